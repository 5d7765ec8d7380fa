"""Quiet local workers: a Dask worker preload (``preload=["sdnn_dask.cluster.quiet"]``).

The workers of a LocalCluster share the terminal's stderr. Two of their log records only
repeat what the client says anyway, and bury the one line the command line prints:

* ``Compute Failed`` (``distributed.worker``, ERROR): a task raised. Its exception is
  raised again on the client, which turns it into ``error: ...`` or a traceback;
* ``Async instruction ... ended with CancelledError`` (``distributed.worker.state_machine``,
  WARNING): a task still running when its worker is closed, as on the way out after an
  error or Ctrl-C.

:func:`dask_setup` drops those two records in the worker, and nothing else: a worker that
dies, runs out of memory or cannot reach the scheduler still says so.
"""

from __future__ import annotations

import logging
from typing import Any

#: (logger name, start of the message) of the records dropped.
DROPPED = (("distributed.worker", "Compute Failed"),
           ("distributed.worker.state_machine", "Async instruction for "))


class _Repeats(logging.Filter):
    """Drops a logger's records whose message starts with ``prefix``."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def quiet_worker_logs() -> None:
    """Add the filters to this process's loggers (once)."""
    for name, prefix in DROPPED:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Repeats) and f.prefix == prefix for f in logger.filters):
            logger.addFilter(_Repeats(prefix))


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, run in each worker as it starts."""
    quiet_worker_logs()
