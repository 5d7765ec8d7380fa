"""Partitions of the work: rows (data parallelism); neurons come with model parallelism."""

from .balance import imbalance, survivors_per_block
from .hashing import bucket_hash, bucket_unhash
from .rows import ROW_PARTITIONS, RowPartition, even_bounds, make_row_partition

__all__ = [
    "ROW_PARTITIONS",
    "RowPartition",
    "bucket_hash",
    "bucket_unhash",
    "even_bounds",
    "imbalance",
    "make_row_partition",
    "survivors_per_block",
]
