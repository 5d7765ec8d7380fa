"""Identical rows computed once under model parallelism: the parts agree on the groups.

A row's activations are split across the parts by columns, so no part alone can say two
rows are equal. Each part *labels* its own slab exactly (:func:`label_rows`: rows equal
in its columns, confirmed value by value after a hash, share the label of the first of
them; a row with no nonzero there is labelled -1, as is a row the part does not hold), and
sends its labels to every other part of its row group. Two rows are identical when every
part gives them the same label, so each part, from the same labels, finds the same
groups (:func:`identical_rows`), drops the same rows (:func:`drop_rows`) and keeps the same
:class:`~sdnn_dask.core.kernels.dedup.Groups`: from then on only representatives are
computed and exchanged, and :func:`~.part_layer.assemble` expands them at the end. Exact, as the
serial kernel's deduplication (:mod:`sdnn_dask.core.kernels.dedup`): the same bits.

:class:`PartRows` holds one part's groups, the multiplicity of every row (for the live
row counts in the trace) and when to look
(:func:`~sdnn_dask.core.kernels.dedup.look_due`: every ``LOOK_EVERY`` layers from layer
``FIRST_LOOK`` on), the same for every part of a group (they must meet), and no more once
a look leaves a single distinct row. Knows nothing of Dask.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from ... import config
from ...core.kernels.dedup import (
    Groups,
    duplicates,
    equal_columns,
    equal_rows,
    hash_block_csc,
    hash_dense_t,
    look_due,
)
from .layout import BLOCK_ROWS, BlockCSC, Slab, csr_to_blocks


def label_rows(slab: Slab) -> np.ndarray:
    """One label per row of ``slab``: the row id of the first row equal to it in these
    columns (value for value), or -1 where the row has no nonzero here."""
    n_rows = len(slab.rows)
    if slab.tile is not None:
        hashes = hash_dense_t(slab.tile)
    else:
        v = slab.blocks
        hashes = hash_block_csc(v.starts, v.indices, v.data, n_rows)
    count = slab.row_nnz()
    labels = slab.rows.astype(np.int64, copy=True)
    labels[count == 0] = -1
    if n_rows < 2:
        return labels
    csr = None

    def same(rep: int, candidates: np.ndarray) -> np.ndarray:
        nonlocal csr
        if slab.tile is not None:
            return equal_columns(slab.tile, candidates, np.ascontiguousarray(slab.tile[:, rep]))
        if csr is None:  # only when some hashes collide
            csr = slab.to_csr()
        vector = np.zeros(slab.n_columns, np.float32)
        start, end = csr.indptr[rep], csr.indptr[rep + 1]
        vector[csr.indices[start:end]] = csr.data[start:end]
        return equal_rows(csr.indptr, csr.indices, csr.data, candidates, vector,
                          int(np.count_nonzero(vector)))

    live = np.flatnonzero(count > 0)
    _, merges = duplicates(hashes[live], lambda i, c: same(live[i], live[c]))
    for rep, merged in merges:
        labels[live[merged]] = labels[live[rep]]
    return labels


def identical_rows(labelled: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[int, np.ndarray]]:
    """The groups of identical rows, from every part's ``(rows, labels)``.

    Rows that every part labels alike are identical; each group's representative is its
    smallest row id. Every part computes the same list from the same labels (in any
    order of parts). Returns ``(representative, other rows)`` pairs.
    """
    rows = np.unique(np.concatenate([r for r, _ in labelled])) if labelled else []
    if len(rows) < 2:
        return []
    key = np.full((len(rows), len(labelled)), -1, np.int64)
    for i, (r, lab) in enumerate(labelled):
        key[np.searchsorted(rows, r), i] = lab
    _, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    sizes = np.bincount(inverse)
    merges = []
    for g in np.flatnonzero(sizes > 1):
        members = rows[inverse == g]  # sorted: the first is the smallest id
        merges.append((int(members[0]), members[1:]))
    return merges


def drop_rows(slab: Slab, drop: np.ndarray) -> Slab:
    """``slab`` without the rows whose ids are in ``drop`` (sorted ids), trace kept."""
    if len(drop) == 0:
        return slab
    keep = ~np.isin(slab.rows, drop, assume_unique=True)
    if keep.all():
        return slab
    rows = slab.rows[keep]
    if slab.tile is not None:
        tile = np.ascontiguousarray(slab.tile[:, keep])
        return Slab(rows, tile=tile, trace=slab.trace)
    csr = slab.to_csr()[keep]
    starts, indices, data, bounds = csr_to_blocks(csr.indptr.astype(np.int64), csr.indices,
                                                  csr.data, slab.n_columns, BLOCK_ROWS)
    return Slab(rows, blocks=BlockCSC(indices, data, starts, bounds), trace=slab.trace)


@dataclass
class PartRows:
    """One part's view of its row group's identical rows (the same on every part).

    Attributes
    ----------
    n_rows
        Rows of the group.
    groups
        Which rows each representative stands for.
    weights
        Row id -> rows it stands for (0 for a row merged into another).
    distinct
        Distinct live rows at the last look (``None`` before the first).
    dropped
        The row ids the last look merged away, sorted.
    """

    n_rows: int
    groups: Groups = field(default_factory=Groups)
    weights: np.ndarray = field(init=False)
    distinct: int | None = None
    dropped: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __post_init__(self) -> None:
        self.weights = np.ones(self.n_rows, np.int64)

    def due(self, layer: int, n_layers: int) -> bool:
        """Whether the parts look after ``layer`` (1-based): :func:`look_due`, and no more
        once a look left a single distinct row."""
        return self.distinct != 1 and look_due(layer, n_layers)

    def merge(self, merges: list[tuple[int, np.ndarray]], live: int) -> np.ndarray:
        """Record ``merges`` (from :func:`identical_rows`, ``live`` rows looked at); the row ids
        dropped, sorted."""
        dropped = [others for _, others in merges]
        for rep, others in merges:
            self.groups.merge(rep, others)
            self.weights[rep] += int(self.weights[others].sum())
            self.weights[others] = 0
        self.distinct = live - sum(len(d) for d in dropped)
        return np.sort(np.concatenate(dropped)) if dropped else np.empty(0, np.int64)

    def agree(self, labelled: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """Merge what every part's ``(rows, labels)`` (:func:`label_rows`) agree on; the
        row ids merged away, sorted, for :func:`drop_rows`."""
        live = len(np.unique(np.concatenate([r for r, _ in labelled]))) if labelled else 0
        self.dropped = self.merge(identical_rows(labelled), live)
        return self.dropped


def agreed(shared: PartRows, *labelled: tuple[np.ndarray, np.ndarray]) -> PartRows:
    """A copy of ``shared`` after a look on ``labelled`` (:meth:`PartRows.agree`): the
    graph transport's task, whose input stays as it was."""
    new = copy.deepcopy(shared)
    new.agree(list(labelled))
    return new


def labelled_rows(slab: Slab) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, labels)`` of ``slab``, what a part tells the others at a look."""
    return slab.rows, label_rows(slab)


def dedup_enabled(dedup: bool | None = None) -> bool:
    """``dedup``, or ``sdnn.kernel.dedup`` when it is ``None``."""
    return bool(config.get("kernel.dedup", True) if dedup is None else dedup)
