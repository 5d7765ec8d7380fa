"""The direct transport of parallel training: one long-running task per slot, many steps.

A step of model-parallel, hybrid or data-parallel training is ``R x C`` slots: row group
``g`` (of ``R``) of the batch, run by the ``C`` parts of a neuron partition (``C = 1``:
the whole model). Slot ``(g, c)`` is one task on its worker (:func:`run_slot`) that
secedes from the worker's thread pool and runs step after step for as long as its
trainer feeds it (a persistent loop, :mod:`.persistent`): it waits for the client's next
feed in its box (one step or many, each the group's rows or their ids in rows held on
the worker), runs them, and replies with what each step measured; a feed of ``None``
ends it. Within a step it exchanges what it must with the other slots worker to worker
through the inference's :class:`~sdnn_dask.parallel.transport.exchange.PieceExchange`
(no scheduler in the loop):

1. forward, layer by layer: it cuts for every part of its group that reads its level
   ``l-1`` columns in layer ``l`` exactly those columns, sends them, waits for the
   pieces it reads and runs its slice of the layer (:func:`~.compiled.layer_forward_t`,
   the serial kernel's sums in the serial order);
2. readout: its partial logits go to part 0 of the group, which adds them up in part
   order, takes the loss (scaled by the group's share of the batch's rows) and sends
   ``dlogits`` back;
3. backward, from layer ``L`` down: it adds up the partial errors its readers sent (in
   part order), masks them (its bias gradient) and sends the partial errors of the inputs
   it read back to their owners, the transposed pattern of the forward;
4. with ``R > 1``, its parameters' gradient is summed across the ``R`` slots of the same
   part (:func:`allreduce`: reduce-scatter then all-gather, each of ``R`` chunks summed
   once, in group order, on one slot and sent to the others, so every copy gets the same
   bits);
5. it applies SGD to its own slices.

A data-parallel slot (``whole``: the worker's copy of the whole model) runs the serial
kernels (:func:`~.loop.gradients`) instead of steps 1-3; that is data parallelism with
the gradient reduced over the exchange.

A slot on the same worker as its peer gets the piece as an array in memory; a slot
elsewhere gets it serialised (pickle protocol 5, arrays out of band) over the worker's
own comm. Bytes are counted as the float32 arrays' ``nbytes``, cross-worker and
same-worker apart, per phase.

Messages are filed by (run token, key group, layer, destination part); the key group is
``8 (s R + g) + phase`` for step ``s`` of the loop with the phases below, so steps,
phases and groups never mix; the client's feeds and the slots' replies are filed under
``8 g + FEED`` and ``8 g + REPLY`` by feed number.

Each step's reply says, per slot, where its time went (:data:`TIMING_KEYS`): computing
forward, backward and the update (the waits and sends inside them not counted), waiting
for pieces, sending them, and the all-reduce of the gradient across row groups (its
waits and sends included).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np

from ..core.kernels import ROW_TILE, dense_step
from ..parallel.transport.direct import PIECE_TIMEOUT, POLL_SECONDS
from ..parallel.transport.exchange import (
    CLIENT,
    PieceExchange,
    unpack,
    wait_pieces,
)
from ..parallel.transport.slot import joined_run
from . import compiled
from .compiled import (
    delta_t,
    gather_delta,
    gather_rows,
    layer_backward_t,
    sampled_gradient_t,
)
from .loop import gradients
from .losses import softmax_cross_entropy
from .model import Gradients, flatten, unflatten
from .parts import PARTS, apply_update, sum_plan
from .replicas import held, held_rows

#: The transports of the trainers; the first is the default.
TRANSPORTS = ("direct", "graph")

#: Phases of a step (the low 3 bits of a message's key group); the client's feeds and
#: the slots' replies have phases of their own.
FORWARD, LOGITS, DLOGITS, BACKWARD, REDUCE, GATHER, FEED, REPLY = range(8)

#: The byte counters a slot returns: per phase, cross-worker and same-worker.
BYTE_KEYS = ("forward", "backward", "readout", "gradient")

#: Where a slot's step time goes, in seconds (each step's reply has them all).
TIMING_KEYS = ("forward_s", "backward_s", "update_s", "wait_s", "send_s", "allreduce_s")

#: How long an idle loop waits for its next feed: for ever (a cancelled task, or a client
#: gone, still stops it within a poll).
FEED_TIMEOUT = float("inf")


class _Slot:
    """What one slot's task needs of the exchange: where its peers are, and the sends."""

    def __init__(self, exchange: PieceExchange, run: Any, token: str, group: int, part: int,
                 groups: int, route: list[list[str]], alive: Any, timeout: float,
                 poll: float):
        self.exchange, self.run, self.token = exchange, run, token
        self.group, self.part, self.groups, self.route = group, part, groups, route
        self.here = exchange.worker.address
        self.alive, self.timeout, self.poll = alive, timeout, poll
        self.step = 0
        self.sent: list[Any] = []
        self.checked = 0
        self.begin_step(0)

    def begin_step(self, step: int) -> None:
        """Step ``step`` of the loop starts: its messages are keyed by it, counted anew."""
        self.step = step
        self.moved = dict.fromkeys(BYTE_KEYS, 0)
        self.local = dict.fromkeys(BYTE_KEYS, 0)
        self.wait_s = 0.0
        self.send_s = 0.0

    def _key_group(self, group: int, phase: int) -> int:
        return 8 * (self.step * self.groups + group) + phase

    def next_feed(self, number: int) -> Any:
        """Wait for the client's feed ``number`` (a list of steps, or None: stop)."""
        got = wait_pieces(self.run, (8 * self.group + FEED, number, self.part), [CLIENT],
                          alive=self.alive, poll=self.poll, timeout=FEED_TIMEOUT)
        return unpack(got[CLIENT])

    def reply(self, number: int, value: Any) -> None:
        """Hand the client what feed ``number``'s steps measured (its feed call returns)."""
        self.run.put(8 * self.group + REPLY, number, [self.part], self.part, value)

    def send(self, phase: int, counter: str, group: int, layer: int, part: int,
             source: int, array: np.ndarray, *, reused: bool = False) -> Any:
        """File ``array`` in slot ``(group, part)``'s box for ``phase`` and ``layer``.

        The array is not copied (a slot in this process gets the array itself, a message
        to another worker reads it until written), so it must not change after; with
        ``reused`` (the sender will write into it) a copy is sent, unless the exchange
        has written it when this returns (its wire). The message's future is returned
        (None in process)."""
        t0 = time.perf_counter()
        where = self.route[group][part]
        key_group = self._key_group(group, phase)
        future = None
        if reused and (where == self.here or not self.exchange.writes_at_once(where)):
            array = array.copy()
        if where == self.here:  # same process: the array itself
            self.run.put(key_group, layer, [part], source, array)
            if (group, part) != (self.group, self.part):
                self.local[counter] += array.nbytes
        else:  # packed by the exchange, unless its wire takes the array as it is
            msg = {"op": "piece", "token": self.token, "group": key_group, "layer": layer,
                   "source": source, "parts": [part], "payload": array, "packed": False,
                   "sent": time.time(), "reply": False}
            future = self.exchange.send(where, msg)
            self.sent.append(future)
            self.moved[counter] += array.nbytes
        self.send_s += time.perf_counter() - t0
        return future

    def receive(self, phase: int, layer: int, sources: list[int]) -> dict[int, np.ndarray]:
        """Wait for this slot's pieces of ``phase`` and ``layer`` from ``sources``."""
        t0 = time.perf_counter()
        got = wait_pieces(self.run, (self._key_group(self.group, phase), layer, self.part),
                          sources, alive=self.alive, poll=self.poll, timeout=self.timeout)
        self.wait_s += time.perf_counter() - t0
        return {q: unpack(v) for q, v in got.items()}

    def mark(self) -> float:
        """Seconds so far minus those spent waiting and sending: differences of marks
        are compute."""
        return time.perf_counter() - self.wait_s - self.send_s

    def check_sends(self) -> None:
        """Raise if a send already failed (its future holds a WorkerLostError); each
        future is looked at until it is done, once."""
        while self.checked < len(self.sent) and self.sent[self.checked].done():
            self.sent[self.checked].result()
            self.checked += 1

    def flush(self) -> None:
        """Wait until every message this slot sent is written."""
        for future in self.sent:
            future.result(timeout=self.timeout)


