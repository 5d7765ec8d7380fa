"""The local cluster: a LocalCluster on this machine, listening on loopback only."""

from __future__ import annotations

import os
from typing import Any

from distributed import LocalCluster, Security

from .. import config
from .profiles import keyword_options
from .security import cluster_security, is_loopback


def make_local_cluster(
    n_workers: int | None = None,
    *,
    threads_per_worker: int | None = None,
    security: Security | bool | None = None,
    **kwargs: Any,
) -> LocalCluster:
    """A LocalCluster listening on loopback only (``sdnn.local``).

    Parameters
    ----------
    n_workers
        Worker processes (default ``sdnn.local.n-workers``, else one per core).
    threads_per_worker
        Threads per worker (default ``sdnn.local.threads-per-worker``, 1).
    security
        See :func:`cluster_security`; default ``sdnn.local.security`` (``null``: TLS only if
        ``host`` is not loopback). ``True`` secures even a loopback cluster.
    **kwargs
        Passed on to :class:`distributed.LocalCluster` (``host`` defaults to
        ``sdnn.local.host``, 127.0.0.1, and ``dashboard_address`` to 127.0.0.1 on a free
        port).
    """
    options = {**keyword_options(config.get("local")), **kwargs}
    options.pop("wait_timeout", None)  # for cluster_client
    profile_workers = options.pop("n_workers", None)
    if n_workers is None:
        n_workers = profile_workers or os.cpu_count() or 1
    profile_threads = options.pop("threads_per_worker", None)
    if threads_per_worker is None:
        threads_per_worker = profile_threads or 1
    profile_security = options.pop("security", None)
    if security is None:
        security = profile_security
    options.setdefault("processes", True)
    if not options["processes"]:
        # threads of this process: in-process comms, nothing listens on the network
        options.pop("host", None)
        options.pop("interface", None)
    # host and dashboard_address come from sdnn.local: loopback. The scheduler always serves
    # HTTP (health, and the dashboard when bokeh is installed), on a free port there, so
    # clusters never collide on 8787.
    host = options.get("host") or "127.0.0.1"  # LocalCluster's default too
    exposed = bool(options.get("interface")) or not is_loopback(host)
    secured = cluster_security(security, exposed=exposed, what=f"a LocalCluster on {host}")
    if secured is not None:
        options["security"] = secured
    return LocalCluster(n_workers=int(n_workers), threads_per_worker=int(threads_per_worker),
                        **options)
