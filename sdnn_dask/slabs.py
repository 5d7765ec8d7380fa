"""Column slabs and the per-part layer step of model parallelism. Knows nothing of Dask.

In model parallelism each part owns some neurons of every level. Its activations for a
level are a :class:`Slab`: the rows (global ids) that have a nonzero in the part's columns,
and those rows' values for its columns, as CSR. One layer on part ``p`` is::

    Y_l[:, own_p] = Y_{l-1}[:, needed_p] @ W_l[needed_p, own_p]   (+ bias, clamp)

where ``needed_p`` are the level ``l-1`` neurons feeding the columns ``p`` owns. The other
parts send ``p`` only the columns of ``needed_p`` they own (:func:`take_columns`), and
:func:`part_layer_step` joins those pieces and runs the same compiled step as the serial
kernel (:func:`~sdnn_dask.kernels.sparse_step` or :func:`~sdnn_dask.kernels.dense_step`)
on the part's slice of the weights. :func:`make_part_plans` precomputes every part's
slices and index maps once per (network, partition).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numba
import numpy as np
import scipy.sparse as sp

from . import config
from .kernels import _ROW_TILE, _SETUP_ROWS, dense_step, sparse_step
from .network import Network, as_csr32
from .partition.neurons import NeuronPartition

#: Per-layer trace of one part: what each tuple of :attr:`Slab.trace` holds.
PART_TRACE_COLUMNS = [
    "layer", "mode", "rows_in", "rows_out", "nnz_out", "seconds",
    "columns_in", "pieces_in", "nnz_in", "rows_received",
]


@dataclass
class Slab:
    """One part's activations for some columns of one level.

    Attributes
    ----------
    rows
        Sorted global ids (int64) of the rows that have a nonzero in these columns.
    values
        ``len(rows) x columns`` float32 CSR with sorted column indices.
    trace
        Per-layer tuples (:data:`PART_TRACE_COLUMNS`) of the part that made it, carried
        from layer to layer so the last slab holds the part's whole history.
    columns
        For a piece cut for several parts at once (:func:`take_columns` with
        ``label=True``): the positions, in the source slab, of its columns. ``None`` for
        a part's own slab and for a piece cut for one part (its columns are then exactly
        the ones that part reads).
    """

    rows: np.ndarray
    values: sp.csr_matrix
    trace: list[tuple] = field(default_factory=list, repr=False)
    columns: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays it holds (what a transfer carries, before framing)."""
        v = self.values
        extra = 0 if self.columns is None else self.columns.nbytes
        return int(self.rows.nbytes + v.indptr.nbytes + v.indices.nbytes + v.data.nbytes
                   + extra)

    @classmethod
    def empty(cls, columns: int, trace: list[tuple] | None = None) -> Slab:
        """A slab with no rows."""
        return cls(np.empty(0, np.int64), sp.csr_matrix((0, columns), dtype=np.float32),
                   list(trace or []))

    @classmethod
    def from_rows(cls, matrix: sp.spmatrix | sp.sparray, columns: np.ndarray) -> Slab:
        """The slab of ``matrix[:, columns]`` (rows numbered from 0), empty rows dropped."""
        csr = as_csr32(matrix)
        colmap = np.full(csr.shape[1], -1, np.int64)
        colmap[columns] = np.arange(len(columns))
        return _select(csr, colmap, len(columns), np.arange(csr.shape[0], dtype=np.int64))


@numba.njit(nogil=True, cache=True)
def _select_columns(indptr, indices, data, colmap):  # pragma: no cover
    """Keep the entries whose column maps to ``>= 0`` (renumbered), and the rows left
    nonempty. ``colmap`` must be increasing where it is not -1, so indices stay sorted."""
    nrows = indptr.shape[0] - 1
    op = np.zeros(nrows + 1, np.int64)
    oi = np.empty(indices.shape[0], np.int32)
    ox = np.empty(indices.shape[0], np.float32)
    kept = np.empty(nrows, np.int64)
    nkept = 0
    nnz = 0
    for r in range(nrows):
        start = nnz
        for p in range(indptr[r], indptr[r + 1]):
            c = colmap[indices[p]]
            if c >= 0:
                oi[nnz] = c
                ox[nnz] = data[p]
                nnz += 1
        if nnz > start:
            kept[nkept] = r
            nkept += 1
            op[nkept] = nnz
    return op[: nkept + 1], oi[:nnz], ox[:nnz], kept[:nkept]


