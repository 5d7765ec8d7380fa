"""Quiet local workers: a Dask worker preload (``preload=["sdnn_dask.cluster.quiet"]``).

The workers of a LocalCluster share the terminal's stderr. Two of their log records only
repeat what the client says anyway, and bury the one line the command line prints:

* ``Compute Failed`` (``distributed.worker``, ERROR): a task raised. Its exception is
  raised again on the client, which turns it into ``error: ...`` or a traceback;
* ``Async instruction ... ended with CancelledError`` (``distributed.worker.state_machine``,
  WARNING): a task still running when its worker is closed, as on the way out after an
  error or Ctrl-C;
* ``Failed to communicate with scheduler during heartbeat`` (``distributed.worker``,
  ERROR, with a traceback) where the scheduler *closed* the connection
  (``CommClosedError``): on a loaded machine a heartbeat can meet the scheduler closing
  on the way out, before the worker is told to close (seen once in 12 Ctrl-C's with the
  cores busy).

:func:`dask_setup` drops those records in the worker, and nothing else: a worker that
dies, runs out of memory or cannot reach the scheduler (a time-out, a refused
connection) still says so.
"""

from __future__ import annotations

import logging
from typing import Any

#: (logger name, start of the message, the exception it must carry or None) of the
#: records dropped.
DROPPED = (("distributed.worker", "Compute Failed", None),
           ("distributed.worker.state_machine", "Async instruction for ", None),
           ("distributed.worker", "Failed to communicate with scheduler during heartbeat",
            "CommClosedError"))


class _Repeats(logging.Filter):
    """Drops a logger's records whose message starts with ``prefix`` (and, if
    ``exception`` is given, whose exception's class has that name)."""

    def __init__(self, prefix: str, exception: str | None = None):
        super().__init__()
        self.prefix, self.exception = prefix, exception

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.prefix):
            return True
        if self.exception is None:
            return False
        error = record.exc_info[1] if record.exc_info else None
        return type(error).__name__ != self.exception


def quiet_worker_logs() -> None:
    """Add the filters to this process's loggers (once)."""
    for name, prefix, exception in DROPPED:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Repeats) and f.prefix == prefix for f in logger.filters):
            logger.addFilter(_Repeats(prefix, exception))


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, run in each worker as it starts."""
    quiet_worker_logs()
