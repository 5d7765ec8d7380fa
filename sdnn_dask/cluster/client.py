"""Opening a client: on a new cluster of any kind, or on a running scheduler.

:func:`make_cluster` makes the cluster a profile names; :func:`cluster_client` also
connects a client and waits for the workers; :func:`connect` reaches a running scheduler;
:func:`local_client` is the short way to a client on a new local cluster;
:func:`dashboard_line` says where the cluster's dashboard is.
"""

from __future__ import annotations

import gc
import warnings
from typing import TYPE_CHECKING, Any

from distributed import Client, LocalCluster, Security

from .. import config
from .batch import start_slurm_runner
from .local import make_local_cluster, own_security
from .profiles import ClusterError, cluster_profile, is_address
from .security import is_loopback
from .slurm import discard_job_credentials, make_slurm_cluster

if TYPE_CHECKING:  # the slurm extra
    from dask_jobqueue import SLURMCluster, SLURMRunner


def make_cluster(
    where: str | None = None,
    *,
    n_workers: int | None = None,
    security: Security | bool | None = None,
    **overrides: Any,
) -> LocalCluster | SLURMCluster | SLURMRunner | str:
    """A new cluster (or the address of a running scheduler) to hand to a Client.

    Parameters
    ----------
    where
        ``"local"``, ``"slurm"``, ``"slurm-batch"``, a profile of ``sdnn.clusters``, or a
        scheduler address (``tcp://host:port``, ``tls://host:port``, returned as is).
        Default ``sdnn.cluster.default`` (``local``).
    n_workers
        Workers to start (local and slurm only).
    security
        See :func:`cluster_security`: TLS by default for slurm and slurm-batch, and for a
        local cluster whose ``host`` is not loopback.
    **overrides
        Options of the profile to override (:func:`make_local_cluster`,
        :func:`make_slurm_cluster`, :func:`start_slurm_runner`).

    Returns
    -------
    distributed.LocalCluster, dask_jobqueue.SLURMCluster, dask_jobqueue.SLURMRunner or str
        Something :class:`distributed.Client` accepts. The caller closes it.

    Raises
    ------
    ClusterError
        Unknown cluster or profile, or options that do not apply.
    ImportError
        A missing optional dependency (the message names the extra).

    Examples
    --------
    >>> cluster = make_cluster("local", n_workers=1)
    >>> cluster.scheduler_address.startswith("tls://127.0.0.1:")  # TLS by default
    True
    >>> cluster.close()
    """
    if where is None:  # the configured default may itself be an address
        where = config.get("cluster.default")
    if is_address(where):
        if n_workers is not None or overrides or security is not None:
            raise ClusterError(f"{where} is a running scheduler: n_workers, security and "
                               "cluster options apply only to clusters started here")
        return str(where)
    kind, options = cluster_profile(where)
    options.update(overrides)
    if security is not None:
        options["security"] = security
    if kind in ("local", "slurm"):
        if n_workers is not None:
            options["n_workers"] = n_workers
        return (make_local_cluster if kind == "local" else make_slurm_cluster)(**options)
    if n_workers is not None:
        raise ClusterError("a slurm-batch cluster has one worker per srun task after the "
                           "first two; ask for more tasks instead of n_workers")
    return start_slurm_runner(**options)


