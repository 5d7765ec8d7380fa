"""Driving blocks of rows through every layer of a network, chunk by chunk.

:func:`forward_block` drives a whole block through all layers, and :func:`forward_blocks`
several blocks at once, as a worker does: :func:`start_block` runs a block's early layers
alone, chunk by chunk, and :func:`finish_blocks` runs the survivors of many blocks together
in full chunks (:mod:`.chunks`). :func:`~.passes.stream_blocks` runs every block layer by
layer instead, for a network streamed from a store, with :func:`run_early_layers`.
:class:`KernelSettings` holds the knobs.

Rows that die (all zero) are compacted away after every layer, so later layers only touch
the survivors: for 1024-120 on the official inputs about 3% of the rows are left after
8 layers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ... import config
from ..csr import as_csr32, row_slice, stack_rows, take_rows
from ..network import Network
from .chunks import BufferPool, Chunk
from .classes import ClassLayers
from .dedup import DedupPolicy, Groups, merge_duplicates
from .schedule import ChunkSchedule, live_rows
from .steps import ROW_TILE, dense_step_w, input_order


@dataclass
class BlockOutput:
    """What one block of rows leaves after the last layer.

    Attributes
    ----------
    rows
        Block-local positions (0-based, increasing) of the rows that are still nonzero.
    values
        Their activations, ``len(rows) x N`` float32 CSR.
    n_rows
        Rows the block had on input.
    trace
        One row per layer: ``layer, mode, rows_in, rows_out, nnz_out, seconds,
        distinct_out`` (``rows_out`` counts every live row; ``distinct_out`` the rows
        computed, once identical rows are computed once: :mod:`.dedup`).
    source
        ``None``, or (``finish_blocks(..., expand=False)``) identical rows kept once:
        ``values`` then holds the distinct rows and row ``rows[i]``'s activations are
        ``values[source[i]]`` (:meth:`expanded` makes them one per row).
    """

    rows: np.ndarray
    values: sp.csr_matrix
    n_rows: int
    trace: pd.DataFrame = field(repr=False)
    source: np.ndarray | None = field(default=None, repr=False)

    def expanded(self) -> BlockOutput:
        """This output with one row of values per surviving row (itself if it has)."""
        if self.source is None:
            return self
        return BlockOutput(self.rows, take_rows(as_csr32(self.values), self.source),
                           self.n_rows, self.trace)

    def to_csr(self) -> sp.csr_matrix:
        """The full ``n_rows x N`` output, zero rows included.

        The values' arrays as they are, with row pointers that skip the dead rows (the
        rows are increasing): no copy of the nonzeros (at N = 65536, 158 million for 2416
        survivors, which a COO round trip took seconds to sort back).
        """
        values = as_csr32(self.expanded().values)
        counts = np.zeros(self.n_rows + 1, np.int64)
        counts[np.asarray(self.rows, np.int64) + 1] = np.diff(values.indptr)
        indptr = np.cumsum(counts)
        if indptr[-1] <= np.iinfo(np.int32).max:
            indptr = indptr.astype(np.int32)
        out = sp.csr_matrix((values.data, values.indices, indptr),
                            shape=(self.n_rows, values.shape[1]), copy=False)
        out.has_sorted_indices = values.has_sorted_indices
        return out


TRACE_COLUMNS = ["layer", "mode", "rows_in", "rows_out", "nnz_out", "seconds", "distinct_out"]
#: A layer's statistics (:attr:`BlockState.stats`): rows in, rows out, nonzeros out,
#: seconds, distinct rows out.
_N_STATS = 5


@dataclass(frozen=True)
class KernelSettings:
    """The kernel's tuning knobs, resolved once where a run starts (the client).

    Parameters
    ----------
    dense_threshold
        Live-row density above which a layer runs on a dense tile.
    chunk_bytes
        Dense tile size of the chunks a block starts in.
    min_chunk_rows
        Rows a chunk has at least, whatever ``chunk_bytes`` says for the network's N
        (``sdnn.kernel.chunk-min-rows`` when ``chunk_bytes`` comes from the config; 1 when
        it is given, so a caller's small chunks stay small).
    dedup
        Compute identical live rows once (:mod:`.dedup`; ``sdnn.kernel.dedup``): the
        same bits, the deep layers at the cost of one row.
    classes
        Compute identical output neurons once (:mod:`.classes`; ``sdnn.kernel.classes``):
        the same bits, RadiX-Net's layers at a 16th of their work.
    """

    dense_threshold: float
    chunk_bytes: int
    min_chunk_rows: int = 1
    dedup: bool = False
    classes: bool = False

    @classmethod
    def resolve(cls, dense_threshold: float | None = None,
                chunk_bytes: int | None = None, dedup: bool | None = None,
                classes: bool | None = None) -> KernelSettings:
        """The given values, the rest from ``sdnn.kernel.*`` of this process's config."""
        if dense_threshold is None:
            dense_threshold = config.get("kernel.dense-threshold")
        min_rows = 1
        if chunk_bytes is None:
            chunk_bytes = config.get("kernel.chunk-bytes")
            min_rows = int(config.get("kernel.chunk-min-rows") or 1)
        if dedup is None:
            dedup = config.get("kernel.dedup", True)
        if classes is None:
            classes = config.get("kernel.classes", True)
        return cls(float(dense_threshold), int(chunk_bytes), max(1, min_rows), bool(dedup),
                   bool(classes))

    def chunk_rows(self, n_neurons: int) -> int:
        """Rows per chunk for a network of ``n_neurons``: ``chunk_bytes`` of float32 tile,
        but at least ``min_chunk_rows``."""
        return max(self.min_chunk_rows, int(self.chunk_bytes) // (4 * n_neurons), 1)

    def schedule(self, n_neurons: int, n_layers: int) -> ChunkSchedule:
        """The chunk schedule (:mod:`.schedule`) these settings give the blocks of a
        network of ``n_neurons`` and ``n_layers``."""
        return ChunkSchedule(n_layers, self.chunk_rows(n_neurons), n_neurons,
                             float(self.dense_threshold))


def forward_block(
    network: Network,
    inputs: sp.csr_matrix | sp.sparray,
    *,
    dense_threshold: float | None = None,
    chunk_bytes: int | None = None,
    settings: KernelSettings | None = None,
    classes: bool | None = None,
) -> BlockOutput:
    """Run a block of input rows through every layer of ``network``.

    The rows are processed in chunks whose dense tile fits ``chunk_bytes`` (sized to the
    L2 cache by default, so converting, computing and compacting stay in cache); as rows
    die, the survivors are repacked into full chunks, so late layers run on few, full,
    contiguous tiles instead of many nearly empty ones.

    Parameters
    ----------
    network
        The weights, bias and clamp.
    inputs
        ``rows x N`` sparse input block (converted to float32 CSR).
    dense_threshold
        Live-row density above which a layer runs on a dense tile
        (default ``sdnn.kernel.dense-threshold``).
    chunk_bytes
        Dense tile size of the chunks a block starts in (default ``sdnn.kernel.chunk-bytes``,
        and then at least ``sdnn.kernel.chunk-min-rows`` rows).
    settings
        All of the kernel's settings at once (a :class:`KernelSettings`), instead of the
        two above and ``classes``.
    classes
        Compute identical output neurons once (:mod:`.classes`; default
        ``sdnn.kernel.classes``).

    Returns
    -------
    BlockOutput
        The surviving rows, their activations and a per-layer trace.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sdnn_dask.core.network import Network
    >>> net = Network([sp.identity(4, format="csr") * 2] * 2, bias=-1.0, ymax=32)
    >>> out = forward_block(net, sp.csr_matrix([[1, 0, 0, 0], [0, 0, 0, 0], [3, 1, 0, 0]]))
    >>> out.rows.tolist(), out.values.toarray().tolist()
    ([0, 2], [[1.0, 0.0, 0.0, 0.0], [9.0, 1.0, 0.0, 0.0]])
    """
    if settings is None:
        settings = KernelSettings.resolve(dense_threshold, chunk_bytes, classes=classes)
    elif dense_threshold is not None or chunk_bytes is not None or classes is not None:
        raise ValueError("give settings or dense_threshold/chunk_bytes/classes, not both")
    return finish_blocks(network, [start_block(network, inputs, settings)], settings)[0]


def forward_blocks(network: Network, blocks: list[sp.csr_matrix | sp.sparray],
                   settings: KernelSettings | None = None) -> list[BlockOutput]:
    """Run several blocks through ``network`` as one worker would: each block alone
    through its early layers, then their survivors merged into full tiles.

    Equal, row for row, to :func:`forward_block` on each block; faster when the blocks
    are small, since late layers then run on full tiles instead of a few rows per block.
    """
    settings = settings or KernelSettings.resolve()
    return finish_blocks(network, [start_block(network, b, settings) for b in blocks],
                         settings)


@dataclass
class BlockState:
    """A block part way through the network (see :func:`start_block`).

    Attributes
    ----------
    n_rows
        Rows the block had on input.
    layer
        Layers done: the next one to run is ``layer`` (0-based).
    chunks
        The live rows, block-local ids and activations, in chunks.
    stats
        ``layers x 5``: rows in, rows out, nonzeros out, seconds and distinct rows out of
        each layer done.
    modes
        The kernel modes each layer used (bits of ``_MODE_BITS``).
    chunk_rows
        Rows of a full chunk (from the kernel settings).
    """

    n_rows: int
    layer: int
    chunks: list[Chunk] = field(repr=False)
    stats: np.ndarray = field(repr=False)
    modes: np.ndarray = field(repr=False)
    chunk_rows: int

    @property
    def seconds(self) -> float:
        """Compute seconds spent on the block so far."""
        return float(self.stats[:, 3].sum())


def _settings_rows(network: Network, settings: KernelSettings) -> int:
    return settings.chunk_rows(network.n_neurons)


def _first_chunks(network: Network, inputs: sp.csr_matrix | sp.sparray,
                  schedule: ChunkSchedule) -> tuple[int, list[Chunk]]:
    """The block's row count, and its rows that hold anything in the schedule's first
    chunks (empty input rows are dead already)."""
    y = as_csr32(inputs)
    n = network.n_neurons
    if y.shape[1] != n:
        raise ValueError(f"inputs have {y.shape[1]} columns, the network has {n} neurons")
    n_rows = int(y.shape[0])
    live = np.flatnonzero(np.diff(y.indptr)).astype(np.int64)
    y = y[live] if len(live) < n_rows else y
    chunk_rows = schedule.chunk_rows
    return n_rows, [Chunk(live[s : s + chunk_rows],
                          csr=row_slice(y, s, min(s + chunk_rows, len(live))))
                    for s in schedule.starts(len(live))]


def begin_block(network: Network, inputs: sp.csr_matrix | sp.sparray,
                settings: KernelSettings | None = None) -> BlockState:
    """A block before its first layer, for :func:`finish_blocks` to run through every
    layer (as :func:`stream_blocks` does)."""
    settings = settings or KernelSettings.resolve()
    schedule = settings.schedule(network.n_neurons, network.n_layers)
    chunk_rows = schedule.chunk_rows
    n_rows, chunks = _first_chunks(network, inputs, schedule)
    n_layers = network.n_layers
    return BlockState(n_rows, 0, chunks, np.zeros((n_layers, _N_STATS)),
                      np.zeros(n_layers, np.uint8), chunk_rows)


def run_early_layers(network: Network, blocks: list[sp.csr_matrix | sp.sparray],
                     settings: KernelSettings, stop_rows: int) -> list[BlockState]:
    """Blocks run layer by layer, all their rows together, until at most ``stop_rows``
    are live, or until two layers in a row each leave nearly all they took
    (:class:`DedupPolicy`'s ``stable``: the rows that are left stay, and identical ones
    may start to pay), or to the end. For a network streamed from a store: the first
    layers of a pass of rows (:func:`~.passes.stream_blocks`), so the passes' survivors
    can go on together (:func:`finish_blocks`), reading the deep layers once."""
    states = [begin_block(network, b, settings) for b in blocks]
    chunk_rows, n = states[0].chunk_rows, network.n_neurons
    offsets = np.cumsum([0] + [s.n_rows for s in states])
    pool = BufferPool(n * chunk_rows)
    step = _Stepper(network, settings, pool, chunk_rows, offsets)
    chunks = []
    for b, state in enumerate(states):
        for chunk in state.chunks:
            chunk.live = chunk.live + offsets[b]
            chunks.append(chunk)
    stable, steady, k = DedupPolicy().stable, 0, 0
    try:
        while k < step.n_layers and steady < 2:
            rows_in = live_rows(chunks)
            if rows_in <= stop_rows:
                break
            chunks = step.schedule.layer(chunks, k, step)
            steady = steady + 1 if k and live_rows(chunks) >= stable * rows_in else 0
            k += 1
    finally:
        step.close()
    # each block's survivors, compact (CSR, over neurons or classes as they are), in its
    # own ids: chunks hold increasing, disjoint id runs, so a chunk is cut at the blocks'
    # offsets (finish_blocks repacks the pieces as the blocks join)
    pieces: list[list[Chunk]] = [[] for _ in states]
    for chunk in chunks:
        csr = chunk.to_csr(pool)
        cuts = np.searchsorted(chunk.live, offsets)
        for b in np.flatnonzero(np.diff(cuts)):
            a, z = cuts[b], cuts[b + 1]
            pieces[b].append(Chunk(chunk.live[a:z] - offsets[b], csr=row_slice(csr, a, z),
                                   space=chunk.space))
    for b, state in enumerate(states):
        state.chunks = pieces[b]
        state.layer, state.stats, state.modes = k, step.stats[b], step.modes[b]
    return states


def start_block(network: Network, inputs: sp.csr_matrix | sp.sparray,
                settings: KernelSettings | None = None) -> BlockState:
    """Run a block through its early layers, where most rows die (phase 1).

    Each chunk runs depth first, alone, so only one chunk's tiles are live at a time
    (cache- and page-fault-friendly); the first chunk decides how far: until at most a
    quarter of its rows survive. Survivors are repacked into full chunks as they come.
    :func:`finish_blocks` runs the rest.
    """
    settings = settings or KernelSettings.resolve()
    if hasattr(network, "kernel_layers"):
        raise ValueError("a streamed network runs layer by layer: use stream_blocks")
    n = network.n_neurons
    schedule = settings.schedule(network.n_neurons, network.n_layers)
    chunk_rows = schedule.chunk_rows
    n_rows, chunks = _first_chunks(network, inputs, schedule)
    pool = BufferPool(n * chunk_rows)
    step = _Stepper(network, settings, pool, chunk_rows)
    early, chunks = step.schedule.depth_first(chunks, step)
    return BlockState(n_rows, early, chunks, step.stats[0], step.modes[0], chunk_rows)


def finish_blocks(network: Network, states: list[BlockState],
                  settings: KernelSettings | None = None, *, expand: bool = True
                  ) -> list[BlockOutput]:
    """Run blocks started by :func:`start_block` through their remaining layers (phase 2).

    Layer by layer over full chunks, repacking when they are half empty. The blocks'
    survivors share the chunks: a block joins at the layer its own phase 1 stopped at,
    so with many small blocks the late layers still run on full tiles. Each block's
    trace is its own: rows and nonzeros counted per block, and a shared chunk's seconds
    split among its blocks by their rows in it. With ``expand=False``, rows merged as
    identical keep one copy of their values (:attr:`BlockOutput.source`).
    """
    settings = settings or KernelSettings.resolve()
    chunk_rows = _settings_rows(network, settings)
    if any(s.chunk_rows != chunk_rows for s in states):
        raise ValueError("blocks started with other kernel settings")
    n = network.n_neurons
    pool = BufferPool(n * chunk_rows)
    offsets = np.cumsum([0] + [s.n_rows for s in states])
    first = min((s.layer for s in states), default=0)
    step = _Stepper(network, settings, pool, chunk_rows, offsets if len(states) > 1 else None,
                    first)
    policy = DedupPolicy()

    def merge(k: int, rows_in: int, chunks: list[Chunk]) -> list[Chunk]:
        """Identical live rows computed once from here on, when the policy says."""
        rows_out = live_rows(chunks)
        if policy.due(k, rows_in, rows_out):
            merged = merge_duplicates(chunks, step.groups, pool)
            policy.looked(k, rows_out, merged)
            chunks = [c for c in chunks if len(c.live)]
        return chunks

    for b, state in enumerate(states):  # block-local ids -> ids unique among the blocks
        step.stats[b, : state.layer] = state.stats[: state.layer]
        step.modes[b, : state.layer] = state.modes[: state.layer]
        for chunk in state.chunks:
            chunk.live = chunk.live + offsets[b]
    joining = sorted(range(len(states)), key=lambda b: states[b].layer)
    chunks: list[Chunk] = []
    try:
        for k in range(first, step.n_layers):
            new: list[Chunk] = []  # blocks whose phase 1 stopped at layer k join
            while joining and states[joining[0]].layer == k:
                new += states[joining.pop(0)].chunks
            chunks = step.schedule.layer(chunks, k, step, new,
                                         merge if settings.dedup else None)
    finally:  # a streamed network stops reading ahead (all rows may have died)
        step.close()
    for b in joining:  # blocks that finished in phase 1
        chunks += states[b].chunks
    if chunks:
        rows = np.concatenate([c.live for c in chunks])
        values = stack_rows([c.neuron_csr() for c in chunks])
    else:
        rows, values = np.empty(0, np.int64), sp.csr_matrix((0, n), dtype=np.float32)
    source = None
    if step.groups:  # every row a representative stands for, its values repeated
        rows, source = step.groups.expand(rows)
        if expand:
            values, source = take_rows(as_csr32(values), source), None
    elif len(states) > 1:  # back into block order (chunks joined by layer, not by block)
        order = np.argsort(rows, kind="stable")
        rows, values = rows[order], values[order]
    values = as_csr32(values)
    cuts = np.searchsorted(rows, offsets)
    outputs = []
    for b, state in enumerate(states):
        mine = slice(cuts[b], cuts[b + 1])
        stats = step.stats[b]
        trace = pd.DataFrame({
            "layer": np.arange(1, step.n_layers + 1),
            "mode": np.asarray(_MODE_NAMES, dtype=object)[step.modes[b]],
            "rows_in": stats[:, 0].astype(np.int64), "rows_out": stats[:, 1].astype(np.int64),
            "nnz_out": stats[:, 2].astype(np.int64), "seconds": stats[:, 3],
            "distinct_out": stats[:, 4].astype(np.int64)})
        # each block's rows, over views of the values (no copy: at N = 65536, 1.3 GB for
        # 2416 rows); blocks hold disjoint rows, so disjoint parts of the arrays
        if source is not None:  # the distinct rows, shared: each block's point into them
            outputs.append(BlockOutput(rows[mine] - offsets[b], values, state.n_rows, trace,
                                       source[mine]))
            continue
        outputs.append(BlockOutput(rows[mine] - offsets[b],
                                   row_slice(values, int(cuts[b]), int(cuts[b + 1])),
                                   state.n_rows, trace))
    return outputs


#: A layer's modes as bits, so a block's can be or-ed together; and back to the name.
_MODE_BITS = {"dense": 1, "sparse": 2}
_MODE_NAMES = ("none", "dense", "sparse", "mixed")


class _Stepper:
    """Advances chunks one layer, keeping each block's per-layer statistics; the
    :class:`~.schedule.ChunkActions` of real chunks, for its :attr:`schedule`.

    ``offsets`` (``blocks + 1``) says which block a chunk's row ids belong to; without
    it every row is block 0's.
    """

    def __init__(self, network: Network, settings: KernelSettings, pool: BufferPool,
                 chunk_rows: int, offsets: np.ndarray | None = None, start: int = 0):
        self.layers = _kernel_layers(network, start)
        self.n_layers = network.n_layers
        self.bias, self.ymax = network.bias, np.float32(network.ymax)
        self.schedule = settings.schedule(network.n_neurons, network.n_layers)
        self.pool, self.chunk_rows, self.n = pool, chunk_rows, network.n_neurons
        self.offsets = offsets
        n_blocks = 1 if offsets is None else len(offsets) - 1
        self.stats = np.zeros((n_blocks, self.n_layers, _N_STATS))
        self.modes = np.zeros((n_blocks, self.n_layers), np.uint8)  # bits of _MODE_BITS
        self.groups = Groups()  # the rows each live row stands for (deduplication)
        self.classes = ClassLayers(network, settings.classes)

    def close(self) -> None:
        """Let go of the layers (a streamed network's reader stops)."""
        if isinstance(self.layers, _InOrder):
            self.layers.close()

    def repack(self, chunks: list[Chunk]) -> list[Chunk]:
        """The rows of ``chunks`` in full chunks (:meth:`Chunk.repack`)."""
        return Chunk.repack(chunks, self.chunk_rows, self.n, self.pool)

    def drop(self, chunk: Chunk) -> None:
        """A chunk all of whose rows died: its tile goes back to the pool."""
        chunk.release(self.pool)

    def set_aside(self, chunk: Chunk) -> None:
        """A part-empty tile left by phase 1: kept compact (sparse) until merged."""
        chunk.to_csr(self.pool)

    def advance(self, chunk: Chunk, k: int) -> None:
        """Run layer ``k`` on ``chunk``, adding to its blocks' statistics.

        A chunk's row ids are increasing and no two chunks' id ranges overlap (see
        :meth:`Chunk.repack`), so a chunk holds each block's rows as one run: its
        blocks' counts come from cutting it at the blocks' offsets.
        """
        live = chunk.live
        rows_in = len(live)
        if not rows_in:
            return
        offsets = self.offsets
        single = True
        if offsets is not None:
            first, last = np.searchsorted(offsets, (live[0], live[-1]), side="right") - 1
            single = first == last
        # the schedule picks the path; Chunk.step's own density test, given a threshold
        # of 0 (always dense) or infinity (never), follows it
        threshold = 0.0 if self.schedule.dense_due(chunk.nnz, rows_in) else math.inf
        t0 = time.perf_counter()
        w, wt, order = self.layers[k]
        layer = self.classes.get(k, w, rows_in)
        if layer is not None:
            mode = chunk.step_classes(layer, self.ymax, self.pool, self.chunk_rows)
        else:
            mode = chunk.step(w, wt, order, self.bias, self.ymax, threshold, self.pool,
                              self.chunk_rows)
        seconds = time.perf_counter() - t0
        if self.groups:  # rows stand for others: count every row they stand for
            self._count_groups(k, live, chunk, mode, seconds)
            return
        if single:  # one block's rows: the chunk's totals are that block's
            b = 0 if offsets is None else int(first)
            self.stats[b, k] += (rows_in, len(chunk.live), chunk.nnz, seconds,
                                 len(chunk.live))
            self.modes[b, k] |= _MODE_BITS[mode]
            return
        blocks = slice(first, last + 1)
        cuts = offsets[first : last + 2]
        rows_in_b = np.diff(np.searchsorted(live, cuts))
        cut_out = np.searchsorted(chunk.live, cuts)
        nnz_before = np.concatenate([[0], np.cumsum(chunk.row_nnz())])
        stats = self.stats[blocks, k]
        stats[:, 0] += rows_in_b
        stats[:, 1] += np.diff(cut_out)
        stats[:, 2] += np.diff(nnz_before[cut_out])
        stats[:, 3] += seconds * rows_in_b / rows_in  # a shared tile's time, split by rows
        stats[:, 4] += np.diff(cut_out)
        self.modes[blocks, k][rows_in_b > 0] |= _MODE_BITS[mode]


    def _count_groups(self, k: int, live: np.ndarray, chunk: Chunk, mode: str,
                      seconds: float) -> None:
        """:meth:`advance`'s statistics where live rows stand for others (their rows
        may belong to several blocks)."""
        n_blocks = self.stats.shape[0]

        def blocks(ids: np.ndarray) -> np.ndarray:
            if self.offsets is None:
                return np.zeros(len(ids), np.int64)
            return np.searchsorted(self.offsets, ids, side="right") - 1

        rows_in, _ = self.groups.expand(live)
        rows_out, source = self.groups.expand(chunk.live)
        in_b = np.bincount(blocks(rows_in), minlength=n_blocks)
        out_blocks = blocks(rows_out)
        stats = self.stats[:, k]
        stats[:, 0] += in_b
        stats[:, 1] += np.bincount(out_blocks, minlength=n_blocks)
        stats[:, 2] += np.bincount(out_blocks, weights=chunk.row_nnz()[source],
                                   minlength=n_blocks)
        stats[:, 3] += seconds * in_b / max(1, len(rows_in))
        # a representative counts once in each block it has rows in
        pairs = np.unique(source * n_blocks + out_blocks)
        stats[:, 4] += np.bincount(pairs % n_blocks, minlength=n_blocks)
        self.modes[in_b > 0, k] |= _MODE_BITS[mode]


def _kernel_layers(network: Network, start: int = 0) -> Any:
    """Layer ``k``'s ``(W, W^T, output order)`` by index: a list for a network in memory;
    for one streamed from a store (which has ``kernel_layers()``), read once, in order,
    from layer ``start`` (0-based) on."""
    stream = getattr(network, "kernel_layers", None)
    if stream is None:
        return list(zip(network.layers, network.transposed, network.output_order,
                        strict=True))
    return _InOrder(stream(start) if start else stream(), start)


class _InOrder:
    """Items of an iterator by index, each index no smaller than the last asked for;
    the iterator's first item is index ``start``."""

    def __init__(self, items: Iterator[Any], start: int = 0):
        self._items, self._k, self._item = items, start - 1, None

    def __getitem__(self, k: int) -> Any:
        while self._k < k:
            self._item = next(self._items)
            self._k += 1
        if k != self._k:
            raise RuntimeError(f"layer {k + 1} asked for after layer {self._k + 1}: a streamed "
                               "network's layers are read once, in order")
        return self._item

    def close(self) -> None:
        """Stop reading ahead (closes the iterator)."""
        close = getattr(self._items, "close", None)
        if close is not None:
            close()



def warm_up_kernels() -> str:
    """Compile (or load from numba's cache) both kernel paths in this process.

    Executors run it on every worker, and serial runs here, before anything is timed, so
    no timing includes compilation.
    """
    tiny = Network([sp.identity(32, format="csr", dtype=np.float32) * 2] * 2,
                   bias=-0.5, ymax=32.0, name="warm-up")
    x = sp.random(64, 32, density=0.5, format="csr", dtype=np.float32, rng=0)
    forward_block(tiny, x, dense_threshold=0.0)
    forward_block(tiny, x, dense_threshold=2.0)
    w, yt = tiny.layers[0], np.ones((32, 4), np.float32)  # the streamed dense step
    walk = input_order(w)
    dense_step_w(yt, w.indptr, w.indices, w.data, tiny.bias, np.float32(tiny.ymax),
                 np.empty_like(yt), ROW_TILE, walk.order, walk.fours)
    return "ok"
