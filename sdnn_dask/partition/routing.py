"""The routing of model parallelism: which columns every part reads, from which part, and
where they lie there. One table per (pattern, partition), for inference and training.

Layer ``l`` on part ``p`` computes its own level ``l`` neurons ``own_p`` from the level
``l-1`` neurons ``needed_p`` that feed them (its own and other parts'). For every source
part ``q``, :attr:`PartRoute.receive` says which of ``needed_p`` come from ``q``
(positions within ``needed_p``) and :attr:`PartRoute.fetch` where they lie among ``q``'s
own level ``l-1`` neurons (positions within ``own_q(l-1)``, increasing): what ``q`` cuts
from its slab and sends. :meth:`LayerRoutes.send` reads the same table from the sender's
side. Inference's part plans (:func:`sdnn_dask.parallel.slabs.make_part_plans`), its
plans read from a store's slices, and the trainers' slices
(:func:`sdnn_dask.training.model_parts.slice_model`) are all made from it. Knows nothing
of Dask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .neurons import NeuronPartition

__all__ = ["LayerRoutes", "PartRoute", "owner_positions", "route_partition", "sources_of"]


@dataclass(frozen=True)
class PartRoute:
    """One part's routes in one layer.

    Attributes
    ----------
    own
        Global ids of the level ``l`` neurons the part computes (sorted).
    needed
        Global ids of the level ``l-1`` neurons it reads (sorted).
    receive
        Source part -> positions within ``needed`` of the columns that part owns (the
        part's own entry included), sources in increasing order.
    fetch
        Source part -> positions within the source's own level ``l-1`` neurons of the
        same columns, in the same order.
    """

    own: np.ndarray
    needed: np.ndarray
    receive: dict[int, np.ndarray]
    fetch: dict[int, np.ndarray]


@dataclass(frozen=True)
class LayerRoutes:
    """Every part's routes in one layer (``parts[p]``)."""

    parts: list[PartRoute]

    def send(self, source: int) -> dict[int, np.ndarray]:
        """Reader part -> positions within ``source``'s own level ``l-1`` neurons of the
        columns that reader reads from it in this layer (``source`` itself included if it
        reads its own), readers in increasing order."""
        return {p: route.fetch[source] for p, route in enumerate(self.parts)
                if source in route.fetch}


def owner_positions(parts: np.ndarray) -> np.ndarray:
    """``[level, neuron]``: the neuron's position among its owner's neurons of that level
    (owners' neurons in increasing global id)."""
    position = np.empty(parts.shape, np.int64)
    for level in range(parts.shape[0]):
        for p in np.unique(parts[level]):
            ids = np.flatnonzero(parts[level] == p)
            position[level, ids] = np.arange(len(ids))
    return position


def sources_of(needed: np.ndarray, owners: np.ndarray, positions: np.ndarray
               ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """``receive`` and ``fetch`` (:class:`PartRoute`) of a part reading ``needed`` (sorted
    global ids of level ``l-1``), given that level's owner and position of every neuron.
    The one rule every plan of model parallelism routes by, whole or read from slices."""
    source = owners[needed]
    receive = {int(q): np.flatnonzero(source == q) for q in np.unique(source)}
    return receive, {q: positions[needed[at]] for q, at in receive.items()}


def route_partition(transposed: Sequence[sp.csr_matrix], partition: NeuronPartition
                    ) -> list[LayerRoutes]:
    """The routes of every layer of a network under ``partition``.

    Parameters
    ----------
    transposed
        ``W_l^T`` per layer (CSR, row ``j``: the inputs of output neuron ``j``), as
        :attr:`sdnn_dask.core.network.Network.transposed` gives them; only the pattern is
        read.
    partition
        The owners of every level's neurons.

    Returns
    -------
    list of LayerRoutes
        One per layer, ``[l - 1]`` for layer ``l``.
    """
    parts = partition.parts
    position = owner_positions(parts)
    out = []
    for layer, wt in enumerate(transposed, start=1):
        routes = []
        for p in range(partition.k):
            own = np.flatnonzero(parts[layer] == p)
            needed = np.unique(wt[own].indices).astype(np.int64)
            receive, fetch = sources_of(needed, parts[layer - 1], position[layer - 1])
            routes.append(PartRoute(own, needed, receive, fetch))
        out.append(LayerRoutes(routes))
    return out
