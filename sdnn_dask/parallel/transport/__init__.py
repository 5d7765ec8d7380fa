"""Moving bytes between workers without the scheduler, and nothing else.

What the bytes mean (activations, partial errors, gradients) is the caller's: inference's
model-parallel parts (:mod:`sdnn_dask.parallel.model_direct`) and training's slots
(:mod:`sdnn_dask.training.slot_task`) both run on these modules.

* :mod:`.exchange`: a worker's mailbox of pieces (a worker extension with its handlers),
  packing, waiting, aborting;
* :mod:`.run`: a direct run's lifecycle, the client's side (register the exchange, open
  the peers' connections, feed, watch, abort, gather) and a task's (join, secede, notice a
  cancellation, abort and leave);
* :mod:`.collectives`: a persistent run's slots' keyed messages, feeds and replies,
  all-reduce and pair sums;
* :mod:`.wire` and :mod:`.ring`: the short way between worker processes (authenticated
  sockets, TLS on a TLS cluster, and a shared-memory ring on one host).
"""
