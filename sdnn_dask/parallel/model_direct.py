"""The direct transport of model parallelism: one long-running task per part, every layer.

``transport="direct"`` (the default of :meth:`ModelParallelExecutor.run
<sdnn_dask.parallel.ModelParallelExecutor.run>`) submits one task per (row group, part),
pinned to the part's worker. Each task secedes from its worker's thread pool (so parts
sharing a worker run side by side) and runs every layer itself::

    for layer l:   cut and send the pieces of level l-1 that other parts read in l
                   wait for the pieces this part reads from the others
                   run the part's step of layer l

The pieces go worker to worker through the :class:`~.exchange.PieceExchange` plugin,
as soon as they are cut: a part on the same worker gets the source's whole slab in
memory, a part elsewhere one piece per worker with the columns its parts there read
(the same pieces, and bytes, as the graph transport). The scheduler only places the
tasks and reports failures; it takes no part in the per-layer exchange.

Per part and layer the task records the step's compute (the part's trace), the time
waiting for pieces, cutting and sending them, (de)serialising, and the transit of the
slowest remote piece (queued on its sender to filed here: the part of the wait the wire
and the event loops account for; the rest is the sender finishing its own step later);
per message, the payload and frame bytes and the bytes the comm wrote.

The run's lifecycle (joining, watching, aborting, gathering) is
:mod:`~sdnn_dask.parallel.transport.run`'s, shared with training's slots.
"""


from __future__ import annotations

import time
from typing import Any

from .slabs import PartPlan, PartRows, Slab, drop_rows, label_rows, part_layer_step, piece_for
from .transport.exchange import Arrived, pack, unpack, wait_pieces
from .transport.run import PIECE_TIMEOUT, POLL_SECONDS, joined_run

#: Per (part, layer) timing columns the direct transport adds to the layer records.
TIMING_COLUMNS = ["layer", "wait_s", "send_s", "serialise_s", "deserialise_s",
                  "transit_s"]

#: One row per message sent between workers.
MESSAGE_COLUMNS = ["group", "layer", "source", "parts", "sender", "receiver",
                   "payload_bytes", "frame_bytes", "wire_bytes"]


