"""What data- and model-parallel executors (and the trainers) share: the pool of workers
they use; for executors also their set-up, the kernel settings their tasks run with, and
the one method a caller needs, ``run``.

An executor is bound to a pool of workers (default: every worker of the cluster), so one
cluster can run a study's grid over worker counts: a run with 1 of 2 workers places its
data and tasks on that worker alone. Kernel settings (``sdnn.kernel.*``) are read once on
the client, when a run starts, and passed to the tasks: a ``dask.config.set`` in the
client's process then governs every strategy alike (a worker's own configuration does not
see it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from distributed import Client

from ..core.kernels import KernelSettings
from ..core.network import Network
from ..core.result import RunResult
from .faults import connected, prepare_workers


class WorkerPool:
    """A client and the workers of it to use: the base of executors and trainers.

    Parameters
    ----------
    client
        Any ``distributed.Client``.
    workers
        Addresses of the workers to use (default: all, including workers that join later);
        each must be connected now.
    """

    def __init__(self, client: Client, workers: Iterable[str] | None = None):
        self.client = client
        self._pool = None if workers is None else sorted(set(workers))
        if self._pool is not None:
            missing = sorted(set(self._pool) - connected(client))
            if missing or not self._pool:
                raise ValueError(f"workers {missing or '[]'} are not connected to the "
                                 "cluster" if missing else "workers: give at least one")

    @property
    def workers(self) -> list[str]:
        """The pool's workers connected now, sorted."""
        now = connected(self.client)
        return sorted(now if self._pool is None else now & set(self._pool))

    @property
    def n_workers(self) -> int:
        """Workers of the pool connected now."""
        return len(self.workers)


class Executor(WorkerPool):
    """Base of the parallel executors: a client, a network and a pool of workers.

    Parameters
    ----------
    client
        Any ``distributed.Client``.
    network
        The network the executor runs.
    workers
        Addresses of the workers to use (default: all, including workers that join later).
    setup
        Functions run once on every worker before its first task (and again on a worker
        restarted by its nanny).
    """

    strategy = "parallel"

    def __init__(self, client: Client, network: Network, *,
                 workers: Iterable[str] | None = None,
                 setup: list[Callable[[], Any]] | None = None):
        super().__init__(client, workers)
        self.network = network
        self._setup = list(setup or [])
        self._ready: set[str] = set()  # workers set up (a restarted worker comes back blank)
        self.setup()

    def setup(self) -> None:
        """Run the set-up functions on every connected worker not yet set up."""
        prepare_workers(self.client, self._ready, self._setup)

    def run(self, inputs: Any, **options: Any) -> RunResult:
        """Infer ``inputs`` (``rows x N``) on the pool; options are the strategy's own.

        Placement (the data a run needs, sent to the workers that run it) happens here,
        before the clock starts; the returned result's ``wall_seconds`` is the inference
        alone.
        """
        raise NotImplementedError

    @staticmethod
    def kernel_settings() -> KernelSettings:
        """``sdnn.kernel.*`` as seen here, on the client (passed to every task)."""
        return KernelSettings.resolve()
