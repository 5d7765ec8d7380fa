"""Per-block layer maths, shared by every executor. Knows nothing of Dask.

One layer of the challenge recurrence on a block of rows is::

    Z = Y @ W ;  Z += b on the nonzeros of Z ;  Y = min(max(Z, 0), ymax) ;  drop zeros

Two compiled (numba) implementations of that step, chosen per layer by the density of the
live rows:

* :func:`sparse_step` walks the rows of ``Y`` (CSR) and scatters into a dense accumulator of
  one output row, then scans the accumulator in column order, so the output comes out sorted
  without a sort. Best when rows hold few nonzeros.
* :func:`dense_step` keeps the live rows as a dense ``neurons x rows`` tile (``Y`` transposed)
  and forms each output neuron as a sum of 32-ish scaled input rows: contiguous, vectorised
  loops over a cache-sized run of rows. Past about 5% density this beats any scatter.

Rows that die (all zero) are compacted away after every layer, so later layers only touch
the survivors: for 1024-120 on the official inputs about 3% of the rows are left after
8 layers. :func:`forward_block` drives a whole block through all layers.

A stored entry whose sum is exactly 0.0 gets no bias, as in the MATLAB reference
(``logical(Z)``) and scipy's product, which drops numerical zeros.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numba
import numpy as np
import pandas as pd
import scipy.sparse as sp

from .. import config
from .csr import (
    as_csr32,
    column_nnz,
    compact_columns,
    csr_to_dense_t,
    dense_t_to_csr,
    pattern_order,
)
from .network import Network

#: Rows of the dense tile processed together (1 KiB per neuron row): the ~32 input rows
#: feeding one output then come from a 1 MiB slab (L2). Measured on the official
#: 1024-neuron layers: 6-8 GFMA/s at 128-512 rows, 3.5-4 at 1024 rows or more.
ROW_TILE = 256

#: Fixed cost of a dense layer, in rows' worth of work: the density needed to go dense is
#: ``threshold * (1 + SETUP_ROWS / rows)``.
SETUP_ROWS = 100.0


@numba.njit(nogil=True, cache=True)
def sparse_step(yp, yi, yx, wp, wi, wx, bias, ymax, n_out, compact):  # pragma: no cover
    """One layer on CSR rows ``(yp, yi, yx)`` with ``W`` in CSR ``(wp, wi, wx)``.

    Returns ``(op, oi, ox, kept)``: the output CSR and the input-row positions it keeps
    (all rows when ``compact`` is false, else only rows with a nonzero).
    """
    nrows = yp.shape[0] - 1
    acc = np.zeros(n_out, np.float32)
    cap = max(1024, 2 * yx.shape[0])
    op = np.zeros(nrows + 1, np.int64)
    oi = np.empty(cap, np.int32)
    ox = np.empty(cap, np.float32)
    kept = np.empty(nrows, np.int64)
    nkept = 0
    nnz = 0
    for r in range(nrows):
        for p in range(yp[r], yp[r + 1]):
            k = yi[p]
            v = yx[p]
            for q in range(wp[k], wp[k + 1]):
                acc[wi[q]] += v * wx[q]
        if nnz + n_out > cap:  # grow the output, doubling, so appends stay amortised O(1)
            cap = max(2 * cap, nnz + n_out)
            oi2 = np.empty(cap, np.int32)
            ox2 = np.empty(cap, np.float32)
            oi2[:nnz] = oi[:nnz]
            ox2[:nnz] = ox[:nnz]
            oi = oi2
            ox = ox2
        start = nnz
        for j in range(n_out):
            z = acc[j]
            if z != 0.0:
                acc[j] = 0.0
                z += bias[j]
                if z > 0.0:
                    if z > ymax:
                        z = ymax
                    oi[nnz] = j
                    ox[nnz] = z
                    nnz += 1
        if nnz > start or not compact:
            kept[nkept] = r
            nkept += 1
            op[nkept] = nnz
    return op[: nkept + 1], oi[:nnz], ox[:nnz], kept[:nkept]


@numba.njit(nogil=True, cache=True)
def dense_step(yt, wtp, wti, wtx, bias, ymax, zt, row_tile, order):  # pragma: no cover
    """One layer on a dense tile ``yt`` (``n_in x rows``) with ``W^T`` in CSR.

    Writes the ``n_out x rows`` output into ``zt`` (any contents; every entry is written)
    and returns ``(alive, nnz)``: which rows have a nonzero, and the number of nonzeros.
    Output neurons are visited in ``order`` (a permutation; see
    :attr:`~sdnn_dask.core.network.Network.output_order`), which only affects speed. An
    ``order`` of some neurons only writes (and counts) those: model-parallel training
    forms the neurons other parts read first, sends them, then forms the rest.
    """
    rows = yt.shape[1]
    n_out = order.shape[0]
    alive = np.zeros(rows, np.bool_)
    counts = np.zeros(rows, np.int32)
    zero = np.float32(0.0)
    for r0 in range(0, rows, row_tile):
        r1 = min(rows, r0 + row_tile)
        m = r1 - r0
        count = counts[r0:r1]
        for jj in range(n_out):
            j = order[jj]
            dst = zt[j, r0:r1]
            for r in range(m):
                dst[r] = 0.0
            q, q_end = wtp[j], wtp[j + 1]
            # Four inputs per pass over dst (a quarter of the loads and stores of dst), added
            # in the same order as one at a time: results are bit-identical to sparse_step.
            while q + 4 <= q_end:
                w0, w1, w2, w3 = wtx[q], wtx[q + 1], wtx[q + 2], wtx[q + 3]
                s0 = yt[wti[q], r0:r1]
                s1 = yt[wti[q + 1], r0:r1]
                s2 = yt[wti[q + 2], r0:r1]
                s3 = yt[wti[q + 3], r0:r1]
                for r in range(m):
                    dst[r] = (((dst[r] + w0 * s0[r]) + w1 * s1[r]) + w2 * s2[r]) + w3 * s3[r]
                q += 4
            while q < q_end:
                w = wtx[q]
                src = yt[wti[q], r0:r1]
                for r in range(m):
                    dst[r] += w * src[r]
                q += 1
            b = bias[j]
            # Selects, not branches, so the loop vectorises (the whole kernel 17% faster
            # on 1024-120 than with branches); the same values: no bias where z == 0.
            for r in range(m):
                z = dst[r]
                y = min(max(z + b, zero), ymax)
                y = y if z != 0.0 else zero
                dst[r] = y
                count[r] += np.int32(y != 0.0)
    nnz = 0
    for r in range(rows):
        nnz += counts[r]
        alive[r] = counts[r] > 0
    return alive, nnz


@numba.njit(nogil=True, cache=True)
def dense_step_w(yt, wp, wi, wx, bias, ymax, zt, row_tile, in_order, fours
                 ):  # pragma: no cover
    """:func:`dense_step` with ``W`` itself in CSR (rows = inputs) instead of ``W^T``.

    Each live input neuron's row of ``yt`` is added, scaled, into the rows of ``zt`` of
    the neurons it feeds; inputs are visited in ``in_order`` (a permutation grouping inputs
    that feed the same outputs, so those rows of ``zt`` stay in L1), then every output gets
    the bias and clamp. ``fours[ii]`` says inputs ``in_order[ii .. ii + 3]`` feed the same
    outputs in the same order: they are added four per pass over each output row (a
    quarter of its loads and stores), in the same order as one at a time. For a network
    streamed from a store: no transpose to build for each layer. The sums run in another
    order than :func:`dense_step`'s, so values agree to float rounding, not bit for bit.
    """
    rows = yt.shape[1]
    n_out = zt.shape[0]
    n_in = in_order.shape[0]
    alive = np.zeros(rows, np.bool_)
    counts = np.zeros(rows, np.int32)
    zero = np.float32(0.0)
    for r0 in range(0, rows, row_tile):
        r1 = min(rows, r0 + row_tile)
        m = r1 - r0
        count = counts[r0:r1]
        for j in range(n_out):
            dst = zt[j, r0:r1]
            for r in range(m):
                dst[r] = 0.0
        ii = 0
        while ii < n_in:
            if fours[ii]:  # (a dead input among them adds exact zeros)
                i0, i1, i2, i3 = in_order[ii], in_order[ii + 1], in_order[ii + 2], \
                    in_order[ii + 3]
                s0, s1 = yt[i0, r0:r1], yt[i1, r0:r1]
                s2, s3 = yt[i2, r0:r1], yt[i3, r0:r1]
                p0, p1, p2, p3 = wp[i0], wp[i1], wp[i2], wp[i3]
                for t in range(wp[i0 + 1] - p0):
                    w0, w1, w2, w3 = wx[p0 + t], wx[p1 + t], wx[p2 + t], wx[p3 + t]
                    dst = zt[wi[p0 + t], r0:r1]
                    for r in range(m):
                        dst[r] = (((dst[r] + w0 * s0[r]) + w1 * s1[r]) + w2 * s2[r]) \
                            + w3 * s3[r]
                ii += 4
                continue
            i = in_order[ii]
            ii += 1
            src = yt[i, r0:r1]
            live = False
            for r in range(m):
                if src[r] != 0.0:
                    live = True
                    break
            if not live:  # a dead input neuron adds nothing
                continue
            for p in range(wp[i], wp[i + 1]):
                w = wx[p]
                dst = zt[wi[p], r0:r1]
                for r in range(m):
                    dst[r] += w * src[r]
        for j in range(n_out):
            dst = zt[j, r0:r1]
            b = bias[j]
            for r in range(m):
                z = dst[r]
                y = min(max(z + b, zero), ymax)
                y = y if z != 0.0 else zero
                dst[r] = y
                count[r] += np.int32(y != 0.0)
    nnz = 0
    for r in range(rows):
        nnz += counts[r]
        alive[r] = counts[r] > 0
    return alive, nnz


@numba.njit(nogil=True, cache=True)
def _same_fours(wp, wi, order):  # pragma: no cover - compiled
    n = order.shape[0]
    same = np.zeros(n, np.bool_)  # same[ii]: in_order[ii] and [ii + 1] share their columns
    for ii in range(n - 1):
        a, b = order[ii], order[ii + 1]
        length = wp[a + 1] - wp[a]
        if wp[b + 1] - wp[b] != length:
            continue
        equal = True
        for t in range(length):
            if wi[wp[a] + t] != wi[wp[b] + t]:
                equal = False
                break
        same[ii] = equal
    fours = np.zeros(n, np.bool_)
    ii = 0
    while ii + 3 < n:  # greedy, as the kernel walks them
        if same[ii] and same[ii + 1] and same[ii + 2]:
            fours[ii] = True
            ii += 4
        else:
            ii += 1
    return fours


class InputOrder(NamedTuple):
    """How :func:`dense_step_w` walks a layer's inputs (see :func:`input_order`)."""

    order: np.ndarray
    fours: np.ndarray


