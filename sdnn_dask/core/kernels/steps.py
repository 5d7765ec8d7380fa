"""The compiled layer step on one block of rows, sparse or dense. Knows nothing of Dask.

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

:func:`dense_step_w` is the dense step on ``W`` itself (a network streamed from a store),
walking the inputs in an :func:`input_order`.

A stored entry whose sum is exactly 0.0 gets no bias, as in the MATLAB reference
(``logical(Z)``) and scipy's product, which drops numerical zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numba
import numpy as np
import scipy.sparse as sp

from ..csr import pattern_order

#: Rows of the dense tile processed together (1 KiB per neuron row): the ~32 input rows
#: feeding one output then come from a 1 MiB slab (L2). Measured on the official
#: 1024-neuron layers: 6-8 GFMA/s at 128-512 rows, 3.5-4 at 1024 rows or more.
ROW_TILE = 256

#: Fixed cost of a dense layer, in rows' worth of work: the density needed to go dense is
#: ``threshold * (1 + SETUP_ROWS / rows)``.
SETUP_ROWS = 100.0


@numba.njit(nogil=True, cache=True)
def _room(oi, ox, nnz, need):  # pragma: no cover - compiled
    """``oi``/``ox`` (their first ``nnz`` entries kept) with room for ``need`` entries:
    doubled when short, so appends stay amortised O(1)."""
    if need <= oi.shape[0]:
        return oi, ox
    cap = max(2 * oi.shape[0], need)
    oi2 = np.empty(cap, np.int32)
    ox2 = np.empty(cap, np.float32)
    oi2[:nnz] = oi[:nnz]
    ox2[:nnz] = ox[:nnz]
    return oi2, ox2


@numba.njit(nogil=True, cache=True)
def _emit_row(acc, bias, ymax, oi, ox, nnz):  # pragma: no cover - compiled
    """One output row from its accumulator, which is cleared: the bias on its nonzeros,
    clamped, zeros dropped, appended to ``oi``/``ox`` at ``nnz``; the new ``nnz``."""
    for j in range(acc.shape[0]):
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
    return nnz


@numba.njit(nogil=True, cache=True)
def sparse_step(yp, yi, yx, wp, wi, wx, bias, ymax, n_out, compact):  # pragma: no cover
    """One layer on CSR rows ``(yp, yi, yx)`` with ``W`` in CSR ``(wp, wi, wx)``.

    Returns ``(op, oi, ox, kept)``: the output CSR and the input-row positions it keeps
    (all rows when ``compact`` is false, else only rows with a nonzero).
    """
    nrows = yp.shape[0] - 1
    acc = np.zeros(n_out, np.float32)
    op = np.zeros(nrows + 1, np.int64)
    oi, ox = _room(np.empty(0, np.int32), np.empty(0, np.float32), 0,
                   max(1024, 2 * yx.shape[0]))
    kept = np.empty(nrows, np.int64)
    nkept = 0
    nnz = 0
    for r in range(nrows):
        for p in range(yp[r], yp[r + 1]):
            k = yi[p]
            v = yx[p]
            for q in range(wp[k], wp[k + 1]):
                acc[wi[q]] += v * wx[q]
        oi, ox = _room(oi, ox, nnz, nnz + n_out)
        start = nnz
        nnz = _emit_row(acc, bias, ymax, oi, ox, nnz)
        if nnz > start or not compact:
            kept[nkept] = r
            nkept += 1
            op[nkept] = nnz
    return op[: nkept + 1], oi[:nnz], ox[:nnz], kept[:nkept]


@numba.njit(nogil=True, cache=True)
def sparse_step_uniform(yp, yi, yx, wi, row_nnz, value, bias, ymax, n_out, compact
                        ):  # pragma: no cover
    """:func:`sparse_step` on a layer of ``row_nnz`` nonzeros in every row, all equal to
    ``value`` (float32), its columns ``wi`` of any integer dtype: a RadiX-Net layer as a
    store keeps it (uint16 columns, a quarter of the int32 columns and float32 values the
    plain step reads). Each input's product with the one value is formed once (the
    product the plain step forms for every nonzero), and four inputs are scattered at a
    time, interleaved, so four independent updates are in flight (one deep layer's row at
    N = 65536: 3.3 ms a layer against 5.6 one input at a time). Where two of the four feed
    one output, its sum may take their terms in another order than the plain step's: the
    values agree to float rounding, as :func:`dense_step_w`'s do.
    """
    nrows = yp.shape[0] - 1
    acc = np.zeros(n_out, np.float32)
    op = np.zeros(nrows + 1, np.int64)
    oi, ox = _room(np.empty(0, np.int32), np.empty(0, np.float32), 0,
                   max(1024, 2 * yx.shape[0]))
    kept = np.empty(nrows, np.int64)
    nkept = 0
    nnz = 0
    for r in range(nrows):
        p, end = yp[r], yp[r + 1]
        while p + 3 < end:
            b0, b1 = np.int64(yi[p]) * row_nnz, np.int64(yi[p + 1]) * row_nnz
            b2, b3 = np.int64(yi[p + 2]) * row_nnz, np.int64(yi[p + 3]) * row_nnz
            v0, v1, v2, v3 = yx[p] * value, yx[p + 1] * value, yx[p + 2] * value, \
                yx[p + 3] * value
            for t in range(row_nnz):
                acc[wi[b0 + t]] += v0
                acc[wi[b1 + t]] += v1
                acc[wi[b2 + t]] += v2
                acc[wi[b3 + t]] += v3
            p += 4
        while p < end:
            base = np.int64(yi[p]) * row_nnz
            vw = yx[p] * value
            for q in range(base, base + row_nnz):
                acc[wi[q]] += vw
            p += 1
        oi, ox = _room(oi, ox, nnz, nnz + n_out)
        start = nnz
        nnz = _emit_row(acc, bias, ymax, oi, ox, nnz)
        if nnz > start or not compact:
            kept[nkept] = r
            nkept += 1
            op[nkept] = nnz
    return op[: nkept + 1], oi[:nnz], ox[:nnz], kept[:nkept]


@numba.njit(nogil=True, cache=True)
def dense_step_sized(yt, wtp, wti, wtx, bias, ymax, zt, row_tile, order, sizes,
                     copy_of):  # pragma: no cover
    """:func:`dense_step`, each output row counting ``sizes[j]`` nonzeros where it is
    nonzero (a tile over neuron classes: :mod:`.classes`), and, where ``copy_of[j] >= 0``
    (``copy_of`` empty: nowhere), output ``j`` copied from output ``copy_of[j]``, one
    visited before it whose column of ``W`` and bias are the same (the same sums: model
    parallelism's part steps, whose tiles stay one row per neuron, so compute each class
    of identical neurons once: :func:`~.classes.copies_in_order`).

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
            if copy_of.shape[0] and copy_of[j] >= 0:
                src = zt[copy_of[j], r0:r1]
                size = sizes[j]
                for r in range(m):
                    dst[r] = src[r]
                    count[r] += size * np.int32(src[r] != 0.0)
                continue
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
            size = sizes[j]
            # Selects, not branches, so the loop vectorises (the whole kernel 17% faster
            # on 1024-120 than with branches); the same values: no bias where z == 0.
            for r in range(m):
                z = dst[r]
                y = min(max(z + b, zero), ymax)
                y = y if z != 0.0 else zero
                dst[r] = y
                count[r] += size * np.int32(y != 0.0)
    nnz = 0
    for r in range(rows):
        nnz += counts[r]
        alive[r] = counts[r] > 0
    return alive, nnz


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
    return dense_step_sized(yt, wtp, wti, wtx, bias, ymax, zt, row_tile, order,
                            np.ones(zt.shape[0], np.int32), np.empty(0, np.int64))


