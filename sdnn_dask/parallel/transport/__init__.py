"""How model-parallel parts exchange activations worker to worker, without the scheduler.

* :mod:`.exchange`: a worker's mailbox of pieces (a worker extension with its handlers),
  packing, waiting, aborting;
* :mod:`.slot`: a task's share of a run on its worker (find the exchange, secede, join,
  notice a cancellation, abort and leave), the one way inference parts and training slots
  take part in a run;
* :mod:`.direct`: the inference part task built on it, and the client's side (registering
  the exchange, opening the peers' connections, waiting for a run and aborting it).
"""
