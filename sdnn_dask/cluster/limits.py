"""How many workers a cluster may be asked for: refused up front, not found out by a hang.

A :class:`~distributed.LocalCluster` of 100000 worker processes does not fail: it forks
until the machine stalls. So :func:`check_workers` holds every cluster started here to a
stated limit, before anything is started:

``local``
    At most ``sdnn.local.max-workers-per-core`` (4) workers per core this process may use
    (:data:`dask.system.CPU_COUNT`: affinity and cgroup quotas counted), and at most one
    per ``sdnn.local.min-worker-memory`` (256 MiB, what an idle worker process takes here)
    of the machine's memory (:data:`distributed.system.MEMORY_LIMIT`: cgroup limits
    counted).
``slurm``
    At most ``sdnn.slurm.max-workers`` (1000): each job is a line in the queue (SLURM's
    default ``MaxJobCount`` is 10000 for every user of the cluster together).

Both limits are settings: raise them in the Dask config where a machine or site allows
more (``dask.config.set({"sdnn.local.max-workers-per-core": 16})``).
"""

from __future__ import annotations

from typing import Any

from .. import config
from .profiles import ClusterError

#: Defaults of the limits, where the Dask config has no value.
MAX_WORKERS_PER_CORE = 4
MIN_WORKER_MEMORY = 256 * 2**20
MAX_SLURM_WORKERS = 1000

#: The option names these limits use in a profile (taken out before a cluster is made).
LIMIT_OPTIONS = ("max_workers_per_core", "min_worker_memory", "max_workers")


def _positive(value: Any, key: str) -> float:
    """A limit from the config, checked: a positive number (bytes given as ``256 MiB``)."""
    from dask.utils import parse_bytes

    try:
        number = float(parse_bytes(value) if isinstance(value, str) else value)
    except (TypeError, ValueError):
        number = float("nan")
    if not number > 0 or number == float("inf"):
        raise ClusterError(f"{key}: expected a positive number, got {value!r}")
    return number


def local_worker_limit(options: dict[str, Any] | None = None) -> tuple[int, str]:
    """The most workers a LocalCluster here may have, and the rule that sets it in words.

    Parameters
    ----------
    options
        A ``local`` profile's options (``max_workers_per_core``, ``min_worker_memory``);
        default ``sdnn.local``.

    Examples
    --------
    >>> limit, rule = local_worker_limit({"max_workers_per_core": 1,
    ...                                   "min_worker_memory": "1 KiB"})
    >>> import dask.system
    >>> limit == dask.system.CPU_COUNT
    True
    """
    import dask.system
    from dask.utils import format_bytes
    from distributed.system import MEMORY_LIMIT

    if options is None:
        from .profiles import keyword_options

        options = keyword_options(config.get("local"))
    per_core = _positive(options.get("max_workers_per_core") or MAX_WORKERS_PER_CORE,
                         "sdnn.local.max-workers-per-core")
    memory = _positive(options.get("min_worker_memory") or MIN_WORKER_MEMORY,
                       "sdnn.local.min-worker-memory")
    cores = dask.system.CPU_COUNT or 1
    by_cores = max(1, int(per_core * cores))
    by_memory = max(1, int(MEMORY_LIMIT // memory))
    if by_cores <= by_memory:
        return by_cores, (f"{per_core:g} per core x {cores} core(s); "
                          "sdnn.local.max-workers-per-core allows more")
    return by_memory, (f"one per {format_bytes(int(memory))} of the "
                       f"{format_bytes(MEMORY_LIMIT)} of memory; "
                       "sdnn.local.min-worker-memory allows more")


def slurm_worker_limit(options: dict[str, Any] | None = None) -> int:
    """The most workers a SLURM cluster started here may ask for (``sdnn.slurm.max-workers``)."""
    if options is None:
        from .profiles import keyword_options

        options = keyword_options(config.get("slurm"))
    return int(_positive(options.get("max_workers") or MAX_SLURM_WORKERS,
                         "sdnn.slurm.max-workers"))


def check_workers(kind: str, n_workers: Any, options: dict[str, Any] | None = None,
                  *, what: str = "n_workers") -> None:
    """Refuse more workers than a cluster of ``kind`` may be asked for, before it starts.

    Parameters
    ----------
    kind
        ``local`` or ``slurm`` (a ``slurm-batch`` cluster's workers are its srun tasks, and
        a running scheduler's are not started here: nothing to check).
    n_workers
        The workers asked for (``None``: the profile's default, checked by the profile).
    options
        The profile's options (default: ``sdnn.<kind>``).
    what
        How the message names the number (``--workers``, ``study.yaml: workers``).

    Raises
    ------
    ClusterError
        Naming the number, the limit and the setting that raises it.
    """
    if n_workers is None or kind not in ("local", "slurm"):
        return
    n = int(n_workers)
    if kind == "local":
        limit, rule = local_worker_limit(options)
        if n > limit:
            raise ClusterError(f"{what} {n}: a LocalCluster on this machine takes at most "
                               f"{limit} worker processes ({rule})")
        return
    limit = slurm_worker_limit(options)
    if n > limit:
        raise ClusterError(f"{what} {n}: a SLURM cluster asks for at most {limit} workers "
                           "(each job waits in the queue with everyone's; "
                           "sdnn.slurm.max-workers allows more)")
