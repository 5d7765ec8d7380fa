"""The work of the serial kernel on one block: its chunk schedule replayed, in the units of
the kernel and block terms.

Exact from per-row counts (:func:`kernel_schedule`), or estimated from a block's per-level
totals (:func:`kernel_estimate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.kernels import ROW_TILE, KernelSettings
from ..core.kernels.schedule import ChunkSchedule
from .terms import BLOCK_TERMS, K

__all__ = ["kernel_estimate", "kernel_schedule"]


@dataclass
class _Rows:
    """A chunk of the replay: its live rows' ids, the level they are at, its form."""

    live: np.ndarray
    level: int = 0
    dense: bool = False


class _Replay:
    """The kernel's chunk actions (:class:`~sdnn_dask.core.kernels.schedule.ChunkActions`)
    on row ids, counting, in the units of :data:`KERNEL_TERMS` and :data:`BLOCK_TERMS`,
    the work each would do; :class:`ChunkSchedule` decides which happen."""

    def __init__(self, counts: np.ndarray, levels: np.ndarray, schedule: ChunkSchedule,
                 weights: float):
        n_layers = len(levels) - 1
        self.counts, self.levels, self.schedule = counts, levels, schedule
        self.n, self.weights = schedule.n_neurons, weights
        self.work = np.zeros((n_layers, K))
        self.block = np.zeros(K + len(BLOCK_TERMS))
        self.modes: list[set[str]] = [set() for _ in range(n_layers)]
        self.repacked = 0.0  # rows copied by repacks of dense tiles
        self.repacks = 0  # repacks so far (a layer that repacked changed its chunks)

    def nnz(self, chunk: _Rows) -> float:
        """Nonzeros of the chunk's live rows."""
        return float(self.counts[self.levels[chunk.level], chunk.live].sum())

    def advance(self, chunk: _Rows, k: int) -> None:
        """Count layer ``k``'s step of ``chunk`` and drop the rows that die."""
        rows, n = len(chunk.live), self.n
        if not rows:
            return
        nnz = self.nnz(chunk)
        dense = self.schedule.dense_due(nnz, rows)
        w = self.work[k]
        if dense:
            if not chunk.dense:  # sparse rows made into a tile
                w[6] += n * rows
            w[0] += self.weights * n * rows
            w[1] += self.weights * n * -(-rows // ROW_TILE)
            w[2] += 1
            self.modes[k].add("dense")
        else:
            if chunk.dense:  # a tile made into sparse rows
                w[7] += n * rows
                w[8] += nnz
                w[9] += 1
            w[3] += self.weights * nnz
            w[4] += n * rows
            w[5] += 1
            self.modes[k].add("sparse")
        chunk.dense = dense
        chunk.level = k + 1
        chunk.live = chunk.live[self.counts[self.levels[k + 1], chunk.live] > 0]
        if not len(chunk.live):
            chunk.dense = False

    def repack(self, chunks: list[_Rows]) -> list[_Rows]:
        """Full chunks of ``chunks``' rows, dense if any was (as :meth:`Chunk.repack`)."""
        self.repacks += 1
        chunks = sorted(chunks, key=lambda c: c.live[0])
        rows = np.concatenate([c.live for c in chunks])
        dense = any(c.dense for c in chunks)
        if dense:
            self.repacked += len(rows)
        cr, level = self.schedule.chunk_rows, chunks[0].level
        return [_Rows(rows[s: s + cr], level, dense) for s in self.schedule.starts(len(rows))]

    def drop(self, chunk: _Rows) -> None:
        """A chunk whose rows all died: nothing to do."""

    def set_aside(self, chunk: _Rows) -> None:
        """A part-empty tile left by the depth-first runs is made sparse, outside any
        layer: the block's ``to_sparse`` terms."""
        if chunk.dense:
            self.block[7] += self.n * len(chunk.live)
            self.block[8] += self.nnz(chunk)
            self.block[9] += 1
            chunk.dense = False


def kernel_schedule(counts: np.ndarray, levels: np.ndarray, n: int,
                    settings: KernelSettings, weights: float
                    ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Replay :func:`~sdnn_dask.core.kernels.forward_block`'s chunk schedule on per-row counts
    (``counts[levels[k]]`` are level ``k``'s).

    The kernel's own :class:`~sdnn_dask.core.kernels.schedule.ChunkSchedule` walks
    chunks of row ids (depth-first runs, repacks, dense or sparse steps), so the work
    counted is the work the kernel does with every live row stepped (``settings.dedup``
    is not replayed). Returns the per-layer regressors (``layers x``
    :data:`KERNEL_TERMS`, in their units), the block's regressors (:data:`KERNEL_TERMS`
    for the tiles made sparse outside the layers, then :data:`BLOCK_TERMS`) and each
    layer's mode as the trace names it (``dense``, ``sparse``, ``mixed`` or ``none``).
    Once the levels repeat (an extended profile) and a layer changed nothing, the
    remaining layers are copies of it.
    """
    n_layers = len(levels) - 1
    schedule = settings.schedule(n, n_layers)
    replay = _Replay(counts, levels, schedule, weights)
    work, modes = replay.work, replay.modes
    live = np.flatnonzero(counts[levels[0]]).astype(np.int64)
    cr = schedule.chunk_rows
    early, joining = schedule.depth_first(
        [_Rows(live[s: s + cr]) for s in schedule.starts(len(live))], replay)
    chunks: list[_Rows] = []
    quiet = False  # the previous layer changed no chunk (no form change, no repack)
    for k in range(early, n_layers):
        if (quiet and k > early and levels[k] == levels[k - 1] == levels[k + 1]
                and levels[k + 1] == levels[-1]):
            work[k:] = work[k - 1]  # the same level in and out from here on
            for j in range(k, n_layers):
                modes[j] = set(modes[k - 1])
            break
        repacks = replay.repacks
        chunks = schedule.layer(chunks, k, replay, joining)
        joining = []
        quiet = work[k, 6] == 0 and work[k, 7] == 0 and replay.repacks == repacks
    chunks += joining  # a block that ran every layer depth first
    block = replay.block
    last = levels[-1]
    for c in chunks:  # the last tiles are made sparse for the output
        if c.dense:
            block[7] += n * len(c.live)
            block[8] += float(counts[last, c.live].sum())
            block[9] += 1
    block[K:] = [1.0, counts.shape[1], n * replay.repacked]
    names = ["none" if not m else next(iter(m)) if len(m) == 1 else "mixed" for m in modes]
    return work, block, names


def kernel_estimate(live: np.ndarray, nnz: np.ndarray, n: int, settings: KernelSettings,
                    weights: float, modes: Sequence[str] | None = None, *,
                    distinct: np.ndarray | None = None, class_share: float = 1.0
                    ) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """The regressors of :func:`kernel_schedule` estimated from a block's per-level live
    rows and nonzeros (no per-row counts).

    Chunk counts follow the kernel's rules applied to the level totals (depth-first
    chunks until a quarter of the rows are left, then full chunks, repacked when half
    empty); a layer's mode is ``modes[k]`` when given (records), else the density rule
    applied to the level's mean chunk, and every chunk of a layer is taken to change form
    when the mode changes. Returns also, per layer, whether the estimate is good enough to
    fit on (``False``: a ``mixed`` layer, or one after it, where the form of each chunk
    is unknown).

    ``distinct`` (per level, where identical rows are computed once: ``sdnn.kernel.
    dedup``) are the rows each layer actually steps, with their share of the level's
    nonzeros; default every live row. ``class_share`` is the share of a layer's output
    neurons computed where equal columns are computed once (``sdnn.kernel.classes``;
    RadiX-Net: 1/16, :data:`~sdnn_dask.projection.terms.CLASS_SHARE`): a dense step then
    does ``weights x class_share x N`` multiply-adds a row on a tile that many columns
    wide, the first layer scatters each input nonzero into ``weights x class_share``
    classes (``class_edge``, and the tile it fills as ``to_dense``), and every later
    layer steps dense (the kernel's class step on anything but
    sparse rows over neurons), unless ``modes`` says otherwise.
    """
    n_layers = len(live) - 1
    schedule = settings.schedule(n, n_layers)  # the kernel's rules, on the level totals
    cr = schedule.chunk_rows
    classes = class_share < 1.0
    width = n * class_share  # columns of a tile: neurons, or classes
    w_layer = weights * width
    live = np.asarray(live, float)
    nnz = np.asarray(nnz, float)
    if distinct is not None:  # the rows stepped, and their nonzeros
        rows_of = np.minimum(np.asarray(distinct, float), live)
        nnz = nnz * np.divide(rows_of, live, out=np.ones_like(live), where=live > 0)
    else:
        rows_of = live
    work = np.zeros((n_layers, K))
    usable = np.ones(n_layers, bool)
    names: list[str] = []
    block = np.zeros(K + len(BLOCK_TERMS))
    rows0 = float(live[0])
    if rows0 <= 0:
        block[K] = 1.0
        return work, block, ["none"] * n_layers, usable
    repacked = 0.0
    first = min(cr, rows0)
    early = 0
    while early < n_layers and schedule.keeps_alone(first * live[early] / rows0):
        early += 1
    chunks = schedule.needed(rows0)
    previous = "sparse"  # the inputs arrive as sparse rows
    for k in range(n_layers):
        rows = float(rows_of[k])
        if k == early and rows:
            if previous == "dense":
                repacked += rows
            chunks = schedule.needed(rows)
        elif k > early:
            chunks = min(chunks, math.ceil(rows))
            if schedule.repack_due(chunks, rows):
                if previous == "dense":
                    repacked += rows
                chunks = schedule.needed(rows)
        if rows <= 0 or chunks <= 0:
            names.append("none")
            continue
        per_chunk = rows / chunks
        if modes is not None:
            mode = modes[k]
        elif classes:
            mode = "sparse" if k == 0 else "dense"
        else:
            mode = "dense" if schedule.dense_due(nnz[k], rows, per_chunk) else "sparse"
        names.append(mode)
        if mode == "mixed" or (k and modes is not None and modes[k - 1] == "mixed"):
            usable[k] = False
        w = work[k]
        if mode in ("dense", "mixed"):
            w[0] = w_layer * rows
            w[1] = w_layer * chunks * math.ceil(per_chunk / ROW_TILE)
            w[2] = chunks
            if previous != "dense":
                w[6] = width * rows
        elif classes and previous == "sparse":
            # the class step on sparse rows over neurons scatters them straight into a
            # tile over the classes: its own cost per edge, and the tile it fills
            w[10] = weights * class_share * nnz[k]
            w[6] = width * rows
            w[5] = chunks
        else:
            w[3] = weights * nnz[k]
            w[4] = width * rows
            w[5] = chunks
            if previous == "dense":
                w[7], w[8], w[9] = width * rows, nnz[k], chunks
        # the class step's scatter writes a tile over the classes: dense from there on
        previous = "dense" if mode == "mixed" or (classes and mode == "sparse") else mode
    last = float(rows_of[-1])
    # a tile over neurons is made sparse rows at the end; one over classes is expanded
    # back to neurons row by row, priced by the block's own terms
    if previous == "dense" and last > 0 and not classes:
        block[7], block[8] = width * last, float(nnz[-1])
        block[9] = schedule.needed(last)
    block[K:] = [1.0, rows0, width * repacked]
    return work, block, names, usable