def chunks(n: int, groups: int) -> np.ndarray:
    """Bounds of ``groups`` near-equal contiguous chunks of ``0..n``."""
    return np.linspace(0, n, groups + 1).round().astype(np.int64)


def allreduce(slot: _Slot, groups: int, vector: np.ndarray) -> np.ndarray:
    """The sum over the ``groups`` row groups of this part's flat gradient ``vector``
    (written into ``vector``, which is returned).

    Reduce-scatter, then all-gather: slot ``(g, c)`` sums chunk ``g`` of every group's
    vector, in group order, and sends the sum to the other groups' slots of part ``c``.
    Each chunk is summed once, so every group ends with the same bits; each slot sends
    and receives ``2 (R - 1) / R`` of a gradient (no slot receives more than that).
    With two groups that is one gradient each way, which :func:`_pair_sum` sends in one
    round instead of two (floating-point addition of two terms is commutative, so both
    ends get ``v_0 + v_1`` to the bit, as the two rounds give).
    """
    me, part = slot.group, slot.part
    if groups == 2:  # one round: the whole vector each way (the same bytes as two halves)
        return _pair_sum(slot, vector, 0, vector.size, 0)
    bounds = chunks(vector.size, groups)
    others = [g for g in range(groups) if g != me]
    for g in others:
        slot.send(REDUCE, "gradient", g, 0, part, me, vector[bounds[g]:bounds[g + 1]])
    got = slot.receive(REDUCE, 0, others)
    got[me] = vector[bounds[me]:bounds[me + 1]]
    total = got[0].copy()
    for g in range(1, groups):
        total += got[g]
    for g in others:
        slot.send(GATHER, "gradient", g, 0, part, me, total)
    # in place: chunk g of ``vector`` was read (for its sum) by group g only, which has
    # sent its total, so it is done with it; chunk ``me`` was read here
    vector[bounds[me]:bounds[me + 1]] = total
    for g, piece in slot.receive(GATHER, 0, others).items():
        vector[bounds[g]:bounds[g + 1]] = piece
    return vector