def _select(csr: sp.csr_matrix, colmap: np.ndarray, columns: int, rows: np.ndarray) -> Slab:
    op, oi, ox, kept = _select_columns(csr.indptr, csr.indices, csr.data, colmap)
    values = sp.csr_matrix((ox, oi, op), shape=(len(kept), columns))
    return Slab(rows[kept], values)


def take_columns(slab: Slab, positions: np.ndarray, *, label: bool = False) -> Slab:
    """The piece of ``slab`` with the columns at ``positions`` (increasing), empty rows
    dropped; carries no trace. ``label`` records ``positions`` in the piece
    (:attr:`Slab.columns`), for pieces that serve several parts."""
    if len(positions) == slab.values.shape[1] and not label:
        return Slab(slab.rows, slab.values)  # every column: nothing to cut
    colmap = np.full(slab.values.shape[1], -1, np.int64)
    colmap[positions] = np.arange(len(positions))
    piece = _select(slab.values, colmap, len(positions), slab.rows)
    if label:
        piece.columns = np.asarray(positions, dtype=np.int32)
    return piece


def piece_for(plan_layer: LayerPlan, destinations: list[int], slab: Slab) -> Slab:
    """What a part sends to the parts ``destinations`` (all on one worker) in one layer:
    the union of the columns they read from it, sent once."""
    if len(destinations) == 1:
        return take_columns(slab, plan_layer.take[destinations[0]])
    positions = np.unique(np.concatenate([plan_layer.take[p] for p in destinations]))
    return take_columns(slab, positions, label=True)


def _columns_from(received: Slab, wanted: np.ndarray) -> Slab:
    """The columns at source positions ``wanted`` out of what a source part provided: its
    whole slab, a piece cut for this part alone, or a labelled piece for several parts."""
    n = received.values.shape[1]
    if n == len(wanted):  # exactly the columns wanted (a superset of equal size is equal)
        return received
    if received.columns is None:  # the source's whole slab (same worker)
        return take_columns(received, wanted)
    return take_columns(received, np.searchsorted(received.columns, wanted))


@numba.njit(nogil=True, cache=True)
def _dense_t_to_csr(zt, alive, nnz):  # pragma: no cover
    """CSR (sorted columns) of the ``alive`` columns of the transposed tile ``zt``."""
    n_out = zt.shape[0]
    nrows = int(alive.sum())
    op = np.zeros(nrows + 1, np.int64)
    oi = np.empty(nnz, np.int32)
    ox = np.empty(nnz, np.float32)
    k = 0
    r_out = 0
    for r in range(zt.shape[1]):
        if alive[r]:
            for j in range(n_out):
                z = zt[j, r]
                if z != 0.0:
                    oi[k] = j
                    ox[k] = z
                    k += 1
            r_out += 1
            op[r_out] = k
    return op, oi, ox


@numba.njit(nogil=True, cache=True)
def _scatter_rows_t(indptr, indices, data, row_pos, col_pos, lo, hi, offset,
                    out):  # pragma: no cover
    """Write rows ``lo..hi`` of a CSR piece into the dense transposed tile ``out``
    (``columns x rows``) at rows ``row_pos - offset`` and columns ``col_pos[indices]``."""
    for r in range(lo, hi):
        rr = row_pos[r] - offset
        for p in range(indptr[r], indptr[r + 1]):
            out[col_pos[indices[p]], rr] = data[p]


