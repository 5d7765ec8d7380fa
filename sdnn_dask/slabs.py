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
    """

    rows: np.ndarray
    values: sp.csr_matrix
    trace: list[tuple] = field(default_factory=list, repr=False)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays it holds (what a transfer carries, before framing)."""
        v = self.values
        return int(self.rows.nbytes + v.indptr.nbytes + v.indices.nbytes + v.data.nbytes)

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


def take_columns(slab: Slab, positions: np.ndarray) -> Slab:
    """The piece of ``slab`` with the columns at ``positions`` (increasing), empty rows
    dropped; carries no trace."""
    colmap = np.full(slab.values.shape[1], -1, np.int64)
    colmap[positions] = np.arange(len(positions))
    return _select(slab.values, colmap, len(positions), slab.rows)


@numba.njit(nogil=True, cache=True)
def _scatter_t(indptr, indices, data, row_pos, col_pos, out):  # pragma: no cover
    """Write CSR entries into the dense transposed tile ``out`` (``columns x rows``)."""
    for r in range(indptr.shape[0] - 1):
        rr = row_pos[r]
        for p in range(indptr[r], indptr[r + 1]):
            out[col_pos[indices[p]], rr] = data[p]


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
    """

    own: np.ndarray
    needed: np.ndarray
    w: sp.csr_matrix = field(repr=False)
    wt: sp.csr_matrix = field(repr=False)
    order: np.ndarray = field(repr=False)
    bias: np.ndarray = field(repr=False)
    put: dict[int, np.ndarray] = field(repr=False)
    take: dict[int, np.ndarray] = field(default_factory=dict, repr=False)


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
        return total

    def sources(self, layer: int) -> list[int]:
        """Parts (other than this one) that send columns to this part in ``layer``."""
        return [q for q in self.layers[layer - 1].put if q != self.part]

    def destinations(self, layer: int) -> list[int]:
        """Parts (other than this one) this part sends columns to in ``layer``."""
        return [p for p in self.layers[layer - 1].take if p != self.part]


def make_part_plans(network: Network, partition: NeuronPartition, *,
                    dense_threshold: float) -> list[PartPlan]:
    """Slice the network's weights and index maps for every part of ``partition``."""
    partition._check_network(network)
    k = partition.k
    parts = partition.parts
    owned = [[np.flatnonzero(parts[level] == p) for p in range(k)]
             for level in range(partition.n_levels)]
    plans = [PartPlan(p, k, owned[0][p], [], float(network.ymax), float(dense_threshold))
             for p in range(k)]
    for layer, wt in enumerate(network.transposed, start=1):
        prev_owner = parts[layer - 1]
        # position of every level l-1 neuron within its owner's slab
        prev_pos = np.empty(network.n_neurons, np.int64)
        for q in range(k):
            prev_pos[owned[layer - 1][q]] = np.arange(len(owned[layer - 1][q]))
        layer_plans = []
        for p in range(k):
            own = owned[layer][p]
            wt_own = wt[own]
            needed = np.unique(wt_own.indices).astype(np.int64)
            wt_sub = as_csr32(wt_own[:, needed])
            w_sub = as_csr32(wt_sub.T)
            first = np.full(len(own), -1, np.int64)
            last = np.full(len(own), -1, np.int64)
            nonempty = np.diff(wt_sub.indptr) > 0
            first[nonempty] = wt_sub.indices[wt_sub.indptr[:-1][nonempty]]
            last[nonempty] = wt_sub.indices[wt_sub.indptr[1:][nonempty] - 1]
            source = prev_owner[needed]
            put = {int(q): np.flatnonzero(source == q) for q in np.unique(source)}
            layer_plans.append(LayerPlan(
                own=own, needed=needed, w=w_sub, wt=wt_sub,
                order=np.lexsort((last, first)).astype(np.int64),
                bias=np.ascontiguousarray(network.bias[own]), put=put))
        for p, lp in enumerate(layer_plans):
            for q, positions in lp.put.items():
                # the columns q sends p, as positions in q's own slab (increasing, since
                # needed is sorted and positions within an owner follow global order)
                layer_plans[q].take[p] = prev_pos[lp.needed[positions]]
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
        Source part -> the piece it sent (columns in the order of ``plan.layers[layer-1]
        .put[source]``).

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
    for q, piece in received.items():
        if piece.values.shape[1] != len(lp.put[q]):
            raise ValueError(f"layer {layer}: part {q} sent {piece.values.shape[1]} columns "
                             f"to part {plan.part}, which expects {len(lp.put[q])}")
        pieces.append((piece, lp.put[q]))
    n_in, n_out = len(lp.needed), len(lp.own)
    foreign = list(received.values())
    # columns_in, pieces_in, nnz_in, rows_received: what came from other parts
    stats = (n_in - len(lp.put.get(plan.part, ())), len(foreign),
             int(sum(s.values.nnz for s in foreign)), int(sum(len(s.rows) for s in foreign)))
    live = [(s, put) for s, put in pieces if len(s.rows)]
    if not live or n_out == 0:
        trace = [*own_prev.trace, (layer, "none", 0, 0, 0, time.perf_counter() - start,
                                   *stats)]
        return Slab.empty(n_out, trace)
    rows = live[0][0].rows if len(live) == 1 else np.unique(
        np.concatenate([s.rows for s, _ in live]))
    n_rows = len(rows)
    nnz_in = sum(s.values.nnz for s, _ in live)
    ymax = np.float32(plan.ymax)
    dense = nnz_in >= plan.dense_threshold * (1.0 + _SETUP_ROWS / n_rows) * n_in * n_rows
    if dense:
        yt = np.zeros((n_in, n_rows), np.float32)
        for s, put in live:
            row_pos = np.searchsorted(rows, s.rows)
            _scatter_t(s.values.indptr, s.values.indices, s.values.data, row_pos, put, yt)
        zt = np.empty((n_out, n_rows), np.float32)
        alive, nnz = dense_step(yt, lp.wt.indptr, lp.wt.indices, lp.wt.data, lp.bias, ymax,
                                zt, _ROW_TILE, lp.order)
        op, oi, ox = _dense_t_to_csr(zt, alive, nnz)
        out_rows = rows[alive]
        mode = "dense"
    else:
        row_idx, col_idx, vals = [], [], []
        for s, put in live:
            v = s.values
            row_idx.append(np.repeat(np.searchsorted(rows, s.rows), np.diff(v.indptr)))
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
                  inputs: sp.spmatrix | sp.sparray, *, dense_threshold: float = 0.05
                  ) -> tuple[sp.csr_matrix, list[Slab]]:
    """Model parallelism in one process: every part, layer by layer, no Dask.

    The executor's reference for what each part computes; also handy for debugging a
    partition. Returns the ``rows x N`` output (original neuron order) and every part's
    last slab (with its trace).
    """
    y = as_csr32(inputs)
    if y.shape[1] != network.n_neurons:
        raise ValueError(f"inputs have {y.shape[1]} columns, the network has "
                         f"{network.n_neurons} neurons")
    plans = make_part_plans(network, partition, dense_threshold=dense_threshold)
    slabs = [Slab.from_rows(y, plan.inputs) for plan in plans]
    for layer in range(1, network.n_layers + 1):
        slabs = [
            part_layer_step(plan, layer, slabs[p], {
                q: take_columns(slabs[q], plans[q].layers[layer - 1].take[p])
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
