"""Identical output neurons computed once: a layer's columns in classes.

Two output neurons of a layer whose columns of ``W`` hold the same inputs with the same
weights, and whose biases are equal, get the same activation from every input row, bit
for bit: every step sums a neuron's terms input by input, ascending, so equal columns sum
the same terms in the same order. RadiX-Net layers
(``W = (1/16) Pi kron(ones(16, 16), I + C^s)``, :mod:`sdnn_dask.data.radixnet`, and the
challenge's own files) hold every column 16 times: column ``j`` equals column
``j + N/16``. A layer of N neurons then has N/16 *classes*, and the kernel keeps one
value per class and live row instead of one per neuron (:class:`ClassSpace`): a step
computes each class once, reading each input from its own class's row, so its terms and
their order are those of the plain step, and the activations expanded back to neurons at
the end are the plain kernel's bits. A layer's work and its tile shrink 16-fold: at
N = 65536 a row of activations is 16 KiB instead of 256 KiB.

Finding them (:func:`column_classes`): a hash of each column (its rows, its values' bits
and its neuron's bias) in one pass over ``W``'s nonzeros, the columns grouped by hash,
then every column compared, entry by entry, with its class's first column (columns that
differ, a hash collision, are grouped again among themselves). No transpose is built:
the first column of each class is gathered in a pass of its own (:attr:`ClassLayer.wt`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from ..csr import pattern_order, transpose
from .hashing import SEED, mix
from .steps import canonical

#: A layer goes to classes only if it has at most this share of classes per neuron: with
#: more, the saving does not pay for the mapping (RadiX-Net: 1/16).
MAX_CLASS_SHARE = 0.5

@numba.njit(nogil=True, cache=True)
def _column_hashes(wp, wi, wx, bias_bits):  # pragma: no cover - compiled
    """Each column's hash (bias bits, then its rows and value bits in row order) and
    its nonzeros."""
    n = bias_bits.shape[0]
    h = np.empty(n, np.uint64)
    for j in range(n):
        h[j] = mix(SEED, np.uint64(bias_bits[j]))
    counts = np.zeros(n, np.int64)
    bits = wx.view(np.uint32)
    for i in range(wp.shape[0] - 1):
        for p in range(wp[i], wp[i + 1]):
            j = wi[p]
            h[j] = mix(mix(h[j], np.uint64(i)), np.uint64(bits[p]))
            counts[j] += 1
    return h, counts


@numba.njit(nogil=True, cache=True)
def _gather_reps(wp, wi, wx, cls, is_rep, tp):  # pragma: no cover - compiled
    """The representatives' columns as rows of a CSR (``tp`` given): row ``c`` holds
    column ``reps[c]``'s rows and values, in row order."""
    ti = np.empty(tp[-1], np.int32)
    tx = np.empty(tp[-1], np.float32)
    fill = tp[:-1].copy()
    for i in range(wp.shape[0] - 1):
        for p in range(wp[i], wp[i + 1]):
            j = wi[p]
            if is_rep[j]:
                c = cls[j]
                ti[fill[c]] = i
                tx[fill[c]] = wx[p]
                fill[c] += 1
    return ti, tx


@numba.njit(nogil=True, cache=True)
def _differs(wp, wi, wx, cls, tp, ti, tx, bias_bits, reps):  # pragma: no cover
    """Whether each column differs from its class's representative (rows, value bits,
    count or bias): a hash collision."""
    n = cls.shape[0]
    pos = np.zeros(n, np.int64)
    bad = np.zeros(n, np.bool_)
    xb = wx.view(np.uint32)
    tb = tx.view(np.uint32)
    for i in range(wp.shape[0] - 1):
        for p in range(wp[i], wp[i + 1]):
            j = wi[p]
            c = cls[j]
            q = tp[c] + pos[j]
            pos[j] += 1
            if q >= tp[c + 1] or ti[q] != i or tb[q] != xb[p]:
                bad[j] = True
    for j in range(n):
        c = cls[j]
        if pos[j] != tp[c + 1] - tp[c] or bias_bits[j] != bias_bits[reps[c]]:
            bad[j] = True
    return bad


