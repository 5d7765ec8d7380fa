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

from ..core.kernels import ROW_TILE, SETUP_ROWS, KernelSettings
from .terms import BLOCK_TERMS, K

__all__ = ["kernel_estimate", "kernel_schedule"]


@dataclass
class _Chunk:
    live: np.ndarray
    dense: bool = False


def kernel_schedule(counts: np.ndarray, levels: np.ndarray, n: int,
                    settings: KernelSettings, weights: float
                    ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Replay :func:`~sdnn_dask.core.kernels.forward_block`'s chunk schedule on per-row counts
    (``counts[levels[k]]`` are level ``k``'s).

    Returns the per-layer regressors (``layers x`` :data:`KERNEL_TERMS`, in their
    units), the block's regressors (:data:`KERNEL_TERMS` for the last tiles made sparse,
    then :data:`BLOCK_TERMS`) and each layer's mode as the trace names it (``dense``,
    ``sparse``, ``mixed`` or ``none``). Once the levels repeat (an extended profile) and
    a layer changed nothing, the remaining layers are copies of it.
    """
    n_layers = len(levels) - 1
    cr = settings.chunk_rows(n)
    thr = float(settings.dense_threshold)
    w_layer = weights * n
    work = np.zeros((n_layers, K))
    modes: list[set[str]] = [set() for _ in range(n_layers)]
    repacked = 0.0
    live = np.flatnonzero(counts[levels[0]]).astype(np.int64)
    chunks = [_Chunk(live[s: s + cr]) for s in range(0, len(live), cr)]

    def advance(chunk: _Chunk, k: int) -> None:
        rows = len(chunk.live)
        if not rows:
            return
        nnz = float(counts[levels[k], chunk.live].sum())
        dense = nnz >= thr * (1.0 + SETUP_ROWS / rows) * n * rows
        w = work[k]
        if dense:
            if not chunk.dense:
                w[6] += n * rows
            w[0] += w_layer * rows
            w[1] += w_layer * -(-rows // ROW_TILE)
            w[2] += 1
            modes[k].add("dense")
        else:
            if chunk.dense:
                w[7] += n * rows
                w[8] += nnz
                w[9] += 1
            w[3] += weights * nnz
            w[4] += n * rows
            w[5] += 1
            modes[k].add("sparse")
        chunk.dense = dense
        chunk.live = chunk.live[counts[levels[k + 1], chunk.live] > 0]
        if not len(chunk.live):
            chunk.dense = False

    def repack(group: list[_Chunk]) -> list[_Chunk]:
        nonlocal repacked
        rows = np.concatenate([c.live for c in group])
        dense = any(c.dense for c in group)
        if dense:
            repacked += len(rows)
        return [_Chunk(rows[s: s + cr], dense) for s in range(0, len(rows), cr)]

    early = 0
    packed: list[_Chunk] = []
    pending: list[_Chunk] = []
    for i, chunk in enumerate(chunks):
        k = 0
        while k < n_layers and (k < early if i else 4 * len(chunk.live) > cr):
            advance(chunk, k)
            k += 1
        if i == 0:
            early = k
        if len(chunk.live):
            pending.append(chunk)
        if sum(len(c.live) for c in pending) >= cr:
            *full, last = repack(pending)
            packed += full
            pending = [last] if len(last.live) < cr else []
            if not pending:
                packed.append(last)
    chunks = packed + pending
    quiet = False  # the previous layer changed no chunk (no form change, no repack)
    for k in range(early, n_layers):
        if (quiet and k > early and levels[k] == levels[k - 1] == levels[k + 1]
                and levels[k + 1] == levels[-1]):
            work[k:] = work[k - 1]  # the same level in and out from here on
            for j in range(k, n_layers):
                modes[j] = set(modes[k - 1])
            break
        for chunk in chunks:
            advance(chunk, k)
        chunks = [c for c in chunks if len(c.live)]
        live_rows = sum(len(c.live) for c in chunks)
        quiet = work[k, 6] == 0 and work[k, 7] == 0
        if len(chunks) > 1 and len(chunks) >= 2 * -(-live_rows // cr):
            chunks = repack(chunks)
            quiet = False
    block = np.zeros(K + len(BLOCK_TERMS))
    last = levels[-1]
    for c in chunks:
        if c.dense:
            block[7] += n * len(c.live)
            block[8] += float(counts[last, c.live].sum())
            block[9] += 1
    block[K:] = [1.0, counts.shape[1], n * repacked]
    names = ["none" if not m else next(iter(m)) if len(m) == 1 else "mixed" for m in modes]
    return work, block, names


def kernel_estimate(live: np.ndarray, nnz: np.ndarray, n: int, settings: KernelSettings,
                    weights: float, modes: Sequence[str] | None = None
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
    """
    n_layers = len(live) - 1
    cr = settings.chunk_rows(n)
    thr = float(settings.dense_threshold)
    w_layer = weights * n
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
    while early < n_layers and 4 * first * live[early] / rows0 > cr:
        early += 1
    chunks = math.ceil(rows0 / cr)
    previous = "sparse"  # the inputs arrive as sparse rows
    for k in range(n_layers):
        rows = float(live[k])
        if k == early and rows:
            if previous == "dense":
                repacked += rows
            chunks = math.ceil(rows / cr)
        elif k > early:
            chunks = min(chunks, math.ceil(rows))
            need = math.ceil(rows / cr)
            if chunks > 1 and chunks >= 2 * need:
                if previous == "dense":
                    repacked += rows
                chunks = need
        if rows <= 0 or chunks <= 0:
            names.append("none")
            continue
        per_chunk = rows / chunks
        if modes is not None:
            mode = modes[k]
        else:
            mode = ("dense" if nnz[k] >= thr * (1.0 + SETUP_ROWS / per_chunk) * n * rows
                    else "sparse")
        names.append(mode)
        if mode == "mixed" or (k and modes is not None and modes[k - 1] == "mixed"):
            usable[k] = False
        w = work[k]
        if mode in ("dense", "mixed"):
            w[0] = w_layer * rows
            w[1] = w_layer * chunks * math.ceil(per_chunk / ROW_TILE)
            w[2] = chunks
            if previous != "dense":
                w[6] = n * rows
        else:
            w[3] = weights * nnz[k]
            w[4] = n * rows
            w[5] = chunks
            if previous == "dense":
                w[7], w[8], w[9] = n * rows, nnz[k], chunks
        previous = "dense" if mode == "mixed" else mode
    if previous == "dense" and live[-1] > 0:
        block[7], block[8] = n * float(live[-1]), float(nnz[-1])
        block[9] = math.ceil(float(live[-1]) / cr)
    block[K:] = [1.0, rows0, n * repacked]
    return work, block, names, usable
