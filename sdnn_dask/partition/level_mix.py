"""The cheapest mix of candidate partitions, level by level, for a traffic-weighted objective.

Partitioning layer by layer is myopic: layer ``l``'s parts are chosen for layer ``l``'s
traffic with level ``l - 1`` fixed, blind to what they do to layer ``l + 1``, where they
are the owners. On RadiX-Net's first block of layers (no row permutation) layer hashing is
*exactly* aligned with every layer whose shift is a multiple of its bucket count, and moves
nothing there, while the layer-by-layer partition, aligned with the layers before, moves
a third of the run's bytes in those layers (65536-30 x 60000 rows at k = 2: 940 of 2498
MB, forecast). Any level may take any balanced partition, so :meth:`LevelMix.choose` chooses,
for every level, one of a few candidates (the layer-by-layer hypergraph's level, layer
hashing, contiguous blocks) by dynamic programming over the levels: the cost of layer
``l`` with its owners from one candidate and its columns from another is the traffic of
the nets it cuts, ``sum_i t_i (lambda_i - 1)``, exactly what the partition minimises.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .hashing import bucket_hash
from .neurons import blocks_of, connectivity

#: The candidates besides the layer-by-layer hypergraph, each one row for every level:
#: layer hashing, contiguous blocks, and the residues of the neuron id modulo 8 and 32 in
#: contiguous blocks (aligned with more of RadiX-Net's shifts than hashing's 128 buckets,
#: so the switch from the hypergraph can fall on a lighter layer).
FIXED_CANDIDATES = ("hash", "block", "residue-8", "residue-32")


def fixed_rows(n_neurons: int, k: int) -> dict[str, np.ndarray]:
    """The part of every neuron in each of :data:`FIXED_CANDIDATES` (the same at every
    level); a residue candidate with fewer residues than parts, or no fewer than the
    neurons, is left out."""
    ids = np.arange(n_neurons, dtype=np.int64)
    rows = {"hash": blocks_of(bucket_hash(ids, n_neurons, 1), n_neurons, k),
            "block": blocks_of(ids, n_neurons, k)}
    for residues in (8, 32):
        if k <= residues < n_neurons and n_neurons % residues == 0:
            position = (ids % residues) * (n_neurons // residues) + ids // residues
            rows[f"residue-{residues}"] = blocks_of(position, n_neurons, k)
    return rows


def cut_traffic(w: sp.csr_matrix, owners: np.ndarray, columns: np.ndarray, k: int,
                traffic: np.ndarray) -> float:
    """``sum_i traffic[i] * (lambda_i - 1)``: the traffic of layer ``w``'s nets (one per
    row, holding its owner and the columns it feeds) that crosses parts."""
    c = connectivity(w, columns, k, owners)
    return float((np.diff(c.indptr) - 1) @ traffic)


@dataclass
class LevelMix:
    """Costs of every pair of candidates per layer, then the cheapest path through them.

    Add the layers in order with :meth:`add_layer` (1-based, from 1), then :meth:`choose`.
    """

    names: tuple[str, ...]

    def __post_init__(self) -> None:
        self.costs: list[np.ndarray] = []  # per layer: [owners' candidate, columns' one]

    def add_layer(self, w: sp.csr_matrix, owners: list[np.ndarray], columns: list[np.ndarray],
                  k: int, traffic: np.ndarray | None, allowed: list[bool] | None = None
                  ) -> None:
        """Layer ``len(costs) + 1``: ``owners[a]`` and ``columns[b]`` are candidate ``a``'s
        and ``b``'s parts of its input and output levels; ``traffic`` its net weights
        (``None``: a layer that carries the previous level forward, where every candidate
        keeps its own parts and costs nothing); ``allowed[b]`` whether candidate ``b``'s
        columns are balanced enough for this layer (default: all are)."""
        m = len(self.names)
        if traffic is None:
            cost = np.full((m, m), np.inf)
            np.fill_diagonal(cost, 0.0)
        else:
            cost = np.array([[cut_traffic(w, owners[a], columns[b], k, traffic)
                              if allowed is None or allowed[b] else np.inf
                              for b in range(m)] for a in range(m)])
        self.costs.append(cost)

    def choose(self) -> tuple[list[int], float]:
        """The candidate of every level ``0..L`` on the cheapest path, and its cost."""
        m = len(self.names)
        best = np.zeros(m)
        back: list[np.ndarray] = []
        for cost in self.costs:
            total = best[:, None] + cost  # [from, to]
            back.append(np.argmin(total, axis=0))
            best = total.min(axis=0)
        state = int(np.argmin(best))
        path = [state]
        for pointers in reversed(back):
            state = int(pointers[state])
            path.append(state)
        return path[::-1], float(best.min())

    def cost_of(self, path: list[int]) -> float:
        """The cost of a path (one candidate per level)."""
        return float(sum(cost[a, b] for cost, a, b in zip(self.costs, path, path[1:],
                                                          strict=False)))


def describe(names: tuple[str, ...], path: list[int]) -> str:
    """``"hypergraph 0-7, hash 8-24"``: which candidate each run of levels took."""
    runs: list[list] = []
    for level, state in enumerate(path):
        if runs and runs[-1][0] == state:
            runs[-1][2] = level
        else:
            runs.append([state, level, level])
    return ", ".join(f"{names[s]} {a}" + (f"-{b}" if b > a else "") for s, a, b in runs)
