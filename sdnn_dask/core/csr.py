"""CSR helpers below the network and the kernels: float32 CSR, transposes, tile <-> CSR.

Shared by :mod:`~sdnn_dask.core.network` (``Network.transposed``) and
:mod:`~sdnn_dask.core.kernels` (the dense tile's conversions), so neither imports the other
for them. Compiled where it matters (numba, releasing the GIL); knows nothing of Dask.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp


def as_csr32(matrix: sp.spmatrix | sp.sparray | np.ndarray) -> sp.csr_matrix:
    """Return ``matrix`` as canonical float32 CSR (sorted, duplicates summed, no zeros).

    Explicit zeros are dropped: in the challenge a stored zero is no edge. Returns the
    input itself when it is already canonical float32 CSR.
    """
    csr = sp.csr_matrix(matrix, dtype=np.float32, copy=False)
    csr.sum_duplicates()  # also sorts indices
    csr.eliminate_zeros()
    return csr


def pattern_order(csr: sp.csr_matrix) -> np.ndarray:
    """An order of the rows of ``csr`` by (first column, last column), grouping rows with
    the same pattern: given ``W^T``, the output neurons' order the dense kernel visits
    (:attr:`Network.output_order`); given ``W``, the inputs' (for
    :func:`~sdnn_dask.core.kernels.dense_step_w`)."""
    nonempty = np.diff(csr.indptr) > 0
    first = np.full(csr.shape[0], -1, dtype=np.int64)
    last = np.full(csr.shape[0], -1, dtype=np.int64)
    first[nonempty] = csr.indices[csr.indptr[:-1][nonempty]]
    last[nonempty] = csr.indices[csr.indptr[1:][nonempty] - 1]
    return np.lexsort((last, first)).astype(np.int64)


@numba.njit(nogil=True, cache=True)
def csr_to_dense_t(yp, yi, yx, out):  # pragma: no cover
    """Scatter CSR rows into the dense transposed tile ``out`` (``n x rows``)."""
    out[:, :] = 0.0
    for r in range(yp.shape[0] - 1):
        for p in range(yp[r], yp[r + 1]):
            out[yi[p], r] = yx[p]


@numba.njit(nogil=True, cache=True)
def compact_columns(src, alive, dst):  # pragma: no cover
    """Copy the ``alive`` columns of ``src`` into ``dst`` (``n x alive.sum()``)."""
    for k in range(src.shape[0]):
        c = 0
        for r in range(src.shape[1]):
            if alive[r]:
                dst[k, c] = src[k, r]
                c += 1


@numba.njit(nogil=True, cache=True)
def column_nnz(tile):  # pragma: no cover
    """Nonzeros of each column of ``tile``."""
    counts = np.zeros(tile.shape[1], np.int64)
    for k in range(tile.shape[0]):
        for r in range(tile.shape[1]):
            if tile[k, r] != 0.0:
                counts[r] += 1
    return counts


@numba.njit(nogil=True, cache=True)
def _dense_t_to_csr(yt):  # pragma: no cover
    """``(indptr, indices, data)`` of the CSR of ``yt.T``, scanning ``yt`` row-major."""
    n, rows = yt.shape
    counts = column_nnz(yt)
    indptr = np.zeros(rows + 1, np.int64)
    for r in range(rows):
        indptr[r + 1] = indptr[r] + counts[r]
    indices = np.empty(indptr[rows], np.int32)
    data = np.empty(indptr[rows], np.float32)
    at = indptr[:rows].copy()
    for k in range(n):
        for r in range(rows):
            v = yt[k, r]
            if v != 0.0:
                indices[at[r]] = k
                data[at[r]] = v
                at[r] += 1
    return indptr, indices, data


@numba.njit(nogil=True, cache=True)
def _transpose(indptr, indices, data, n_cols):  # pragma: no cover - compiled
    # (A two-pass form, bucketing columns first for locality, measured no faster at
    # N = 65536: 37-49 ms against 36 ms a layer.)
    nnz = indices.shape[0]
    tp = np.zeros(n_cols + 1, np.int64)
    for p in range(nnz):
        tp[indices[p] + 1] += 1
    for j in range(n_cols):
        tp[j + 1] += tp[j]
    fill = tp[:-1].copy()
    ti = np.empty(nnz, np.int32)
    tx = np.empty(nnz, np.float32)
    for i in range(indptr.shape[0] - 1):  # rows in order: each column's entries sorted
        for p in range(indptr[i], indptr[i + 1]):
            q = fill[indices[p]]
            ti[q] = i
            tx[q] = data[p]
            fill[indices[p]] = q + 1
    return tp, ti, tx


def transpose(w: sp.csr_matrix) -> sp.csr_matrix:
    """``w.T`` as canonical float32 CSR (the CSC of ``w``), ``w`` canonical float32 CSR.

    Compiled, releasing the GIL: a network streamed from a store transposes each layer
    in a background thread while the previous one computes. The row pointers stay int32
    where they fit, as scipy's.
    """
    tp, ti, tx = _transpose(w.indptr, w.indices, w.data, w.shape[1])
    if tp[-1] <= np.iinfo(np.int32).max:
        tp = tp.astype(np.int32)
    out = sp.csr_matrix((tx, ti, tp), shape=(w.shape[1], w.shape[0]), copy=False)
    out.has_sorted_indices = True
    out.has_canonical_format = True
    return out


def dense_t_to_csr(yt: np.ndarray) -> sp.csr_matrix:
    """The ``rows x n`` CSR of a dense transposed tile."""
    indptr, indices, data = _dense_t_to_csr(yt)
    csr = sp.csr_matrix((data, indices, indptr), shape=(yt.shape[1], yt.shape[0]))
    csr.has_sorted_indices = True  # canonical by construction: sorted, no zeros
    csr.has_canonical_format = True
    return csr


@numba.njit(nogil=True, cache=True)
def _take_rows(indptr, indices, data, source):  # pragma: no cover - compiled
    out_ptr = np.zeros(source.shape[0] + 1, np.int64)
    for r in range(source.shape[0]):
        s = source[r]
        out_ptr[r + 1] = out_ptr[r] + indptr[s + 1] - indptr[s]
    out_i = np.empty(out_ptr[-1], np.int32)
    out_x = np.empty(out_ptr[-1], np.float32)
    for r in range(source.shape[0]):
        s = source[r]
        start, length = indptr[s], indptr[s + 1] - indptr[s]
        out_i[out_ptr[r] : out_ptr[r] + length] = indices[start : start + length]
        out_x[out_ptr[r] : out_ptr[r] + length] = data[start : start + length]
    return out_ptr, out_i, out_x


def take_rows(csr: sp.csr_matrix, source: np.ndarray) -> sp.csr_matrix:
    """Rows ``source`` of a canonical float32 CSR (repeats allowed), as canonical CSR.

    ``csr[source]``, compiled: the outputs of identical rows computed once are expanded
    with it, at N = 65536 thousands of copies of a 65536-nonzero row (scipy's row
    indexing took 1.1-1.7 s for 2416 of them, this a fraction).
    """
    indptr, indices, data = _take_rows(csr.indptr, as_csr32(csr).indices,
                                       as_csr32(csr).data,
                                       np.ascontiguousarray(source, dtype=np.int64))
    if indptr[-1] <= np.iinfo(np.int32).max:
        indptr = indptr.astype(np.int32)
    out = sp.csr_matrix((data, indices, indptr), shape=(len(source), csr.shape[1]),
                        copy=False)
    out.has_sorted_indices = csr.has_sorted_indices
    return out


def stack_rows(parts: list[sp.csr_matrix]) -> sp.csr_matrix:
    """The rows of ``parts`` (CSR, equal widths) one after another, as one CSR, which is
    canonical if every part is: stacking keeps each row as it was, so scipy need not
    sort the result again (at N = 65536 a pass's survivors hold 15 million nonzeros,
    sorted again in 0.45 s)."""
    stacked = sp.vstack(parts, format="csr")
    if all(p.has_canonical_format for p in parts):
        stacked.has_sorted_indices = True
        stacked.has_canonical_format = True
    return stacked


def row_slice(csr: sp.csr_matrix, start: int, stop: int) -> sp.csr_matrix:
    """Rows ``start:stop`` of ``csr`` as a CSR over views of its arrays (no copy of the
    nonzeros; scipy's slicing copies them: at N = 65536 a pass of 3800 input rows holds
    26 million). The slice must not be changed in place."""
    ptr = csr.indptr[start : stop + 1]
    first, last = int(ptr[0]), int(ptr[-1])
    out = sp.csr_matrix((csr.data[first:last], csr.indices[first:last], ptr - first),
                        shape=(stop - start, csr.shape[1]), copy=False)
    if csr.has_sorted_indices:
        out.has_sorted_indices = True
    return out
