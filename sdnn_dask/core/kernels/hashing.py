"""The 64-bit hash the kernels group equal things by: rows (:mod:`.dedup`), columns of W
and rows of W^T (:mod:`.classes`). Only a grouping: whatever a hash groups is compared
value by value before anything is merged, so a collision costs time, never a result."""

from __future__ import annotations

import numba
import numpy as np

#: The starting value of a hash (FNV-1a's offset basis).
SEED = np.uint64(0xCBF29CE484222325)


@numba.njit(nogil=True, cache=True)
def mix(h, x):  # pragma: no cover - compiled
    """``h`` with the 64-bit value ``x`` mixed in (FNV-1a's step, then a shift-xor)."""
    h ^= x
    h *= np.uint64(0x100000001B3)
    h ^= h >> np.uint64(29)
    return h
