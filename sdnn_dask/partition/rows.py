"""Row partitions for data parallelism: which input rows each block gets.

A partition is a permutation of the rows followed by a split of the permuted sequence into
``B`` contiguous, near-equal blocks. ``order[p]`` is the original row at permuted position
``p``; results are put back into the original order through it, so a partition never
changes a result, only where the work runs.

* ``block``: the identity, contiguous row ranges.
* ``hash``: the bucket hash of Mofrad et al.; row ``v`` goes to position ``h(v)``.
* ``random``: a seeded random permutation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..registry import ROW_PARTITIONS
from .hashing import bucket_unhash


@dataclass(frozen=True, eq=False)
class RowPartition:
    """Rows split into blocks.

    Attributes
    ----------
    name
        ``"block"``, ``"hash"`` or ``"random"``.
    order
        ``order[p]`` is the original row at permuted position ``p``.
    bounds
        Block ``b`` is positions ``bounds[b]:bounds[b+1]`` of the permuted sequence.

    Examples
    --------
    >>> part = make_row_partition("block", n_rows=5, n_blocks=2)
    >>> [b.tolist() for b in part.blocks()]
    [[0, 1, 2], [3, 4]]
    """

    name: str
    order: np.ndarray
    bounds: np.ndarray

    @property
    def n_rows(self) -> int:
        """Rows partitioned."""
        return len(self.order)

    @property
    def n_blocks(self) -> int:
        """Blocks (some may be empty when there are more blocks than rows)."""
        return len(self.bounds) - 1

    def block(self, b: int) -> np.ndarray:
        """Original row ids of block ``b``, in permuted order."""
        return self.order[self.bounds[b] : self.bounds[b + 1]]

    def blocks(self) -> list[np.ndarray]:
        """Original row ids of every block."""
        return [self.block(b) for b in range(self.n_blocks)]

    def inverse(self) -> np.ndarray:
        """``position[v]``: the permuted position of original row ``v``."""
        position = np.empty_like(self.order)
        position[self.order] = np.arange(self.n_rows, dtype=self.order.dtype)
        return position

    def block_of(self) -> np.ndarray:
        """``block_of[v]``: the block holding original row ``v``."""
        owner = np.empty(self.n_rows, dtype=np.int64)
        for b in range(self.n_blocks):
            owner[self.block(b)] = b
        return owner


def even_bounds(n_items: int, n_blocks: int) -> np.ndarray:
    """Boundaries of ``n_blocks`` contiguous near-equal blocks (sizes differ by at most 1)."""
    if n_blocks < 1:
        raise ValueError(f"the number of blocks must be >= 1, got {n_blocks}")
    sizes = np.full(n_blocks, n_items // n_blocks, dtype=np.int64)
    sizes[: n_items % n_blocks] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def _block_order(n_rows: int, seed: int, nbuckets: int) -> np.ndarray:
    return np.arange(n_rows, dtype=np.int64)


def _hash_order(n_rows: int, seed: int, nbuckets: int) -> np.ndarray:
    # position h(v) holds row v, so the row at position p is h^-1(p)
    return bucket_unhash(np.arange(n_rows, dtype=np.int64), n_rows, nbuckets)


def _random_order(n_rows: int, seed: int, nbuckets: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n_rows).astype(np.int64)


_ORDERS: dict[str, Callable[[int, int, int], np.ndarray]] = {
    "block": _block_order,
    "hash": _hash_order,
    "random": _random_order,
}


def make_row_partition(
    name: str, n_rows: int, n_blocks: int, *, seed: int = 0, nbuckets: int = 1
) -> RowPartition:
    """Build a row partition by name.

    Parameters
    ----------
    name
        ``"block"``, ``"hash"`` or ``"random"``.
    n_rows
        Rows to split.
    n_blocks
        Blocks to split into (may exceed ``n_rows``: the extra blocks are empty).
    seed
        For ``"random"``.
    nbuckets
        For ``"hash"``: ``P = 128 * nbuckets``.
    """
    if name not in _ORDERS:
        raise ValueError(f"unknown row partition {name!r}; choose one of {ROW_PARTITIONS}")
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    order = _ORDERS[name](n_rows, seed, nbuckets)
    return RowPartition(name=name, order=order, bounds=even_bounds(n_rows, n_blocks))
