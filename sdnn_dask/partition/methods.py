"""Neuron partitions by name: ``block``, ``hash``, ``random`` or ``hypergraph``.

The one place a method name becomes a :class:`~.neurons.NeuronPartition`; the
partition type and its communication volume live in :mod:`~.neurons`, the hypergraph
partitioner in :mod:`~.hypergraph` (both below this module).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from ..registry import NEURON_PARTITIONS
from .hashing import bucket_hash
from .hypergraph import TrafficSettings, hypergraph_partition
from .neurons import NeuronPartition, blocks_of

if TYPE_CHECKING:
    from ..core.network import Network


def make_neuron_partition(
    network: Network,
    k: int,
    method: str = "block",
    *,
    seed: int = 0,
    nbuckets: int = 1,
    epsilon: float = 0.03,
    cache: bool | str | os.PathLike | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    inputs: sp.spmatrix | sp.sparray | None = None,
    traffic: TrafficSettings | None = None,
) -> NeuronPartition:
    """Build a neuron partition of ``network`` into ``k`` parts by name.

    Parameters
    ----------
    network
        The network whose neurons (every level ``0..L``) are partitioned.
    k
        Number of parts (workers); parts are empty only when ``k > N``.
    method
        ``"block"``, ``"hash"``, ``"random"`` or ``"hypergraph"``.
    seed
        For ``"random"`` and ``"hypergraph"``.
    nbuckets
        For ``"hash"``: ``P = 128 * nbuckets``.
    epsilon
        For ``"hypergraph"``: allowed work imbalance per layer, ``max <= (1 + eps) mean``.
    cache
        For ``"hypergraph"`` (the others take milliseconds): a folder, or ``True`` for
        ``cache_dir() / "partitions"``; see :func:`~.hypergraph.hypergraph_partition`.
    progress
        For ``"hypergraph"``: called as ``progress(stage, done, total)`` (see
        :func:`~.hypergraph.hypergraph_partition`).
    inputs, traffic
        For ``"hypergraph"``: the input rows whose traffic weighs the partition, and how
        it is estimated (:func:`~.hypergraph.hypergraph_partition`); without ``inputs``
        every layer is partitioned with uniform weights.

    Examples
    --------
    >>> from sdnn_dask.data.radixnet import make_network
    >>> net = make_network(1024, 2)
    >>> part = make_neuron_partition(net, 4, "block")
    >>> part.volume(net)["km1"].tolist()  # every input feeds every block
    [3072, 3072]
    >>> make_neuron_partition(net, 4, "hash").parts[0, :6].tolist()  # v mod 128 picks the block
    [0, 0, 0, 0, 0, 0]
    """
    if method not in NEURON_PARTITIONS:
        raise ValueError(f"unknown neuron partition {method!r}; choose one of {NEURON_PARTITIONS}")
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    k = int(k)
    if method == "hypergraph":
        return hypergraph_partition(network, k, epsilon=epsilon, seed=seed, cache=cache,
                                    progress=progress, inputs=inputs, traffic=traffic)

    start = time.perf_counter()
    n, levels = network.n_neurons, network.n_layers + 1
    ids = np.arange(n, dtype=np.int64)
    if method == "block":
        positions, params = ids, {}
    elif method == "hash":
        positions, params = bucket_hash(ids, n, nbuckets), {"nbuckets": nbuckets}
    else:
        # one permutation for every level, as layer hashing uses one mapping: hash and
        # random then differ only in the relabeling, and neuron j keeps its owner across
        # levels like block and hash
        order = np.random.default_rng(seed).permutation(n)
        positions = np.empty(n, dtype=np.int64)
        positions[order] = ids
        params = {"seed": seed}
    row = blocks_of(positions, n, k)
    parts = np.broadcast_to(row, (levels, n))
    return NeuronPartition(method=method, k=k, parts=parts, params=params,
                           seconds=time.perf_counter() - start)