def _pair_sum(slot: _Slot, vector: np.ndarray, lo: int, hi: int, piece: int,
              sent: bool = False) -> np.ndarray:
    """``vector[lo:hi]`` plus the other group's, in place (two groups, one round): send
    ours (a copy, unless already ``sent``), add theirs when it comes. ``piece`` numbers
    the message."""
    other = 1 - slot.group
    if not sent:
        slot.send(REDUCE, "gradient", other, piece, slot.part, slot.group,
                         vector[lo:hi], reused=True)
    theirs = slot.receive(REDUCE, piece, [other])[other]
    vector[lo:hi] += theirs
    return vector


#: Bytes of gradient a data-parallel slot on two workers sends at once, as soon as
#: its layers are computed (the last piece, with the biases and readout, may be smaller).
BUCKET_BYTES = 1 << 16


def gradient_buckets(model: Any, bucket_bytes: int = BUCKET_BYTES
                     ) -> list[tuple[int, int, int]]:
    """How the flat gradient (:meth:`~.model.SparseModel.parameters`' order) goes out in
    pieces while the backward runs: ``(layer, lo, hi)``, sent once layer ``layer``'s
    weight gradient is final (from the top down), each at least ``bucket_bytes``; then,
    with ``layer`` -1 (sent when the backward is done), the weights of the layers left
    and the biases and readout."""
    params = model.parameters()
    n = model.n_layers
    ends = np.cumsum([p.size for p in params])
    starts = ends - np.array([p.size for p in params])
    out, hi, size = [], int(ends[n - 1]), 0
    for k in range(n - 1, 0, -1):  # layer 0's goes with the rest
        size += params[k].nbytes
        if size >= bucket_bytes:
            out.append((k, int(starts[k]), hi))
            hi, size = int(starts[k]), 0
    out.append((-1, 0, hi))
    out.append((-1, int(ends[n - 1]), int(ends[-1])))
    return out


