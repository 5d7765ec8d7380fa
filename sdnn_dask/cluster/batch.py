"""The slurm-batch cluster: the tasks of one ``srun`` as scheduler, client and workers.

Every task of the allocation runs the same program, and :class:`dask_jobqueue.SLURMRunner`
makes task 0 the scheduler, task 1 the client and every other task a worker. See
``studies/slurm-compare.sbatch``.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distributed import Security

from .. import config
from .profiles import ClusterError, keyword_options
from .security import (
    cluster_security,
    private_directory,
    shared_directory,
    temporary_security,
    truthy,
)
from .slurm import import_jobqueue

if TYPE_CHECKING:  # the slurm extra
    from dask_jobqueue import SLURMRunner


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
        made = temporary_security()
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
    options = {**keyword_options(config.get("slurm-batch")), **overrides}
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
    import_jobqueue()  # or a clear error naming the extra
    from dask_jobqueue.slurm import SLURMRunner

    shared = shared_directory(options.pop("shared_directory", None))
    step = ".".join(os.environ.get(v, "0") for v in
                    ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_RESTART_COUNT"))
    run_dir = shared / f"batch-{step}"
    if rank == 0:
        shutil.rmtree(run_dir, ignore_errors=True)  # a stale run of the same step
        private_directory(run_dir)
    timeout = float(options.pop("wait_timeout", None) or 300)
    secured = options.pop("security", None)
    if truthy(secured) is not False:
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
