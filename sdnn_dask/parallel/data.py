"""Data parallelism: blocks of input rows, every worker holding all the weights.

The weights go to every worker once (``scatter(..., broadcast=True)``) and are kept
there for every later run (:func:`~.placement.keep_on` restores replicas Dask's memory
manager dropped, before the clock starts). A run splits the rows by a row partition,
places the blocks on the workers, then maps the kernel over them: each block runs
through all layers on one worker with no communication between layers, and only its
surviving rows come back. The result
is put back into the original row order, so the partition changes where the work runs,
never the answer.

A worker that dies mid-run does not change the answer either: the blocks it held were
scattered, which Dask cannot recompute, so their tasks are cancelled; the executor sends
those blocks again (and the weights, if no copy is left) and reruns only them, up to
:data:`RETRIES` times, inside the timed run. Only if that fails does the run raise
:exc:`~sdnn_dask.parallel.faults.WorkerLostError`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import CancelledError
from typing import Any

import dask.array as da
import numpy as np
import pandas as pd
import scipy.sparse as sp
from distributed import Client, Future, as_completed, get_worker, wait

from .. import config
from ..allocator import tune_allocator
from ..kernels import KernelSettings, forward_block, warm_up_kernels
from ..network import Network, as_csr32
from ..partition import make_row_partition
from ..registry import PLACEMENTS
from ..result import RunResult, network_info
from .base import Executor
from .faults import WorkerLostError, connected, place_retrying
from .placement import keep_on

#: Times a run sends again the blocks a dead worker took with it, and reruns them.
RETRIES = 3



def run_block(network: Network, block: Any, block_id: int,
              kernel: KernelSettings | None = None) -> dict[str, Any]:
    """Run one block of rows through the network (executed on a worker).

    ``block`` is a scipy sparse matrix or a pydata/sparse array; ``kernel`` the settings
    resolved on the client (default: this process's ``sdnn.kernel.*``). Returns the
    surviving rows (block-local ids), their activations, the compute time measured here
    and the trace.
    """
    csr = as_csr32(block.tocsr() if hasattr(block, "tocsr") else block)
    kernel = kernel or KernelSettings.resolve()
    start = time.perf_counter()
    out = forward_block(network, csr, dense_threshold=kernel.dense_threshold,
                        chunk_bytes=kernel.chunk_bytes)
    compute = time.perf_counter() - start
    try:
        worker = get_worker().address
    except ValueError:  # called outside a worker (e.g. in a test)
        worker = "local"
    return {
        "block": block_id,
        "worker": worker,
        "n_rows": out.n_rows,
        "rows": out.rows,
        "values": out.values,
        "compute_s": compute,
        "trace": out.trace,
    }


class DataParallelExecutor(Executor):
    """Run data-parallel inference of one network on a Dask cluster.

    Parameters
    ----------
    client
        Any ``distributed.Client``.
    network
        The network; sent to every worker of the pool once, here.
    workers
        Addresses of the workers to use (default: every worker of the cluster).
    warm_up
        Compile the kernels on every worker now, so runs are timed warm.

    Examples
    --------
    >>> from distributed import Client, LocalCluster  # doctest: +SKIP
    >>> from sdnn_dask.radixnet import make_network, make_inputs  # doctest: +SKIP
    >>> client = Client(LocalCluster(n_workers=2, threads_per_worker=1))  # doctest: +SKIP
    >>> executor = DataParallelExecutor(client, make_network(1024, 120))  # doctest: +SKIP
    >>> result = executor.run(make_inputs(6000), partition="hash")  # doctest: +SKIP
    """

    strategy = "data"

    def __init__(self, client: Client, network: Network, *,
                 workers: Iterable[str] | None = None, warm_up: bool = True):
        # see sdnn_dask.allocator: large arrays without page faults
        super().__init__(client, network, workers=workers,
                         setup=[tune_allocator, warm_up_kernels] if warm_up
                         else [tune_allocator])
        _ = network.output_order  # ship transposes and orders with the weights: built once
        self._weights: Future = self._scatter_weights()
        self._kernel = self.kernel_settings()

    def _scatter_weights(self) -> Future:
        return self.client.scatter(self.network, workers=self.workers, broadcast=True,
                                   hash=False)

    def run(
        self,
        inputs: sp.spmatrix | sp.sparray | da.Array,
        *,
        partition: str | None = None,
        n_blocks: int | None = None,
        seed: int = 0,
        nbuckets: int | None = None,
        placement: str = "static",
    ) -> RunResult:
        """Infer ``inputs`` with rows split into blocks.

        Parameters
        ----------
        inputs
            ``rows x N`` scipy sparse matrix, or a ``dask.array`` whose chunks are
            pydata/sparse (or scipy) arrays: then its row chunks are the blocks.
        partition
            ``"block"`` (default), ``"hash"`` or ``"random"`` (scipy inputs only).
        n_blocks
            Blocks (default: ``sdnn.data-parallel.blocks-per-worker`` per worker). May
            exceed the number of workers or of rows.
        seed
            Seed of the ``"random"`` partition.
        nbuckets
            Buckets of the ``"hash"`` partition (default ``sdnn.data-parallel.nbuckets``).
        placement
            ``"static"`` (default): block ``b`` is placed on worker ``b mod P`` and runs
            there, as MPI ranks each own their rows (default blocks: one per worker).
            ``"dynamic"``: every block is placed on every worker, and each worker is given
            the next block as soon as it finishes one, as in a manager-worker scheme
            (default blocks: ``sdnn.data-parallel.dynamic-blocks-per-worker`` per worker).
            Either way the blocks are placed before the clock starts.
        """
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got "
                             f"{placement!r}")
        self._kernel = self.kernel_settings()  # read here, on the client: tasks get it
        if isinstance(inputs, da.Array):
            if partition not in (None, "block", "chunks"):
                raise ValueError(
                    "a dask array is split by its own row chunks; rechunk it, or pass a "
                    f"scipy matrix to use the {partition!r} partition"
                )
            return self._run_dask_array(inputs)
        partition = partition or "block"
        nbuckets = int(nbuckets or config.get("data-parallel.nbuckets"))
        y = as_csr32(inputs)
        self._check_width(y.shape)
        if n_blocks is None:
            per_worker = ("data-parallel.blocks-per-worker" if placement == "static"
                          else "data-parallel.dynamic-blocks-per-worker")
            n_blocks = self.n_workers * int(config.get(per_worker))
        part = make_row_partition(partition, y.shape[0], n_blocks, seed=seed, nbuckets=nbuckets)
        row_ids = part.blocks()
        blocks = [y[ids] for ids in row_ids]

        def place() -> list[Future]:
            self._prepare()
            workers = self.workers
            # Before the clock starts: static, block b on worker b mod P; dynamic, every
            # block on every worker (a block can run wherever a worker frees up).
            if placement == "static":
                futures = [self.client.scatter([block], workers=[workers[b % len(workers)]],
                                               hash=False)[0]
                           for b, block in enumerate(blocks)]
            else:
                futures = self.client.scatter(blocks, workers=workers, broadcast=True,
                                              hash=False)
            self._wait(futures)
            if any(f.cancelled() for f in [self._weights, *futures]):
                raise CancelledError("data placed on a worker that died")
            return futures

        futures = place_retrying(self.client, self.strategy, place)
        if placement == "static":
            results, wall = self._map(futures, blocks)
        else:
            results, wall = self._map_dynamic(futures)
        params: dict[str, Any] = {"placement": placement}
        if partition == "random":
            params["seed"] = seed
        if partition == "hash":
            params["nbuckets"] = nbuckets
        return self._assemble(results, row_ids, y.shape[0], wall, partition, params)

    def _check_width(self, shape: tuple[int, ...]) -> None:
        if len(shape) != 2 or shape[1] != self.network.n_neurons:
            raise ValueError(
                f"inputs have shape {shape}; the network needs rows x {self.network.n_neurons}"
            )

    def _run_dask_array(self, inputs: da.Array) -> RunResult:
        self._check_width(inputs.shape)
        if len(inputs.chunks[1]) != 1:
            inputs = inputs.rechunk({1: -1})  # a block needs whole rows
        self._prepare()
        futures = self.client.compute(list(inputs.to_delayed()[:, 0]))
        self._wait(futures)
        sizes = inputs.chunks[0]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        row_ids = [np.arange(starts[b], starts[b + 1]) for b in range(len(sizes))]
        results, wall = self._map(futures)
        return self._assemble(results, row_ids, int(inputs.shape[0]), wall, "chunks", {})

    def _wait(self, futures: list[Future]) -> None:
        with self.client.as_current():  # wait() looks up the current client
            wait(futures)

    def _prepare(self) -> None:
        """Before the clock: set up workers that joined since (e.g. restarted by their
        nanny), scatter the weights again if every copy died with its worker, and copy
        them back to workers whose replica Dask's memory manager dropped."""
        self.setup()
        if self._weights.cancelled():
            self._weights = self._scatter_weights()
        keep_on(self.client, self._weights, self.workers)

    def _map(self, block_futures: list[Future], blocks: list[Any] | None = None
             ) -> tuple[list[dict[str, Any]], float]:
        """Run every block and gather the results, timed.

        ``blocks`` are the data scattered as ``block_futures``: blocks lost with a worker
        are sent again from them. Without them (dask array chunks, which Dask recomputes
        itself) a lost block raises :exc:`WorkerLostError`.
        """
        start = time.perf_counter()
        workers = connected(self.client)
        block_futures = list(block_futures)
        pool = self.workers
        # pinned where placed (block b on worker b mod P); a rerun goes where its block is
        tasks = [self._submit(block, b, pool[b % len(pool)] if blocks is not None else None)
                 for b, block in enumerate(block_futures)]
        retries = 0
        while True:
            try:
                results = self.client.gather(tasks)
                return results, time.perf_counter() - start
            except CancelledError as error:
                # Scattered data that died with its worker is forgotten by the scheduler,
                # and the tasks that need it are cancelled: send it again, rerun those.
                # (The cancellations may arrive in several messages: retry what is known.)
                redo = [b for b, (task, block) in enumerate(zip(tasks, block_futures,
                                                                strict=True))
                        if task.cancelled() or block.cancelled()]
                if blocks is None or not redo or retries == RETRIES:
                    raise WorkerLostError(self.strategy, workers - connected(self.client),
                                          f" (blocks {redo} lost, after {retries} retries)"
                                          ) from error
                retries += 1
                if self._weights.cancelled():  # every copy died
                    self._weights = self._scatter_weights()
                again = self.client.scatter([blocks[b] for b in redo],
                                            workers=self.workers, hash=False)
                for b, block in zip(redo, again, strict=True):
                    self.client.cancel(tasks[b])
                    block_futures[b], tasks[b] = block, self._submit(block, b)

    def _submit(self, block: Future, block_id: int, worker: str | None = None) -> Future:
        where = self.workers if worker is None else [worker]
        return self.client.submit(run_block, self._weights, block, block_id, self._kernel,
                                  workers=where, allow_other_workers=False, pure=False)

    def _map_dynamic(self, block_futures: list[Future]) -> tuple[list[dict[str, Any]], float]:
        """Hand the blocks out one at a time: each worker gets the next block as soon as
        it finishes one (every worker holds every block). Timed.

        A worker lost mid-run raises :exc:`WorkerLostError` (no retry: the blocks are
        everywhere, but which ran is the manager's state).
        """
        workers = self.workers
        start = time.perf_counter()
        queue = list(range(len(block_futures)))
        running: dict[Future, str] = {}
        for worker in workers:
            if queue:
                b = queue.pop(0)
                running[self._submit(block_futures[b], b, worker)] = worker
        results: dict[int, dict[str, Any]] = {}
        try:
            with self.client.as_current():  # as_completed looks up the current client
                pending = as_completed(list(running))
            for task in pending:
                worker = running.pop(task)
                res = task.result()
                results[res["block"]] = res
                if queue:
                    b = queue.pop(0)
                    nxt = self._submit(block_futures[b], b, worker)
                    running[nxt] = worker
                    pending.add(nxt)
        except CancelledError as error:
            raise WorkerLostError(self.strategy, set(workers) - connected(self.client),
                                  " (dynamic placement)") from error
        wall = time.perf_counter() - start
        return [results[b] for b in range(len(block_futures))], wall

    def _assemble(
        self,
        results: list[dict[str, Any]],
        row_ids: list[np.ndarray],
        n_inputs: int,
        wall: float,
        partition: str,
        params: dict[str, Any],
    ) -> RunResult:
        n = self.network.n_neurons
        rows, cols, vals, blocks, layers = [], [], [], [], []
        for res, ids in zip(results, row_ids, strict=True):
            if res["n_rows"] != len(ids):
                raise RuntimeError(f"block {res['block']} came back with {res['n_rows']} rows, "
                                   f"sent {len(ids)}")
            coo = res["values"].tocoo()
            rows.append(ids[res["rows"][coo.row]])  # block-local -> original row ids
            cols.append(coo.col)
            vals.append(coo.data)
            blocks.append({"block": res["block"], "worker": res["worker"], "rows": len(ids),
                           "survivors": len(res["rows"]), "compute_s": res["compute_s"]})
            layers.append(res["trace"].assign(block=res["block"]))
        output = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(n_inputs, n),
        )
        return RunResult(
            strategy=self.strategy,
            partition=partition,
            network=network_info(self.network),
            n_inputs=n_inputs,
            n_workers=self.n_workers,
            n_blocks=len(row_ids),
            row_groups=len(row_ids),
            output=as_csr32(output),
            wall_seconds=wall,
            blocks=pd.DataFrame(blocks),
            layers=pd.concat(layers, ignore_index=True),
            params=params,
        )