@numba.njit(nogil=True, cache=True)
def _expand_rows(indptr, indices, data, classes, sizes):  # pragma: no cover - compiled
    """CSR rows over classes -> CSR rows over neurons, columns ascending, zeros dropped."""
    rows = indptr.shape[0] - 1
    out_ptr = np.zeros(rows + 1, np.int64)
    for r in range(rows):
        count = 0
        for p in range(indptr[r], indptr[r + 1]):
            if data[p] != 0.0:
                count += sizes[indices[p]]
        out_ptr[r + 1] = out_ptr[r] + count
    out_i = np.empty(out_ptr[-1], np.int32)
    out_x = np.empty(out_ptr[-1], np.float32)
    vector = np.zeros(sizes.shape[0], np.float32)
    for r in range(rows):
        for p in range(indptr[r], indptr[r + 1]):
            vector[indices[p]] = data[p]
        at = out_ptr[r]
        for j in range(classes.shape[0]):
            v = vector[classes[j]]
            if v != 0.0:
                out_i[at] = j
                out_x[at] = v
                at += 1
        for p in range(indptr[r], indptr[r + 1]):
            vector[indices[p]] = 0.0
    return out_ptr, out_i, out_x


@dataclass(frozen=True, eq=False)
class ClassSpace:
    """The columns of activations kept one per class of a layer's output neurons.

    Attributes
    ----------
    layer
        The layer (0-based) whose output neurons the classes group.
    classes
        ``(N,)`` int32: each neuron's class (the column its value is kept in).
    sizes
        ``(n_classes,)`` int32: the neurons of each class.
    """

    layer: int
    classes: np.ndarray = field(repr=False)
    sizes: np.ndarray = field(repr=False)

    @property
    def n(self) -> int:
        """Classes (columns of the activations)."""
        return int(self.sizes.shape[0])

    def tile_nnz(self, tile: np.ndarray) -> int:
        """Neuron nonzeros of an ``n x rows`` class tile (each class counts its size)."""
        return int(np.count_nonzero(tile, axis=1).astype(np.int64) @ self.sizes)

    def column_nnz(self, tile: np.ndarray) -> np.ndarray:
        """Neuron nonzeros of each column (live row) of an ``n x rows`` class tile."""
        return self.sizes.astype(np.int64) @ (tile != 0)

    def row_nnz(self, csr: sp.csr_matrix) -> np.ndarray:
        """Neuron nonzeros of each row of a CSR over classes."""
        rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
        weights = self.sizes[csr.indices] * (csr.data != 0)
        return np.bincount(rows, weights=weights, minlength=csr.shape[0]).astype(np.int64)

    def expand_csr(self, csr: sp.csr_matrix) -> sp.csr_matrix:
        """CSR rows over classes as CSR rows over neurons (each class's value repeated in
        every neuron of the class; canonical)."""
        indptr, indices, data = _expand_rows(csr.indptr, csr.indices, csr.data,
                                             self.classes, self.sizes)
        out = sp.csr_matrix((data, indices, indptr),
                            shape=(csr.shape[0], self.classes.shape[0]), copy=False)
        out.has_sorted_indices = True
        out.has_canonical_format = True
        return out