def _union_rows(live: list[tuple[Slab, np.ndarray]]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sorted union of the pieces' rows, and each piece's row positions in it."""
    if len(live) == 1:
        rows = live[0][0].rows
        return rows, [np.arange(len(rows), dtype=np.int64)]
    top = max(int(s.rows[-1]) for s, _ in live) + 1
    mask = np.zeros(top, np.bool_)
    for s, _ in live:
        mask[s.rows] = True
    rows = np.flatnonzero(mask)
    index = np.empty(top, np.int64)
    index[rows] = np.arange(len(rows))
    return rows, [index[s.rows] for s, _ in live]


def _dense_layer(lp: LayerPlan, live: list[tuple[Slab, np.ndarray]],
                 row_pos: list[np.ndarray], n_rows: int, ymax: np.float32,
                 chunk_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The dense step over the union rows, ``chunk_rows`` at a time: each chunk's input
    and output tiles are reused buffers sized for the cache, as in the serial kernel (a
    whole-slab tile is slower, and a fresh one per layer page-faults in a Dask worker)."""
    n_in, n_out = len(lp.needed), len(lp.own)
    y_buf = np.empty(n_in * min(chunk_rows, n_rows), np.float32)
    z_buf = np.empty(n_out * min(chunk_rows, n_rows), np.float32)
    alive = np.zeros(n_rows, np.bool_)
    indptrs, indices, values = [], [], []
    offset = 0
    for c0 in range(0, n_rows, chunk_rows):
        c1 = min(n_rows, c0 + chunk_rows)
        m = c1 - c0
        yt = y_buf[: n_in * m].reshape(n_in, m)
        yt.fill(0.0)
        for (s, put), pos in zip(live, row_pos, strict=True):
            lo, hi = np.searchsorted(pos, (c0, c1))
            v = s.values
            _scatter_rows_t(v.indptr, v.indices, v.data, pos, put, lo, hi, c0, yt)
        zt = z_buf[: n_out * m].reshape(n_out, m)
        chunk_alive, nnz = dense_step(yt, lp.wt.indptr, lp.wt.indices, lp.wt.data, lp.bias,
                                      ymax, zt, _ROW_TILE, lp.order)
        op, oi, ox = _dense_t_to_csr(zt, chunk_alive, nnz)
        alive[c0:c1] = chunk_alive
        indptrs.append(op[1:] + offset)
        indices.append(oi)
        values.append(ox)
        offset += nnz
    indptr = np.concatenate([np.zeros(1, np.int64), *indptrs])
    return indptr, np.concatenate(indices), np.concatenate(values), alive


@dataclass
class LayerPlan:
    """What one part needs to run one layer, and to serve the next parts.

    Attributes
    ----------
    own
        Global ids of the level ``l`` neurons the part computes (sorted).
    needed
        Global ids of the level ``l-1`` neurons it reads (sorted).
    w, wt
        ``W_l[needed, own]`` and its transpose, float32 CSR.
    order
        Visiting order of the output neurons for the dense step.
    bias
        Bias of the owned neurons.
    put
        Source part -> positions in ``needed`` of the columns that part provides (the
        part's own entry included).
    take
        Destination part -> positions in the part's own level ``l-1`` slab of the
        columns that destination needs in layer ``l`` (the part itself included).
    fetch
        Source part -> positions in that part's level ``l-1`` slab of the columns this
        part reads from it (``fetch[q]`` here is ``take[p]`` in part ``q``'s plan).
    """

    own: np.ndarray
    needed: np.ndarray
    w: sp.csr_matrix = field(repr=False)
    wt: sp.csr_matrix = field(repr=False)
    order: np.ndarray = field(repr=False)
    bias: np.ndarray = field(repr=False)
    put: dict[int, np.ndarray] = field(repr=False)
    take: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    fetch: dict[int, np.ndarray] = field(default_factory=dict, repr=False)


@dataclass
class PartPlan:
    """Everything part ``part`` of a neuron partition holds: one :class:`LayerPlan` per
    layer, the clamp, and the level-0 columns it owns."""

    part: int
    k: int
    inputs: np.ndarray
    layers: list[LayerPlan] = field(repr=False)
    ymax: float
    dense_threshold: float
    chunk_bytes: int = 1 << 20

    @property
    def nbytes(self) -> int:
        """Bytes of its weight slices and index maps."""
        total = 0
        for lp in self.layers:
            for m in (lp.w, lp.wt):
                total += m.data.nbytes + m.indices.nbytes + m.indptr.nbytes
            total += lp.own.nbytes + lp.needed.nbytes + lp.order.nbytes + lp.bias.nbytes
            total += sum(a.nbytes for a in lp.put.values())
            total += sum(a.nbytes for a in lp.take.values())
            total += sum(a.nbytes for a in lp.fetch.values())
        return total

    def sources(self, layer: int) -> list[int]:
        """Parts (other than this one) that send columns to this part in ``layer``."""
        return [q for q in self.layers[layer - 1].put if q != self.part]

    def destinations(self, layer: int) -> list[int]:
        """Parts (other than this one) this part sends columns to in ``layer``."""
        return [p for p in self.layers[layer - 1].take if p != self.part]


def make_part_plans(network: Network, partition: NeuronPartition, *,
                    dense_threshold: float | None = None,
                    chunk_bytes: int | None = None) -> list[PartPlan]:
    """Slice the network's weights and index maps for every part of ``partition``.

    ``dense_threshold`` and ``chunk_bytes`` default to ``sdnn.kernel.*``, as in
    :func:`~sdnn_dask.kernels.forward_block`.
    """
    if dense_threshold is None:
        dense_threshold = config.get("kernel.dense-threshold")
    if chunk_bytes is None:
        chunk_bytes = config.get("kernel.chunk-bytes")
    partition._check_network(network)
    k = partition.k
    parts = partition.parts
    owned = [[np.flatnonzero(parts[level] == p) for p in range(k)]
             for level in range(partition.n_levels)]
    # position of every neuron of a level within its owner's slab
    position = np.empty(parts.shape, np.int64)
    for level, parts_owned in enumerate(owned):
        for ids in parts_owned:
            position[level, ids] = np.arange(len(ids))
    plans = [PartPlan(p, k, owned[0][p], [], float(network.ymax), float(dense_threshold),
                      int(chunk_bytes)) for p in range(k)]
    for layer, wt in enumerate(network.transposed, start=1):
        prev_owner = parts[layer - 1]
        prev_pos = position[layer - 1]
        order = network.output_order[layer - 1]
        layer_plans = []
        for p in range(k):
            own = owned[layer][p]
            wt_own = wt[own]
            needed = np.unique(wt_own.indices).astype(np.int64)
            wt_sub = as_csr32(wt_own[:, needed])
            w_sub = as_csr32(wt_sub.T)
            source = prev_owner[needed]
            put = {int(q): np.flatnonzero(source == q) for q in np.unique(source)}
            # the network's dense-step order restricted to the owned neurons, renumbered
            # (local input ids follow global ones, so the grouping it makes still holds)
            in_order = order[parts[layer][order] == p]
            layer_plans.append(LayerPlan(
                own=own, needed=needed, w=w_sub, wt=wt_sub, order=position[layer][in_order],
                bias=np.ascontiguousarray(network.bias[own]), put=put))
        for p, lp in enumerate(layer_plans):
            for q, positions in lp.put.items():
                # the columns q sends p, as positions in q's own slab (increasing, since
                # needed is sorted and positions within an owner follow global order)
                layer_plans[q].take[p] = prev_pos[lp.needed[positions]]
                lp.fetch[q] = layer_plans[q].take[p]
        for p in range(k):
            plans[p].layers.append(layer_plans[p])
    return plans


def part_layer_step(plan: PartPlan, layer: int, own_prev: Slab,
                    received: dict[int, Slab]) -> Slab:
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

    Returns
    -------
    Slab
        The part's level ``layer`` slab, its trace extended by this layer.
    """
    start = time.perf_counter()
    lp = plan.layers[layer - 1]
    pieces: list[tuple[Slab, np.ndarray]] = []
    if plan.part in lp.put:
        pieces.append((take_columns(own_prev, lp.take[plan.part]), lp.put[plan.part]))
    for q, given in received.items():
        if q not in lp.fetch:
            raise ValueError(f"layer {layer}: part {plan.part} reads nothing from part {q}")
        n_given = given.values.shape[1]
        if n_given < len(lp.fetch[q]) or (given.columns is not None
                                          and len(given.columns) != n_given):
            raise ValueError(f"layer {layer}: part {q} provided {n_given} columns to part "
                             f"{plan.part}, which reads {len(lp.fetch[q])} of them")
        pieces.append((_columns_from(given, lp.fetch[q]), lp.put[q]))
    n_in, n_out = len(lp.needed), len(lp.own)
    foreign = [piece for piece, _ in pieces[len(pieces) - len(received):]]
    # columns_in, pieces_in, nnz_in, rows_received: what came from other parts
    stats = (n_in - len(lp.put.get(plan.part, ())), len(foreign),
             int(sum(s.values.nnz for s in foreign)), int(sum(len(s.rows) for s in foreign)))
    live = [(s, put) for s, put in pieces if len(s.rows)]
    if not live or n_out == 0:
        trace = [*own_prev.trace, (layer, "none", 0, 0, 0, time.perf_counter() - start,
                                   *stats)]
        return Slab.empty(n_out, trace)
    rows, row_pos = _union_rows(live)
    n_rows = len(rows)
    nnz_in = sum(s.values.nnz for s, _ in live)
    ymax = np.float32(plan.ymax)
    dense = nnz_in >= plan.dense_threshold * (1.0 + _SETUP_ROWS / n_rows) * n_in * n_rows
    if dense:
        op, oi, ox, alive = _dense_layer(lp, live, row_pos, n_rows, ymax,
                                         max(1, plan.chunk_bytes // (4 * max(n_in, n_out))))
        out_rows = rows[alive]
        mode = "dense"
    else:
        row_idx, col_idx, vals = [], [], []
        for (s, put), pos in zip(live, row_pos, strict=True):
            v = s.values
            row_idx.append(np.repeat(pos, np.diff(v.indptr)))
            col_idx.append(put[v.indices])
            vals.append(v.data)
        x = sp.csr_matrix((np.concatenate(vals), (np.concatenate(row_idx),
                                                  np.concatenate(col_idx))),
                          shape=(n_rows, n_in))
        x.sort_indices()  # sum in the serial kernel's order of inputs
        op, oi, ox, kept = sparse_step(x.indptr, x.indices.astype(np.int32, copy=False),
                                       x.data, lp.w.indptr, lp.w.indices, lp.w.data,
                                       lp.bias, ymax, n_out, True)
        out_rows = rows[kept]
        mode = "sparse"
    values = sp.csr_matrix((ox, oi, op), shape=(len(out_rows), n_out))
    trace = [*own_prev.trace, (layer, mode, n_rows, len(out_rows), int(values.nnz),
                               time.perf_counter() - start, *stats)]
    return Slab(out_rows, values, trace)


def forward_parts(network: Network, partition: NeuronPartition,
                  inputs: sp.spmatrix | sp.sparray, *, dense_threshold: float | None = None,
                  chunk_bytes: int | None = None) -> tuple[sp.csr_matrix, list[Slab]]:
    """Model parallelism in one process: every part, layer by layer, no Dask.

    The executor's reference for what each part computes; also handy for debugging a
    partition. Returns the ``rows x N`` output (original neuron order) and every part's
    last slab (with its trace).
    """
    y = as_csr32(inputs)
    if y.shape[1] != network.n_neurons:
        raise ValueError(f"inputs have {y.shape[1]} columns, the network has "
                         f"{network.n_neurons} neurons")
    plans = make_part_plans(network, partition, dense_threshold=dense_threshold,
                            chunk_bytes=chunk_bytes)
    slabs = [Slab.from_rows(y, plan.inputs) for plan in plans]
    for layer in range(1, network.n_layers + 1):
        slabs = [
            part_layer_step(plan, layer, slabs[p], {
                q: piece_for(plans[q].layers[layer - 1], [p], slabs[q])
                for q in plan.sources(layer)})
            for p, plan in enumerate(plans)
        ]
    return assemble(slabs, [plan.layers[-1].own for plan in plans], y.shape), slabs


def assemble(slabs: list[Slab], columns: list[np.ndarray], shape: tuple[int, int],
             row_ids: np.ndarray | None = None) -> sp.csr_matrix:
    """Join the parts' last slabs into one ``shape`` CSR in the original neuron order.

    ``columns[p]`` are the global ids of part ``p``'s columns; ``row_ids`` maps slab rows
    to output rows (identity when omitted).
    """
    r, c, v = [], [], []
    for slab, cols in zip(slabs, columns, strict=True):
        coo = slab.values.tocoo()
        rows = slab.rows[coo.row]
        r.append(rows if row_ids is None else row_ids[rows])
        c.append(cols[coo.col])
        v.append(coo.data)
    if not r:
        return sp.csr_matrix(shape, dtype=np.float32)
    return as_csr32(sp.csr_matrix((np.concatenate(v), (np.concatenate(r), np.concatenate(c))),
                                  shape=shape))