@numba.njit(nogil=True, cache=True)
def scatter_step(yp, yi, yx, rp, ri, rx, bias, ymax, zt, sizes):  # pragma: no cover
    """One layer from CSR rows ``(yp, yi, yx)`` over neurons into a dense tile ``zt``
    (``n_classes x rows``) over output classes (:mod:`.classes`), with ``(rp, ri, rx)``
    the classes' columns of ``W`` in CSR (rows = inputs, columns = classes).

    Each row's nonzero inputs, ascending, are scattered into one accumulator per class,
    as :func:`sparse_step` does per neuron (the same terms in the same order); returns
    ``(alive, nnz)`` as :func:`dense_step_sized` does, ``sizes[c]`` nonzeros a class.
    """
    n_c, rows = zt.shape
    acc = np.zeros(n_c, np.float32)
    alive = np.zeros(rows, np.bool_)
    zero = np.float32(0.0)
    nnz = 0
    for r in range(rows):
        for p in range(yp[r], yp[r + 1]):
            k = yi[p]
            v = yx[p]
            for q in range(rp[k], rp[k + 1]):
                acc[ri[q]] += v * rx[q]
        count = 0
        for c in range(n_c):
            z = acc[c]
            y = zero
            if z != 0.0:
                acc[c] = 0.0
                y = min(max(z + bias[c], zero), ymax)
            zt[c, r] = y
            count += sizes[c] * np.int32(y != 0.0)
        alive[r] = count > 0
        nnz += count
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


