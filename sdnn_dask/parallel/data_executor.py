"""Data parallelism: blocks of input rows, every worker holding all the weights.

The weights go to every worker once (``scatter(..., broadcast=True)``) and are kept
there for every later run (:func:`~.placement.keep_on` restores replicas Dask's memory
manager dropped, before the clock starts). A run splits the rows by a row partition,
places the blocks on the workers, then maps the kernel over them: each block runs
through all layers on one worker with no communication between layers, and only its
surviving rows come back. The result is put back into the original row order, so the
partition changes where the work runs, never the answer.

A worker given several blocks runs them merged (``sdnn.data-parallel.merge-blocks``):
each block alone through its early layers, then all their survivors together in full
tiles (:func:`~sdnn_dask.core.kernels.start_block`, :func:`~sdnn_dask.core.kernels.finish_blocks`),
so many small blocks cost little more than one per worker. Static placement runs one task
per worker over the blocks pinned to it (:func:`~.blocks.run_blocks`); dynamic placement puts the
block ids in a queue on the scheduler, and one task per worker (:func:`~.blocks.drain_queue`) takes
the next id as it frees up, runs that block's early layers, and finishes the blocks it
took, merged.

A worker that dies mid-run does not change the answer either: the blocks it held were
scattered, which Dask cannot recompute, so their tasks are cancelled; the executor sends
those blocks again (and the weights, if no copy is left) and reruns only them, up to
:data:`RETRIES` times, inside the timed run. Only if that fails does the run raise
:exc:`~sdnn_dask.parallel.faults.WorkerLostError`.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError
from typing import Any

import dask.array as da
import numpy as np
import pandas as pd
import scipy.sparse as sp
from distributed import Client, Future, Queue, as_completed, wait

from .. import config
from ..core.csr import stack_rows, take_rows
from ..core.kernels import (
    warm_up_kernels,
)
from ..core.network import Network, as_csr32
from ..core.result import RunResult, network_info
from ..data.store import NetworkStore
from ..data.streaming import StreamedNetwork, bytes_read
from ..partition import make_row_partition
from ..registry import PLACEMENTS
from .allocator import tune_allocator
from .base import Executor
from .blocks import (
    drain_queue,
    finish_here,
    run_block,
    run_blocks,
    start_one,
    stream_early_here,
    stream_here,
    stream_join_here,
)
from .faults import WorkerLostError, connected, gather_pinned, place_retrying
from .peak_memory import read_workers, reset_workers
from .placement import keep_on
from .weights import choose_weights, run_hosts, worker_memory_limit

#: Times a run sends again the blocks a dead worker took with it, and reruns them.
RETRIES = 3

#: Dynamic placement: blocks queued or running per worker (one ahead of the one running,
#: so a worker never waits for the client to hand it the next).
AHEAD = 2


class DataParallelExecutor(Executor):
    """Run data-parallel inference of one network on a Dask cluster.

    Parameters
    ----------
    client
        Any ``distributed.Client``.
    network
        The network; sent to every worker of the pool once, here. A network store
        (:class:`~sdnn_dask.data.store.NetworkStore` or its folder, or a
        :class:`~sdnn_dask.data.streaming.StreamedNetwork` of some of its layers) is read into
        memory and sent so when it fits, else streamed (see ``weights``).
    workers
        Addresses of the workers to use (default: every worker of the cluster).
    warm_up
        Compile the kernels on every worker now, so runs are timed warm.
    weights
        ``"resident"``, ``"streamed"`` or ``"auto"`` (default
        ``sdnn.data-parallel.weights``; see :func:`~.weights.choose_weights`). Streamed, each
        worker maps the store (one machine's workers share its pages in the page cache)
        and runs its blocks layer by layer, all of them through a layer before the next;
        only static placement with merged blocks runs so. The choice, and why, are
        :attr:`weights` and :attr:`weights_reason`, and every run's ``params`` say it.

    Examples
    --------
    >>> from distributed import Client, LocalCluster  # doctest: +SKIP
    >>> from sdnn_dask.data.radixnet import make_network, make_inputs  # doctest: +SKIP
    >>> client = Client(LocalCluster(n_workers=2, threads_per_worker=1))  # doctest: +SKIP
    >>> executor = DataParallelExecutor(client, make_network(1024, 120))  # doctest: +SKIP
    >>> result = executor.run(make_inputs(6000), partition="hash")  # doctest: +SKIP
    """

    strategy = "data"

    def __init__(self, client: Client,
                 network: Network | NetworkStore | StreamedNetwork | str | os.PathLike, *,
                 workers: Iterable[str] | None = None, warm_up: bool = True,
                 weights: str | None = None):
        # see sdnn_dask.parallel.allocator: large arrays without page faults
        super().__init__(client, network, workers=workers,
                         setup=[tune_allocator, warm_up_kernels] if warm_up
                         else [tune_allocator])
        if isinstance(network, NetworkStore | str | os.PathLike):  # a store, or its folder
            network = StreamedNetwork(network)
        self._store = network.store if isinstance(network, StreamedNetwork) else None
        self._resident_bytes = (network.resident_bytes()
                                if isinstance(network, StreamedNetwork) else 0)
        # every process of the run on a host holds a copy when resident: its workers'
        # (the client keeps none of a store's: see _scatter_weights)
        hosts = (None if isinstance(network, Network)
                 else run_hosts(client, self.workers, client_copy=False))
        # sdnn.data-parallel.weights is for stores: a network in memory is resident
        # unless streamed weights are asked for here (an error then)
        self.weights, self.weights_reason = choose_weights(
            network, weights or ("auto" if isinstance(network, Network)
                                 else config.get("data-parallel.weights")),
            worker_memory_limit(client, self.workers), hosts)
        self.network = network
        if isinstance(network, Network):
            _ = network.output_order  # ship transposes and orders with the weights
        self._weights: Future = self._scatter_weights()
        self._kernel = self.kernel_settings()

    def _scatter_weights(self) -> Future:
        weights = self.network
        if self.weights == "resident" and isinstance(weights, StreamedNetwork):
            # read here and sent, not kept: the client's copy would be one more on its host
            # (self.network stays the store; a copy lost with every worker is read again)
            weights = weights.store.to_network(weights.n_layers)
            _ = weights.output_order
        return self.client.scatter(weights, workers=self.workers, broadcast=True,
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
        merge: bool | None = None,
        join: bool | None = None,
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
            ``"dynamic"``: every block is placed on every worker, and each worker takes
            the next block from a queue on the scheduler as it frees up, as in a
            manager-worker scheme (default blocks:
            ``sdnn.data-parallel.dynamic-blocks-per-worker`` per worker). A worker's
            blocks run merged (``sdnn.data-parallel.merge-blocks``, see the module).
            Either way the blocks are placed before the clock starts.
        merge
            Run a worker's blocks merged (default ``sdnn.data-parallel.merge-blocks``):
            each alone through its early layers, then all their survivors together in
            full tiles. ``False``: every block alone, one task each.
        join
            Streamed weights: once the workers' early layers leave their survivors, take
            them on together on one worker (default ``sdnn.data-parallel.join``), so the
            deep layers, one or a few distinct rows by then, are read and stepped once
            instead of once a worker (65536-1920 x 60000 on 2 workers: 34.5 s apart,
            see docs/benchmarks.md). ``False``: each worker to the end on its own.
        """
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got "
                             f"{placement!r}")
        self._kernel = self.kernel_settings()  # read here, on the client: tasks get it
        if self.weights == "streamed" and (placement != "static" or merge is False
                                           or isinstance(inputs, da.Array)):
            raise ValueError(
                "streamed weights run each worker's blocks together, layer by layer: only "
                "static placement with merged blocks and scipy inputs run so (got "
                f"placement={placement!r}, merge={merge!r}"
                f"{', a dask array' if isinstance(inputs, da.Array) else ''})")
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
        cut = block_cutter(y, row_ids)

        def place() -> list[Future]:
            self._prepare()
            workers = self.workers
            # Before the clock starts: static, block b on worker b mod P; dynamic, every
            # block on every worker (a block can run wherever a worker frees up). One
            # block cut at a time, sent and dropped here: the client holds the inputs
            # and at most one block's copy, not a second copy of every row.
            futures = [self.client.scatter(
                [cut(b)], hash=False, broadcast=placement != "static",
                workers=[workers[b % len(workers)]] if placement == "static" else workers)[0]
                for b in range(len(row_ids))]
            self._wait(futures)
            if any(f.cancelled() for f in [self._weights, *futures]):
                raise CancelledError("data placed on a worker that died")
            return futures

        futures = place_retrying(self.client, self.strategy, place)
        merge = bool(config.get("data-parallel.merge-blocks") if merge is None else merge)
        merge = merge or self.weights == "streamed"  # a worker's blocks stream together
        before = self._store_use()
        join = bool(config.get("data-parallel.join", True) if join is None else join)
        join = join and self.weights == "streamed"
        reset_workers(self.client, self.workers)  # the peak of this run, blocks placed
        if placement == "static":
            results, wall = self._map(futures, cut, merge=merge, join=join)
        else:
            results, wall = self._map_dynamic(futures, merge=merge)
        peaks = read_workers(self.client, self.workers)
        params: dict[str, Any] = {"dedup": self._kernel.dedup,
                                  "classes": self._kernel.classes, "placement": placement,
                                  "merge_blocks": "merged" if merge else "alone",
                                  "weights": self.weights}
        if self.weights == "streamed":
            params["join"] = join
        if partition == "random":
            params["seed"] = seed
        if partition == "hash":
            params["nbuckets"] = nbuckets
        result = self._assemble(results, row_ids, y.shape[0], wall, partition, params)
        use = self._store_use(before)
        if use is not None:
            result.blocks = result.blocks.merge(use, on="worker", how="left")
        result.blocks = result.blocks.merge(peaks, on="worker", how="left")
        return result

    def _store_use(self, before: pd.DataFrame | None = None) -> pd.DataFrame | None:
        """Per worker of a run on a store: how it held the weights, their bytes (the copy
        in memory, or the most layers a streamed run prepares at once) and the store's
        bytes it read (during the run, given ``before``: this table taken before it).
        ``None`` for a network given in memory."""
        if self._store is None:
            return None
        folder = str(self._store.folder)
        reports = self.client.run(_store_report, folder, workers=self.workers)
        if self.weights == "resident":
            held = self._resident_bytes
        else:
            layers = self._store.manifest["layers"][: self.network.n_layers]
            held = (self.network.window + 1) * 8 * max(e["nnz"] for e in layers)
        table = pd.DataFrame([{"worker": w, "weights": self.weights, "weight_bytes": held,
                               "store_bytes_read": read} for w, read in reports.items()])
        if before is not None:
            start = before.set_index("worker")["store_bytes_read"]
            table["store_bytes_read"] -= [int(start.get(w, 0)) for w in table["worker"]]
        return table

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
        reset_workers(self.client, self.workers)
        results, wall = self._map(futures)
        result = self._assemble(results, row_ids, int(inputs.shape[0]), wall, "chunks", {})
        peaks = read_workers(self.client, self.workers)
        result.blocks = result.blocks.merge(peaks, on="worker", how="left")
        return result

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

    def _map(self, block_futures: list[Future], blocks: Callable[[int], Any] | None = None,
             merge: bool = False, join: bool = False) -> tuple[list[dict[str, Any]], float]:
        """Run every block and gather the results, timed.

        ``blocks(b)`` cuts again the data scattered as ``block_futures[b]``, block ``b`` on
        worker ``b mod P``: each worker's blocks run there, merged into one task if ``merge``
        (:func:`~.blocks.run_blocks`), and blocks lost with a worker are cut and sent again.
        Without them (dask array chunks, which Dask recomputes itself) each block is a task
        wherever its chunk is, and a lost block raises :exc:`WorkerLostError`.
        """
        start = time.perf_counter()
        workers = connected(self.client)
        block_futures = list(block_futures)
        pool = self.workers
        n = len(block_futures)
        if blocks is None or not merge:
            groups = [[b] for b in range(n)]
            pinned = [None if blocks is None else pool[b % len(pool)] for b in range(n)]
        else:  # worker w's blocks: w, w + P, w + 2P, ...
            used = min(len(pool), n)
            groups = [list(range(w, n, used)) for w in range(used)]
            pinned = pool[:used]
        join = join and self.weights == "streamed" and len(groups) > 1
        tasks = [self._submit_group(g, block_futures, w, early=join)
                 for g, w in zip(groups, pinned, strict=True)]
        retries = 0
        while True:
            try:
                if join:  # every worker's survivors on to the end on the first's
                    joined = self.client.submit(
                        stream_join_here, self._weights, self._kernel, *tasks,
                        workers=[pinned[0]] if pinned[0] else self.workers,
                        allow_other_workers=True, pure=False)
                    results = [self.client.gather(joined)]
                else:
                    results = self.client.gather(tasks)
                # identical rows' values come once, with their ``source``: _assemble
                # expands them straight into the output
                flat = [r for res in results for r in (res if isinstance(res, list) else [res])]
                return sorted(flat, key=lambda r: r["block"]), time.perf_counter() - start
            except CancelledError as error:
                # Scattered data that died with its worker is forgotten by the scheduler,
                # and the tasks that need it are cancelled: send it again, rerun those.
                # (The cancellations may arrive in several messages: retry what is known.)
                redo = [i for i, (task, group) in enumerate(zip(tasks, groups, strict=True))
                        if task.cancelled() or any(block_futures[b].cancelled() for b in group)]
                lost = [b for i in redo for b in groups[i]]
                if blocks is None or not redo or retries == RETRIES:
                    raise WorkerLostError(self.strategy, workers - connected(self.client),
                                          f" (blocks {lost} lost, after {retries} retries)"
                                          ) from error
                retries += 1
                if self._weights.cancelled():  # every copy died
                    self._weights = self._scatter_weights()
                again = self.client.scatter([blocks(b) for b in lost],
                                            workers=self.workers, hash=False)
                for b, block in zip(lost, again, strict=True):
                    block_futures[b] = block
                for i in redo:
                    self.client.cancel(tasks[i])
                    tasks[i] = self._submit_group(groups[i], block_futures, None, early=join)

    def _submit_group(self, group: list[int], block_futures: list[Future],
                      worker: str | None, early: bool = False) -> Future:
        where = self.workers if worker is None else [worker]
        if early:  # the early layers alone (stream_join_here takes them on)
            return self.client.submit(stream_early_here, self._weights, group, self._kernel,
                                      *(block_futures[b] for b in group), workers=where,
                                      allow_other_workers=False, pure=False)
        if self.weights == "streamed":
            return self.client.submit(stream_here, self._weights, group, self._kernel,
                                      *(block_futures[b] for b in group), workers=where,
                                      allow_other_workers=False, pure=False)
        if len(group) == 1:
            return self._submit(block_futures[group[0]], group[0], worker)
        return self.client.submit(run_blocks, self._weights, group, self._kernel,
                                  *(block_futures[b] for b in group), workers=where,
                                  allow_other_workers=False, pure=False)

    def _submit(self, block: Future, block_id: int, worker: str | None = None) -> Future:
        where = self.workers if worker is None else [worker]
        return self.client.submit(run_block, self._weights, block, block_id, self._kernel,
                                  workers=where, allow_other_workers=False, pure=False)

    def _map_dynamic(self, block_futures: list[Future], merge: bool = False
                     ) -> tuple[list[dict[str, Any]], float]:
        """Hand the blocks out as workers free up (every worker holds every block). Timed.

        Each worker has at most :data:`AHEAD` blocks queued or running, and gets the next
        block when one finishes (so it never idles waiting for the client). With
        ``merge``, a block's task runs only its early layers (:func:`~.blocks.start_one`) and its
        state stays on the worker; once every block is handed out, each worker finishes
        the blocks it started in one task, their survivors merged into full tiles
        (:func:`~.blocks.finish_here`).

        A worker lost mid-run raises :exc:`WorkerLostError` (no retry: the blocks are
        everywhere, but which ran is the manager's state).
        """
        if merge:
            return self._drain(block_futures)
        workers = self.workers
        start = time.perf_counter()
        queue = list(range(len(block_futures)))
        running: dict[Future, str] = {}
        started: dict[str, list[tuple[int, Future]]] = {w: [] for w in workers}
        finishing: list[Future] = []

        def hand_out(worker: str) -> Future:
            b = queue.pop(0)
            if merge:
                task = self.client.submit(start_one, self._weights, block_futures[b],
                                          self._kernel, workers=[worker],
                                          allow_other_workers=False, pure=False)
                started[worker].append((b, task))
            else:
                task = self._submit(block_futures[b], b, worker)
            running[task] = worker
            return task

        def finish_all() -> None:
            for worker, mine in started.items():
                if mine:
                    ids = [b for b, _ in mine]
                    finishing.append(self.client.submit(
                        finish_here, self._weights, ids, self._kernel,
                        *(t for _, t in mine), workers=[worker], allow_other_workers=False,
                        pure=False))

        for _ in range(AHEAD):
            for worker in workers:
                if queue:
                    hand_out(worker)
        results: dict[int, dict[str, Any]] = {}
        try:
            if merge and not queue:
                finish_all()
            with self.client.as_current():  # as_completed looks up the current client
                pending = as_completed(list(running))
            for task in pending:
                worker = running.pop(task)
                if not merge:
                    res = task.result()
                    results[res["block"]] = res
                elif task.cancelled() or task.status == "error":
                    task.result()  # raise it
                if queue:
                    pending.add(hand_out(worker))
                    if merge and not queue:
                        finish_all()
            for res in self.client.gather(finishing):
                results.update({r["block"]: r for r in res})
        except CancelledError as error:
            raise WorkerLostError(self.strategy, set(workers) - connected(self.client),
                                  " (dynamic placement)") from error
        wall = time.perf_counter() - start
        return [results[b] for b in range(len(block_futures))], wall

    def _drain(self, block_futures: list[Future]) -> tuple[list[dict[str, Any]], float]:
        """Dynamic placement with merging: worker ``w`` is given block ``w`` and the other
        block ids go into a queue on the scheduler (before the clock); one
        :func:`~.blocks.drain_queue` task per worker takes them as it frees up. Timed. A worker lost
        mid-run raises :exc:`WorkerLostError`."""
        n = len(block_futures)
        workers = self.workers[:n]  # a worker with no first block has nothing to do
        ids = Queue(f"sdnn-blocks-{uuid.uuid4().hex}", client=self.client)
        try:
            for b in [*range(len(workers), n), *[-1] * len(workers)]:
                ids.put(b)
            start = time.perf_counter()
            tasks = [self.client.submit(drain_queue, self._weights, ids.name, self._kernel,
                                        first, *block_futures, workers=[w],
                                        allow_other_workers=False, pure=False)
                     for first, w in enumerate(workers)]
            done = gather_pinned(self.client, tasks, workers, strategy=self.strategy)
            wall = time.perf_counter() - start
        finally:
            ids.close()
        results = {r["block"]: r for res in done for r in res}
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
        # The output is built by one copy of rows (take_rows) from the blocks' values
        # stacked: output row v is stacked row source[v], an empty row where v died.
        # (Through COO, at 65536-1920 x 60000 the client held several transient copies of
        # 1.3 GB of survivors' values; identical rows sent once are expanded here too.)
        pieces: list[sp.csr_matrix] = []
        where: dict[int, int] = {}  # blocks of one task may share one values matrix
        source = np.full(n_inputs, -1, dtype=np.int64)
        at = 0
        blocks, layers = [], []
        for res, ids in zip(results, row_ids, strict=True):
            if res["n_rows"] != len(ids):
                raise RuntimeError(f"block {res['block']} came back with {res['n_rows']} rows, "
                                   f"sent {len(ids)}")
            values = res.pop("values")
            if id(values) not in where:
                where[id(values)] = at
                pieces.append(as_csr32(values))
                at += values.shape[0]
            first = where[id(values)]
            pointers = res.pop("source", None)
            rows = np.asarray(res["rows"], dtype=np.int64)
            # block-local survivors -> original row ids; their rows of the values
            source[ids[rows]] = first + (np.arange(len(rows)) if pointers is None
                                         else np.asarray(pointers, dtype=np.int64))
            blocks.append({"block": res["block"], "worker": res["worker"], "rows": len(ids),
                           "survivors": len(rows), "compute_s": res["compute_s"]})
            layers.append(res["trace"].assign(block=res["block"]))
        pieces.append(sp.csr_matrix((1, n), dtype=np.float32))  # the rows that died
        source[source < 0] = at
        stacked = stack_rows(pieces)
        del pieces, where  # the gathered values (results no longer hold them)
        output = take_rows(stacked, source)
        del stacked
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


