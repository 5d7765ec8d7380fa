"""The per-part layer step of model parallelism, and model parallelism in one process.
Knows nothing of Dask.

:func:`part_layer_step` joins the columns a part reads (its own slab's and the pieces
other parts sent, as :class:`_Input`), and runs the same compiled step as the serial
kernel (:func:`~sdnn_dask.core.kernels.sparse_step` on the inputs gathered into one CSR,
or :func:`~sdnn_dask.core.kernels.dense_step` through :func:`~.tiles.dense_layer`) on the
part's slice of the weights (:mod:`.plans`). The compiled helpers take the inputs as the
tuples :func:`_kernel_args` makes (described in :mod:`.tiles`). :func:`forward_parts`
runs every part, layer by layer, with no Dask; :func:`assemble` joins their last slabs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from ...core.kernels import ROW_TILE, SETUP_ROWS, sparse_step
from ...core.kernels.dedup import Groups
from ...core.network import Network, as_csr32
from ...partition.neurons import NeuronPartition
from .layout import BLOCK_ROWS, BlockCSC, Slab, blocks_rows_used, csr_to_blocks, tile_rows_used
from .plans import PartPlan, make_part_plans, piece_for
from .shared_rows import PartRows, dedup_enabled, drop_rows, label_rows
from .tiles import dense_layer, padded


class _Scratch(threading.local):
    """Per-thread buffers reused by every step the thread runs: Dask workers page-fault
    on fresh large allocations (see :mod:`sdnn_dask.parallel.allocator`), and a step's temporaries
    would be fresh every layer. Each is as large as the largest step has needed."""

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype: type) -> np.ndarray:
        """A buffer of at least ``size`` items starting on a 64-byte boundary (numpy
        gives 16: a tile row would then straddle cache lines in every vector load)."""
        buf = self.buffers.get(name)
        if buf is None or buf.shape[0] < size:
            size = max(size, 0 if buf is None else buf.shape[0] * 5 // 4)
            raw = np.empty(size + 64, dtype)
            skip = (-raw.ctypes.data % 64) // raw.itemsize
            buf = raw[skip : skip + size]
            self.buffers[name] = buf
        return buf

    def keep(self, name: str, buf: np.ndarray) -> None:
        self.buffers[name] = buf


_scratch = _Scratch()

#: A plan without classes: every owned neuron computed (PartPlan.classes false).
_NO_COPIES = np.empty(0, np.int64)


@dataclass
class _Input:
    """What one source provides a layer: some columns of a slab, and where they go.

    ``columns`` are positions in ``slab`` (``None``: all of them), ``put`` their positions
    among the layer's inputs; ``used`` marks the slab rows with a nonzero there (``None``:
    every row), ``nnz`` counts the nonzeros and ``n_rows`` the rows used.
    """

    slab: Slab
    columns: np.ndarray | None
    put: np.ndarray
    used: np.ndarray | None = None
    nnz: int = 0
    n_rows: int = 0

    def __post_init__(self) -> None:
        slab = self.slab
        if self.columns is None or len(self.columns) == slab.n_columns:
            self.columns = None
            self.nnz, self.n_rows = slab.nnz, len(slab.rows)
            return
        self.columns = np.ascontiguousarray(self.columns, dtype=np.int64)
        if slab.tile is not None:
            self.used, self.n_rows, nnz = tile_rows_used(slab.tile, self.columns)
        else:
            v = slab.blocks
            self.used, self.n_rows, nnz = blocks_rows_used(v.starts, v.indices,
                                                            self.columns, len(slab.rows))
        self.nnz = int(nnz)
        if self.n_rows == len(slab.rows):
            self.used = None

    @property
    def rows(self) -> np.ndarray:
        """Global ids of the rows used."""
        return self.slab.rows if self.used is None else self.slab.rows[self.used]


def _provided(given: Slab, wanted: np.ndarray, put: np.ndarray) -> _Input:
    """The columns at source positions ``wanted`` out of what a source part provided: its
    whole slab, a piece cut for this part alone, or a labelled piece for several parts."""
    if given.n_columns == len(wanted):  # exactly the columns wanted (a superset of equal
        return _Input(given, None, put)  # size is equal)
    if given.columns is None:  # the source's whole slab (same worker)
        return _Input(given, wanted, put)
    return _Input(given, np.searchsorted(given.columns, wanted), put)


def _union_rows(inputs: list[_Input]) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """The sorted union of the rows the inputs use, and each input's slab row positions
    in it (``None`` where its rows are the union itself). A slab row the union lacks
    (zero in the columns read) gets the position of the next union row."""
    first = inputs[0].slab.rows
    if all(s.used is None and (s.slab.rows is first or np.array_equal(s.slab.rows, first))
           for s in inputs):
        return first, [None] * len(inputs)
    top = max(int(s.slab.rows[-1]) for s in inputs) + 1
    mask = np.zeros(top, np.bool_)
    for s in inputs:
        mask[s.rows] = True
    rows = np.flatnonzero(mask)
    below = np.cumsum(mask)  # union rows at or before each id
    positions: list[np.ndarray | None] = []
    for s in inputs:
        if s.used is None and len(s.slab.rows) == len(rows):
            positions.append(None)  # all its rows, as many as the union: the union
        else:
            r = s.slab.rows
            positions.append(below[r] - mask[r])
    return rows, positions


def _kernel_args(inputs: list[_Input], positions: list[np.ndarray | None]) -> tuple:
    """The inputs as the tuples the compiled helpers take (see :func:`_fill_tile`)."""
    no_indices, no_positions = np.empty(0, np.int32), np.empty(0, np.int64)
    starts, bounds, idxs, vals, poss, srcs, tiles = [], [], [], [], [], [], []
    for s, pos in zip(inputs, positions, strict=True):
        slab = s.slab
        n, rows = slab.n_columns, len(slab.rows)
        if slab.tile is not None:
            starts.append((np.arange(n + 1, dtype=np.int64) * rows).reshape(1, n + 1))
            bounds.append(np.array([0, rows], np.int64))
            idxs.append(no_indices)
            vals.append(slab.tile.reshape(-1))
        else:
            v = slab.blocks
            starts.append(np.ascontiguousarray(v.starts, dtype=np.int64))
            bounds.append(np.ascontiguousarray(v.block_rows, dtype=np.int64))
            idxs.append(np.ascontiguousarray(v.indices, dtype=np.int32))
            vals.append(np.ascontiguousarray(v.data, dtype=np.float32))
        poss.append(no_positions if pos is None else pos)
        srcs.append(np.arange(n, dtype=np.int64) if s.columns is None else s.columns)
        tiles.append(np.ascontiguousarray(s.put, dtype=np.int64))
    same = np.array([pos is None for pos in positions])
    dense = np.array([s.slab.tile is not None for s in inputs])
    return (tuple(starts), tuple(bounds), tuple(idxs), tuple(vals), tuple(poss), same, dense,
            tuple(srcs), tuple(tiles))


@numba.njit(nogil=True, cache=True)
def _gather_csr(starts, bounds, idxs, vals, poss, same, dense, srcs, tiles, n_in,
                n_rows):  # pragma: no cover
    """The inputs as one row-major ``n_rows x n_in`` CSR, column indices increasing in
    every row, for the sparse step."""
    n_inputs = len(vals)
    owner = np.full(n_in, -1, np.int64)
    which = np.empty(n_in, np.int64)
    xp = np.zeros(n_rows + 1, np.int64)
    for i in range(n_inputs):
        st, idx, val, pos, src = starts[i], idxs[i], vals[i], poss[i], srcs[i]
        for j in range(src.shape[0]):
            owner[tiles[i][j]] = i
            which[tiles[i][j]] = j
            c = src[j]
            for blk in range(st.shape[0]):
                for p in range(st[blk, c], st[blk, c + 1]):
                    if dense[i]:
                        if val[p] == 0.0:
                            continue
                        r = p - st[0, c]
                    else:
                        r = idx[p]
                    xp[(r if same[i] else pos[r]) + 1] += 1
    for r in range(n_rows):
        xp[r + 1] += xp[r]
    cur = xp[:n_rows].copy()
    xi = np.empty(xp[n_rows], np.int32)
    xx = np.empty(xp[n_rows], np.float32)
    for t in range(n_in):  # inputs in order: every row's columns come out sorted
        i = owner[t]
        if i < 0:
            continue
        st, idx, val, pos = starts[i], idxs[i], vals[i], poss[i]
        c = srcs[i][which[t]]
        for blk in range(st.shape[0]):
            for p in range(st[blk, c], st[blk, c + 1]):
                if dense[i]:
                    if val[p] == 0.0:
                        continue
                    r = p - st[0, c]
                else:
                    r = idx[p]
                if not same[i]:
                    r = pos[r]
                q = cur[r]
                xi[q] = t
                xx[q] = val[p]
                cur[r] = q + 1
    return xp, xi, xx


def part_layer_step(plan: PartPlan, layer: int, own_prev: Slab,
                    received: dict[int, Slab], weights: np.ndarray | None = None) -> Slab:
    """Run ``layer`` (1-based) on one part.

    Parameters
    ----------
    plan
        The part's plan.
    layer
        Layer number, 1-based.
    own_prev
        The part's own level ``layer - 1`` slab (all the columns it owns).
    received
        Source part -> what it provided: its whole level ``layer - 1`` slab (a part on the
        same worker), the piece it cut for this part, or a labelled piece it cut for
        several parts on this worker (:func:`piece_for`).
    weights
        Row id -> rows it stands for, where identical rows are computed once
        (:class:`~.shared_rows.PartRows`): the trace's live rows and nonzeros count
        every row a computed one stands for, ``distinct_out`` the rows computed.

    Returns
    -------
    Slab
        The part's level ``layer`` slab, its trace extended by this layer: a tile when
        the dense step's output is at least half nonzero, else a :class:`BlockCSC`.
    """
    start = time.perf_counter()
    lp = plan.layers[layer - 1]
    # the columns read, straight out of what was given: nothing is cut or copied here
    inputs: list[_Input] = []
    if plan.part in lp.put:
        inputs.append(_Input(own_prev, lp.take[plan.part], lp.put[plan.part]))
    for q, given in received.items():
        if q not in lp.fetch:
            raise ValueError(f"layer {layer}: part {plan.part} reads nothing from part {q}")
        n_given = given.n_columns
        if n_given < len(lp.fetch[q]) or (given.columns is not None
                                          and len(given.columns) != n_given):
            raise ValueError(f"layer {layer}: part {q} provided {n_given} columns to part "
                             f"{plan.part}, which reads {len(lp.fetch[q])} of them")
        inputs.append(_provided(given, lp.fetch[q], lp.put[q]))
    n_in, n_out = len(lp.needed), len(lp.own)
    foreign = inputs[len(inputs) - len(received):]
    # columns_in, pieces_in, nnz_in, rows_received: what came from other parts
    stats = (n_in - len(lp.put.get(plan.part, ())), len(foreign),
             sum(s.nnz for s in foreign), sum(s.n_rows for s in foreign))
    live = [s for s in inputs if s.nnz]
    if not live or n_out == 0:
        trace = [*own_prev.trace, (layer, "none", 0, 0, 0, time.perf_counter() - start,
                                   *stats, 0)]
        return Slab.empty(n_out, trace)
    rows, positions = _union_rows(live)
    n_rows = len(rows)
    nnz_in = sum(s.nnz for s in live)
    args = _kernel_args(live, positions)
    ymax = np.float32(plan.ymax)
    dense = nnz_in >= plan.dense_threshold * (1.0 + SETUP_ROWS / n_rows) * n_in * n_rows
    if dense:
        # at least sdnn.kernel.chunk-min-rows, as the serial kernel: 1 MiB of tile is 4
        # rows at N = 65536, and the dense step's rate falls with the rows of its tile
        chunk_rows = max(1, plan.min_chunk_rows, plan.chunk_bytes // (4 * max(n_in, n_out)))
        if chunk_rows >= ROW_TILE:  # whole row tiles of the dense step (496-row chunks
            chunk_rows -= chunk_rows % ROW_TILE  # made hypergraph parts 10% slower)
        rows_t = padded(min(chunk_rows, n_rows))
        out_hint = nnz_in * n_out // n_in + n_out * rows_t + 1
        as_tile, tile, starts, indices, data, bounds, alive, nnz, oi, ox = dense_layer(
            *args, n_in, n_rows, chunk_rows, lp.wt.indptr, lp.wt.indices, lp.wt.data,
            lp.bias, ymax, lp.order, ROW_TILE, _scratch.get("y", n_in * rows_t, np.float32),
            _scratch.get("z", n_out * rows_t, np.float32),
            _scratch.get("oi", out_hint, np.int32), _scratch.get("ox", out_hint, np.float32),
            lp.copy_of if plan.classes else _NO_COPIES)
        _scratch.keep("oi", oi)
        _scratch.keep("ox", ox)
        out_rows = rows[alive]
        if as_tile:
            out = Slab(out_rows, tile=tile, tile_nnz=int(nnz))
        else:
            out = Slab(out_rows, blocks=BlockCSC(indices, data, starts, bounds))
        mode = "dense"
    else:
        xp, xi, xx = _gather_csr(*args, n_in, n_rows)
        if xp[-1] < np.iinfo(np.int32).max:  # the serial kernel's index type
            xp = xp.astype(np.int32)
        op, oi, ox, kept = sparse_step(xp, xi, xx, lp.w.indptr, lp.w.indices, lp.w.data,
                                       lp.bias, ymax, n_out, True)
        starts, indices, data, bounds = csr_to_blocks(op, oi, ox, n_out, BLOCK_ROWS)
        out = Slab(rows[kept], blocks=BlockCSC(indices, data, starts, bounds))
        mode = "sparse"
    seconds = time.perf_counter() - start
    rows_in, rows_out, nnz_out = n_rows, len(out.rows), out.nnz
    if weights is not None:  # identical rows computed once: count every row they stand for
        rows_in = int(weights[rows].sum())
        out_weights = weights[out.rows]
        rows_out = int(out_weights.sum())
        nnz_out = int(out.row_nnz() @ out_weights)
    out.trace = [*own_prev.trace, (layer, mode, rows_in, rows_out, nnz_out, seconds, *stats,
                                   len(out.rows))]
    return out


def forward_parts(network: Network, partition: NeuronPartition,
                  inputs: sp.spmatrix | sp.sparray, *, dense_threshold: float | None = None,
                  chunk_bytes: int | None = None, dedup: bool | None = None,
                  classes: bool | None = None) -> tuple[sp.csr_matrix, list[Slab]]:
    """Model parallelism in one process: every part, layer by layer, no Dask.

    The executor's reference for what each part computes; also handy for debugging a
    partition. With ``dedup`` (default ``sdnn.kernel.dedup``) the parts look for
    identical rows as the executor's do (:class:`~.shared_rows.PartRows`); with
    ``classes`` (default ``sdnn.kernel.classes``) their dense steps compute each class of
    identical neurons once (:attr:`~.plans.LayerPlan.copy_of`). Returns the
    ``rows x N`` output (original neuron order) and every part's last slab (with its
    trace).
    """
    y = as_csr32(inputs)
    if y.shape[1] != network.n_neurons:
        raise ValueError(f"inputs have {y.shape[1]} columns, the network has "
                         f"{network.n_neurons} neurons")
    plans = make_part_plans(network, partition, dense_threshold=dense_threshold,
                            chunk_bytes=chunk_bytes, classes=classes)
    slabs = [Slab.from_rows(y, plan.inputs) for plan in plans]
    shared = PartRows(y.shape[0]) if dedup_enabled(dedup) else None
    n_layers = network.n_layers
    for layer in range(1, n_layers + 1):
        weights = shared.weights if shared is not None and shared.groups else None
        slabs = [
            part_layer_step(plan, layer, slabs[p], {
                q: piece_for(plans[q].layers[layer - 1], [p], slabs[q])
                for q in plan.sources(layer)}, weights)
            for p, plan in enumerate(plans)
        ]
        if shared is not None and shared.due(layer, n_layers):
            labelled = [(s.rows, label_rows(s)) for s in slabs]
            merges = shared.agree(labelled)
            slabs = [drop_rows(s, merges) for s in slabs]
    groups = shared.groups if shared is not None else None
    return assemble(slabs, [plan.layers[-1].own for plan in plans], y.shape,
                    groups=groups), slabs


def assemble(slabs: list[Slab], columns: list[np.ndarray], shape: tuple[int, int],
             row_ids: np.ndarray | None = None, groups: Groups | None = None
             ) -> sp.csr_matrix:
    """Join the parts' last slabs into one ``shape`` CSR in the original neuron order.

    ``columns[p]`` are the global ids of part ``p``'s columns; ``row_ids`` maps slab rows
    to output rows (identity when omitted); ``groups`` says which rows each slab row
    stands for, where identical rows were computed once.
    """
    r, c, v = [], [], []
    for slab, cols in zip(slabs, columns, strict=True):
        row, col, data = slab.coo()
        rows = slab.rows
        if groups:  # every row a computed one stands for gets its values
            rows, source = groups.expand(rows)
            coo = sp.csr_matrix((data, (row, col)),
                                shape=(len(slab.rows), len(cols)))[source].tocoo()
            row, col, data = coo.row, coo.col, coo.data
        rows = rows[row]
        r.append(rows if row_ids is None else row_ids[rows])
        c.append(cols[col])
        v.append(data)
    if not r:
        return sp.csr_matrix(shape, dtype=np.float32)
    return as_csr32(sp.csr_matrix((np.concatenate(v), (np.concatenate(r), np.concatenate(c))),
                                  shape=shape))


def warm_up_parts() -> str:
    """Compile (or load from numba's cache) the part step's helpers in this process, for
    one to four inputs a layer, dense and sparse, so no part step's time includes
    compilation. Executors run it on their workers beside
    :func:`~sdnn_dask.core.kernels.warm_up_kernels`."""
    from ...partition import make_neuron_partition

    n = 64
    rng = np.random.default_rng(0)
    layers = [sp.random(n, n, density=0.2, format="csr", dtype=np.float32, rng=rng)
              + sp.identity(n, format="csr", dtype=np.float32) for _ in range(3)]
    tiny = Network(layers, bias=-0.05, ymax=4.0, name="warm-up")
    x = sp.random(300, n, density=0.3, format="csr", dtype=np.float32, rng=rng)
    for k in range(1, 5):
        partition = make_neuron_partition(tiny, k, "block")
        for threshold in (0.0, 2.0):
            forward_parts(tiny, partition, x, dense_threshold=threshold)
    return "ok"
