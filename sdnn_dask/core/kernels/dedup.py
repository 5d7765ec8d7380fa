"""Identical live rows computed once: exact deduplication of a block's survivors.

After 15-20 challenge layers every surviving row is the same saturated vector (each column
of a challenge layer sums to 2, so ``32 x 2 + bias`` clamps back to 32), yet the plain
kernel steps every copy through every remaining layer. A row's next activations depend on
its own activations alone, and the dense and sparse steps sum in the same order (input
neuron by input neuron, ascending), so two rows that are equal bit for bit stay equal
bit for bit, whichever chunk, tile or path computes them. So rows found equal are
merged: one *representative* goes on, the others are its *members*, and the result is
expanded back at the end, the same bits as without deduplication.

Finding them: a 64-bit hash of each live row's nonzeros (column and float32 bits, the
same for a dense tile's column and a CSR row), rows grouped by hash, and every member
compared with its representative before it is merged (a hash collision keeps both).
:class:`DedupPolicy` says when to look: once the live rows stop falling, and less often
while a look finds little (the cost of a look is about a 32nd of a layer's step on the
same rows: one pass over the nonzeros against 32 multiply-adds for each).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numba
import numpy as np

from .chunks import BufferPool, Chunk
from .hashing import SEED, mix


@numba.njit(nogil=True, cache=True)
def hash_dense_t(tile):  # pragma: no cover - compiled
    """A hash of each column of the ``n x rows`` float32 ``tile`` (its nonzeros: column
    index and bits), equal to :func:`hash_csr` of the same row."""
    n, rows = tile.shape
    bits = tile.view(np.uint32)
    out = np.full(rows, SEED, np.uint64)
    for k in range(n):
        for r in range(rows):
            b = bits[k, r]
            if b != 0 and b != np.uint32(0x80000000):  # +0.0 and -0.0 are both zero
                out[r] = mix(mix(out[r], np.uint64(k)), np.uint64(b))
    return out


@numba.njit(nogil=True, cache=True)
def hash_csr(indptr, indices, data):  # pragma: no cover - compiled
    """A hash of each CSR row's nonzeros (column index and float32 bits)."""
    rows = indptr.shape[0] - 1
    bits = data.view(np.uint32)
    out = np.full(rows, SEED, np.uint64)
    for r in range(rows):
        h = out[r]
        for p in range(indptr[r], indptr[r + 1]):
            b = bits[p]
            if b != 0 and b != np.uint32(0x80000000):
                h = mix(mix(h, np.uint64(indices[p])), np.uint64(b))
        out[r] = h
    return out


@numba.njit(nogil=True, cache=True)
def hash_block_csc(starts, indices, data, n_rows):  # pragma: no cover - compiled
    """A hash of each row of a column-major block layout (``starts[b, j]..starts[b, j+1]``
    index the nonzeros of column ``j`` in block ``b``; ``indices`` are row positions),
    equal to :func:`hash_csr` of the same row: every block's columns are visited in
    increasing order, so each row's nonzeros mix in column order."""
    bits = data.view(np.uint32)
    out = np.full(n_rows, SEED, np.uint64)
    for b in range(starts.shape[0]):
        for j in range(starts.shape[1] - 1):
            for p in range(starts[b, j], starts[b, j + 1]):
                v = bits[p]
                if v != 0 and v != np.uint32(0x80000000):
                    r = indices[p]
                    out[r] = mix(mix(out[r], np.uint64(j)), np.uint64(v))
    return out


