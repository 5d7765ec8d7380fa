"""The SLURM cluster: Dask workers as SLURM jobs, through dask-jobqueue (extra ``slurm``).

dask-jobqueue is imported only when a SLURM cluster is made (:func:`import_jobqueue`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from distributed import Security

from .. import config
from .limits import LIMIT_OPTIONS, check_workers
from .profiles import SLURM_EXTRA, ClusterError, cluster_profile, keyword_options
from .security import cluster_security, private_directory, shared_directory

if TYPE_CHECKING:  # the slurm extra
    from dask_jobqueue import SLURMCluster


def import_jobqueue():
    """Import dask_jobqueue, or say which extra provides it."""
    if "dask_jobqueue" in sys.modules and sys.modules["dask_jobqueue"] is not None:
        return sys.modules["dask_jobqueue"]
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGINT)
    try:
        import dask_jobqueue
    except ImportError as error:
        raise ImportError(
            f"SLURM clusters need dask-jobqueue, which is not installed: {SLURM_EXTRA}"
        ) from error
    finally:
        # dask_jobqueue.runner replaces the SIGINT handler when imported (for SLURMRunner's
        # tasks); give Ctrl-C back its usual meaning everywhere else.
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return dask_jobqueue


def make_slurm_cluster(
    n_workers: int | None = None,
    *,
    security: Security | bool | None = None,
    **kwargs: Any,
) -> SLURMCluster:
    """Dask workers as SLURM jobs (:class:`dask_jobqueue.SLURMCluster`, extra ``slurm``).

    The scheduler runs in this process; each job runs ``processes`` workers (1 by default)
    with ``cores`` threads in total and ``memory``.

    Parameters
    ----------
    n_workers
        Workers to ask for now (default ``sdnn.slurm.n-workers``; 0: none yet, call
        ``cluster.scale``).
    security
        TLS by default (the scheduler listens on the cluster network): see
        :func:`cluster_security`. The jobs get the credentials as 0600 files in
        ``shared_directory/tls``.
    **kwargs
        Options of ``sdnn.slurm`` to override, and any keyword of
        :class:`dask_jobqueue.SLURMCluster` (``queue``, ``account``, ``walltime``,
        ``job_extra_directives``, ``job_script_prologue``, ...). Besides those:
        ``python`` (default: this interpreter, ``sys.executable``), ``shared_directory``
        (credentials and logs, on a file system the nodes see; default
        ``~/.cache/sdnn_dask/slurm``), ``log_directory`` (default
        ``shared_directory/logs``), ``dashboard_address`` (default loopback, free port),
        ``scheduler_host`` (the scheduler listens on every interface otherwise).

    Raises
    ------
    ImportError
        Without dask-jobqueue (or cryptography, for TLS): names the extra to install.
    ClusterError
        For more workers than ``sdnn.slurm.max-workers`` (:func:`~.limits.check_workers`).
    """
    jobqueue = import_jobqueue()
    options = {**keyword_options(config.get("slurm")), **kwargs}
    workers = options.pop("n_workers", None)
    if n_workers is None:
        n_workers = workers
    limits = {name: options.pop(name, None) for name in LIMIT_OPTIONS}
    check_workers("slurm", n_workers, limits)
    options.pop("wait_timeout", None)
    if security is None:
        security = options.pop("security", None)
    else:
        options.pop("security", None)
    shared = shared_directory(options.pop("shared_directory", None))
    if options.get("python") is None:
        options["python"] = sys.executable
    if options.get("log_directory") is None:
        options["log_directory"] = str(private_directory(shared / "logs"))
    scheduler_options = dict(options.pop("scheduler_options", None) or {})
    dashboard = options.pop("dashboard_address", None)
    if dashboard is not None:
        scheduler_options.setdefault("dashboard_address", dashboard)
    host = options.pop("scheduler_host", None)
    if host:
        scheduler_options.setdefault("host", host)
    extra = [str(a) for a in options.get("worker_extra_args") or []]
    if not any(a.startswith("--dashboard") or a == "--no-dashboard" for a in extra):
        extra += ["--dashboard-address", "127.0.0.1:0"]  # workers' plain HTTP: loopback
    options["worker_extra_args"] = extra
    secured = cluster_security(security, exposed=True, what="a SLURM cluster's scheduler")
    if secured is not None:
        options["security"] = secured
        options["shared_temp_directory"] = str(private_directory(shared / "tls"))
    cluster = jobqueue.SLURMCluster(scheduler_options=scheduler_options, **options)
    if n_workers:
        cluster.scale(int(n_workers))
    return cluster


def discard_job_credentials(cluster: Any) -> None:
    """Delete the credential files dask-jobqueue wrote for a cluster's jobs."""
    for key in ("ca_file", "cert", "key"):
        handle = getattr(cluster, f"_job_{key}", None)
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.close()  # a NamedTemporaryFile: closing deletes it


def slurm_job_script(**overrides: Any) -> str:
    """The job script a SLURM cluster submits for each worker (nothing is submitted).

    Starts the cluster's scheduler to know its address, then closes it.

    Parameters
    ----------
    **overrides
        As for :func:`make_slurm_cluster` (``profile=`` names a ``sdnn.clusters`` profile
        of kind ``slurm`` to start from).
    """
    profile = overrides.pop("profile", None)
    if profile is not None:
        kind, options = cluster_profile(profile)
        if kind != "slurm":
            raise ClusterError(f"cluster {profile!r} is of kind {kind!r}: only 'slurm' "
                               "clusters submit job scripts")
        overrides = {**options, **overrides}
    overrides.pop("n_workers", None)
    cluster = make_slurm_cluster(0, **overrides)
    try:
        return cluster.job_script()
    finally:
        cluster.close()
        discard_job_credentials(cluster)
