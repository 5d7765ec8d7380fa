"""Compiled passes that cut a layer into per-part slices and rebuild a part's layer from
its slice (:mod:`.slices`), in one pass over the nonzeros each, where scipy's transposes
and fancy indexing would take several (measured at N = 65536: 150 ms a layer and part to
load with scipy, see the closing note of issue 22). Knows nothing of Dask.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def gather_rows(indptr, indices, rows):  # pragma: no cover - compiled
    """``(indptr, indices)`` of the rows ``rows`` of a CSR pattern, in that order."""
    out_ptr = np.zeros(rows.shape[0] + 1, np.int64)
    for r in range(rows.shape[0]):
        out_ptr[r + 1] = out_ptr[r] + indptr[rows[r] + 1] - indptr[rows[r]]
    out_idx = np.empty(out_ptr[-1], indices.dtype)
    for r in range(rows.shape[0]):
        start = indptr[rows[r]]
        for p in range(out_ptr[r + 1] - out_ptr[r]):
            out_idx[out_ptr[r] + p] = indices[start + p]
    return out_ptr, out_idx


@numba.njit(nogil=True, cache=True)
def needed_of(columns, n):  # pragma: no cover - compiled
    """The sorted distinct values of ``columns`` (int64), and every value's rank among
    them (int32, -1 for a value absent)."""
    rank = np.full(n, -1, np.int32)
    for p in range(columns.shape[0]):
        rank[columns[p]] = 0
    count = 0
    for j in range(n):
        if rank[j] == 0:
            rank[j] = count
            count += 1
    needed = np.empty(count, np.int64)
    for j in range(n):
        if rank[j] >= 0:
            needed[rank[j]] = j
    return needed, rank


@numba.njit(nogil=True, cache=True)
def part_layer_csr(columns, indptr, n):  # pragma: no cover - compiled
    """A part's layer from its slice: ``W_l^T[own]`` with columns renumbered into
    ``needed``, and its transpose ``W_l[needed, own]``, both canonical CSR (int32).

    ``columns`` are the slice's global input ids, row by row (``indptr``, one row per
    owned neuron, increasing within a row). Returns ``needed, wt_indptr, wt_indices,
    w_indptr, w_indices, w_from`` where ``w_from[p]`` is the position in the slice of
    ``W``'s ``p``-th value (so values that differ are carried over in one gather).
    """
    needed, rank = needed_of(columns, n)
    n_own = indptr.shape[0] - 1
    nnz = columns.shape[0]
    wt_ptr = np.empty(n_own + 1, np.int32)
    wt_idx = np.empty(nnz, np.int32)
    w_ptr = np.zeros(needed.shape[0] + 1, np.int32)
    for r in range(n_own + 1):
        wt_ptr[r] = indptr[r]
    for p in range(nnz):
        local = rank[columns[p]]
        wt_idx[p] = local
        w_ptr[local + 1] += 1
    for i in range(needed.shape[0]):
        w_ptr[i + 1] += w_ptr[i]
    cursor = w_ptr[:-1].copy()
    w_idx = np.empty(nnz, np.int32)
    w_from = np.empty(nnz, np.int64)
    for r in range(n_own):
        for p in range(indptr[r], indptr[r + 1]):
            at = cursor[wt_idx[p]]
            w_idx[at] = r
            w_from[at] = p
            cursor[wt_idx[p]] = at + 1
    return needed, wt_ptr, wt_idx, w_ptr, w_idx, w_from


@numba.njit(nogil=True, cache=True)
def slice_is_sound(columns, indptr, n):  # pragma: no cover - compiled
    """Whether a part's slice of a layer may be given to :func:`part_layer_csr`: row
    pointers from 0 to the columns' count, never decreasing; columns in ``0..n-1``,
    strictly increasing in each row (what :func:`needed_of` indexes by, unchecked)."""
    if indptr.shape[0] == 0 or indptr[0] != 0 or indptr[-1] != columns.shape[0]:
        return False
    for r in range(indptr.shape[0] - 1):
        start, end = indptr[r], indptr[r + 1]
        if end < start:
            return False
        previous = -1
        for p in range(start, end):
            j = np.int64(columns[p])
            if j <= previous or j >= n:  # also j < 0: previous starts at -1
                return False
            previous = j
    return True