class UniformWeights(NamedTuple):
    """A layer whose every row holds ``row_nnz`` nonzeros, all ``value``: its columns
    ``indices`` (row after row, any integer dtype, read-only is fine) are all it needs;
    :func:`sparse_step_uniform` steps on it as it is."""

    indices: np.ndarray
    row_nnz: int
    value: np.float32


class StoredLayer:
    """A layer as a store keeps it, decoded to canonical CSR only when a step needs that.

    The deep layers of a streamed run step one or a few rows with the sparse step, which
    takes a RadiX-Net layer as stored (:attr:`uniform`: uint16 columns, one value): no
    int32 columns or float32 values are made for them (at N = 65536, 16 MB a layer
    written and read again). :attr:`csr` decodes on first use (the dense step, the
    inputs' order, the classes).

    Parameters
    ----------
    uniform
        The layer as stored.
    decode
        Returns the canonical CSR (float32 data, int32 indices, sorted).
    shape
        ``(N, N)``.
    """

    __slots__ = ("_csr", "_decode", "shape", "uniform")

    def __init__(self, uniform: UniformWeights, decode: Callable[[], sp.csr_matrix],
                 shape: tuple[int, int]):
        self.uniform, self._decode, self.shape, self._csr = uniform, decode, shape, None

    @property
    def csr(self) -> sp.csr_matrix:
        """The canonical CSR, decoded once."""
        if self._csr is None:
            self._csr = self._decode()
        return self._csr


def canonical(w: sp.csr_matrix | StoredLayer) -> sp.csr_matrix:
    """``w`` as canonical CSR (a :class:`StoredLayer` decoded)."""
    return w.csr if isinstance(w, StoredLayer) else w


class InputOrder(NamedTuple):
    """How :func:`dense_step_w` walks a layer's inputs (see :func:`input_order`)."""

    order: np.ndarray
    fours: np.ndarray


class LazyInputOrder:
    """:func:`input_order` of ``w``, computed the first time a dense step asks for it: a
    streamed layer's deep layers run one or a few rows on the sparse step, which needs
    none (at N = 65536 the order costs more than the step)."""

    __slots__ = ("_computed", "_w")

    def __init__(self, w: sp.csr_matrix | StoredLayer):
        self._w, self._computed = w, None

    def _get(self) -> InputOrder:
        if self._computed is None:
            self._computed = input_order(canonical(self._w))
        return self._computed

    @property
    def order(self) -> np.ndarray:
        """:attr:`InputOrder.order`."""
        return self._get().order

    @property
    def fours(self) -> np.ndarray:
        """:attr:`InputOrder.fours`."""
        return self._get().fours


def input_order(w: sp.csr_matrix) -> InputOrder:
    """The inputs of ``W`` (CSR) grouped by their columns
    (:func:`~sdnn_dask.core.network.pattern_order`), and where four in a row feed the same
    outputs (RadiX-Net: 16 inputs share each pattern)."""
    order = pattern_order(w)
    return InputOrder(order, _same_fours(w.indptr, w.indices, order))
