"""How model-parallel parts exchange activations worker to worker, without the scheduler.

* :mod:`.exchange`: a worker's mailbox of pieces (a worker extension with its handlers),
  packing, waiting, aborting;
* :mod:`.direct`: joining a run on a worker (find the exchange, secede, register, abort,
  clean up), the peers' connections, and the inference part task built on them.
"""
