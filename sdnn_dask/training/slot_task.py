"""The direct transport of parallel training: one long-running task per slot, many steps.

A step of model-parallel, hybrid or data-parallel training is ``R x C`` slots: row group
``g`` (of ``R``) of the batch, run by the ``C`` parts of a neuron partition (``C = 1``:
the whole model). Slot ``(g, c)`` is one task on its worker (:func:`run_slot`) that
secedes from the worker's thread pool and runs step after step for as long as its
trainer feeds it (a persistent loop, :mod:`.trainer`): it waits for the client's next
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
   part (:func:`~.collectives.allreduce`: reduce-scatter then all-gather, each of ``R``
   chunks summed once, in group order, on one slot and sent to the others, so every copy
   gets the same bits);
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

Each step's reply says, per slot, where its time went (:data:`~.collectives.TIMING_KEYS`):
computing forward, backward and the update (the waits and sends inside them not counted), waiting
for pieces, sending them, and the all-reduce of the gradient across row groups (its
waits and sends included).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np

from ..core.kernels import ROW_TILE, dense_step
from ..parallel.transport.collectives import (
    BACKWARD,
    DLOGITS,
    FORWARD,
    LOGITS,
    Slot,
    timed_allreduce,
)
from ..parallel.transport.run import PIECE_TIMEOUT, POLL_SECONDS, joined_run
from .compiled import (
    delta_t,
    gather_delta,
    layer_backward_t,
    sampled_gradient_t,
)
from .losses import softmax_cross_entropy
from .model import flatten, unflatten
from .model_parts import PARTS, apply_update, sum_plan
from .replicas import BUCKET_BYTES, data_step, held_rows


def _split(order: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``order`` as two orders: the entries in ``first``, then the rest (each keeps its
    relative order)."""
    mask = np.zeros(order.shape[0], bool)
    mask[first] = True
    chosen = mask[order]
    return (np.ascontiguousarray(order[chosen]), np.ascontiguousarray(order[~chosen]))


