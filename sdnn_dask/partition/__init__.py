"""Partitions of the work: rows (data parallelism) and neurons (model parallelism)."""

from .balance import imbalance, survivors_per_block
from .hashing import bucket_hash, bucket_unhash
from .hypergraph import (
    PartitionCacheWarning,
    TrafficSettings,
    hypergraph_partition,
    partition_columns,
)
from .methods import NEURON_PARTITIONS, make_neuron_partition
from .neurons import NeuronPartition, column_net_km1
from .rows import ROW_PARTITIONS, RowPartition, even_bounds, make_row_partition
from .traffic import SampledForward, TrafficProfile

__all__ = [
    "NEURON_PARTITIONS",
    "ROW_PARTITIONS",
    "NeuronPartition",
    "PartitionCacheWarning",
    "RowPartition",
    "SampledForward",
    "TrafficProfile",
    "TrafficSettings",
    "bucket_hash",
    "bucket_unhash",
    "column_net_km1",
    "even_bounds",
    "hypergraph_partition",
    "imbalance",
    "make_neuron_partition",
    "make_row_partition",
    "partition_columns",
    "survivors_per_block",
]