def _store_report(folder: str, dask_worker: Any = None) -> int:
    """On a worker (``client.run``): the store's bytes it read."""
    return bytes_read(folder)


def block_cutter(inputs: sp.csr_matrix, row_ids: list[np.ndarray]
                 ) -> Callable[[int], sp.csr_matrix]:
    """``cut(b)``: block ``b``'s rows of ``inputs`` (``row_ids[b]``, in that order), a view
    of ``inputs``' arrays where they are a contiguous range (the block partition: no copy,
    :func:`row_view`), else a copy made when asked (so the caller can
    send it and drop it before cutting the next)."""
    ranges = [(int(ids[0]), int(ids[-1]) + 1)
              if len(ids) and ids[-1] - ids[0] + 1 == len(ids) and np.all(np.diff(ids) == 1)
              else None for ids in row_ids]

    def cut(b: int) -> sp.csr_matrix:
        if not len(row_ids[b]):
            return inputs[:0]
        if ranges[b] is not None:
            return row_view(inputs, *ranges[b])
        return take_rows(inputs, row_ids[b])

    return cut


def row_view(csr: sp.csr_matrix, start: int, stop: int) -> sp.csr_matrix:
    """Rows ``start:stop`` of ``csr`` over views of its nonzeros, never a copy of them.

    :func:`~sdnn_dask.core.csr.row_slice`'s matrix is built by scipy's constructor, whose
    format check copies an index or value array that is a view of less than half of a
    larger one (scipy 1.17, ``_prune_array``): every block of more than one is such a
    view. The arrays are set after construction here, past that check (they are valid:
    a contiguous range of a valid CSR's). Not to be changed in place.
    """
    out = sp.csr_matrix((stop - start, csr.shape[1]), dtype=csr.dtype)
    ptr = csr.indptr[start : stop + 1]
    first, last = int(ptr[0]), int(ptr[-1])
    out.indptr = ptr - ptr.dtype.type(first)  # the inputs' index type, as the views'
    out.indices, out.data = csr.indices[first:last], csr.data[first:last]
    out.has_sorted_indices = csr.has_sorted_indices
    return out
