"""The direct transport of model parallelism: one long-running task per part.

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

Stopping: a part whose task was cancelled (``client.cancel``, the client gone) notices
within :data:`POLL_SECONDS`; a part that fails aborts its worker's share of the run; the
client (:func:`gather_direct`) aborts the run on every worker when a worker is lost, a
part fails or the caller is interrupted, so no task is left waiting for a piece.
"""

from __future__ import annotations

import time
import warnings
from concurrent.futures import CancelledError
from typing import Any

from distributed import Client, Future, wait

from ... import config
from ..faults import WorkerLostError, connected
from ..slabs import PartPlan, PartRows, Slab, drop_rows, label_rows, part_layer_step, piece_for
from .exchange import (
    EXTENSION,
    Arrived,
    PieceExchange,
    RunAborted,
    pack,
    unpack,
    wait_pieces,
)
from .slot import joined_run
from .wire import crosses_network

#: How often a waiting part checks that its task is still wanted, and the client that
#: the run's workers are still connected.
POLL_SECONDS = 0.1

#: Seconds a part waits with no piece arriving before giving up (a last resort: lost
#: workers and cancellations are noticed within ``POLL_SECONDS``).
PIECE_TIMEOUT = 600.0

#: Per (part, layer) timing columns the direct transport adds to the layer records.
TIMING_COLUMNS = ["layer", "wait_s", "send_s", "serialise_s", "deserialise_s",
                  "transit_s"]

#: One row per message sent between workers.
MESSAGE_COLUMNS = ["group", "layer", "source", "parts", "sender", "receiver",
                   "payload_bytes", "frame_bytes", "wire_bytes"]


def ensure_exchange(client: Client) -> None:
    """Register :class:`~.exchange.PieceExchange` on the workers that lack it (and, with
    the scheduler, on every worker that joins later)."""
    has = client.run(lambda dask_worker: EXTENSION in dask_worker.extensions)
    if not all(has.values()):
        client.register_plugin(PieceExchange(), name=EXTENSION)


async def _connect_peers(dask_worker: Any, peers: list[str]) -> int:
    return await dask_worker.extensions[EXTENSION].connect_peers(peers)


def _wire_address(dask_worker: Any) -> Any:
    return dask_worker.extensions[EXTENSION].wire_address()


def _know_wires(dask_worker: Any, table: dict[str, Any]) -> int:
    return dask_worker.extensions[EXTENSION].know_wires(table)


def connect_peers(client: Client, workers: list[str], *, wire: bool | None = None) -> None:
    """Open every worker pair's connection before the clock starts; with ``wire``
    (default ``sdnn.transport.wire``), start the workers' :class:`~.wire.Wire` and hand
    out their addresses, so pieces between worker processes of a plain ``tcp://``
    cluster go by it. Warns if a wire listens beyond loopback: its frames are
    authenticated, not encrypted."""
    client.run(_connect_peers, peers=workers, workers=workers)
    if wire is None:
        wire = bool(config.get("transport.wire", True))
    if wire and len(workers) > 1:
        table = client.run(_wire_address, workers=workers)
        exposed = sorted({w[0] for w in table.values() if w and crosses_network(w[0])})
        if exposed:  # a TLS cluster has no wire (its addresses are None)
            warnings.warn(f"the workers' wire listens on {', '.join(exposed)}: its frames "
                          "cross the network authenticated (HMAC) but not encrypted, as "
                          "this tcp:// cluster's comms do; a tls:// cluster encrypts both "
                          "(and keeps pieces off the wire)", UserWarning, stacklevel=2)
        client.run(_know_wires, table=table, workers=workers)


def _abort(dask_worker: Any, token: str, strategy: str, lost: list[str], reason: str) -> bool:
    exchange = dask_worker.extensions.get(EXTENSION)
    if exchange is None:
        return False
    error: BaseException = (WorkerLostError(strategy, lost) if lost
                            else RunAborted(f"{strategy} run {token} aborted: {reason}"))
    return exchange.abort(token, error)


def abort_run(client: Client, token: str, *, strategy: str, lost: list[str] = (),
              reason: str = "") -> None:
    """Stop run ``token`` on every connected worker and drop its state there."""
    try:
        client.run(_abort, token=token, strategy=strategy, lost=list(lost), reason=reason,
                   workers=sorted(connected(client)), on_error="ignore")
    except Exception:  # best effort: the tasks' own checks still stop them
        pass


def _active(dask_worker: Any) -> list[str]:
    exchange = dask_worker.extensions.get(EXTENSION)
    return exchange.active() if exchange is not None else []