class _PartWorkspace:
    """A part's per-layer tiles for one batch size, their layout, and the split visiting
    orders.

    **Own-output layout.** Layer ``l``'s input tile (``l >= 2``) holds first every neuron
    the part owns at level ``l-1``, in the order of its own outputs, then each peer's piece
    in part order, in the order the peer sends it. Layer ``l-1`` writes its outputs
    straight into the head of that tile, and a peer's piece is copied whole into its
    block: nothing is gathered row by row. The slice's ``W^T`` column ids and ``W``'s rows
    are mapped to tile rows (``wt_indices``, ``tile_rows``); the sums keep their order,
    so the steps are bit for bit those of the gathered layout (and of the graph
    transport). Backward, the partial errors use the same layout, so the part's own are
    already where its sum reads them and each peer's is one contiguous block.

    Forward, a part forms first the neurons other parts read in the next layer
    (``boundary``), sends them, then the rest; backward, it forms first the partial
    errors of the inputs other parts own, sends them, then its own. The peers' pieces
    travel while both go on computing, and the tiles are reused step after step (a new
    tile per layer and step costs page faults on every first touch)."""

    def __init__(self, state: Any, part: int, rows: int):
        self.rows = rows
        layers = state.layers
        n_layers = len(layers)
        self.blocks: list[dict[int, slice]] = []   # peer -> its piece's rows in the tile
        self.wt_indices: list[np.ndarray] = []
        self.tile_rows: list[np.ndarray | None] = []
        self.inputs: list[np.ndarray | None] = []
        for index, sl in enumerate(layers):
            if index == 0:  # the batch itself: no layout
                self.blocks.append({})
                self.wt_indices.append(sl.wt.indices)
                self.tile_rows.append(None)
                self.inputs.append(None)
                continue
            head = len(layers[index - 1].own)
            tile_rows = np.full(len(sl.needed), -1, np.int64)
            if part in sl.fetch:
                tile_rows[sl.fetch[part]] = layers[index - 1].send[part]
            blocks, offset = {}, head
            for q in sorted(q for q in sl.fetch if q != part):
                n = len(sl.fetch[q])
                blocks[q] = slice(offset, offset + n)
                tile_rows[sl.fetch[q]] = np.arange(offset, offset + n)
                offset += n
            if (tile_rows < 0).any():
                raise AssertionError(f"layer {index + 1}: an input of part {part} has no "
                                     "owner")
            self.blocks.append(blocks)
            self.tile_rows.append(tile_rows)
            self.wt_indices.append(tile_rows[sl.wt.indices].astype(sl.wt.indices.dtype))
            self.inputs.append(np.empty((offset, rows), np.float32))
        # each layer's outputs: the head of the next layer's tile, the top's its own
        self.outputs = [self.inputs[i + 1][:len(sl.own)] if i + 1 < n_layers
                        else np.empty((len(sl.own), rows), np.float32)
                        for i, sl in enumerate(layers)]
        self.dyt = np.empty(max(len(sl.own) for sl in layers) * rows, np.float32)
        # partial errors: two tiles used in turn, since a layer's own partials are read
        # by the sum of the layer below
        size = max(t.shape[0] for t in self.inputs if t is not None) * rows if n_layers > 1 else 0
        self._partials = [np.empty(size, np.float32), np.empty(size, np.float32)]
        self.forward, self.backward = [], []
        for sl in layers:
            read = [ix for q, ix in sl.send.items() if q != part]
            self.forward.append(_split(sl.order_fwd, np.concatenate(read) if read
                                       else np.zeros(0, np.int64)))
            owned = [ix for q, ix in sl.fetch.items() if q != part]
            self.backward.append(_split(sl.order_bwd, np.concatenate(owned) if owned
                                        else np.zeros(0, np.int64)))
        # backward, per layer below the top: where each neuron's partial errors come
        # from (source 0 this part's own, at its own row of the tile above; then its
        # readers' pieces in part order), as CSR
        self.sums = [sum_plan(sl, part, sl.send.get(part))
                     if i + 1 < n_layers else None for i, sl in enumerate(layers)]

    def partials(self, layer: int) -> np.ndarray:
        """Layer ``layer``'s partial errors tile, laid out as its input tile."""
        flat = self._partials[layer % 2]
        tile = self.inputs[layer - 1]
        return flat[:tile.size].reshape(tile.shape)


def _workspace(state: Any, part: int, rows: int) -> _PartWorkspace:
    if state.workspace is None or state.workspace.rows != rows:
        state.workspace = None  # the old tiles go before the new ones are made
        state.workspace = _PartWorkspace(state, part, rows)
    return state.workspace


