"""Where the work runs: a Dask cluster to hand to the executors.

A :class:`~distributed.LocalCluster` on this machine is the embedded default: one
single-threaded worker process per core, listening on loopback only (scheduler, workers
and dashboard), so nothing on the network can reach it.
"""

from __future__ import annotations

import os

from distributed import Client, LocalCluster

from . import config


def make_local_cluster(
    n_workers: int | None = None,
    *,
    threads_per_worker: int | None = None,
    **kwargs,
) -> LocalCluster:
    """A loopback-only LocalCluster.

    Parameters
    ----------
    n_workers
        Worker processes (default ``sdnn.local.n-workers``, else one per core).
    threads_per_worker
        Threads per worker (default ``sdnn.local.threads-per-worker``, 1).
    **kwargs
        Passed on to :class:`distributed.LocalCluster`.
    """
    if n_workers is None:
        n_workers = config.get("local.n-workers") or os.cpu_count() or 1
    if threads_per_worker is None:
        threads_per_worker = int(config.get("local.threads-per-worker"))
    kwargs.setdefault("host", config.get("local.host"))
    kwargs.setdefault("processes", True)
    # The scheduler always serves HTTP (health, and the dashboard when bokeh is installed):
    # keep it on loopback, on a free port, so clusters never collide on 8787.
    kwargs.setdefault("dashboard_address", config.get("local.dashboard-address"))
    return LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, **kwargs)


def local_client(n_workers: int | None = None, **kwargs) -> Client:
    """A client on a new :func:`make_local_cluster`, with every worker up.

    Close it with ``client.close(); client.cluster.close()`` or use it as a context manager
    (closing the client also closes a cluster it created).
    """
    cluster = make_local_cluster(n_workers, **kwargs)
    client = Client(cluster, set_as_default=False)
    client.wait_for_workers(len(cluster.workers))
    return client