def run_part(plan: PartPlan, slab: Slab | dict[str, Any], *, token: str, group: int,
             route: list[str], expected: int, n_layers: int, strategy: str = "model",
             dedup: int = 0, first_layer: int = 1, last_layer: int | None = None,
             stop_rows: int = 0, poll: float = POLL_SECONDS, timeout: float = PIECE_TIMEOUT
             ) -> dict[str, Any]:
    """Run the layers of one part of one row group (a task on the part's worker).

    Parameters
    ----------
    plan, slab
        The part's plan and its level-0 slab; or, to go on from a level reached before,
        what that run (or :func:`~.model_passes.join_passes`) returned: its ``slab`` and
        its ``shared`` rows.
    token, group
        The run's token and the part's row group.
    route
        Worker of every part of the group (``route[p]``).
    expected
        Parts of this run (all groups) hosted on this worker.
    n_layers
        Layers of the network.
    first_layer, last_layer
        The layers to run (default: from 1 to ``n_layers``).
    stop_rows
        Stop early, after the first look for identical rows that leaves at most this many
        distinct rows (every part of the group sees the same look, so all stop at the same
        layer); 0 never stops early. A row pass uses it (:mod:`~.model_passes`).
    dedup
        The rows of the group where identical rows are computed once (its parts send
        each other their row labels when :meth:`~sdnn_dask.parallel.slabs.PartRows.due`
        says, as messages of layer ``-layer``); 0 computes every row.

    Returns
    -------
    dict
        ``slab`` (the last level, with the part's trace), ``timing`` (tuples of
        :data:`TIMING_COLUMNS`), ``messages`` (tuples of :data:`MESSAGE_COLUMNS`),
        ``groups`` (the rows each computed row stands for, or ``None``), ``shared`` (the
        group's :class:`~.slabs.PartRows`, or ``None``) and ``layer`` (the last layer run).
    """
    part = plan.part
    timing: list[tuple] = []
    sent: list[list[Any]] = []
    checked = 0
    if isinstance(slab, dict):  # going on from a level reached before
        slab, shared = slab["slab"], slab["shared"]
    else:
        shared = PartRows(dedup) if dedup else None
    last = n_layers if last_layer is None else last_layer
    reached = first_layer - 1
    with joined_run(token, expected=expected, peers=route, strategy=strategy,
                    label=f"part {part} of group {group}",
                    cancelled=f"{strategy} run {token}: part {part} of group {group} "
                              "was cancelled",
                    registered_by="use ModelParallelExecutor, which registers it") as joined:
        exchange, run, here = joined.exchange, joined.run, joined.here
        for layer in range(first_layer, last + 1):
            lp = plan.layers[layer - 1]
            start = time.perf_counter()
            serialise = 0.0
            readers: dict[str, list[int]] = {}
            for p in plan.destinations(layer):
                readers.setdefault(route[p], []).append(p)
            for where, parts in readers.items():
                if where == here:  # same process: the readers take the slab itself
                    run.put(group, layer, parts, part, slab)
                    continue
                piece = piece_for(lp, parts, slab)
                t0 = time.perf_counter()
                payload, frame_bytes = pack(piece)
                serialise += time.perf_counter() - t0
                msg = {"op": "piece", "token": token, "group": group, "layer": layer,
                       "source": part, "parts": parts, "payload": payload,
                       "sent": time.time(), "reply": False}
                sent.append([group, layer, part, tuple(parts), here, where, piece.nbytes,
                             frame_bytes, exchange.send(where, msg)])
            send = time.perf_counter() - start
            while checked < len(sent) and sent[checked][-1].done():
                sent[checked][-1].result()  # raises WorkerLostError if it failed
                checked += 1
            t0 = time.perf_counter()
            got = wait_pieces(run, (group, layer, part), plan.sources(layer), alive=joined.alive,
                              poll=poll, timeout=timeout)
            waited = time.perf_counter() - t0
            # transit: the slowest remote piece, from queued there to filed here
            transit = max((v.arrived - v.sent for v in got.values()
                           if isinstance(v, Arrived)), default=0.0)
            t0 = time.perf_counter()
            received = {q: unpack(v) for q, v in got.items()}
            deserialise = time.perf_counter() - t0
            slab = part_layer_step(plan, layer, slab, received,
                                   shared.weights if shared and shared.groups else None)
            timing.append((layer, waited, send, serialise, deserialise, transit))
            looked = shared is not None and shared.due(layer, n_layers)
            if looked:
                labelled = _swap_labels(joined, plan, slab, group, layer, route, sent,
                                        poll=poll, timeout=timeout)
                slab = drop_rows(slab, shared.agree(labelled))
            reached = layer
            if stop_rows and looked and shared.distinct <= stop_rows:
                break  # few distinct rows left: this pass joins the others here
        for record in sent:  # every piece written: the bytes the comm reported
            record[-1] = record[-1].result(timeout=timeout)
    return {"slab": slab, "timing": timing, "messages": [tuple(r) for r in sent],
            "groups": None if shared is None else shared.groups, "shared": shared,
            "layer": reached}


def _swap_labels(joined: Any, plan: PartPlan, slab: Slab, group: int, layer: int,
                 route: list[str], sent: list[list[Any]], *, poll: float, timeout: float
                 ) -> list[tuple[Any, Any]]:
    """Send this part's row labels (:func:`~sdnn_dask.parallel.slabs.label_rows`) to
    every other part of its group, and return every part's, in part order: the look
    after ``layer``, its messages recorded in ``sent`` under layer ``-layer``."""
    part, token, here = plan.part, joined.run.token, joined.here
    mine = (slab.rows, label_rows(slab))
    others: dict[str, list[int]] = {}
    for p, where in enumerate(route):
        if p != part:
            others.setdefault(where, []).append(p)
    for where, parts in others.items():
        if where == here:
            joined.run.put(group, -layer, parts, part, mine)
            continue
        payload, frame_bytes = pack(mine)
        msg = {"op": "piece", "token": token, "group": group, "layer": -layer,
               "source": part, "parts": parts, "payload": payload, "sent": time.time(),
               "reply": False}
        sent.append([group, -layer, part, tuple(parts), here, where,
                     mine[0].nbytes + mine[1].nbytes, frame_bytes,
                     joined.exchange.send(where, msg)])
    got = wait_pieces(joined.run, (group, -layer, part),
                      [p for p in range(len(route)) if p != part], alive=joined.alive,
                      poll=poll, timeout=timeout)
    labelled = {q: unpack(v) for q, v in got.items()}
    labelled[part] = mine
    return [labelled[q] for q in sorted(labelled)]
