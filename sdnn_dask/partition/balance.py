"""Balance metrics: how evenly work lands on blocks or workers."""

from __future__ import annotations

import numpy as np

from .rows import RowPartition


def imbalance(loads: np.ndarray | list[float]) -> float:
    """``max / mean`` of per-part loads: 1.0 is perfect balance; ``nan`` without load.

    Examples
    --------
    >>> imbalance([2, 2, 2]), imbalance([4, 1, 1])
    (1.0, 2.0)
    """
    loads = np.asarray(loads, dtype=np.float64)
    if loads.size == 0 or not loads.mean() > 0:
        return float("nan")
    return float(loads.max() / loads.mean())


def survivors_per_block(partition: RowPartition, categories: np.ndarray) -> np.ndarray:
    """How many of the surviving rows (``categories``, 0-based) each block holds."""
    owner = partition.block_of()
    return np.bincount(owner[np.asarray(categories, dtype=np.int64)],
                       minlength=partition.n_blocks)