def active_runs(client: Client) -> dict[str, list[str]]:
    """Worker -> tokens of the direct runs with state there (empty when all is clean)."""
    return client.run(_active)


def run_part(plan: PartPlan, slab: Slab, *, token: str, group: int, route: list[str],
             expected: int, n_layers: int, strategy: str = "model", dedup: int = 0,
             poll: float = POLL_SECONDS, timeout: float = PIECE_TIMEOUT) -> dict[str, Any]:
    """Run every layer of one part of one row group (a task on the part's worker).

    Parameters
    ----------
    plan, slab
        The part's plan and its level-0 slab.
    token, group
        The run's token and the part's row group.
    route
        Worker of every part of the group (``route[p]``).
    expected
        Parts of this run (all groups) hosted on this worker.
    n_layers
        Layers to run.
    dedup
        The rows of the group where identical rows are computed once (its parts send
        each other their row labels when :meth:`~sdnn_dask.parallel.slabs.PartRows.due`
        says, as messages of layer ``-layer``); 0 computes every row.

    Returns
    -------
    dict
        ``slab`` (the last level, with the part's trace), ``timing`` (tuples of
        :data:`TIMING_COLUMNS`), ``messages`` (tuples of :data:`MESSAGE_COLUMNS`),
        ``groups`` (the rows each computed row stands for, or ``None``).
    """
    part = plan.part
    timing: list[tuple] = []
    sent: list[list[Any]] = []
    checked = 0
    shared = PartRows(dedup) if dedup else None
    with joined_run(token, expected=expected, peers=route, strategy=strategy,
                    label=f"part {part} of group {group}",
                    cancelled=f"{strategy} run {token}: part {part} of group {group} "
                              "was cancelled",
                    registered_by="use ModelParallelExecutor, which registers it") as joined:
        exchange, run, here = joined.exchange, joined.run, joined.here
        for layer in range(1, n_layers + 1):
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
            if shared is not None and shared.due(layer, n_layers):
                labelled = _swap_labels(joined, plan, slab, group, layer, route, sent,
                                        poll=poll, timeout=timeout)
                slab = drop_rows(slab, shared.agree(labelled))
        for record in sent:  # every piece written: the bytes the comm reported
            record[-1] = record[-1].result(timeout=timeout)
    return {"slab": slab, "timing": timing, "messages": [tuple(r) for r in sent],
            "groups": None if shared is None else shared.groups}


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


def check_run(client: Client, futures: list[Future], workers: set[str], *, token: str,
              strategy: str, poll: float = POLL_SECONDS) -> bool:
    """Raise if direct run ``token`` cannot finish; else whether its tasks are all done.

    A worker of the run gone raises :exc:`WorkerLostError` naming it; a task that failed,
    its own error; the run's tasks cancelled with no worker lost,
    :exc:`~.exchange.RunAborted`.
    """
    lost = workers - connected(client)
    if not lost and any(f.cancelled() for f in futures):
        time.sleep(poll)  # a worker's loss may cancel first and report after
        lost = workers - connected(client)
        if not lost:
            raise RunAborted(f"{strategy} run {token} was cancelled: its part tasks "
                             "were cancelled with no worker lost")
    if lost:
        raise WorkerLostError(strategy, lost)
    failed = [f for f in futures if f.status == "error"]
    if failed:
        failed[0].result()  # raises the part's own error
    return all(f.done() for f in futures)


def stop_run(client: Client, futures: list[Future], token: str, strategy: str,
             error: BaseException) -> None:
    """Abort run ``token`` on every worker (``error``'s lost workers named) and cancel
    its tasks."""
    lost = list(getattr(error, "lost", []))
    abort_run(client, token, strategy=strategy, lost=lost, reason=repr(error))
    client.cancel(futures)


def gather_direct(client: Client, futures: list[Future], workers: set[str], *, token: str,
                  strategy: str, poll: float = POLL_SECONDS) -> list[Any]:
    """Wait for a direct run's part tasks, stopping the whole run on any trouble.

    A worker of the run leaving, a part failing, the run's tasks being cancelled, or the
    caller being interrupted (``KeyboardInterrupt``) aborts the run on every worker and
    cancels its tasks; then :exc:`WorkerLostError` (naming the lost workers), the part's
    own error, :exc:`~.exchange.RunAborted` or the interruption is raised
    (:func:`check_run`).
    """
    try:
        while True:
            try:
                with client.as_current():
                    wait(futures, timeout=poll)
            except (TimeoutError, CancelledError):
                pass
            if check_run(client, futures, workers, token=token, strategy=strategy,
                         poll=poll):
                return client.gather(futures)
    except BaseException as error:
        stop_run(client, futures, token, strategy, error)
        raise