@dataclass
class Groups:
    """Which rows a representative stands for (rows never merged stand for themselves).

    Attributes
    ----------
    members
        Representative id -> sorted ids of every row it stands for (itself included);
        only representatives that stand for more than themselves.
    """

    members: dict[int, np.ndarray] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.members)

    def of(self, rep: int) -> np.ndarray:
        """The rows ``rep`` stands for."""
        found = self.members.get(int(rep))
        return np.array([rep], np.int64) if found is None else found

    def merge(self, rep: int, others: np.ndarray) -> None:
        """``rep`` now also stands for ``others`` (representatives themselves) and theirs."""
        parts = [self.of(rep), *(self.members.pop(int(o), np.array([o], np.int64))
                                 for o in others)]
        self.members[int(rep)] = np.sort(np.concatenate(parts))

    def expand(self, reps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every row ``reps`` stand for, sorted, and for each the position in ``reps`` of
        its representative."""
        if not self.members:
            return reps, np.arange(len(reps))
        ids = [self.of(r) for r in reps]
        rows = np.concatenate(ids) if ids else np.empty(0, np.int64)
        source = np.repeat(np.arange(len(reps)), [len(i) for i in ids])
        order = np.argsort(rows, kind="stable")
        return rows[order], source[order]


def duplicates(hashes: np.ndarray, same: Callable[[int, np.ndarray], np.ndarray]
               ) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """Rows to drop, and ``(representative, merged)`` position pairs, from row hashes.

    Parameters
    ----------
    hashes
        One hash per live row (positions ``0..rows-1``, in row-id order).
    same
        ``same(i, positions)``: whether the row at position ``i`` equals each of the rows
        at ``positions`` (an array), value for value.

    Returns
    -------
    drop, merges
        A boolean mask of the rows merged into another, and for each representative
        the positions merged into it. The representative is the group's first row.
    """
    order = np.argsort(hashes, kind="stable")
    sorted_hashes = hashes[order]
    starts = np.flatnonzero(np.r_[True, sorted_hashes[1:] != sorted_hashes[:-1]])
    ends = np.r_[starts[1:], len(order)]
    drop = np.zeros(len(hashes), np.bool_)
    merges: list[tuple[int, np.ndarray]] = []
    for s, e in zip(starts[ends - starts > 1], ends[ends - starts > 1], strict=True):
        pending = np.sort(order[s:e])
        while len(pending) > 1:  # a hash collision splits a group, it never merges it
            rep, rest = pending[0], pending[1:]
            equal = same(int(rep), rest)
            if equal.any():
                drop[rest[equal]] = True
                merges.append((int(rep), rest[equal].astype(np.int64)))
            pending = rest[~equal]
    return drop, merges


@dataclass
class DedupPolicy:
    """When a block's survivors are looked at for duplicates.

    A look starts once a layer leaves at least ``stable`` of the rows it took (the live
    rows stopped falling); a look that merges at least ``productive`` of the rows is
    followed by one after the next layer, one that merges less doubles the wait (up to
    ``longest`` layers), so rows that never repeat cost a look every ``longest`` layers.
    """

    stable: float = 0.9
    productive: float = 0.1
    longest: int = 16
    wait: int = 1
    next_layer: int = 0

    def due(self, layer: int, rows_in: int, rows_out: int) -> bool:
        """Whether to look after ``layer`` (0-based), which took ``rows_in`` live rows
        (distinct) and left ``rows_out``."""
        return (rows_out > 1 and layer >= self.next_layer
                and rows_out >= self.stable * rows_in)

    def looked(self, layer: int, rows: int, merged: int) -> None:
        """A look after ``layer`` merged ``merged`` of ``rows`` rows."""
        self.wait = 1 if merged >= self.productive * rows else min(2 * self.wait,
                                                                      self.longest)
        self.next_layer = layer + self.wait


@numba.njit(nogil=True, cache=True)
def equal_columns(tile, columns, vector):  # pragma: no cover - compiled
    """Whether each of ``tile``'s ``columns`` equals ``vector`` (values)."""
    out = np.ones(columns.shape[0], np.bool_)
    for i in range(columns.shape[0]):
        r = columns[i]
        for k in range(tile.shape[0]):
            if tile[k, r] != vector[k]:
                out[i] = False
                break
    return out


@numba.njit(nogil=True, cache=True)
def equal_rows(indptr, indices, data, rows, vector, vector_nnz):  # pragma: no cover
    """Whether each of the CSR ``rows`` equals the dense ``vector`` (values), which has
    ``vector_nnz`` nonzeros."""
    out = np.zeros(rows.shape[0], np.bool_)
    for i in range(rows.shape[0]):
        r = rows[i]
        count = 0
        equal = True
        for p in range(indptr[r], indptr[r + 1]):
            if data[p] != 0.0:
                count += 1
                if vector[indices[p]] != data[p]:
                    equal = False
                    break
        out[i] = equal and count == vector_nnz
    return out


def _row_vector(chunk: Chunk, r: int) -> np.ndarray:
    """Row ``r`` of ``chunk`` as a dense float32 vector (its columns: neurons or
    classes)."""
    if chunk.dense_t is not None:
        return np.ascontiguousarray(chunk.dense_t[:, r])
    vector = np.zeros(chunk.width, np.float32)
    c = chunk.csr
    start, end = c.indptr[r], c.indptr[r + 1]
    vector[c.indices[start:end]] = c.data[start:end]
    return vector


def merge_duplicates(chunks: list[Chunk], groups: Groups, pool: BufferPool) -> int:
    """Merge the live rows of ``chunks`` that are equal into one representative each
    (recorded in ``groups``), dropping the others from their chunks; the rows merged.

    Exact: rows are grouped by :func:`hash_dense_t` / :func:`hash_csr`, and each is
    compared with its representative, value by value, before it is dropped. Only chunks
    whose columns are of one kind (neurons, or one layer's classes) are compared.
    """
    kinds: dict[int, list[Chunk]] = {}
    for c in chunks:
        kinds.setdefault(-1 if c.space is None else c.space.layer, []).append(c)
    if len(kinds) > 1:
        return sum(_merge_alike(alike, groups, pool) for alike in kinds.values())
    return _merge_alike(chunks, groups, pool)


def _merge_alike(chunks: list[Chunk], groups: Groups, pool: BufferPool) -> int:
    """:func:`merge_duplicates` of chunks whose columns are of one kind."""
    hashes = [hash_dense_t(c.dense_t) if c.dense_t is not None
              else hash_csr(c.csr.indptr, c.csr.indices, c.csr.data) for c in chunks]
    sizes = np.array([len(h) for h in hashes], np.int64)
    if sizes.sum() < 2:
        return 0
    owner = np.repeat(np.arange(len(chunks)), sizes)
    local = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)

    def same(rep: int, candidates: np.ndarray) -> np.ndarray:
        vector = _row_vector(chunks[owner[rep]], int(local[rep]))
        nonzeros = int(np.count_nonzero(vector))
        out = np.zeros(len(candidates), np.bool_)
        for c in np.unique(owner[candidates]):
            mine = owner[candidates] == c
            rows = local[candidates[mine]]
            chunk = chunks[c]
            if chunk.dense_t is not None:
                out[mine] = equal_columns(chunk.dense_t, rows, vector)
            else:
                out[mine] = equal_rows(chunk.csr.indptr, chunk.csr.indices, chunk.csr.data,
                                        rows, vector, nonzeros)
        return out

    drop, merges = duplicates(np.concatenate(hashes), same)
    if not merges:
        return 0
    ids = np.concatenate([c.live for c in chunks])
    for rep, merged in merges:
        groups.merge(int(ids[rep]), ids[merged])
    start = 0
    for chunk, size in zip(chunks, sizes, strict=True):
        chunk.keep(~drop[start : start + size], pool)
        start += size
    return int(drop.sum())


#: Layers between two looks of model parallelism's parts, and the first layer looked after
#: (:mod:`sdnn_dask.parallel.slabs.shared_rows`; the traffic forecast replays them).
LOOK_EVERY = 4
FIRST_LOOK = 8


def look_due(layer: int, n_layers: int, every: int = LOOK_EVERY) -> bool:
    """Whether the parts of a model-parallel row group look for identical rows after
    ``layer`` (1-based): every ``every``-th layer from layer 8 on, never after the last. Not
    before: the first layers hold nearly every input row, all distinct on the
    challenge's inputs, and looks there made a 1024-120 x 60000 run 30% slower."""
    return FIRST_LOOK <= layer < n_layers and layer % every == 0