@dataclass(eq=False)
class ClassLayer:
    """One layer with its output neurons in classes (:func:`column_classes`).

    Attributes
    ----------
    space
        The output classes (:class:`ClassSpace`).
    wt
        ``n_classes x N`` float32 CSR: row ``c`` is the column of ``W`` of class ``c``'s
        first neuron (inputs as neurons, ascending).
    bias
        ``(n_classes,)`` float32: each class's bias.
    """

    space: ClassSpace
    wt: sp.csr_matrix = field(repr=False)
    bias: np.ndarray = field(repr=False)
    _from_classes: dict = field(default_factory=dict, repr=False)
    _from_neurons: tuple | None = field(default=None, repr=False)
    _scatter: sp.csr_matrix | None = field(default=None, repr=False)

    def step_weights(self, inputs: ClassSpace | None) -> tuple[sp.csr_matrix, np.ndarray]:
        """``(W^T, output order)`` for a tile whose rows are ``inputs``' classes (or
        neurons, for ``None``): the classes' columns, each input index mapped to the row
        it is kept in, in the same order; and an order of the classes grouping those that
        read the same rows (:func:`~sdnn_dask.core.csr.pattern_order`)."""
        if inputs is None:
            if self._from_neurons is None:
                self._from_neurons = (self.wt, pattern_order(self.wt))
            return self._from_neurons
        found = self._from_classes.get(inputs.layer)
        if found is None:
            wt = sp.csr_matrix((self.wt.data, inputs.classes[self.wt.indices],
                                self.wt.indptr), shape=(self.wt.shape[0], inputs.n))
            found = self._from_classes[inputs.layer] = (wt, pattern_order(wt))
        return found

    @property
    def scatter(self) -> sp.csr_matrix:
        """``N x n_classes`` float32 CSR: ``W``'s columns of the classes' first neurons,
        rows = inputs, for the step on sparse rows over neurons."""
        if self._scatter is None:
            self._scatter = transpose(self.wt)
        return self._scatter


def column_classes(w: sp.csr_matrix, bias: np.ndarray, layer: int) -> ClassLayer | None:
    """The classes of ``w``'s output neurons (equal columns and equal bias), as a
    :class:`ClassLayer`; ``None`` if they are more than :data:`MAX_CLASS_SHARE` of the
    neurons (the plain kernel then does better).

    Exact: columns grouped by hash are compared entry by entry with their class's first
    column; the columns that differ (a collision) are grouped again among themselves.
    """
    n = int(w.shape[1])
    bias = np.ascontiguousarray(bias, dtype=np.float32)
    bias_bits = bias.view(np.uint32)
    hashes, counts = _column_hashes(w.indptr, w.indices, w.data, bias_bits)
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    if len(first) > MAX_CLASS_SHARE * n:
        return None
    while True:
        order = np.argsort(first, kind="stable")  # classes numbered by first neuron
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        cls = rank[inverse.ravel()].astype(np.int32)
        reps = first[order].astype(np.int64)
        is_rep = np.zeros(n, np.bool_)
        is_rep[reps] = True
        tp = np.zeros(len(reps) + 1, np.int64)
        np.cumsum(counts[reps], out=tp[1:])
        ti, tx = _gather_reps(w.indptr, w.indices, w.data, cls, is_rep, tp)
        bad = _differs(w.indptr, w.indices, w.data, cls, tp, ti, tx, bias_bits, reps)
        if not bad.any():
            break
        # a collision: the columns that differ from their class's first one form a new
        # class, the first of them its representative, and are checked again (each round
        # settles one column at least)
        moved = np.flatnonzero(bad)
        inverse = inverse.ravel().copy()
        inverse[moved] = len(first)
        first = np.append(first, moved[0])
        if len(first) > MAX_CLASS_SHARE * n:
            return None
    sizes = np.bincount(cls, minlength=len(reps)).astype(np.int32)
    wt = sp.csr_matrix((tx, ti, tp), shape=(len(reps), int(w.shape[0])))
    wt.has_sorted_indices = True
    return ClassLayer(ClassSpace(layer, cls, sizes), wt, bias[reps].copy())


