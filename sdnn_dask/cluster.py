"""Where the work runs: a Dask cluster to hand to the executors.

One factory, :func:`make_cluster`, and one helper that also connects and waits for the
workers, :func:`cluster_client`, for four places:

``"local"`` (the default)
    A :class:`~distributed.LocalCluster` on this machine: one single-threaded worker process
    per core, listening on loopback only (scheduler, workers and dashboard), so nothing on
    the network can reach it.
``"slurm"``
    Dask workers started as SLURM jobs by :class:`dask_jobqueue.SLURMCluster` (extra
    ``slurm``); the scheduler runs in this process. :func:`slurm_job_script` shows the job
    script it submits.
``"slurm-batch"``
    A fixed allocation: every task of one ``srun`` runs the same program, and
    :class:`dask_jobqueue.SLURMRunner` makes task 0 the scheduler, task 1 the client (the
    only task in which :func:`make_cluster` returns) and every other task a worker. See
    ``studies/slurm-compare.sbatch``.
``"tcp://host:port"``, ``"tls://host:port"``
    A scheduler that is already running.

Options come from profiles in the Dask config: ``sdnn.local``, ``sdnn.slurm`` and
``sdnn.slurm-batch`` (defaults in ``sdnn.yaml``), and named profiles
``sdnn.clusters.<name>`` (a ``kind`` among those three and the options that differ from
it); keyword arguments override them.

Security
--------
A Dask scheduler runs whatever code its clients send, and workers run whatever the scheduler
sends. So every cluster that listens beyond loopback uses TLS with mutual authentication by
default: temporary self-signed credentials made for that cluster
(:meth:`distributed.Security.temporary`, needs ``cryptography``, in the ``slurm`` extra).
Only processes holding them can connect. The credentials reach the SLURM jobs as files only
the user can read (mode 0600, in a 0700 directory of ``sdnn.slurm.shared-directory``, which
must be on a file system the compute nodes see, as the home directory usually is); job
scripts and command lines carry only their paths. The dashboard, which is plain HTTP, stays
on loopback unless configured otherwise. ``security=False`` (or ``sdnn.<kind>.security:
false``) turns TLS off, with a warning when the cluster is reachable from the network.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import logging
import os
import shutil
import signal
import socket
import stat
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distributed import Client, LocalCluster, Security

from . import config

if TYPE_CHECKING:  # the slurm extra
    from dask_jobqueue import SLURMCluster, SLURMRunner

KINDS = ("local", "slurm", "slurm-batch")
"""The kinds of cluster :func:`make_cluster` starts (besides scheduler addresses)."""

SLURM_EXTRA = "pip install 'sdnn_dask[slurm]'"

__all__ = [
    "KINDS",
    "ClusterError",
    "cluster_client",
    "cluster_profile",
    "cluster_security",
    "local_client",
    "make_cluster",
    "make_local_cluster",
    "make_slurm_cluster",
    "private_directory",
    "slurm_job_script",
    "start_slurm_runner",
]


class ClusterError(RuntimeError):
    """A cluster could not be made or reached; the message says what was expected."""


# --------------------------------------------------------------------------- profiles


def _options(mapping: dict[str, Any] | None) -> dict[str, Any]:
    """Config keys (``n-workers``) as keyword names (``n_workers``)."""
    return {str(k).replace("-", "_"): v for k, v in (mapping or {}).items()}


def is_address(where: object) -> bool:
    """Whether ``where`` is a scheduler address (``tcp://host:port``, ``tls://...``)."""
    return isinstance(where, str) and "://" in where


def cluster_profile(name: str | None = None) -> tuple[str, dict[str, Any]]:
    """The kind and options of a cluster profile.

    Parameters
    ----------
    name
        ``"local"``, ``"slurm"``, ``"slurm-batch"`` (options ``sdnn.<name>``), or the name
        of a profile in ``sdnn.clusters`` (its ``kind``'s options, updated with its own).
        Default: ``sdnn.cluster.default``.

    Returns
    -------
    kind, options
        Options with keyword-style names (``n_workers``, not ``n-workers``).

    Raises
    ------
    ClusterError
        For an unknown name or a profile without a valid ``kind``.

    Examples
    --------
    >>> import dask.config
    >>> with dask.config.set({"sdnn.clusters.big": {"kind": "slurm", "memory": "64GiB"}}):
    ...     kind, options = cluster_profile("big")
    >>> kind, options["memory"], options["cores"]
    ('slurm', '64GiB', 1)
    """
    name = name or config.get("cluster.default") or "local"
    if name in KINDS:
        return name, _options(config.get(name))
    profiles = config.get("clusters") or {}
    if name not in profiles:
        defined = ", ".join(sorted(profiles)) or "none defined"
        raise ClusterError(
            f"unknown cluster {name!r}: expected 'local', 'slurm', 'slurm-batch', a profile "
            f"of sdnn.clusters ({defined}), or a scheduler address such as "
            "tls://host:8786"
        )
    options = _options(profiles[name])
    kind = options.pop("kind", None)
    if kind not in KINDS:
        raise ClusterError(
            f"cluster profile sdnn.clusters.{name} needs kind: one of {', '.join(KINDS)} "
            f"(found {kind!r})"
        )
    return kind, {**_options(config.get(kind)), **options}


# --------------------------------------------------------------------------- security


def _truthy(value: object) -> bool | None:
    """``True``/``False``/``None`` from a config value (``"false"`` from an env var too)."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ClusterError(f"security must be true, false or a distributed.Security, not {value!r}")


def _temporary_security() -> Security:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ImportError(
            "TLS for this cluster needs temporary credentials, made with the 'cryptography' "
            f"package, which is not installed: {SLURM_EXTRA} (or pip install cryptography)"
        ) from None
    return Security.temporary()


def cluster_security(
    security: Security | bool | str | None, *, exposed: bool, what: str = "this cluster"
) -> Security | None:
    """The security of a new cluster: TLS by default when it is reachable from the network.

    Parameters
    ----------
    security
        ``None``: TLS (temporary credentials) if ``exposed``, else none. ``True``: TLS with
        new temporary credentials. ``False``: none (warns if ``exposed``). A
        :class:`distributed.Security`: used as is.
    exposed
        Whether the cluster listens beyond loopback.
    what
        Names the cluster in the warning.

    Returns
    -------
    distributed.Security or None
    """
    if isinstance(security, Security):
        return security
    wanted = _truthy(security)
    if wanted is None:
        wanted = exposed
    if wanted:
        return _temporary_security()
    if exposed:
        warnings.warn(
            f"{what} listens beyond loopback without TLS: anyone who can reach it can run "
            "code as you; keep security on unless the network is yours alone",
            UserWarning,
            stacklevel=3,
        )
    return None


def _is_loopback(host: str | None) -> bool:
    """Whether a listening host is loopback only (``None``/``""`` mean every interface)."""
    if not host:
        return False
    host = host.split("://")[-1]
    if host.startswith("["):
        host = host[1 : host.index("]")]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def private_directory(path: str | os.PathLike[str]) -> Path:
    """Make (if needed) a directory only this user can read, write or list (mode 0700).

    Raises
    ------
    ClusterError
        If it exists and belongs to another user.
    """
    path = Path(os.path.expandvars(os.fspath(path))).expanduser()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise ClusterError(
            f"{path} belongs to uid {info.st_uid}, not you: cluster credentials and logs need "
            "a directory of your own (set sdnn.slurm.shared-directory)"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)
    return path


def _shared_directory(configured: str | None) -> Path:
    return private_directory(configured or Path.home() / ".cache" / "sdnn_dask" / "slurm")


# --------------------------------------------------------------------------- local


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
    options = {**_options(config.get("local")), **kwargs}
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
    exposed = bool(options.get("interface")) or not _is_loopback(host)
    secured = cluster_security(security, exposed=exposed, what=f"a LocalCluster on {host}")
    if secured is not None:
        options["security"] = secured
    return LocalCluster(n_workers=int(n_workers), threads_per_worker=int(threads_per_worker),
                        **options)


# --------------------------------------------------------------------------- SLURM


def _import_jobqueue():
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
    """
    jobqueue = _import_jobqueue()
    options = {**_options(config.get("slurm")), **kwargs}
    workers = options.pop("n_workers", None)
    if n_workers is None:
        n_workers = workers
    options.pop("wait_timeout", None)
    if security is None:
        security = options.pop("security", None)
    else:
        options.pop("security", None)
    shared = _shared_directory(options.pop("shared_directory", None))
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


def _discard_job_credentials(cluster: Any) -> None:
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
        _discard_job_credentials(cluster)


# --------------------------------------------------------------------------- SLURM batch


def _exit_quietly(*_: Any) -> None:
    raise SystemExit(0)


def _write_private(path: Path, text: str) -> None:
    """Write a file only this user can read, atomically (others wait for it to appear)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _batch_security(run_dir: Path, rank: int, timeout: float) -> Security:
    """Credentials shared by the tasks of one srun: task 0 makes them, the others read them."""
    cert, key = run_dir / "cluster-cert.pem", run_dir / "cluster-key.pem"
    if rank == 0:
        made = _temporary_security()
        _write_private(key, made.tls_scheduler_key)
        _write_private(cert, made.tls_scheduler_cert)  # written last: the others wait for it
    else:
        deadline = time.monotonic() + timeout
        while not cert.is_file():
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"task {rank}: task 0 did not write the cluster's credentials to {cert} "
                    f"within {timeout:.0f} s; is {run_dir.parent} shared by the nodes?"
                )
            time.sleep(0.2)
    cert_pem, key_pem = cert.read_text(), key.read_text()  # in memory: files may go
    return Security(
        require_encryption=True,
        tls_ca_file=cert_pem,
        tls_scheduler_cert=cert_pem, tls_scheduler_key=key_pem,
        tls_worker_cert=cert_pem, tls_worker_key=key_pem,
        tls_client_cert=cert_pem, tls_client_key=key_pem,
    )


def _slurm_memory_limit() -> int | str:
    per_cpu = os.environ.get("SLURM_MEM_PER_CPU")
    cpus = int(os.environ.get("SLURM_CPUS_PER_TASK", "1"))
    if per_cpu and per_cpu.isdigit():
        return int(per_cpu) * cpus * 2**20
    return "auto"


def _patient(runner_class: type) -> type:
    """``runner_class`` reading the scheduler file only once it is whole.

    The scheduler task writes the file in place; dask-jobqueue's runner reads it as soon as
    it exists, so on a loaded node a client or worker task could read it half written and
    die on the JSON (seen as a batch job killed with exit 143).
    """

    class PatientRunner(runner_class):
        async def get_scheduler_address(self) -> str:
            import asyncio
            import json

            while True:
                try:
                    return json.loads(Path(self.scheduler_file).read_text())["address"]
                except (OSError, TypeError, ValueError, KeyError):  # absent, or half written
                    await asyncio.sleep(0.2)

    PatientRunner.__name__ = PatientRunner.__qualname__ = runner_class.__name__
    return PatientRunner


def start_slurm_runner(**overrides: Any) -> SLURMRunner:
    """Make the tasks of this ``srun`` a Dask cluster (:class:`dask_jobqueue.SLURMRunner`).

    Every task calls this. Task 0 runs the scheduler and task 2 onwards run a worker each
    (with ``SLURM_CPUS_PER_TASK`` threads); in those tasks this function does not return:
    the process exits (status 0) when the client closes the runner. Task 1 gets the runner
    back, connected: pass it to :class:`distributed.Client` (or :func:`cluster_client`) and
    close it when done, which stops the scheduler and the workers.

    Parameters
    ----------
    **overrides
        Options of ``sdnn.slurm-batch``: ``security`` (TLS by default: task 0 makes
        temporary credentials and shares them as 0600 files under ``shared_directory``,
        which the nodes must see), ``shared_directory``, ``interface``,
        ``dashboard_address``, ``wait_timeout`` (seconds the tasks wait for task 0's
        credentials), ``log_level`` (of ``distributed`` in every task, default warning),
        ``scheduler_options`` and ``worker_options`` (passed on).

    Raises
    ------
    ClusterError
        Outside ``srun`` (no ``SLURM_PROCID``) or with fewer than 3 tasks.
    """
    options = {**_options(config.get("slurm-batch")), **overrides}
    missing = [v for v in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID")
               if v not in os.environ]
    if missing:
        raise ClusterError(
            "the slurm-batch cluster runs inside srun, where every task runs the same "
            "program (task 0: scheduler, task 1: the study, others: workers; see "
            f"studies/slurm-compare.sbatch); {', '.join(missing)} not set here"
        )
    rank, ntasks = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    if ntasks < 3:
        raise ClusterError(f"a slurm-batch cluster needs at least 3 tasks (scheduler, client, "
                           f"one worker per further task); this srun has {ntasks}")
    _import_jobqueue()  # or a clear error naming the extra
    from dask_jobqueue.slurm import SLURMRunner

    shared = _shared_directory(options.pop("shared_directory", None))
    step = ".".join(os.environ.get(v, "0") for v in
                    ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_RESTART_COUNT"))
    run_dir = shared / f"batch-{step}"
    if rank == 0:
        shutil.rmtree(run_dir, ignore_errors=True)  # a stale run of the same step
        private_directory(run_dir)
    timeout = float(options.pop("wait_timeout", None) or 300)
    secured = options.pop("security", None)
    if _truthy(secured) is not False:
        secured = (secured if isinstance(secured, Security)
                   else _batch_security(run_dir, rank, timeout))
    else:
        secured = cluster_security(False, exposed=True, what="a slurm-batch cluster")
    interface = options.pop("interface", None)
    logging.getLogger("distributed").setLevel(str(options.pop("log_level", None)
                                                  or "warning").upper())
    scheduler_options = {"dashboard_address": options.pop("dashboard_address", None),
                         **(options.pop("scheduler_options", None) or {})}
    worker_options = {"nthreads": int(os.environ.get("SLURM_CPUS_PER_TASK", "1")),
                      "memory_limit": _slurm_memory_limit(), "death_timeout": 60,
                      "dashboard_address": "127.0.0.1:0",
                      **(options.pop("worker_options", None) or {})}
    if options:
        raise ClusterError(f"unknown slurm-batch option(s): {', '.join(sorted(options))}")
    if interface:
        scheduler_options.setdefault("interface", interface)
        worker_options.setdefault("interface", interface)
    if secured is not None:
        scheduler_options.update(security=secured, protocol="tls://")
        worker_options.update(security=secured, protocol="tls")
    previous = signal.signal(signal.SIGINT, _exit_quietly)  # the runner ends tasks by SIGINT
    try:
        runner = _patient(SLURMRunner)(scheduler_file=str(run_dir / "scheduler.json"),
                                       scheduler_options=scheduler_options,
                                       worker_options=worker_options)
    finally:
        signal.signal(signal.SIGINT, previous)
        if rank == 0:
            shutil.rmtree(run_dir, ignore_errors=True)
    # Task 1, the client, from here on.
    runner.security = secured if secured is not None else Security()
    if secured is not None:
        from distributed.core import rpc

        # SLURMRunner's own connection to the scheduler (to stop it) has no credentials.
        runner.scheduler_comm = rpc(runner.scheduler_address,
                                    connection_args=secured.get_connection_args("client"))
    return runner


# --------------------------------------------------------------------------- the factory


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
    >>> cluster.scheduler_address.startswith("tcp://127.0.0.1:")
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
                _discard_job_credentials(owned)


def _owning_client(cluster: Any, **kwargs: Any) -> Client:
    try:
        client = _OwningClient(cluster, set_as_default=False, **kwargs)
    except BaseException:
        cluster.close()
        _discard_job_credentials(cluster)
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
        The client's credentials (default: ``distributed.comm.tls.*`` in the Dask config).
    timeout
        Seconds to try to connect (default ``distributed.comm.timeouts.connect``).
    """
    if address.startswith("tcp://") and not _is_loopback(address):
        warnings.warn(f"{address} is plain TCP: anyone who can reach that scheduler can run "
                      "code on its workers; prefer a tls:// scheduler", UserWarning,
                      stacklevel=2)
    if security is None:
        security = Security()  # from the Dask config
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
