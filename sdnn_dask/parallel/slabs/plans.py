"""Every part's plan of a model-parallel run: its slices of the weights and the index
maps saying which columns it reads from, and sends to, every other part. Knows nothing of
Dask.

One layer on part ``p`` is::

    Y_l[:, own_p] = Y_{l-1}[:, needed_p] @ W_l[needed_p, own_p]   (+ bias, clamp)

where ``needed_p`` are the level ``l-1`` neurons feeding the columns ``p`` owns.
:func:`make_part_plans` precomputes every part's slices and index maps once per (network,
partition); :func:`piece_for` cuts, by those maps, what a part sends to other parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ... import config
from ...core.kernels.classes import copies_in_order
from ...core.network import Network, as_csr32
from ...partition.neurons import NeuronPartition
from ...partition.routing import owner_positions, route_partition
from .layout import Slab, take_columns


@dataclass
class LayerPlan:
    """What one part needs to run one layer, and to serve the next parts.

    Attributes
    ----------
    own
        Global ids of the level ``l`` neurons the part computes (sorted).
    needed
        Global ids of the level ``l-1`` neurons it reads (sorted).
    w, wt
        ``W_l[needed, own]`` and its transpose, float32 CSR.
    order
        Visiting order of the output neurons for the dense step.
    copy_of
        Per owned neuron, an owned neuron visited before it in ``order`` with the same
        column of ``W`` and bias, whose activations the dense step copies (-1: computed;
        RadiX-Net: 16 neurons to a class, about 8 of each in a part of 2); see
        :func:`~sdnn_dask.core.kernels.classes.copies_in_order`.
    bias
        Bias of the owned neurons.
    put
        Source part -> positions in ``needed`` of the columns that part provides (the
        part's own entry included).
    take
        Destination part -> positions in the part's own level ``l-1`` slab of the
        columns that destination needs in layer ``l`` (the part itself included).
    fetch
        Source part -> positions in that part's level ``l-1`` slab of the columns this
        part reads from it (``fetch[q]`` here is ``take[p]`` in part ``q``'s plan).
    """

    own: np.ndarray
    needed: np.ndarray
    w: sp.csr_matrix = field(repr=False)
    wt: sp.csr_matrix = field(repr=False)
    order: np.ndarray = field(repr=False)
    bias: np.ndarray = field(repr=False)
    put: dict[int, np.ndarray] = field(repr=False)
    take: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    fetch: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _copy_of: np.ndarray | None = field(default=None, repr=False)

    @property
    def copy_of(self) -> np.ndarray:
        """Found the first time it is asked for: only a dense step reads it, and a deep
        layer's sparse step over a few rows never does (finding one layer's classes at
        N = 65536 took longer than a deep step; model parallelism's deep layers, loaded
        from slices, were bound by it)."""
        if self._copy_of is None:
            self._copy_of = copies_in_order(self.wt, self.bias, self.order)
        return self._copy_of


@dataclass
class PartPlan:
    """Everything part ``part`` of a neuron partition holds: one :class:`LayerPlan` per
    layer, the clamp, and the level-0 columns it owns; ``classes``: its dense steps
    compute each class of identical neurons once (:attr:`LayerPlan.copy_of`;
    ``sdnn.kernel.classes``)."""

    part: int
    k: int
    inputs: np.ndarray
    layers: list[LayerPlan] = field(repr=False)
    ymax: float
    dense_threshold: float
    chunk_bytes: int = 1 << 20
    min_chunk_rows: int = 1
    classes: bool = True

    @property
    def nbytes(self) -> int:
        """Bytes of its weight slices and index maps."""
        total = 0
        for lp in self.layers:
            for m in (lp.w, lp.wt):
                total += m.data.nbytes + m.indices.nbytes + m.indptr.nbytes
            total += lp.own.nbytes + lp.needed.nbytes + lp.order.nbytes + lp.bias.nbytes
            total += sum(a.nbytes for a in lp.put.values())
            total += sum(a.nbytes for a in lp.take.values())
            total += sum(a.nbytes for a in lp.fetch.values())
        return total

    @property
    def last_own(self) -> np.ndarray:
        """Global ids of the last level's neurons this part computes."""
        return self.layers[-1].own

    def sources(self, layer: int) -> list[int]:
        """Parts (other than this one) that send columns to this part in ``layer``."""
        return [q for q in self.layers[layer - 1].put if q != self.part]

    def destinations(self, layer: int) -> list[int]:
        """Parts (other than this one) this part sends columns to in ``layer``."""
        return [p for p in self.layers[layer - 1].take if p != self.part]


def make_part_plans(network: Network, partition: NeuronPartition, *,
                    dense_threshold: float | None = None,
                    chunk_bytes: int | None = None,
                    min_chunk_rows: int | None = None,
                    classes: bool | None = None) -> list[PartPlan]:
    """Slice the network's weights and index maps for every part of ``partition``.

    ``dense_threshold``, ``chunk_bytes`` and ``classes`` default to ``sdnn.kernel.*``, as
    in :func:`~sdnn_dask.core.kernels.forward_block`.
    """
    if classes is None:
        classes = bool(config.get("kernel.classes", True))
    if dense_threshold is None:
        dense_threshold = config.get("kernel.dense-threshold")
    if chunk_bytes is None:
        chunk_bytes = config.get("kernel.chunk-bytes")
        if min_chunk_rows is None:  # as KernelSettings.resolve: the minimum goes with it
            min_chunk_rows = int(config.get("kernel.chunk-min-rows") or 1)
    min_chunk_rows = max(1, int(min_chunk_rows or 1))
    partition._check_network(network)
    k = partition.k
    parts = partition.parts
    position = owner_positions(parts)
    plans = [PartPlan(p, k, np.flatnonzero(parts[0] == p), [], float(network.ymax),
                      float(dense_threshold), int(chunk_bytes), min_chunk_rows, bool(classes))
             for p in range(k)]
    routes = route_partition(network.transposed, partition)
    for layer, (wt, layer_routes) in enumerate(zip(network.transposed, routes, strict=True),
                                               start=1):
        order = network.output_order[layer - 1]
        for p, route in enumerate(layer_routes.parts):
            wt_sub = as_csr32(wt[route.own][:, route.needed])
            # the network's dense-step order restricted to the owned neurons, renumbered
            # (local input ids follow global ones, so the grouping it makes still holds)
            in_order = order[parts[layer][order] == p]
            plans[p].layers.append(LayerPlan(
                own=route.own, needed=route.needed, w=as_csr32(wt_sub.T), wt=wt_sub,
                order=position[layer][in_order],
                bias=np.ascontiguousarray(network.bias[route.own]),
                put=route.receive, take=layer_routes.send(p), fetch=route.fetch))
    return plans


def piece_for(plan_layer: LayerPlan, destinations: list[int], slab: Slab) -> Slab:
    """What a part sends to the parts ``destinations`` (all on one worker) in one layer:
    the union of the columns they read from it, sent once."""
    if len(destinations) == 1:
        return take_columns(slab, plan_layer.take[destinations[0]])
    positions = np.unique(np.concatenate([plan_layer.take[p] for p in destinations]))
    return take_columns(slab, positions, label=True)