def _part_forward_backward(slot: Slot, state: Any, x_t: np.ndarray, labels: np.ndarray,
                           share: float, parts: int) -> float | None:
    """Steps 1-3 for a part's slices (``state``: a :class:`~.model_parts._Part`); its
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
            # its own outputs are in the tile's head already; each peer's piece is copied
            # whole into its block
            tile = ws.inputs[layer - 1]
            blocks = ws.blocks[layer - 1]
            for q, piece in slot.receive(FORWARD, layer, sorted(blocks)).items():
                tile[blocks[q]] = piece
        sl.wt.data[:] = sl.w.data[sl.to_t]  # w changed in the last update
        out = ws.outputs[layer - 1]
        indices = ws.wt_indices[layer - 1]
        boundary, interior = ws.forward[layer - 1]
        if layer < n_layers and len(boundary):
            dense_step(tile, sl.wt.indptr, indices, sl.wt.data, sl.bias, ymax, out,
                       ROW_TILE, boundary)
            for p, ix in sl.send.items():  # to the other parts that read them
                if p != part:
                    slot.send(FORWARD, "forward", group, layer + 1, p, part, out[ix])
            dense_step(tile, sl.wt.indptr, indices, sl.wt.data, sl.bias, ymax, out,
                       ROW_TILE, interior)
        else:
            dense_step(tile, sl.wt.indptr, indices, sl.wt.data, sl.bias, ymax, out,
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
            sl.partial = ws.partials(layer)
            remote, own = ws.backward[layer - 1]
            rows_of = ws.tile_rows[layer - 1]
            layer_backward_t(delta, sl.inputs, sl.w, sl.partial, remote, grad=grad,
                             tile_rows=rows_of)
            for q, block in ws.blocks[layer - 1].items():  # back to the inputs' owners
                # a copy: the tile is written again two layers down, maybe before a
                # same-worker reader has summed it
                slot.send(BACKWARD, "backward", group, layer - 1, q, part,
                          sl.partial[block].copy())
            layer_backward_t(delta, sl.inputs, sl.w, sl.partial, own, grad=grad,
                             tile_rows=rows_of)
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
             backend: str = "compiled", strategy: str = "training",
             bucket_bytes: int = BUCKET_BYTES, poll: float = POLL_SECONDS,
             timeout: float = PIECE_TIMEOUT) -> dict[str, Any]:
    """One slot's persistent loop (a task on its worker; see the module docstring).

    Parameters
    ----------
    key
        The trainer's state key on this worker: a part's (its :data:`~.model_parts.PARTS` key
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
    strategy
        Names the loop in its errors (``"data"``, ``"model"``, ``"hybrid"``).
    bucket_bytes
        With ``whole`` and two groups: the least bytes of gradient sent at once during
        the backward (:func:`~.replicas.gradient_buckets`).

    Each feed is a list of steps, each a dict: ``x`` (the group's input columns this part
    reads, ``needed x rows`` float32, or with ``whole`` the group's rows) and ``labels``,
    or ``rows`` (ids into the rows held here, :func:`~.replicas.hold_rows`); and
    ``share``, the group's rows over the batch's (its loss and gradient are scaled by
    it). Its reply is one record per step: ``loss`` (the group's scaled loss, on part 0;
    else None), ``moved`` and ``local`` (bytes per :data:`~.collectives.BYTE_KEYS`),
    ``seconds`` (the step here), ``started`` (``time.time()``) and
    :data:`~.collectives.TIMING_KEYS`.

    Returns
    -------
    dict
        ``steps``: the steps it ran.
    """
    with joined_run(token, expected=expected, peers=sorted({w for row in route for w in row}),
                    strategy=strategy, label=f"slot ({group}, {part})",
                    cancelled=f"{strategy} training loop {token}: slot ({group}, {part}) "
                              "was cancelled",
                    registered_by="the trainers register it") as joined:
        slot = Slot(joined.exchange, joined.run, token, group, part, groups, route,
                     joined.alive, timeout, poll)
        steps = 0
        for number in itertools.count():
            feed = slot.next_feed(number)
            if feed is None:
                break
            records = []
            for item in feed:
                slot.begin_step(steps)
                records.append(_step(slot, key, item, groups, parts, whole, backend,
                                     bucket_bytes))
                steps += 1
            slot.reply(number, records)
        slot.flush()
    return {"steps": steps}


def _step(slot: Slot, key: str, item: dict[str, Any], groups: int, parts: int,
          whole: bool, backend: str, bucket_bytes: int) -> dict[str, Any]:
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
        loss = data_step(slot, key, groups, x, labels, share, backend, bucket_bytes)
    else:
        state = PARTS[(key, slot.part)]
        loss = _part_forward_backward(slot, state, x, labels, share, parts)
        if groups > 1:
            grads = _part_gradients(state)
            _set_part_gradients(state, unflatten(timed_allreduce(slot, groups,
                                                                  flatten(grads)), grads))
        u0 = time.perf_counter()
        apply_update(state)
        slot.update_s = time.perf_counter() - u0
    return {"loss": loss, "moved": dict(slot.moved), "local": dict(slot.local),
            "seconds": time.perf_counter() - t0, "started": started,
            "rows": int(labels.shape[0]), "forward_s": slot.forward_s,
            "backward_s": slot.backward_s, "update_s": slot.update_s,
            "wait_s": slot.wait_s, "send_s": slot.send_s, "allreduce_s": slot.allreduce_s}