@numba.njit(nogil=True, cache=True)
def _row_hashes(wtp, wti, wtx, bias_bits):  # pragma: no cover - compiled
    bits = wtx.view(np.uint32)
    out = np.empty(wtp.shape[0] - 1, np.uint64)
    for j in range(wtp.shape[0] - 1):
        h = mix(SEED, np.uint64(bias_bits[j]))
        for p in range(wtp[j], wtp[j + 1]):
            h = mix(mix(h, np.uint64(wti[p])), np.uint64(bits[p]))
        out[j] = h
    return out


@numba.njit(nogil=True, cache=True)
def _copies(wtp, wti, wtx, bias_bits, order, hashes):  # pragma: no cover - compiled
    n = wtp.shape[0] - 1
    copy_of = np.full(n, -1, np.int64)
    seen = dict()
    xb = wtx.view(np.uint32)
    for jj in range(order.shape[0]):
        j = order[jj]
        h = hashes[j]
        if h in seen:
            i = seen[h]
            same = (wtp[i + 1] - wtp[i] == wtp[j + 1] - wtp[j]
                    and bias_bits[i] == bias_bits[j])
            if same:
                for t in range(wtp[j + 1] - wtp[j]):
                    if wti[wtp[i] + t] != wti[wtp[j] + t] or xb[wtp[i] + t] != xb[wtp[j] + t]:
                        same = False
                        break
            if same:  # (a collision computes j itself)
                copy_of[j] = i
        else:
            seen[h] = j
    return copy_of


def copies_in_order(wt: sp.csr_matrix, bias: np.ndarray, order: np.ndarray) -> np.ndarray:
    """For :func:`dense_step_sized`: each output (row of ``W^T``) visited in ``order`` whose
    row and bias equal those of one visited before it, that one's index, else -1. Rows are
    grouped by a hash of their columns and value bits, and compared entry by entry."""
    bias_bits = np.ascontiguousarray(bias, dtype=np.float32).view(np.uint32)
    hashes = _row_hashes(wt.indptr, wt.indices, wt.data, bias_bits)
    return _copies(wt.indptr, wt.indices, wt.data, bias_bits, np.asarray(order, np.int64),
                   hashes)


#: A streamed layer goes to classes (:mod:`.classes`) for a chunk of at least this many
#: live rows: finding a layer's classes costs about what a plain step on a few rows does
#: (a network in memory keeps its classes, found once).
STREAM_CLASS_ROWS = 16
#: Layers whose classes a streamed network keeps for its next passes of rows (the first
#: ones found; rows die within 20-30 challenge layers, so these are all a run needs).
STREAM_CLASS_LAYERS = 64


class ClassLayers:
    """Each layer's :class:`~.classes.ClassLayer` (``None``: the layer runs plain), found
    when a chunk first needs it and kept on the network
    (:attr:`~sdnn_dask.core.network.Network.class_layers`): in memory, every layer's,
    found once a process; streamed from a store, only for chunks of at least
    :data:`STREAM_CLASS_ROWS` rows, and the first :data:`STREAM_CLASS_LAYERS` layers'
    kept for the run's next passes (:attr:`StreamedNetwork.class_layers
    <sdnn_dask.data.streaming.StreamedNetwork.class_layers>`)."""

    def __init__(self, network: Any, enabled: bool):
        self.enabled = enabled
        self.streamed = hasattr(network, "kernel_layers")
        self.kept: dict[int, ClassLayer | None] = network.class_layers
        self.found: dict[int, ClassLayer | None] = {}
        self.bias = network.bias

    def get(self, k: int, w: Any, rows: int) -> ClassLayer | None:
        """Layer ``k``'s classes for a chunk of ``rows`` live rows, or ``None``."""
        if not self.enabled:
            return None
        for known in (self.kept, self.found):
            if k in known:
                return known[k]
        if self.streamed and rows < STREAM_CLASS_ROWS:
            return None
        found = column_classes(canonical(w), self.bias, k)
        keep = not self.streamed or len(self.kept) < STREAM_CLASS_LAYERS
        (self.kept if keep else self.found)[k] = found
        return found