class _OwningClient(Client):
    """A Client that closes, with itself, the cluster it was made for."""

    _owned: Any = None

    def close(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().close(*args, **kwargs)
        finally:
            owned, self._owned = self._owned, None
            if owned is not None:
                owned.close()
                discard_job_credentials(owned)


def _owning_client(cluster: Any, **kwargs: Any) -> Client:
    try:
        client = _OwningClient(cluster, set_as_default=False, **kwargs)
    except BaseException:
        cluster.close()
        discard_job_credentials(cluster)
        raise
    client._owned = cluster
    return client


def _wait(client: Client, n: int, timeout: float | None, what: str) -> None:
    try:
        client.wait_for_workers(n, timeout=timeout)
    except TimeoutError as error:
        cluster = getattr(client, "_owned", None) or client.cluster
        detail = ""
        jobs = [getattr(w, "job_id", None) for w in getattr(cluster, "workers", {}).values()]
        if any(jobs):
            logs = getattr(cluster, "_job_kwargs", {}).get("log_directory")
            detail = (f"; SLURM jobs {', '.join(j for j in jobs if j)} (see squeue"
                      + (f", and the logs in {logs})" if logs else ")"))
        client.close()
        raise ClusterError(f"{what}: {n} worker(s) did not connect within {timeout} s"
                           f"{detail}") from error


def cluster_client(
    where: Any = None,
    *,
    n_workers: int | None = None,
    timeout: float | None = None,
    security: Security | bool | None = None,
    **overrides: Any,
) -> Client:
    """A client on a new cluster, or on a running scheduler, with the workers connected.

    Closing the client (or leaving its ``with`` block) closes a cluster it started, which
    for SLURM cancels the jobs.

    Parameters
    ----------
    where
        As for :func:`make_cluster`; or a cluster (or started
        :class:`~dask_jobqueue.SLURMRunner`) made elsewhere, which the client does not
        close.
    n_workers
        Workers to start and wait for (local and slurm).
    timeout
        Seconds to wait for the workers (default ``sdnn.<kind>.wait-timeout``: none for
        slurm, where jobs may queue). For a scheduler address, the connection timeout.
    security
        For a new cluster see :func:`cluster_security`. For an address: the client's
        credentials (default: ``distributed.comm.tls.*`` in the Dask config).
    **overrides
        Options of the cluster's profile.

    Raises
    ------
    ClusterError
        The scheduler cannot be reached, or the workers do not come in time.
    """
    if where is None:  # the configured default may itself be an address
        where = config.get("cluster.default")
    if is_address(where):
        if n_workers is not None or overrides:
            raise ClusterError(f"{where} is a running scheduler: n_workers and cluster "
                               "options apply only to clusters started here")
        return connect(where, security=security, timeout=timeout)
    if where is not None and not isinstance(where, str):
        client = Client(where, set_as_default=False)
        expected = getattr(where, "n_workers", None)
        if isinstance(expected, int) and expected > 0:
            _wait(client, expected, timeout, "cluster")
        return client
    kind, options = cluster_profile(where)
    if timeout is None:
        timeout = options.get("wait_timeout") if kind != "slurm-batch" else None
    cluster = make_cluster(where, n_workers=n_workers, security=security, **overrides)
    client = _owning_client(cluster)
    if kind == "local":
        expected = len(cluster.workers)
    elif kind == "slurm":  # jobs x workers per job
        expected = len(cluster.worker_spec) * len(cluster.new_spec.get("group") or [None])
    else:
        expected = cluster.n_workers
    if expected:
        _wait(client, expected, timeout, f"the {where or kind} cluster")
    return client


def connect(address: str, *, security: Security | None = None,
            timeout: float | None = None) -> Client:
    """A client on a running scheduler, with a clear error when it cannot connect.

    Parameters
    ----------
    address
        ``tls://host:port`` (or ``tcp://``: then anyone who reaches it can use it; a warning
        says so for a host that is not loopback).
    security
        The client's credentials (default: those of the TLS LocalCluster this process
        started at ``address``, if any, else ``distributed.comm.tls.*`` in the Dask
        config).
    timeout
        Seconds to try to connect (default ``distributed.comm.timeouts.connect``).
    """
    if address.startswith("tcp://") and not is_loopback(address):
        warnings.warn(f"{address} is plain TCP: anyone who can reach that scheduler can run "
                      "code on its workers; prefer a tls:// scheduler", UserWarning,
                      stacklevel=2)
    if security is None:  # a cluster of this process's own, else the Dask config
        security = own_security(address) or Security()
    if address.startswith("tls://") and not security.get_connection_args("client").get(
            "ssl_context"):
        raise ClusterError(f"{address} uses TLS, and this client has no credentials: set "
                           "distributed.comm.tls.ca-file, .client.cert and .client.key in the "
                           "Dask config, or pass security=")
    # Client(timeout=None) is an error: leave it out to get the config's default
    options = {} if timeout is None else {"timeout": timeout}
    try:
        return Client(address, security=security, set_as_default=False, **options)
    except (OSError, TimeoutError) as error:
        # The half-built Client is garbage; finalise it now. Left to the collector, its
        # __del__ closes it at a random later moment, and if that moment is inside another
        # client's loop start, both wait on distributed's loop lock (a hang, seen in tests).
        gc.collect()
        hint = (" (the scheduler may require TLS, or other credentials than these)"
                if address.startswith(("tls://", "tcp://")) else "")
        raise ClusterError(f"could not connect to the scheduler at {address}: {error}{hint}"
                           ) from error


def local_client(n_workers: int | None = None, **kwargs: Any) -> Client:
    """A client on a new :func:`make_local_cluster`, with every worker up.

    Closing the client (``client.close()``, or leaving its ``with`` block) also closes the
    cluster.
    """
    cluster = make_local_cluster(n_workers, **kwargs)
    client = _owning_client(cluster)
    client.wait_for_workers(len(cluster.workers))
    return client


#: What :func:`dashboard_line` says when the scheduler has no bokeh, hence no dashboard.
DASHBOARD_MISSING = "dashboard: not running (pip install 'sdnn_dask[dashboard]')"


def dashboard_line(client: Client) -> str:
    """One line saying where the client's cluster shows its Dask dashboard.

    The scheduler serves HTTP either way, and ``client.dashboard_link`` is a URL either
    way; without bokeh (the ``dashboard`` extra) the page there only says bokeh is
    missing. So the scheduler is asked whether it loaded the dashboard.

    Parameters
    ----------
    client
        A connected client.

    Returns
    -------
    str
        ``dashboard: http://host:port/status``, or :data:`DASHBOARD_MISSING`. A scheduler
        that cannot be asked (one that refuses to run the question) gets its link.
    """
    def has_dashboard() -> bool:  # run on the scheduler, pickled by value
        import sys

        return "distributed.dashboard.scheduler" in sys.modules

    try:
        served = client.run_on_scheduler(has_dashboard)
    except Exception:  # any refusal: the link is still the best thing to show
        served = True
    link = client.dashboard_link
    return f"dashboard: {link}" if served and link else DASHBOARD_MISSING