def input_order(w: sp.csr_matrix) -> InputOrder:
    """The inputs of ``W`` (CSR) grouped by their columns
    (:func:`~sdnn_dask.core.network.pattern_order`), and where four in a row feed the same
    outputs (RadiX-Net: 16 inputs share each pattern)."""
    order = pattern_order(w)
    return InputOrder(order, _same_fours(w.indptr, w.indices, order))




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
        One row per layer: ``layer, mode, rows_in, rows_out, nnz_out, seconds``.
    """

    rows: np.ndarray
    values: sp.csr_matrix
    n_rows: int
    trace: pd.DataFrame = field(repr=False)

    def to_csr(self) -> sp.csr_matrix:
        """The full ``n_rows x N`` output, zero rows included."""
        values = self.values.tocoo()
        n = self.values.shape[1]
        return as_csr32(
            sp.csr_matrix(
                (values.data, (self.rows[values.row], values.col)), shape=(self.n_rows, n)
            )
        )


TRACE_COLUMNS = ["layer", "mode", "rows_in", "rows_out", "nnz_out", "seconds"]


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
    """

    dense_threshold: float
    chunk_bytes: int
    min_chunk_rows: int = 1

    @classmethod
    def resolve(cls, dense_threshold: float | None = None,
                chunk_bytes: int | None = None) -> KernelSettings:
        """The given values, the rest from ``sdnn.kernel.*`` of this process's config."""
        if dense_threshold is None:
            dense_threshold = config.get("kernel.dense-threshold")
        min_rows = 1
        if chunk_bytes is None:
            chunk_bytes = config.get("kernel.chunk-bytes")
            min_rows = int(config.get("kernel.chunk-min-rows") or 1)
        return cls(float(dense_threshold), int(chunk_bytes), max(1, min_rows))

    def chunk_rows(self, n_neurons: int) -> int:
        """Rows per chunk for a network of ``n_neurons``: ``chunk_bytes`` of float32 tile,
        but at least ``min_chunk_rows``."""
        return max(self.min_chunk_rows, int(self.chunk_bytes) // (4 * n_neurons), 1)


def forward_block(
    network: Network,
    inputs: sp.csr_matrix | sp.sparray,
    *,
    dense_threshold: float | None = None,
    chunk_bytes: int | None = None,
    settings: KernelSettings | None = None,
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
        two above.

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
        settings = KernelSettings.resolve(dense_threshold, chunk_bytes)
    elif dense_threshold is not None or chunk_bytes is not None:
        raise ValueError("give settings or dense_threshold/chunk_bytes, not both")
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
        ``layers x 4``: rows in, rows out, nonzeros out and seconds of each layer done.
    modes
        The kernel modes each layer used (bits of ``_MODE_BITS``).
    chunk_rows
        Rows of a full chunk (from the kernel settings).
    """

    n_rows: int
    layer: int
    chunks: list[_Chunk] = field(repr=False)
    stats: np.ndarray = field(repr=False)
    modes: np.ndarray = field(repr=False)
    chunk_rows: int

    @property
    def seconds(self) -> float:
        """Compute seconds spent on the block so far."""
        return float(self.stats[:, 3].sum())


def _settings_rows(network: Network, settings: KernelSettings) -> int:
    return settings.chunk_rows(network.n_neurons)


def _first_chunks(network: Network, inputs: sp.csr_matrix | sp.sparray, chunk_rows: int
                  ) -> tuple[int, list[_Chunk]]:
    """The block's row count, and its rows that hold anything in chunks of ``chunk_rows``
    (empty input rows are dead already)."""
    y = as_csr32(inputs)
    n = network.n_neurons
    if y.shape[1] != n:
        raise ValueError(f"inputs have {y.shape[1]} columns, the network has {n} neurons")
    n_rows = int(y.shape[0])
    live = np.flatnonzero(np.diff(y.indptr)).astype(np.int64)
    y = y[live] if len(live) < n_rows else y
    return n_rows, [_Chunk(live[s : s + chunk_rows], csr=y[s : s + chunk_rows])
                    for s in range(0, len(live), chunk_rows)]


def begin_block(network: Network, inputs: sp.csr_matrix | sp.sparray,
                settings: KernelSettings | None = None) -> BlockState:
    """A block before its first layer, for :func:`finish_blocks` to run through every
    layer (as :func:`stream_blocks` does)."""
    settings = settings or KernelSettings.resolve()
    chunk_rows = _settings_rows(network, settings)
    n_rows, chunks = _first_chunks(network, inputs, chunk_rows)
    n_layers = network.n_layers
    return BlockState(n_rows, 0, chunks, np.zeros((n_layers, 4)),
                      np.zeros(n_layers, np.uint8), chunk_rows)


def stream_blocks(network: Network, blocks: list[sp.csr_matrix | sp.sparray],
                  settings: KernelSettings | None = None) -> list[BlockOutput]:
    """Run blocks through ``network`` layer by layer: every block's rows through layer 1,
    then all through layer 2, and so on, so each layer is read once.

    The way to run a network streamed from a store
    (:class:`~sdnn_dask.data.streaming.StreamedNetwork`), which yields its layers once, in
    order; on a network in memory it equals :func:`forward_block` on each block row for
    row (to float rounding: a chunk may take the other path), and is slower, since early
    layers then hold every chunk's tile at once instead of one chunk's at a time.
    """
    settings = settings or KernelSettings.resolve()
    return finish_blocks(network, [begin_block(network, b, settings) for b in blocks],
                         settings)


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
    chunk_rows = _settings_rows(network, settings)
    n_rows, chunks = _first_chunks(network, inputs, chunk_rows)
    pool = _BufferPool(n * chunk_rows)
    step = _Stepper(network, settings, pool, chunk_rows)
    early = 0
    packed: list[_Chunk] = []
    pending: list[_Chunk] = []
    for i, chunk in enumerate(chunks):
        k = 0
        while k < step.n_layers and (k < early if i else 4 * len(chunk.live) > chunk_rows):
            step.advance(chunk, k)
            k += 1
        if i == 0:
            early = k
        if len(chunk.live):
            pending.append(chunk)
        else:
            chunk.release(pool)
        if sum(len(c.live) for c in pending) >= chunk_rows:
            *full, last = _Chunk.repack(pending, chunk_rows, n, pool)
            packed += full
            pending = [last] if len(last.live) < chunk_rows else []
            if not pending:
                packed.append(last)
    for chunk in pending:  # part-empty tiles: kept compact until merged in phase 2
        chunk.to_csr(pool)
    return BlockState(n_rows, early, packed + pending, step.stats[0], step.modes[0],
                      chunk_rows)


def finish_blocks(network: Network, states: list[BlockState],
                  settings: KernelSettings | None = None) -> list[BlockOutput]:
    """Run blocks started by :func:`start_block` through their remaining layers (phase 2).

    Layer by layer over full chunks, repacking when they are half empty. The blocks'
    survivors share the chunks: a block joins at the layer its own phase 1 stopped at,
    so with many small blocks the late layers still run on full tiles. Each block's
    trace is its own: rows and nonzeros counted per block, and a shared chunk's seconds
    split among its blocks by their rows in it.
    """
    settings = settings or KernelSettings.resolve()
    chunk_rows = _settings_rows(network, settings)
    if any(s.chunk_rows != chunk_rows for s in states):
        raise ValueError("blocks started with other kernel settings")
    n = network.n_neurons
    pool = _BufferPool(n * chunk_rows)
    offsets = np.cumsum([0] + [s.n_rows for s in states])
    step = _Stepper(network, settings, pool, chunk_rows, offsets if len(states) > 1 else None)
    for b, state in enumerate(states):  # block-local ids -> ids unique among the blocks
        step.stats[b, : state.layer] = state.stats[: state.layer]
        step.modes[b, : state.layer] = state.modes[: state.layer]
        for chunk in state.chunks:
            chunk.live = chunk.live + offsets[b]
    joining = sorted(range(len(states)), key=lambda b: states[b].layer)
    chunks: list[_Chunk] = []
    try:
        for k in range(min((s.layer for s in states), default=0), step.n_layers):
            if joining and states[joining[0]].layer == k:
                new: list[_Chunk] = []
                while joining and states[joining[0]].layer == k:
                    new += states[joining.pop(0)].chunks
                # the joining blocks' part-empty tiles (phase 1 leaves one or two each, sparse)
                # become full ones
                partial = [c for c in new if len(c.live) < chunk_rows]
                if len(partial) > 1:
                    new = [c for c in new if len(c.live) == chunk_rows] + _Chunk.repack(
                        partial, chunk_rows, n, pool)
                chunks += new
            for chunk in chunks:
                step.advance(chunk, k)
            chunks = _Chunk.repack_if_half_empty([c for c in chunks if len(c.live)], chunk_rows,
                                                 n, pool)
    finally:  # a streamed network stops reading ahead (all rows may have died)
        step.close()
    for b in joining:  # blocks that finished in phase 1
        chunks += states[b].chunks
    if chunks:
        rows = np.concatenate([c.live for c in chunks])
        values = sp.vstack([c.to_csr() for c in chunks], format="csr")
    else:
        rows, values = np.empty(0, np.int64), sp.csr_matrix((0, n), dtype=np.float32)
    if len(states) > 1:  # back into block order (chunks joined by layer, not by block)
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
            "nnz_out": stats[:, 2].astype(np.int64), "seconds": stats[:, 3]})
        outputs.append(BlockOutput(rows[mine] - offsets[b], values[mine], state.n_rows, trace))
    return outputs


#: A layer's modes as bits, so a block's can be or-ed together; and back to the name.
_MODE_BITS = {"dense": 1, "sparse": 2}
_MODE_NAMES = ("none", "dense", "sparse", "mixed")


class _Stepper:
    """Advances chunks one layer, keeping each block's per-layer statistics.

    ``offsets`` (``blocks + 1``) says which block a chunk's row ids belong to; without
    it every row is block 0's.
    """

    def __init__(self, network: Network, settings: KernelSettings, pool: _BufferPool,
                 chunk_rows: int, offsets: np.ndarray | None = None):
        self.layers = _kernel_layers(network)
        self.n_layers = network.n_layers
        self.bias, self.ymax = network.bias, np.float32(network.ymax)
        self.threshold = float(settings.dense_threshold)
        self.pool, self.chunk_rows = pool, chunk_rows
        self.offsets = offsets
        n_blocks = 1 if offsets is None else len(offsets) - 1
        self.stats = np.zeros((n_blocks, self.n_layers, 4))  # rows in/out, nnz out, seconds
        self.modes = np.zeros((n_blocks, self.n_layers), np.uint8)  # bits of _MODE_BITS

    def close(self) -> None:
        """Let go of the layers (a streamed network's reader stops)."""
        if isinstance(self.layers, _InOrder):
            self.layers.close()

    def advance(self, chunk: _Chunk, k: int) -> None:
        """Run layer ``k`` on ``chunk``, adding to its blocks' statistics.

        A chunk's row ids are increasing and no two chunks' id ranges overlap (see
        :meth:`_Chunk.repack`), so a chunk holds each block's rows as one run: its
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
        t0 = time.perf_counter()
        w, wt, order = self.layers[k]
        mode = chunk.step(w, wt, order, self.bias, self.ymax, self.threshold, self.pool,
                          self.chunk_rows)
        seconds = time.perf_counter() - t0
        if single:  # one block's rows: the chunk's totals are that block's
            b = 0 if offsets is None else int(first)
            self.stats[b, k] += (rows_in, len(chunk.live), chunk.nnz, seconds)
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
        self.modes[blocks, k][rows_in_b > 0] |= _MODE_BITS[mode]


def _kernel_layers(network: Network) -> Any:
    """Layer ``k``'s ``(W, W^T, output order)`` by index: a list for a network in memory;
    for one streamed from a store (which has ``kernel_layers()``), read once, in order."""
    stream = getattr(network, "kernel_layers", None)
    if stream is None:
        return list(zip(network.layers, network.transposed, network.output_order,
                        strict=True))
    return _InOrder(stream())


class _InOrder:
    """Items of an iterator by index, each index no smaller than the last asked for."""

    def __init__(self, items: Iterator[Any]):
        self._items, self._k, self._item = items, -1, None

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


class _BufferPool:
    """Equal-size float32 buffers, reused within one :func:`forward_block` call.

    Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` on workers, which makes every large
    allocation an mmap with fresh page faults; allocating per layer or per repack cost
    workers ~30% against the same kernel in a plain process. The pool is dropped when the
    call returns, so nothing outlives it.
    """

    def __init__(self, size: int):
        self.size = size
        self._free: list[np.ndarray] = []

    def take(self) -> np.ndarray:
        return self._free.pop() if self._free else np.empty(self.size, np.float32)

    def give(self, *buffers: np.ndarray) -> None:
        self._free.extend(buffers)


class _Chunk:
    """Live rows of part of a block: block-local ids and activations, sparse or dense.

    A dense chunk holds two pooled buffers of ``chunk_rows`` columns; each layer writes
    into the spare one and compacts back into the other, so no layer allocates.
    """

    def __init__(self, live: np.ndarray, csr: sp.csr_matrix | None = None):
        self.live = live
        self.csr = csr
        self._buffers: list[np.ndarray] | None = None
        self._current = 0
        self.nnz = int(csr.nnz) if csr is not None else 0

    @property
    def dense_t(self) -> np.ndarray | None:
        """The live rows as a dense ``n x rows`` tile (a view of the current buffer)."""
        if self._buffers is None:
            return None
        return self._view(self._current, len(self.live))

    def _view(self, which: int, rows: int) -> np.ndarray:
        flat = self._buffers[which]
        n = flat.shape[0] // self._capacity
        return flat[: n * rows].reshape(n, rows)

    def _attach(self, pool: _BufferPool, capacity: int) -> None:
        self._capacity = capacity
        self._buffers = [pool.take(), pool.take()]
        self._current = 0

    def release(self, pool: _BufferPool) -> None:
        """Return the buffers to the pool (the chunk is no longer used)."""
        if self._buffers is not None:
            pool.give(*self._buffers)
            self._buffers = None

    def step(self, w: sp.csr_matrix, wt: sp.csr_matrix | None, order: np.ndarray,
             bias: np.ndarray, ymax: np.float32, threshold: float, pool: _BufferPool,
             capacity: int) -> str:
        """Advance one layer in place, dropping rows that die; returns the mode used.

        Without ``wt`` a dense layer runs :func:`dense_step_w` on ``w``, ``order`` then
        being an :class:`InputOrder`; else :func:`dense_step` on ``wt``, in output
        ``order``.
        """
        rows, n = len(self.live), w.shape[1]
        # A dense layer costs ~n_out * 32 loop set-ups whatever the row count, so few rows
        # need a higher density to pay for it (measured crossover: ~5 rows when full).
        dense = self.nnz >= threshold * (1.0 + SETUP_ROWS / rows) * n * rows
        if dense:
            if self._buffers is None:
                c = self.csr
                self._attach(pool, capacity)
                csr_to_dense_t(c.indptr, c.indices, c.data, self.dense_t)
                self.csr = None
            out = self._view(1 - self._current, rows)
            if wt is None:  # streamed: no transpose, ``order`` an InputOrder
                alive, self.nnz = dense_step_w(self.dense_t, w.indptr, w.indices, w.data,
                                               bias, ymax, out, ROW_TILE, order.order,
                                               order.fours)
            else:
                alive, self.nnz = dense_step(self.dense_t, wt.indptr, wt.indices, wt.data,
                                             bias, ymax, out, ROW_TILE, order)
            self._current = 1 - self._current
            if not alive.all():
                keep = int(alive.sum())
                compact_columns(out, alive, self._view(1 - self._current, keep))
                self.live = self.live[alive]
                self._current = 1 - self._current
            if not len(self.live):
                self.release(pool)
            return "dense"
        c = self.to_csr(pool)
        op, oi, ox, kept = sparse_step(c.indptr, c.indices, c.data, w.indptr, w.indices,
                                       w.data, bias, ymax, n, True)
        self.csr = sp.csr_matrix((ox, oi, op), shape=(len(kept), n))
        self.live, self.nnz = self.live[kept], int(ox.shape[0])
        return "sparse"

    def row_nnz(self) -> np.ndarray:
        """Nonzeros of each live row."""
        if not len(self.live):  # every row died: the tile is gone
            return np.zeros(0, np.int64)
        if self.csr is not None:
            return np.diff(self.csr.indptr)
        return column_nnz(self.dense_t)

    def to_csr(self, pool: _BufferPool | None = None) -> sp.csr_matrix:
        """The live rows as CSR (``len(live) x n``); a dense chunk becomes sparse."""
        if self.csr is None:
            self.csr = dense_t_to_csr(self.dense_t)
            if pool is not None:
                self.release(pool)
            self._buffers = None
        return self.csr

    @staticmethod
    def repack_if_half_empty(chunks: list[_Chunk], chunk_rows: int, n: int,
                             pool: _BufferPool) -> list[_Chunk]:
        """``chunks``, repacked (:meth:`repack`) if they fill half their tiles or less."""
        live_rows = sum(len(c.live) for c in chunks)
        if len(chunks) > 1 and len(chunks) >= 2 * -(-live_rows // chunk_rows):
            return _Chunk.repack(chunks, chunk_rows, n, pool)
        return chunks

    @staticmethod
    def repack(chunks: list[_Chunk], chunk_rows: int, n: int, pool: _BufferPool
               ) -> list[_Chunk]:
        """The rows of ``chunks``, in order of their ids, as full chunks of ``chunk_rows``
        (the last may be short); the old chunks' buffers go back to the pool.

        Every chunk's ids increase (:class:`_Stepper` relies on it). One block's chunks
        hold consecutive id ranges, so they only need putting end to end; chunks of
        several blocks may interleave, and are then merged by id.
        """
        chunks = sorted(chunks, key=lambda c: c.live[0])
        live = np.concatenate([c.live for c in chunks])
        order = None if np.all(live[1:] > live[:-1]) else np.argsort(live, kind="stable")
        if all(c._buffers is None for c in chunks):
            csr = sp.vstack([c.csr for c in chunks], format="csr")
            if order is not None:
                live, csr = live[order], csr[order]
            return [_Chunk(live[s : s + chunk_rows], csr=csr[s : s + chunk_rows])
                    for s in range(0, len(live), chunk_rows)]
        if order is not None:
            return _Chunk._merge_dense(chunks, live, order, chunk_rows, n, pool)
        packed = []
        for s in range(0, len(live), chunk_rows):
            part = _Chunk(live[s : s + chunk_rows])
            part._attach(pool, chunk_rows)
            packed.append(part)
        # copy each source chunk's columns into the destination chunks they fall in
        position = 0
        for c in chunks:
            source = c.dense_t
            if source is None:  # a sparse chunk among dense ones
                source = np.empty((n, len(c.live)), np.float32)
                csr_to_dense_t(c.csr.indptr, c.csr.indices, c.csr.data, source)
            done = 0
            while done < len(c.live):
                part = packed[position // chunk_rows]
                at = position % chunk_rows
                take = min(len(c.live) - done, chunk_rows - at)
                part.dense_t[:, at : at + take] = source[:, done : done + take]
                part.nnz += int(np.count_nonzero(source[:, done : done + take]))
                done += take
                position += take
            c.release(pool)
        return packed

    @staticmethod
    def _merge_dense(chunks: list[_Chunk], live: np.ndarray, order: np.ndarray,
                     chunk_rows: int, n: int, pool: _BufferPool) -> list[_Chunk]:
        """:meth:`repack` of chunks whose ids interleave: gather the columns by id."""
        every = np.empty((n, len(live)), np.float32)
        at = 0
        for c in chunks:
            if c.dense_t is not None:
                every[:, at : at + len(c.live)] = c.dense_t
            else:
                csr_to_dense_t(c.csr.indptr, c.csr.indices, c.csr.data,
                                every[:, at : at + len(c.live)])
            at += len(c.live)
            c.release(pool)
        live = live[order]
        packed = []
        for s in range(0, len(live), chunk_rows):
            part = _Chunk(live[s : s + chunk_rows])
            part._attach(pool, chunk_rows)
            np.take(every, order[s : s + chunk_rows], axis=1, out=part.dense_t)
            part.nnz = int(np.count_nonzero(part.dense_t))
            packed.append(part)
        return packed


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
