"""The local cluster: a LocalCluster on this machine, listening on loopback only, with TLS
(temporary credentials) by default: loopback is reachable by every process of the machine.

Its worker processes are started with SIGINT blocked (:func:`_started_without_sigint`):
they share the terminal's process group, so a Ctrl-C would otherwise raise
``KeyboardInterrupt`` in every one of them, each printing its traceback, while the client
(which alone decides what an interrupt means) closes them anyway. And they drop the two
log records that only repeat what the client reports (:mod:`.quiet`).
"""

from __future__ import annotations

import os
import signal
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from distributed import LocalCluster, Security

from .. import config
from .limits import LIMIT_OPTIONS, check_workers
from .profiles import keyword_options
from .security import cluster_security, is_loopback

T = TypeVar("T")

#: The preload that quiets the workers' repeats of the client's errors (:mod:`.quiet`).
QUIET_PRELOAD = "sdnn_dask.cluster.quiet"


def make_local_cluster(
    n_workers: int | None = None,
    *,
    threads_per_worker: int | None = None,
    security: Security | bool | None = None,
    quiet: bool = True,
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
        See :func:`cluster_security`; default ``sdnn.local.security`` (``null``: TLS with
        temporary credentials, on loopback too: on a shared machine any local process
        could otherwise connect and run code as you). ``False``: plain TCP (warned
        about if ``host`` is not loopback). Worker threads (``processes=False``) listen
        on nothing: no TLS.
    quiet
        Add the :mod:`.quiet` preload to the workers' (default): they do not log again the
        errors of tasks, which the client raises.
    **kwargs
        Passed on to :class:`distributed.LocalCluster` (``host`` defaults to
        ``sdnn.local.host``, 127.0.0.1, and ``dashboard_address`` to 127.0.0.1 on a free
        port).

    Raises
    ------
    ClusterError
        For more workers than this machine takes (:func:`~.limits.check_workers`), before
        any is started.
    """
    options = {**keyword_options(config.get("local")), **kwargs}
    options.pop("wait_timeout", None)  # for cluster_client
    limits = {name: options.pop(name, None) for name in LIMIT_OPTIONS}
    profile_workers = options.pop("n_workers", None)
    if n_workers is None:
        n_workers = profile_workers or os.cpu_count() or 1
    check_workers("local", n_workers, limits)
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
    if options["processes"]:
        secured = cluster_security(security, exposed=exposed, default=True,
                                   what=f"a LocalCluster on {host}")
    else:  # in-process comms: nothing to secure, unless asked
        secured = cluster_security(security if security else False, exposed=False)
    if secured is not None:
        options["security"] = secured
    if quiet:
        preload = options.get("preload") or config_preload()
        preload = [preload] if isinstance(preload, str) else list(preload)
        options["preload"] = list(dict.fromkeys([*preload, QUIET_PRELOAD]))
    cluster = _started_without_sigint(lambda: LocalCluster(
        n_workers=int(n_workers), threads_per_worker=int(threads_per_worker), **options))
    if secured is not None:
        with _MADE_LOCK:
            _MADE[cluster.scheduler_address] = cluster
    return cluster


#: The TLS LocalClusters this process started, by scheduler address, while they live:
#: a client of this process given only the address (``--cluster tls://...``) gets their
#: credentials, which this process holds anyway (:func:`own_security`).
_MADE: weakref.WeakValueDictionary[str, LocalCluster] = weakref.WeakValueDictionary()
_MADE_LOCK = threading.Lock()


def own_security(address: str) -> Security | None:
    """The credentials of the TLS LocalCluster this process started at ``address``, if it
    did and the cluster is still open; else None."""
    with _MADE_LOCK:
        cluster = _MADE.get(address)
    if cluster is None or cluster.status.name in ("closing", "closed"):
        return None
    return cluster.security


def config_preload() -> list[str]:
    """The workers' preloads in the Dask config (kept when :data:`QUIET_PRELOAD` is added)."""
    import dask

    value = dask.config.get("distributed.worker.preload", default=None) or []
    return [value] if isinstance(value, str) else list(value)


def _started_without_sigint(start: Callable[[], T]) -> T:
    """``start()`` in a thread that blocks SIGINT; this thread stays interruptible.

    A signal mask is inherited by the threads a thread starts and kept across ``fork`` and
    ``exec``: the cluster's event loop, the threads that spawn its worker processes, and
    those processes all start with SIGINT blocked, from their first instruction (a handler
    installed by the worker would leave its first second of imports exposed). Restarted
    workers come from the same loop, so they block it too. The caller's thread waits with
    a timeout, so a Ctrl-C while the workers start reaches it: the cluster is closed as
    soon as it is up, and the interrupt goes on.
    """
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no masks (and no process groups)
        return start()
    outcome: dict[str, Any] = {}

    def run() -> None:
        # Starting multiprocessing's resource tracker unblocks SIGINT in the thread that
        # starts it (the first to make a Queue, the cluster's loop): start it first.
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            value = start()
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error
            return
        outcome["value"] = value

    thread = threading.Thread(target=run, name="sdnn-dask cluster start", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)  # a timed join: KeyboardInterrupt reaches this thread
    except KeyboardInterrupt:
        _close_when_started(thread, outcome)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _close_when_started(thread: threading.Thread, outcome: dict[str, Any]) -> None:
    """After a Ctrl-C during the start: wait for the start to end (more Ctrl-Cs only
    repeat the request) and close what it started, quietly, before the interrupt goes on.
    Left to the interpreter's exit, a cluster half started in a daemon thread is torn down
    mid-call, with tracebacks."""
    import logging

    while thread.is_alive():
        try:
            thread.join()
        except KeyboardInterrupt:
            continue
    value = outcome.get("value")
    if value is not None:
        logging.disable(logging.CRITICAL)
        try:
            value.close()
        finally:
            logging.disable(logging.NOTSET)
