"""Model parallelism (and the 2-D hybrid): every layer's neurons split across workers.

A :class:`~sdnn_dask.partition.NeuronPartition` assigns each neuron of every level to one
of ``k`` parts; each part is pinned to one worker (``part % workers``) and holds only its
slice of every layer's weights (:func:`~sdnn_dask.parallel.slabs.make_part_plans`). Layer ``l`` is,
per part ``p``::

    send   q -> p :  Y_{l-1}[:, own_q & needed_p]     (on q's worker)
    step   p      :  Y_l[:, own_p] = Y_{l-1}[:, needed_p] @ W_l[needed_p, own_p]

Two transports carry the pieces: ``direct`` (the default; one long-running task per part
runs every layer and sends its pieces worker to worker, :mod:`.model_direct`) and ``graph``
(a Dask task per send and per step, every exchange scheduled by Dask).

so a part receives exactly the activation columns it reads and does not own: the
column-net hypergraph's connectivity minus one, which hypergraph partitioning minimises.
Only rows with a nonzero in the columns sent travel, column-major: as row blocks of
nonzeros, or as a dense tile once at least half the entries are nonzero (the smaller).
Communication is between workers: when several parts share a worker (``k > workers``), a
source sends that worker one piece with the union of the columns its parts read, and parts
on the source's own worker read its slab in memory. With one part per worker that is
exactly the km1 volume; with more, the bytes moved fall below it.

The hybrid splits the input rows into ``R`` groups (a row partition, as in data
parallelism) and runs the ``C = k`` parts of each group; group ``g``'s part ``p`` runs on
worker ``(g * C + p) % workers``. ``R = 1`` is model parallelism, ``C = 1`` data parallelism.

If a worker a run is placed on dies, its pinned tasks can never run elsewhere, and the
slices and slabs scattered to it cannot be recomputed: the run is cancelled and raises
:exc:`~sdnn_dask.parallel.faults.WorkerLostError` within a second or two (on the direct
transport every surviving part stops too), and the next run places the plans again on the
workers connected then.

Every task of a run carries the run's token in its key. The direct transport counts the
bytes of every piece it sends; for the graph one they are read from Dask's transfer logs
(:mod:`.transfers`). Either way they are reported per layer next to the partition's
predicted volume.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from dask.sizeof import sizeof
from distributed import Client, Future, wait

from .. import config
from ..core.kernels import warm_up_kernels
from ..core.network import Network, as_csr32
from ..core.result import RunResult, network_info
from ..data.store import NetworkStore
from ..data.streaming import StreamedNetwork
from ..partition import NeuronPartition, make_neuron_partition, make_row_partition
from ..registry import OBJECTIVES, TRANSPORTS  # "direct" or "graph"
from .allocator import tune_allocator
from .base import Executor
from .exchange_forecast import forecast_exchange
from .faults import WorkerLostError, place_retrying
from .model_direct import MESSAGE_COLUMNS, TIMING_COLUMNS
from .model_graph import graph_messages
from .model_passes import PassRunner
from .peak_memory import read_workers, reset_workers
from .placement import keep_on, slot_index
from .slabs import (
    PART_TRACE_COLUMNS,
    PartPlan,
    Slab,
    dedup_enabled,
    make_part_plans,
    warm_up_parts,
)
from .slabs.row_passes import assemble_output, pass_rows_for
from .slabs.slice_checks import SliceDamagedError, StaleSlicesWarning, read_slices_index
from .slabs.sliced_plans import SlicedPartPlan, open_part, open_parts, part_resident_bytes
from .slabs.slices import discard_slices, slices_volume, write_part_slices
from .transfers import transfers_of, widen_transfer_logs
from .transport.run import connect_peers, ensure_exchange
from .weights import WEIGHTS, choose_part_weights, worker_memory_limit


@sizeof.register(Slab)
def _sizeof_slab(slab: Slab) -> int:  # Dask's transfer accounting and memory limits use it
    return slab.nbytes


@sizeof.register(PartPlan)
def _sizeof_plan(plan: PartPlan) -> int:
    return plan.nbytes


class ModelParallelExecutor(Executor):
    """Run model-parallel (or hybrid) inference of one network on a Dask cluster.

    Parameters
    ----------
    client
        Any ``distributed.Client``.
    network
        The network. Each partition's weight slices are sent to the workers the first
        time it is used, and kept for later runs with the same partition. A network store
        (:class:`~sdnn_dask.data.store.NetworkStore`, its folder, or a
        :class:`~sdnn_dask.data.streaming.StreamedNetwork` of some of its layers) is cut
        once per partition into per-part slices beside the store
        (:mod:`~sdnn_dask.parallel.slabs.slices`), and each part's worker maps only its
        slice: resident or streamed layer by layer (see ``weights``).
    workers
        Addresses of the workers to use (default: every worker of the cluster).
    warm_up
        Compile the kernels on every worker now, so runs are timed warm.
    weights
        For a store: ``"resident"``, ``"streamed"`` or ``"auto"`` (default
        ``sdnn.data-parallel.weights``; see
        :func:`~sdnn_dask.parallel.weights.choose_part_weights`), decided per part when a
        partition is placed; :attr:`part_weights` says what was chosen and why.

    Examples
    --------
    >>> from sdnn_dask.cluster import local_client  # doctest: +SKIP
    >>> from sdnn_dask.data.radixnet import make_network  # doctest: +SKIP
    >>> from sdnn_dask.data.images import make_inputs  # doctest: +SKIP
    >>> client = local_client(2)  # doctest: +SKIP
    >>> executor = ModelParallelExecutor(client, make_network(1024, 120))  # doctest: +SKIP
    >>> result = executor.run(make_inputs(6000), partition="hypergraph", k=4)  # doctest: +SKIP
    >>> result.communication[["layer", "km1", "bytes_moved"]].head()  # doctest: +SKIP
    """

    def __init__(self, client: Client,
                 network: Network | NetworkStore | StreamedNetwork | str | os.PathLike, *,
                 workers: Iterable[str] | None = None, warm_up: bool = True,
                 weights: str | None = None):
        self._placed: dict[tuple, tuple[NeuronPartition, list[PartPlan],
                                        dict[tuple[int, str], Future], list[str]]] = {}
        self._forecasts: dict[tuple, tuple[pd.DataFrame, NeuronPartition, Any]] = {}
        if isinstance(network, NetworkStore | str | os.PathLike):  # a store, or its folder
            network = StreamedNetwork(network)
        # sdnn.data-parallel.weights is for stores; streamed weights asked for here need one
        self.weights = weights or ("auto" if isinstance(network, Network)
                                   else config.get("data-parallel.weights"))
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got "
                             f"{self.weights!r}")
        if self.weights == "streamed" and isinstance(network, Network):
            raise ValueError("streamed weights need a network store (sdnn-dask convert, or "
                             "generate --store); this network is in memory")
        #: Per part of the partition placed last: ``(mode, reason)``, for a store.
        self.part_weights: list[tuple[str, str]] = []
        #: The slices folder of the partition placed last (a store only).
        self.slices: Path | None = None
        # see sdnn_dask.parallel.allocator: large arrays without page faults
        super().__init__(client, network, workers=workers,
                         setup=[tune_allocator, warm_up_kernels, warm_up_parts] if warm_up
                         else [tune_allocator])

    @property
    def streamed(self) -> bool:
        """Whether the network is a store's (cut into per-part slices on the workers)."""
        return isinstance(self.network, StreamedNetwork)

    def partition(self, method: str | NeuronPartition = "block", k: int | None = None, *,
                  seed: int = 0, nbuckets: int = 1, epsilon: float = 0.03,
                  cache: bool | str | None = True, inputs: sp.spmatrix | None = None,
                  objective: str = "traffic") -> NeuronPartition:
        """The neuron partition a run with these arguments uses (built if needed); a
        hypergraph one is weighted by the traffic of ``inputs`` unless ``objective`` is
        ``"km1"`` (:func:`~sdnn_dask.partition.hypergraph.hypergraph_partition`)."""
        if isinstance(method, NeuronPartition):
            if k is not None and k != method.k:
                raise ValueError(f"k={k} but the partition given has k={method.k}")
            return method
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got "
                             f"{objective!r}")
        k = self.n_workers if k is None else k
        return make_neuron_partition(self.network, k, method, seed=seed, nbuckets=nbuckets,
                                     epsilon=epsilon, cache=cache if method == "hypergraph"
                                     else None,
                                     inputs=inputs if objective == "traffic" else None)

    def _place(self, partition: NeuronPartition, row_groups: int
               ) -> tuple[list[PartPlan], dict[tuple[int, str], Future], list[str]]:
        """Plans of every part, on the workers that run them (built and sent once), by
        ``(part, worker)``."""
        self.setup()
        workers = self.workers
        settings = self.kernel_settings()  # read here, on the client, for every part
        kernel = (settings.dense_threshold, settings.chunk_bytes, settings.min_chunk_rows,
                  settings.classes)
        digest = hashlib.sha1()
        for row in partition.parts:  # a level at a time: block partitions are broadcast
            digest.update(np.ascontiguousarray(row).tobytes())
        key = (partition.method, partition.k, digest.hexdigest(), row_groups,
               tuple(workers), kernel)
        hosts = {p: sorted({self._slot(workers, g, p, partition.k)
                            for g in range(row_groups)}) for p in range(partition.k)}
        if key not in self._placed:
            self._placed = {}  # one partition's plans at a time: release the old first
            if self.streamed:
                plans, futures = self._open_slices(partition, hosts, workers, kernel)
            else:
                plans = make_part_plans(self.network, partition, dense_threshold=kernel[0],
                                        chunk_bytes=kernel[1], min_chunk_rows=kernel[2],
                                        classes=kernel[3])
                futures = {}
                for p, plan in enumerate(plans):
                    [future] = self.client.scatter([plan], workers=hosts[p], broadcast=True,
                                                   hash=False)
                    futures.update({(p, host): future for host in hosts[p]})
            self._wait(list(futures.values()))
            self._placed = {key: (partition, plans, futures, workers)}
        _, plans, futures, workers = self._placed[key]
        if not self.streamed:
            for p in range(partition.k):  # a part shared by row groups: a copy per host
                keep_on(self.client, futures[p, hosts[p][0]], set(hosts[p]))
        return plans, futures, workers

    def _open_slices(self, partition: NeuronPartition, hosts: dict[int, list[str]],
                     workers: list[str], kernel: tuple[float, int, int]
                     ) -> tuple[list[PartPlan], dict[tuple[int, str], Future]]:
        """A store's partition: its slices cut (once, beside the store), and every part
        opened on each worker that runs it, resident or streamed."""
        folder = write_part_slices(self.network, partition)
        self.slices = folder  # before anything reads it: a damaged slice names this folder
        cut = read_slices_index(folder)["cut"]  # every part opens this cut, or fails
        sharing = {w: sum(w in h for h in hosts.values()) for w in workers}
        need = [part_resident_bytes(folder, p) for p in range(partition.k)]
        self.part_weights = choose_part_weights(
            need, [max(sharing[w] for w in hosts[p]) for p in range(partition.k)],
            self.weights, worker_memory_limit(self.client, workers))
        net = self.network
        window = int(config.get("store.window"))
        futures = {}
        plans: list[PartPlan] = []
        for p in range(partition.k):
            streamed = self.part_weights[p][0] == "streamed"
            for host in hosts[p]:
                futures[p, host] = self.client.submit(
                    open_part, str(folder), p, net.bias, net.ymax, streamed=streamed,
                    window=window, dense_threshold=kernel[0], chunk_bytes=kernel[1],
                    min_chunk_rows=kernel[2], cut=cut, classes=kernel[3],
                    key=f"open-part-{folder.name}-p{p}-{uuid.uuid4().hex[:8]}", workers=[host],
                    allow_other_workers=False, pure=False)
            # the client's own view: routes and owned neurons, no layer loaded
            plans.append(SlicedPartPlan(folder, p, bias=net.bias, ymax=net.ymax,
                                        streamed=True, window=window,
                                        dense_threshold=kernel[0], chunk_bytes=kernel[1],
                                        min_chunk_rows=kernel[2], cut=cut,
                                        classes=kernel[3]))
        return plans, futures

    @staticmethod
    def _slot(workers: list[str], group: int, part: int, k: int) -> str:
        return workers[slot_index(group, part, k, len(workers))]

    def _wait(self, futures: list[Future]) -> None:
        with self.client.as_current():
            wait(futures)
        for future in futures:
            if future.status == "error":
                future.result()  # a part that could not be opened: its own error

    def run(
        self,
        inputs: sp.spmatrix | sp.sparray,
        *,
        partition: str | NeuronPartition = "block",
        k: int | None = None,
        row_groups: int = 1,
        row_partition: str = "block",
        seed: int = 0,
        nbuckets: int = 1,
        epsilon: float = 0.03,
        cache: bool | str | None = True,
        transport: str = "direct",
        dedup: bool | None = None,
        objective: str = "traffic",
        forecast: bool = False,
        pass_rows: int | None = None,
    ) -> RunResult:
        """Infer ``inputs`` with every layer's neurons split into ``k`` parts.

        Parameters
        ----------
        inputs
            ``rows x N`` scipy sparse matrix.
        partition
            A :class:`~sdnn_dask.partition.NeuronPartition`, or the method to build one:
            ``"block"``, ``"hash"``, ``"random"`` or ``"hypergraph"`` (needs the
            ``partition`` extra).
        k
            Parts (default: one per worker); may exceed the number of workers.
        row_groups
            ``R`` of the hybrid: row groups, each run by its own ``k`` parts (1: plain
            model parallelism).
        row_partition
            How rows are split into groups: ``"block"``, ``"hash"`` or ``"random"``.
        seed, nbuckets, epsilon, cache
            Passed to the neuron partition (``seed`` also to a random row partition).
        transport
            ``"direct"`` (default): one long-running task per part, pieces sent worker
            to worker (:mod:`sdnn_dask.parallel.model_direct`); ``"graph"``: one Dask task per
            part and layer, every exchange scheduled by Dask (its cost stays measurable).
        dedup
            Compute identical rows once (default ``sdnn.kernel.dedup``): each group's
            parts agree on them (:mod:`sdnn_dask.parallel.slabs.shared_rows`) and only
            representatives are computed and exchanged; the same bits either way.
        objective
            A ``"hypergraph"`` partition built here: ``"traffic"`` (weighted by what a
            sample of ``inputs`` sends; Mt-KaHyPar on the layers that carry it) or
            ``"km1"`` (every net and layer alike).
        forecast
            Also forecast the bytes moved from a sample of the inputs, before looking
            (:func:`~sdnn_dask.parallel.exchange_forecast.forecast_exchange`):
            ``predicted_bytes`` per layer in ``communication`` and in total.
        pass_rows
            Rows a row group's parts take through the early layers at once (default
            :func:`~sdnn_dask.parallel.slabs.row_passes.pass_rows_for`: about
            ``sdnn.store.pass-bytes`` of activations); more go in passes, their survivors
            joined for the deep layers (:mod:`~sdnn_dask.parallel.model_passes`). The
            run's ``params["passes"]`` says how many.

        Returns
        -------
        RunResult
            ``strategy`` is ``"model"`` (``R = 1``) or ``"hybrid"``; ``communication``
            has, per layer, the predicted volume and the bytes moved between workers
            (counted by the direct transport, or read from Dask's transfer logs);
            ``transport`` names the transport.
        """
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, "
                             f"got {transport!r}")
        y = as_csr32(inputs)
        n = self.network.n_neurons
        if y.ndim != 2 or y.shape[1] != n:
            raise ValueError(f"inputs have shape {y.shape}; the network needs rows x {n}")
        if int(row_groups) != row_groups or row_groups < 1:
            raise ValueError(f"row_groups must be a positive integer, got {row_groups!r}")
        part = self.partition(partition, k, seed=seed, nbuckets=nbuckets, epsilon=epsilon,
                              cache=cache, inputs=y, objective=objective)
        groups = make_row_partition(row_partition, y.shape[0], row_groups, seed=seed).blocks()
        if pass_rows is not None and (int(pass_rows) != pass_rows or pass_rows < 1):
            raise ValueError(f"pass_rows must be a positive integer, got {pass_rows!r}")
        settings = (row_partition, seed, transport, dedup_enabled(dedup), pass_rows)
        try:
            result = self._run(y, part, groups, row_groups, *settings)
        except SliceDamagedError as error:
            if not self.streamed or self.slices is None:
                raise
            # a slice failed its checksum or a range check on a worker (or here): its
            # folder is cut again, once, and the run repeated; never a wrong answer, and
            # never "run it again" (the same slice would fail again)
            warnings.warn(f"{error}; cutting the slices {self.slices} again",
                          StaleSlicesWarning, stacklevel=2)
            self._placed = {}
            discard_slices(self.slices)
            result = self._run(y, part, groups, row_groups, *settings)
        if forecast:
            self._add_forecast(result, y, part, groups, settings[3])
        return result

    def _add_forecast(self, result: RunResult, y: sp.csr_matrix, part: NeuronPartition,
                      groups: list[np.ndarray], dedup: bool) -> None:
        """``predicted_bytes_in`` per part and layer (in ``layers``), ``predicted_bytes``
        per layer (in ``communication``) and in total: each row group's forecast, its parts
        routed to the workers that ran them."""
        blocks = result.blocks
        routes = tuple(tuple(blocks[blocks["group"] == g].sort_values("part")["worker"])
                       for g in range(len(groups)))
        # once per partition, inputs and placement: a study repeats its runs
        key = (id(part), id(y.data), id(y.indptr), y.shape, tuple(len(r) for r in groups),
               routes, dedup)
        if key not in self._forecasts:
            frames = [forecast_exchange(self.network, part, y[rows], dedup=dedup,
                                        route=list(routes[g])).assign(group=g)
                      for g, rows in enumerate(groups)]
            # the objects are kept with it, so their ids are not reused while it is
            self._forecasts = {key: (pd.concat(frames, ignore_index=True), part, y)}
        forecast = self._forecasts[key][0]
        result.layers = result.layers.merge(
            forecast[["group", "part", "layer", "predicted_bytes_in"]],
            on=["group", "part", "layer"], how="left")
        per_layer = forecast.groupby("layer")["predicted_bytes_in"].sum()
        result.communication["predicted_bytes"] = result.communication["layer"].map(per_layer)
        result.predicted_bytes = float(per_layer.sum())

    def _run(self, y: sp.csr_matrix, part: NeuronPartition, groups: list[np.ndarray],
             row_groups: int, row_partition: str, seed: int, transport: str, dedup: bool,
             pass_rows: int | None) -> RunResult:
        """One run of :meth:`run`, its arguments checked."""
        n, k = self.network.n_neurons, part.k
        token = uuid.uuid4().hex[:12]

        strategy = "model" if row_groups == 1 else "hybrid"

        def rows_a_pass(workers: list[str]) -> int:
            hosted = Counter(self._slot(workers, g, p, k) for g in range(len(groups))
                             for p in range(k))
            return int(pass_rows or pass_rows_for(n, k, max(hosted.values())))

        def place() -> tuple[PassRunner, dict[tuple[int, int], Future], list[str]]:
            plans, plan_futures, workers = self._place(part, row_groups)
            used = {self._slot(workers, g, p, k) for g in range(len(groups)) for p in range(k)}
            runner = PassRunner(self.client, plans, plan_futures,
                                lambda g, p: self._slot(workers, g, p, k),
                                n_layers=self.network.n_layers, token=token,
                                strategy=strategy, transport=transport, used=used)
            # Inputs: each part's level-0 columns of its group's first pass, on its worker.
            first = runner.first_pass(y, groups, rows_a_pass(workers))
            self._wait(list(first.values()))
            if any(f.cancelled() for f in [*plan_futures.values(), *first.values()]):
                raise CancelledError("data placed on a worker that died")
            return runner, first, workers

        def forget() -> None:
            self._placed = {}

        runner, first, workers = place_retrying(self.client, strategy, place, forget)
        used = runner.used
        before = self._store_use(used)
        reset_workers(self.client, used)  # the peak of this run, its first pass placed
        if transport == "direct":
            ensure_exchange(self.client)
            connect_peers(self.client, sorted(used))
        else:
            widen_transfer_logs(self.client)
        start = time.perf_counter()
        try:
            passed = runner.run(y, groups, dedup, rows_a_pass(workers), first)
        except WorkerLostError:
            self._placed = {}  # plans died with the worker: place them again next run
            raise
        del first
        output = assemble_output(
            [(groups[g], slabs, shared) for g, slabs, shared in passed.finals],
            [plan.last_own for plan in runner.plans], (y.shape[0], n))
        wall = time.perf_counter() - start
        if transport == "direct":
            messages = pd.DataFrame(passed.messages, columns=MESSAGE_COLUMNS)
            timing = [_timing_by_layer(passed.timing.get((g, p), []))
                      for g in range(len(groups)) for p in range(k)]
        else:
            messages, timing = graph_messages(transfers_of(self.client, token)), None
        store_use = self._store_use(used, before)
        peaks = read_workers(self.client, used)
        parts_out = []
        for g in range(len(groups)):
            for p in range(k):
                survivors = sum(len(shared.expand(slabs[p].rows)[0]) if shared
                                else len(slabs[p].rows)
                                for h, slabs, shared in passed.finals if h == g)
                parts_out.append((g, p, passed.traces.get((g, p), []), survivors))
        result = self._result(y.shape[0], output, wall, part, row_groups,
                              row_partition, groups, parts_out, workers, messages, timing,
                              seed, transport, dedup)
        result.blocks = result.blocks.merge(peaks, on="worker", how="left")
        result.params["passes"] = passed.passes
        if passed.join_layer:  # the layer after which each group's passes went on together
            result.params["joined_at"] = max(passed.join_layer.values())
        if store_use is not None:
            result.blocks = result.blocks.merge(store_use, on=["worker", "part"], how="left")
            result.params["weights"] = "+".join(sorted({m for m, _ in self.part_weights}))
        return result

    def _store_use(self, used: set[str], before: pd.DataFrame | None = None
                   ) -> pd.DataFrame | None:
        """Per worker and part of a store's run: weights held, and bytes of the slices
        read (during the run, given ``before``: the same table taken before it)."""
        if not self.streamed or self.slices is None:
            return None
        reports = self.client.run(_parts_report, str(self.slices), workers=sorted(used))
        rows = [dict(row, worker=w) for w, report in reports.items() for row in report]
        table = pd.DataFrame(rows, columns=["worker", "part", "weights", "weight_bytes",
                                            "store_bytes_read"])
        if before is not None:
            start = before.set_index(["worker", "part"])["store_bytes_read"]
            table["store_bytes_read"] -= [int(start.get((w, p), 0)) for w, p in
                                          zip(table["worker"], table["part"], strict=True)]
        return table

    def _result(self, n_inputs: int, output: sp.csr_matrix, wall: float,
                part: NeuronPartition, row_groups: int, row_partition: str,
                groups: list[np.ndarray], parts_out: list[tuple[int, int, list[tuple], int]],
                workers: list[str], messages: pd.DataFrame,
                timing: list[list[tuple]] | None, seed: int, transport: str, dedup: bool
                ) -> RunResult:
        k = part.k
        blocks, layers = [], []
        for i, (g, p, part_trace, survivors) in enumerate(parts_out):
            block = g * k + p
            trace = pd.DataFrame(part_trace, columns=PART_TRACE_COLUMNS)
            if timing is not None:  # direct: waiting, sending, (de)serialising
                trace = trace.merge(pd.DataFrame(timing[i], columns=TIMING_COLUMNS),
                                    on="layer", how="left")
            trace.insert(0, "block", block)
            trace["group"], trace["part"] = g, p
            layers.append(trace)
            row = {"block": block, "worker": self._slot(workers, g, p, k),
                   "rows": len(groups[g]), "survivors": survivors,
                   "compute_s": float(trace["seconds"].sum()), "group": g, "part": p}
            if timing is not None:
                row["wait_s"] = float(trace["wait_s"].sum())
                row["send_s"] = float(trace["send_s"].sum())
            blocks.append(row)
        layers = pd.concat(layers, ignore_index=True)
        # measured: bytes each (group, part) received per layer (a piece for several
        # parts on one worker counts for the first of them, as it travelled once)
        moved = (messages.assign(part=[p[0] for p in messages["parts"]])
                 .groupby(["group", "part", "layer"])["payload_bytes"]
                 .agg(["sum", "count"]).reset_index()
                 if len(messages) else
                 pd.DataFrame(columns=["group", "part", "layer", "sum", "count"]))
        moved = moved.rename(columns={"sum": "bytes_in", "count": "transfers_in"})
        layers = layers.merge(moved, on=["group", "part", "layer"], how="left")
        layers[["bytes_in", "transfers_in"]] = (layers[["bytes_in", "transfers_in"]]
                                                .fillna(0).astype(np.int64))
        volume = (slices_volume(self.slices) if self.streamed
                  else part.volume(self.network))
        per_layer = layers.groupby("layer").agg(
            bytes_moved=("bytes_in", "sum"), transfers=("transfers_in", "sum"),
            columns_in=("columns_in", "sum"), nnz_in=("nnz_in", "sum"),
            rows_received=("rows_received", "sum"), seconds_max=("seconds", "max"),
        ).reset_index()
        communication = volume.merge(per_layer, on="layer", how="left")
        if transport == "direct":  # what the comms wrote: payload plus framing
            wire = messages.groupby("layer")["wire_bytes"].sum()
            communication["wire_bytes"] = (communication["layer"].map(wire).fillna(0)
                                           .astype(np.int64))
            for column in ("wait_s", "send_s", "serialise_s", "deserialise_s", "transit_s"):
                communication[column] = communication["layer"].map(
                    layers.groupby("layer")[column].sum())
        # columns_in sums over groups: every group exchanges the partition's volume
        params: dict[str, Any] = {"k": k, "row_groups": row_groups, "transport": transport,
                                  "dedup": dedup, "classes": self.kernel_settings().classes,
                                  **part.params}
        if row_groups > 1:
            params["row_partition"] = row_partition
            if row_partition == "random":
                params["row_seed"] = seed
        return RunResult(
            strategy="model" if row_groups == 1 else "hybrid",
            partition=part.method,
            network=network_info(self.network),
            n_inputs=n_inputs,
            n_workers=len(workers),
            n_blocks=len(parts_out),
            output=output,
            wall_seconds=wall,
            blocks=pd.DataFrame(blocks),
            layers=layers,
            params=params,
            parts=k,
            row_groups=row_groups,
            bytes_moved=int(communication["bytes_moved"].sum()),
            predicted_volume=int(volume["km1"].sum()) * row_groups,
            partition_seconds=part.seconds,
            communication=communication,
            transport=transport,
            messages=messages,
        )


def _parts_report(folder: str, dask_worker: Any = None) -> list[dict[str, Any]]:
    """On a worker (``client.run``): its open parts of the slices ``folder``."""
    return open_parts(folder)


def _timing_by_layer(timing: list[tuple]) -> list[tuple]:
    """A part's direct-transport timing (:data:`TIMING_COLUMNS`) over its passes, one
    tuple a layer: the waits and sends summed, the slowest transit."""
    if not timing:
        return []
    frame = pd.DataFrame(timing, columns=TIMING_COLUMNS)
    merged = frame.groupby("layer", sort=True).agg(
        {c: ("max" if c == "transit_s" else "sum") for c in TIMING_COLUMNS[1:]}).reset_index()
    return [tuple(r) for r in merged[TIMING_COLUMNS].itertuples(index=False)]