def _split(order: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``order`` as two orders: the entries in ``first``, then the rest (each keeps its
    relative order)."""
    mask = np.zeros(order.shape[0], bool)
    mask[first] = True
    chosen = mask[order]
    return (np.ascontiguousarray(order[chosen]), np.ascontiguousarray(order[~chosen]))


class _PartWorkspace:
    """A part's per-layer tiles for one batch size, and the split visiting orders.

    Forward, a part forms first the neurons other parts read in the next layer
    (``boundary``), sends them, then the rest; backward, it forms first the partial
    errors of the inputs other parts own, sends them, then its own. The peers' pieces
    travel while both go on computing, and the tiles are reused step after step (a new
    tile per layer and step costs page faults on every first touch)."""

    def __init__(self, state: Any, part: int, rows: int):
        self.rows = rows
        layers = state.layers
        self.inputs = [np.empty((len(sl.needed), rows), np.float32) for sl in layers]
        self.outputs = [np.empty((len(sl.own), rows), np.float32) for sl in layers]
        self.dyt = np.empty(max(len(sl.own) for sl in layers) * rows, np.float32)
        # partial errors: two tiles used in turn, since a layer's own partials are read
        # by the sum of the layer below
        size = max(len(sl.needed) for sl in layers) * rows
        self._partials = [np.empty(size, np.float32), np.empty(size, np.float32)]
        self.forward, self.backward, self.ranges = [], [], {}
        for sl in layers:
            read = [ix for q, ix in sl.send.items() if q != part]
            self.forward.append(_split(sl.order_fwd, np.concatenate(read) if read
                                       else np.zeros(0, np.int64)))
            owned = [ix for q, ix in sl.fetch.items() if q != part]
            self.backward.append(_split(sl.order_bwd, np.concatenate(owned) if owned
                                        else np.zeros(0, np.int64)))
            for ix in list(sl.fetch.values()) + list(sl.send.values()):
                if len(ix) not in self.ranges:
                    self.ranges[len(ix)] = np.arange(len(ix), dtype=np.int64)
        # backward, per layer below the top: where each neuron's partial errors come
        # from (source 0 this part's own, then its readers in part order), as CSR
        self.sums = [sum_plan(sl, part, layers[i + 1].fetch.get(part))
                     if i + 1 < len(layers) else None for i, sl in enumerate(layers)]

    def arange(self, n: int) -> np.ndarray:
        return self.ranges[n]

    def partials(self, layer: int, needed: int) -> np.ndarray:
        """Layer ``layer``'s partial errors tile, ``needed x rows``."""
        flat = self._partials[layer % 2]
        return flat[:needed * self.rows].reshape(needed, self.rows)


def _workspace(state: Any, part: int, rows: int) -> _PartWorkspace:
    if state.workspace is None or state.workspace.rows != rows:
        state.workspace = None  # the old tiles go before the new ones are made
        state.workspace = _PartWorkspace(state, part, rows)
    return state.workspace


def _part_forward_backward(slot: _Slot, state: Any, x_t: np.ndarray, labels: np.ndarray,
                           share: float, parts: int) -> float | None:
    """Steps 1-3 for a part's slices (``state``: a :class:`~.parts._Part`); its
    gradients are left on ``state``. Returns the group's scaled loss on part 0."""
    group, part, rows = slot.group, slot.part, x_t.shape[1]
    started = slot.mark()
    layers = state.layers
    n_layers = len(layers)
    ws = _workspace(state, part, rows)
    ymax = np.float32(state.ymax)
    for layer in range(1, n_layers + 1):
        sl = layers[layer - 1]
        if layer == 1:
            tile = x_t
        else:
            tile = ws.inputs[layer - 1]
            below = layers[layer - 2]
            if part in sl.fetch:  # its own columns first, while the peers' travel
                gather_rows(tile, sl.fetch[part], below.outputs, below.send[part])
            others = [q for q in sl.fetch if q != part]
            for q, piece in slot.receive(FORWARD, layer, sorted(others)).items():
                gather_rows(tile, sl.fetch[q], piece, ws.arange(len(piece)))
        sl.wt.data[:] = sl.w.data[sl.to_t]  # w changed in the last update
        out = ws.outputs[layer - 1]
        boundary, interior = ws.forward[layer - 1]
        if layer < n_layers and len(boundary):
            dense_step(tile, sl.wt.indptr, sl.wt.indices, sl.wt.data, sl.bias, ymax, out,
                       ROW_TILE, boundary)
            for p, ix in sl.send.items():  # to the other parts that read them
                if p != part:
                    slot.send(FORWARD, "forward", group, layer + 1, p, part, out[ix])
            dense_step(tile, sl.wt.indptr, sl.wt.indices, sl.wt.data, sl.bias, ymax, out,
                       ROW_TILE, interior)
        else:
            dense_step(tile, sl.wt.indptr, sl.wt.indices, sl.wt.data, sl.bias, ymax, out,
                       ROW_TILE, sl.order_fwd)
        sl.inputs, sl.outputs = tile, out
        slot.check_sends()
    top = layers[-1]
    partial = top.outputs.T @ state.readout
    loss = None
    if part == 0:
        got = slot.receive(LOGITS, 0, list(range(1, parts))) if parts > 1 else {}
        got[0] = partial
        logits = got[0].copy()
        for q in range(1, parts):
            logits += got[q]
        logits += state.readout_bias
        value, dlogits = softmax_cross_entropy(logits, labels)
        if share != 1.0:
            dlogits *= np.float32(share)
        loss = value * share
        state.grad_c = dlogits.sum(axis=0)
        for q in range(1, parts):
            slot.send(DLOGITS, "readout", group, 0, q, 0, dlogits)
    else:
        slot.send(LOGITS, "readout", group, 0, 0, part, partial)
        dlogits = slot.receive(DLOGITS, 0, [0])[0]
    state.grad_r = top.outputs @ dlogits
    forward_done = slot.mark()
    slot.forward_s = forward_done - started
    above = None
    for layer in range(n_layers, 0, -1):
        sl = layers[layer - 1]
        dyt = ws.dyt[:len(sl.own) * rows].reshape(len(sl.own), rows)
        if layer == n_layers:
            np.matmul(state.readout, dlogits.T, out=dyt)
            delta, sl.grad_b = delta_t(dyt, sl.outputs, state.ymax, out=dyt)
        else:
            # its own partial errors first, then the peers' in part order (as the graph
            # transport adds them), summed and masked in one pass
            readers, ptr, src, row = ws.sums[layer - 1]
            got = slot.receive(BACKWARD, layer, [q for q in readers if q != part])
            srcs = tuple(np.require(above.partial if q == part else got[q], np.float32,
                                    ["C", "W"]) for q in readers)
            sl.grad_b = np.empty(len(sl.own), np.float32)
            if srcs:
                gather_delta(srcs, ptr, src, row, sl.outputs, ymax, dyt, sl.grad_b)
            else:  # no part reads these neurons: no error reaches them
                dyt[...] = 0.0
                sl.grad_b[:] = 0.0
            delta = dyt
        grad = np.empty(sl.w.nnz, np.float32)
        if layer > 1:
            sl.partial = ws.partials(layer, len(sl.needed))
            remote, own = ws.backward[layer - 1]
            layer_backward_t(delta, sl.inputs, sl.w, sl.partial, remote, grad=grad)
            for q, ix in sl.fetch.items():  # back to the owners of the inputs it read
                if q != part:
                    slot.send(BACKWARD, "backward", group, layer - 1, q, part,
                              sl.partial[ix])
            layer_backward_t(delta, sl.inputs, sl.w, sl.partial, own, grad=grad)
        else:
            sampled_gradient_t(sl.inputs, delta, sl.w, sl.order_bwd, grad=grad)
        sl.grad_w = grad
        above = sl
        slot.check_sends()
    slot.backward_s = slot.mark() - forward_done
    return loss


def _part_gradients(state: Any) -> list[np.ndarray]:
    """A part's gradients in a fixed order (the same on every group's copy)."""
    out = [sl.grad_w for sl in state.layers] + [sl.grad_b for sl in state.layers]
    out.append(state.grad_r)
    if state.readout_bias is not None:
        out.append(state.grad_c)
    return out


def _set_part_gradients(state: Any, arrays: list[np.ndarray]) -> None:
    n = len(state.layers)
    for i, sl in enumerate(state.layers):
        sl.grad_w, sl.grad_b = arrays[i], arrays[n + i]
    state.grad_r = arrays[2 * n]
    if state.readout_bias is not None:
        state.grad_c = arrays[2 * n + 1]


def run_slot(key: str, token: str, group: int, part: int, groups: int, parts: int,
             route: list[list[str]], expected: int, *, whole: bool = False,
             backend: str = "compiled", poll: float = POLL_SECONDS,
             timeout: float = PIECE_TIMEOUT) -> dict[str, Any]:
    """One slot's persistent loop (a task on its worker; see the module docstring).

    Parameters
    ----------
    key
        The trainer's state key on this worker: a part's (its :data:`~.parts.PARTS` key
        is ``(key, part)``) or, with ``whole``, a data-parallel copy's
        (:func:`~.replicas.held`).
    token
        The loop's run token.
    group, part, groups, parts
        This slot and the shape of a step (``R`` groups of ``C`` parts).
    route
        ``route[g][c]``: the worker of slot ``(g, c)``.
    expected
        Slots of the loop hosted on this worker.
    whole
        The slot holds the whole model (data parallelism, ``parts == 1``): the serial
        kernels compute its gradient.
    backend
        With ``whole``: ``"compiled"`` or ``"reference"`` (:func:`~.loop.gradients`).

    Each feed is a list of steps, each a dict: ``x`` (the group's input columns this part
    reads, ``needed x rows`` float32, or with ``whole`` the group's rows) and ``labels``,
    or ``rows`` (ids into the rows held here, :func:`~.replicas.hold_rows`); and
    ``share``, the group's rows over the batch's (its loss and gradient are scaled by
    it). Its reply is one record per step: ``loss`` (the group's scaled loss, on part 0;
    else None), ``moved`` and ``local`` (bytes per :data:`BYTE_KEYS`), ``seconds`` (the
    step here), ``started`` (``time.time()``) and :data:`TIMING_KEYS`.

    Returns
    -------
    dict
        ``steps``: the steps it ran.
    """
    with joined_run(token, expected=expected, peers=sorted({w for row in route for w in row}),
                    strategy="training", label=f"slot ({group}, {part})",
                    cancelled=f"training loop {token}: slot ({group}, {part}) was cancelled",
                    registered_by="the trainers register it") as joined:
        slot = _Slot(joined.exchange, joined.run, token, group, part, groups, route,
                     joined.alive, timeout, poll)
        steps = 0
        for number in itertools.count():
            feed = slot.next_feed(number)
            if feed is None:
                break
            records = []
            for item in feed:
                slot.begin_step(steps)
                records.append(_step(slot, key, item, groups, parts, whole, backend))
                steps += 1
            slot.reply(number, records)
        slot.flush()
    return {"steps": steps}


def _step(slot: _Slot, key: str, item: dict[str, Any], groups: int, parts: int,
          whole: bool, backend: str) -> dict[str, Any]:
    """One step of one slot: its inputs from ``item``, its record for the reply."""
    started, t0 = time.time(), time.perf_counter()
    share = float(item["share"])
    x, labels = item.get("x"), item.get("labels")
    if "rows" in item:
        held_x, held_labels = held_rows(key, slot.part)
        rows = item["rows"]
        x = (np.ascontiguousarray(held_x[:, rows]) if not whole
             else held_x[rows])
        labels = held_labels[rows]
    slot.forward_s = slot.backward_s = slot.update_s = slot.allreduce_s = 0.0
    if whole:
        loss = _data_step(slot, key, groups, x, labels, share, backend)
    else:
        state = PARTS[(key, slot.part)]
        loss = _part_forward_backward(slot, state, x, labels, share, parts)
        if groups > 1:
            grads = _part_gradients(state)
            _set_part_gradients(state, unflatten(_timed_allreduce(slot, groups,
                                                                  flatten(grads)), grads))
        u0 = time.perf_counter()
        apply_update(state)
        slot.update_s = time.perf_counter() - u0
    return {"loss": loss, "moved": dict(slot.moved), "local": dict(slot.local),
            "seconds": time.perf_counter() - t0, "started": started,
            "rows": int(labels.shape[0]), "forward_s": slot.forward_s,
            "backward_s": slot.backward_s, "update_s": slot.update_s,
            "wait_s": slot.wait_s, "send_s": slot.send_s, "allreduce_s": slot.allreduce_s}


def _timed_allreduce(slot: _Slot, groups: int, vector: np.ndarray) -> np.ndarray:
    """:func:`allreduce`, its wall time in ``slot.allreduce_s``; its own waits and sends
    are its time, not counted again in the slot's ``wait_s`` and ``send_s``."""
    t0, waited, sent = time.perf_counter(), slot.wait_s, slot.send_s
    out = allreduce(slot, groups, vector)
    slot.allreduce_s = time.perf_counter() - t0
    slot.wait_s, slot.send_s = waited, sent
    return out


def _overlapped_data_step(slot: _Slot, model: Any, optimizer: Any, cache: Any,
                          labels: np.ndarray, share: float, vector: np.ndarray,
                          t0: float, t1: float) -> float:
    """A data-parallel slot of two: the backward sends each bucket of its (scaled)
    gradient to the other slot as soon as its layers are done, so the exchange runs
    under the layers below; then every bucket is summed with the other's, in place.
    Without rows (``cache`` None: a batch smaller than the cluster) it sends zeros."""
    buckets = gradient_buckets(model)
    early = {layer: i for i, (layer, _, _) in enumerate(buckets) if layer >= 0}
    scale = vector.dtype.type(share)
    other, waited, sent_s = 1 - slot.group, slot.wait_s, slot.send_s

    def send(i: int) -> None:
        _, lo, hi = buckets[i]
        if share != 1.0:
            vector[lo:hi] *= scale
        slot.send(REDUCE, "gradient", other, i, slot.part, slot.group,
                               vector[lo:hi], reused=True)

    if cache is None:
        loss = 0.0
        vector[...] = 0.0
    else:
        loss, _ = compiled.backward(model, cache, labels, out=vector,
                                    ready=lambda k: send(early[k]) if k in early else None)
    for i, (layer, _, _) in enumerate(buckets):
        if layer < 0 or cache is None:
            send(i)
    t2 = time.perf_counter()
    for i, (_, lo, hi) in enumerate(buckets):
        _pair_sum(slot, vector, lo, hi, i, sent=True)
    t3 = time.perf_counter()
    # the sends inside the backward are the exchange's, not compute
    inside = slot.send_s - sent_s
    slot.forward_s, slot.backward_s = t1 - t0, t2 - t1 - inside
    slot.allreduce_s = t3 - t2 + inside
    slot.wait_s, slot.send_s = waited, sent_s
    w = model.n_layers
    views = unflatten(vector, model.parameters())
    optimizer.step(Gradients(views[:w], views[w:2 * w], views[2 * w], views[2 * w + 1]))
    slot.update_s = time.perf_counter() - t3
    return loss * share


def _data_step(slot: _Slot, key: str, groups: int, x: Any, labels: np.ndarray,
               share: float, backend: str) -> float:
    """A whole-model slot: the serial kernels on its rows, the gradient all-reduced."""
    model, optimizer, workspace = held(key)
    arrays = model.parameters()
    t0 = time.perf_counter()
    if groups == 2 and backend == "compiled":  # each bucket sent once its layers are done
        vector = workspace.vector(sum(a.size for a in arrays))
        cache = compiled.forward(model, x, workspace) if x.shape[0] else None
        return _overlapped_data_step(slot, model, optimizer, cache, labels, share, vector,
                                     t0, time.perf_counter())
    if x.shape[0] and backend == "compiled":
        # the gradient written straight into one vector (reduced as it is), reused
        vector = workspace.vector(sum(a.size for a in arrays))
        cache = compiled.forward(model, x, workspace)
        t1 = time.perf_counter()
        loss, _ = compiled.backward(model, cache, labels, out=vector)
        if share != 1.0:
            vector *= vector.dtype.type(share)
    elif x.shape[0]:
        loss, grads = gradients(model, x, labels, backend, None)
        t1 = time.perf_counter()  # the reference's forward is not timed apart
        vector = flatten(grads.arrays())
        if share != 1.0:
            vector *= vector.dtype.type(share)
    else:  # a batch smaller than the cluster: this worker adds nothing, but updates
        loss, vector = 0.0, np.zeros(sum(a.size for a in arrays), model.dtype)
        t1 = time.perf_counter()
    t2 = time.perf_counter()
    slot.forward_s, slot.backward_s = t1 - t0, t2 - t1
    if groups > 1:
        vector = _timed_allreduce(slot, groups, vector)
    t3 = time.perf_counter()
    w = model.n_layers
    views = unflatten(vector, arrays)
    optimizer.step(Gradients(views[:w], views[w:2 * w], views[2 * w], views[2 * w + 1]))
    slot.update_s = time.perf_counter() - t3
    return loss * share
