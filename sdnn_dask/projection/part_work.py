"""The work of one model-parallel part: its layer step in the units of the terms, the bytes
of the pieces it sends, and where the executor places the parts.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.kernels import ROW_TILE, SETUP_ROWS, KernelSettings
from ..parallel.placement import slot_index
from .terms import PART_TERMS, K

__all__ = ["part_chunk_rows", "part_slots", "part_work", "parts_per_core", "payload"]


def part_chunk_rows(n_in: float, n_out: float, settings: KernelSettings) -> int:
    """Rows of a dense part step's chunk (whole 256-row tiles once it holds one)."""
    rows = max(1, int(settings.min_chunk_rows),
               int(settings.chunk_bytes) // (4 * int(max(n_in, n_out))))
    if rows >= ROW_TILE:
        rows -= rows % ROW_TILE
    return rows


def part_work(rows: float, nnz_read: float, nnz_out: float, n_in: float, n_out: float,
              weights: float, settings: KernelSettings, mode: str | None = None,
              class_share: float = 1.0) -> tuple[np.ndarray, np.ndarray, str]:
    """Kernel and part regressors of one part's layer step (:data:`KERNEL_TERMS`,
    :data:`PART_TERMS`); ``weights`` per input row of the part's slice of the layer;
    ``rows`` the rows it computes (distinct ones, where identical rows are computed
    once). With ``class_share`` < 1 (``sdnn.kernel.classes``) a dense step computes that
    share of its outputs, one per class, and copies the rest (the copy is in the part's
    per-entry output term)."""
    k_work = np.zeros(K)
    p_work = np.zeros(len(PART_TERMS))
    if rows <= 0 or n_out <= 0:
        p_work[2] = 1.0
        return k_work, p_work, "none"
    if mode is None:
        dense = nnz_read >= settings.dense_threshold * (1.0 + SETUP_ROWS / rows) * n_in * rows
        mode = "dense" if dense else "sparse"
    w_part = weights * n_in  # nonzeros of W[needed, own]
    if mode == "dense":
        cr = part_chunk_rows(n_in, n_out, settings)
        full, rest = divmod(rows, cr)
        tiles = full * math.ceil(cr / ROW_TILE) + (math.ceil(rest / ROW_TILE) if rest else 0)
        k_work[0] = w_part * class_share * rows
        k_work[1] = w_part * class_share * tiles
        p_work[0] = 2.0 * n_out * rows  # the own columns: copied row-aligned; the output
        p_work[3] = max(0.0, n_in - n_out) * rows  # the pieces: zeroed, then scattered
    else:
        k_work[3] = weights * nnz_read
        k_work[4] = n_out * rows
        p_work[1] = nnz_read + nnz_out
    p_work[2] = 1.0
    return k_work, p_work, mode


def payload(rows: float, nnz: float, columns: float, block_rows: int = 256) -> float:
    """Bytes of a slab of ``rows x columns`` holding ``nnz`` nonzeros (:class:`~sdnn_dask.
    slabs.Slab`): row ids, then a tile (4 bytes an entry) when at least half the entries
    are nonzero, else block CSC (8 bytes a nonzero, 8 per column and block of
    ``block_rows`` rows: 256, or the dense step's chunk when a dense step made it)."""
    if rows <= 0:
        return 0.0
    if 2 * nnz >= rows * columns:
        return 8.0 * rows + 4.0 * rows * columns
    blocks = math.ceil(rows / block_rows)
    return 8.0 * rows + 8.0 * nnz + 8.0 * blocks * (columns + 1) + 8.0 * (blocks + 1)


def part_slots(row_groups: int, parts: int, workers: int) -> np.ndarray:
    """Worker of every (group, part), as the executor places them."""
    g, p = np.meshgrid(np.arange(row_groups), np.arange(parts), indexing="ij")
    return slot_index(g, p, parts, workers)


def parts_per_core(row_groups: int, parts: int, workers: int) -> int:
    """Parts sharing the busiest worker (single-threaded workers: one core each)."""
    return int(np.bincount(part_slots(row_groups, parts, workers).ravel(),
                           minlength=workers).max())
