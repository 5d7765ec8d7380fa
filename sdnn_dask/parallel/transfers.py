"""Bytes moved between workers, read from Dask's own transfer accounting.

Every worker logs each fetch of data from another worker in
``Worker.transfer_incoming_log``: the keys fetched, their size (Dask's ``sizeof`` of each
object, i.e. the bytes of the arrays a :class:`~sdnn_dask.parallel.slabs.Slab` holds), the
sender and the duration. Executors give the keys of one run a common token; :func:`transfers_of`
collects the log entries holding that token from every worker. Nothing is recomputed from
the partition: what is reported is what Dask says it moved.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pandas as pd
from distributed import Client

#: Entries kept per worker. Dask keeps ``distributed.admin.low-level-log-length`` (1000 by
#: default), fewer than one model-parallel run of 120 layers at k = 4 makes.
TRANSFER_LOG_LENGTH = 200_000

TRANSFER_COLUMNS = ["receiver", "sender", "key", "nbytes", "start", "stop"]


def _widen(dask_worker: Any, maxlen: int) -> int:
    log = dask_worker.transfer_incoming_log
    if log.maxlen is not None and log.maxlen < maxlen:
        dask_worker.transfer_incoming_log = deque(log, maxlen=maxlen)
    return dask_worker.transfer_incoming_log.maxlen


def widen_transfer_logs(client: Client, maxlen: int = TRANSFER_LOG_LENGTH) -> None:
    """Make every worker's incoming-transfer log keep at least ``maxlen`` entries."""
    client.run(_widen, maxlen=maxlen)


def _entries(dask_worker: Any, token: str) -> list[tuple]:
    out = []
    for entry in dask_worker.transfer_incoming_log:
        for key, nbytes in entry["keys"].items():
            name = key if isinstance(key, str) else str(key)
            if token in name:
                out.append((dask_worker.address, entry["who"], name, int(nbytes),
                            entry["start"], entry["stop"]))
    return out


def transfers_of(client: Client, token: str) -> pd.DataFrame:
    """Every transfer between workers of a key containing ``token``.

    Returns
    -------
    pandas.DataFrame
        One row per key fetched: ``receiver, sender, key, nbytes, start, stop``.
    """
    rows = [row for entries in client.run(_entries, token=token).values() for row in entries]
    return pd.DataFrame(rows, columns=TRANSFER_COLUMNS)
