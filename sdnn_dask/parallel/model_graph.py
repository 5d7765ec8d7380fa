"""The graph transport of model parallelism: a Dask task per part and layer.

``transport="graph"`` of :meth:`ModelParallelExecutor.run
<sdnn_dask.parallel.ModelParallelExecutor.run>`: :func:`build_graph` makes, for every row
group and layer, a task per piece a part sends to another worker (``send-...``) and a task
per part's step (``step-...``), each pinned to its part's worker, so every exchange is
scheduled by Dask and its cost stays measurable; :func:`graph_messages` reads the bytes
moved back from Dask's transfer logs. Where identical rows are computed once, a look after
layer ``l`` adds a task per part labelling its rows (``labels-...``), one agreeing on the
groups (``agree-...``, on part 0's worker) and one per part dropping the rows merged away
(``drop-...``), on :func:`~.slabs.shared_rows.look_due`'s schedule every :data:`GRAPH_LOOK_EVERY`
layers, without its shortcut (the graph is built before anything runs).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import dask
import numpy as np
import pandas as pd
from distributed import Future

from .model_direct import MESSAGE_COLUMNS
from .slabs import PartPlan, PartRows, Slab, drop_rows, part_layer_step, piece_for
from .slabs.shared_rows import agreed, labelled_rows, look_due


def _send(plan: PartPlan, layer: int, slab: Slab, destinations: list[int]) -> Slab:
    """On the sender's worker: the columns of ``slab`` that the parts ``destinations``
    (all on one other worker) read in ``layer``, once."""
    return piece_for(plan.layers[layer - 1], destinations, slab)


def _step(plan: PartPlan, layer: int, own_prev: Slab, sources: list[int], *pieces: Slab,
          shared: PartRows | None = None) -> Slab:
    """On the part's worker: one layer of one part."""
    return part_layer_step(plan, layer, own_prev, dict(zip(sources, pieces, strict=True)),
                           shared.weights if shared is not None and shared.groups else None)


def _drop(slab: Slab, shared: PartRows) -> Slab:
    """On the part's worker: its slab without the rows a look merged away."""
    return drop_rows(slab, shared.dropped)


#: Layers between two looks for identical rows once past layer 8: a look is three task
#: hops that every part of the group waits for, so they are fewer than on the direct
#: transport (every 4th layer made a 1024-120 run twice as slow).
GRAPH_LOOK_EVERY = 16

_KEY = re.compile(r"-g(\d+)-l(\d+)-(\d+)to(\d+)(?:\+\d+)*$")


def graph_messages(transfers: pd.DataFrame) -> pd.DataFrame:
    """Dask's transfer log of a graph run as :data:`MESSAGE_COLUMNS` rows."""
    rows = []
    for t in transfers.itertuples():
        m = _KEY.search(t.key)
        if m is None:
            continue
        g, layer, q = (int(x) for x in m.groups()[:3])
        parts = tuple(int(x) for x in t.key[m.start(4):].split("+"))
        rows.append((g, layer, q, parts, t.sender, t.receiver, int(t.nbytes),
                     np.nan, np.nan))
    return pd.DataFrame(rows, columns=MESSAGE_COLUMNS)

def build_graph(plans: list[PartPlan], plan_futures: dict[tuple[int, str], Future],
                slab_futures: dict[tuple[int, int], Future], slot: Callable[[int, int], str],
                n_layers: int, dedup: list[int], token: str, *,
                group_ids: list[int] | None = None, first_layer: int = 1,
                last_layer: int | None = None, shared_in: list[PartRows | None] | None = None
                ) -> tuple[list[Any], list[Any]]:
    """Delayed tasks of layers ``first_layer`` to ``last_layer`` (default: every layer),
    each pinned to its part's worker (``slot(g, p)``), and each group's last
    :class:`~.slabs.PartRows` (``None`` where ``dedup[i]`` is 0: every row computed; else
    the group's rows); looks for identical rows follow
    :func:`~.slabs.shared_rows.look_due` every :data:`GRAPH_LOOK_EVERY` layers.
    ``group_ids`` numbers the groups (default ``0, 1, ...``); ``shared_in[i]`` is a
    group's rows as a pass left them (:mod:`~.model_passes`), where it goes on from one."""
    k = len(plans)
    last = n_layers if last_layer is None else last_layer
    finals, last_shared = [], []
    for i, g in enumerate(group_ids if group_ids is not None else range(len(dedup))):
        def pinned(p: int, g: int = g) -> Any:
            return dask.annotate(workers=[slot(g, p)],
                                 allow_other_workers=False)
        current: list[Any] = [slab_futures[g, p] for p in range(k)]
        given = shared_in[i] if shared_in is not None else None
        shared: Any = given if given is not None else (PartRows(dedup[i]) if dedup[i]
                                                       else None)
        for layer in range(first_layer, last + 1):
            # what each source sends, once per other worker that hosts readers
            provided: dict[tuple[int, int], Any] = {}
            for q, plan in enumerate(plans):
                here = slot(g, q)
                readers: dict[str, list[int]] = {}
                for p in plan.destinations(layer):
                    readers.setdefault(slot(g, p), []).append(p)
                for where, parts in readers.items():
                    if where == here:  # same worker: the readers take q's slab as is
                        for p in parts:
                            provided[q, p] = current[q]
                        continue
                    name = "+".join(map(str, parts))
                    with pinned(q):
                        piece = dask.delayed(_send, pure=False)(
                            plan_futures[q, here], layer, current[q], parts,
                            dask_key_name=f"send-{token}-g{g}-l{layer}-{q}to{name}")
                    for p in parts:
                        provided[q, p] = piece
            nxt = []
            for p, plan in enumerate(plans):
                sources = plan.sources(layer)
                with pinned(p):
                    nxt.append(dask.delayed(_step, pure=False)(
                        plan_futures[p, slot(g, p)], layer, current[p],
                        sources, *[provided[q, p] for q in sources], shared=shared,
                        dask_key_name=f"step-{token}-g{g}-l{layer}-p{p}"))
            if dedup[i] and look_due(layer, n_layers, GRAPH_LOOK_EVERY):
                labels = []
                for p in range(k):
                    with pinned(p):
                        labels.append(dask.delayed(labelled_rows, pure=False)(
                            nxt[p], dask_key_name=f"labels-{token}-g{g}-l{layer}-p{p}"))
                with pinned(0):
                    shared = dask.delayed(agreed, pure=False)(
                        shared, *labels, dask_key_name=f"agree-{token}-g{g}-l{layer}")
                for p in range(k):
                    with pinned(p):
                        nxt[p] = dask.delayed(_drop, pure=False)(
                            nxt[p], shared, dask_key_name=f"drop-{token}-g{g}-l{layer}-p{p}")
            current = nxt
        finals += current
        last_shared.append(shared)
    return finals, last_shared
