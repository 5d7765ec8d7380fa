"""Model-parallel training on Dask: every layer's output neurons split over ``k`` parts.

A :class:`~sdnn_dask.partition.NeuronPartition` gives, for every level ``l``, the part that
owns each neuron. Part ``p`` keeps, per layer ``l``, the slice ``W_l[needed_p, own_p]``
(``own_p``: the level ``l`` neurons it owns, the columns of ``W_l`` it computes;
``needed_p``: the level ``l-1`` neurons with a stored weight into ``own_p``), the biases
``b_l[own_p]``, the readout rows ``R[own_p(L)]`` and their momentum; part 0 also keeps the
readout bias ``c``. Every part sees every row of the mini-batch. A step:

1. forward, layer by layer: part ``p`` gathers ``Y_{l-1}[:, needed_p]`` (the input columns
   of ``X`` for layer 1, sent by the client; for ``l >= 2`` the columns it owns and those
   cut for it by their owners) and computes ``Y_l[:, own_p]`` with
   :func:`~.compiled.layer_forward_t` on its slice, the serial kernel's sums in the serial
   order (so the activations are bit-identical to the serial step's);
2. readout: each part forms ``Y_L[:, own_p] @ R[own_p]``; part 0 sums the partials, adds
   ``c`` and takes the softmax cross-entropy once; ``dlogits`` goes back to every part;
3. backward, from layer ``L`` down: part ``p`` has ``dY_l[:, own_p]`` (from ``dlogits`` at
   the top; below, the sum of the partial errors every part that reads its columns sent
   back), masks it (:func:`~.compiled.delta_t`: its bias gradient), and
   :func:`~.compiled.layer_backward_t` gives the sampled gradient of its slice and the
   partial errors ``delta @ W_l[needed_p, own_p]^T`` of the inputs it read, which go back to
   their owners: the transposed pattern of the forward, the same volume;
4. update: each part applies SGD (the rule of :class:`~.optim.SGD`, its kernel) to its own
   slices; nothing is reduced across parts, since no two parts hold the same parameter.

Transport is the task graph: a part's work per layer is a task pinned to its worker, and
a "cut" task on the source's worker selects only the columns a destination on another
worker needs, so only those move. Parts on the same worker read each other's columns
from the worker's memory (no task, nothing moved); those bytes are reported apart.

Bytes counted (``StepResult``): the ``nbytes`` of the float32 pieces as received, i.e.
``columns x rows x 4`` per piece, with no fixed overhead (the pickling's framing is not
counted). Layer 1 exchanges nothing (every part is sent the input columns it needs, counted
in ``bytes_inputs``) and no error flows below layer 1, so forward and backward both move the
activation columns of layers ``2..L``: ``sum_{l>=2} sum_p |needed_p(l) - own_p(l-1)| x rows
x 4`` in all (cross-worker plus same-worker), which :meth:`ModelParallelTrainer.predicted_bytes`
gives from the pattern and the partition alone.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from distributed import Client, wait

from ..parallel.allocator import tune_allocator
from ..parallel.faults import connected
from ..parallel.transport.direct import connect_peers, ensure_exchange
from ..partition import NeuronPartition, make_neuron_partition
from .compiled import (
    delta_t,
    gather_delta,
    layer_backward_t,
    layer_forward_t,
    sampled_gradient_t,
)
from .losses import as_labels, softmax_cross_entropy
from .model import SparseModel
from .optim import check_settings
from .parts import (
    PARTS,
    apply_update,
    drop_parts,
    fetch_part,
    pattern_network,
    place_part,
    slice_model,
    sum_plan,
)
from .persistent import PersistentLoop, step_seconds, timing_fields
from .replicas import hold_rows
from .slot import TRANSPORTS, chunks

__all__ = ["ModelParallelStep", "ModelParallelTrainer"]


def _forward(trainer: str, p: int, layer: int, x: np.ndarray | None,
             pieces: dict[int, np.ndarray], local: tuple[int, ...], rows: int,
             *after: Any) -> tuple[int, int]:
    """Layer ``layer`` (1-based) forward on part ``p``.

    ``x``: the needed input columns (layer 1 only), ``needed x rows``. ``pieces``: source
    part -> the columns it cut for ``p`` (other workers); ``local``: parts on this worker
    (``p`` included) whose columns are read from memory. ``after`` only orders the task.
    Returns (bytes received from other workers, bytes read from other parts here).
    """
    state = PARTS[(trainer, p)]
    sl = state.layers[layer - 1]
    moved = read = 0
    if layer == 1:
        tile = x
    else:
        tile = np.empty((len(sl.needed), rows), np.float32)
        for q, piece in pieces.items():
            tile[sl.fetch[q]] = piece
            moved += piece.nbytes
        for q in local:
            src = PARTS[(trainer, q)].layers[layer - 2]
            tile[sl.fetch[q]] = src.outputs[src.send[p]]
            if q != p:
                read += len(sl.fetch[q]) * rows * 4
    sl.wt.data[:] = sl.w.data[sl.to_t]  # w changed in the last update
    out = np.empty((len(sl.own), rows), np.float32)
    layer_forward_t(tile, sl.wt, sl.bias, state.ymax, out, sl.order_fwd)
    sl.inputs, sl.outputs = tile, out
    return moved, read


def _cut_forward(trainer: str, q: int, level: int, p: int, *after: Any) -> np.ndarray:
    """The columns of part ``q``'s level ``level`` that part ``p`` reads (a copy: only it
    moves)."""
    sl = PARTS[(trainer, q)].layers[level - 1]
    return np.ascontiguousarray(sl.outputs[sl.send[p]])


def _readout(trainer: str, p: int, *after: Any) -> np.ndarray:
    state = PARTS[(trainer, p)]
    return state.layers[-1].outputs.T @ state.readout


def _loss(trainer: str, partials: list[np.ndarray], labels: np.ndarray
          ) -> tuple[float, np.ndarray]:
    """On part 0: the logits (partials summed, ``c`` added), the loss and ``dlogits``."""
    state = PARTS[(trainer, 0)]
    logits = partials[0].copy()
    for partial in partials[1:]:
        logits += partial
    logits += state.readout_bias
    value, dlogits = softmax_cross_entropy(logits, labels)
    state.grad_c = dlogits.sum(axis=0)
    return value, dlogits


def _backward(trainer: str, p: int, layer: int, top: tuple[float, np.ndarray] | None,
              pieces: dict[int, np.ndarray], local: tuple[int, ...], rows: int,
              *after: Any) -> tuple[int, int]:
    """Layer ``layer`` backward on part ``p``: ``dY_l[:, own_p]`` from ``dlogits`` (``top``,
    layer L) or as the sum of the partial errors of the parts that read its columns
    (``pieces`` from other workers, ``local`` parts' read from memory), then the slice's
    gradients and, below layer 1, its partial errors of ``Y_{l-1}[:, needed_p]``."""
    state = PARTS[(trainer, p)]
    sl = state.layers[layer - 1]
    moved = read = 0
    if top is not None:
        dlogits = top[1]
        dyt = state.readout @ dlogits.T
        state.grad_r = sl.outputs @ dlogits
        delta, sl.grad_b = delta_t(dyt, sl.outputs, state.ymax, out=dyt)
    else:
        sources = {q: piece for q, piece in pieces.items()}
        for q in local:
            src = PARTS[(trainer, q)].layers[layer]
            sources[q] = np.ascontiguousarray(src.partial[src.fetch[p]])
            if q != p:
                read += sources[q].nbytes
        moved = sum(piece.nbytes for piece in pieces.values())
        # its own partial errors first, then the others' in part order, summed and masked
        # as the direct transport does: the sum does not depend on placement
        if sl.sum_plan is None:
            sl.sum_plan = sum_plan(sl, p)
        readers, ptr, src_ix, row = sl.sum_plan
        dyt = np.empty((len(sl.own), rows), np.float32)
        sl.grad_b = np.zeros(len(sl.own), np.float32)
        if readers:
            gather_delta(tuple(np.require(sources[q], np.float32, ["C", "W"])
                               for q in readers),
                         ptr, src_ix, row, sl.outputs, np.float32(state.ymax), dyt,
                         sl.grad_b)
        else:  # no part reads these neurons: no error reaches them
            dyt[...] = 0.0
        delta = dyt
    if layer > 1:
        sl.partial, sl.grad_w, _ = layer_backward_t(delta, sl.inputs, sl.w, None, sl.order_bwd)
    else:
        sl.grad_w = sampled_gradient_t(sl.inputs, delta, sl.w, sl.order_bwd)
    return moved, read


def _apply(trainer: str, p: int, *after: Any) -> int:
    """SGD on part ``p``'s slices (``after`` only orders the task)."""
    apply_update(PARTS[(trainer, p)])
    return p


def _cut_backward(trainer: str, q: int, layer: int, p: int, *after: Any) -> np.ndarray:
    """Part ``q``'s partial errors of layer ``layer``'s inputs that part ``p`` owns."""
    sl = PARTS[(trainer, q)].layers[layer - 1]
    return np.ascontiguousarray(sl.partial[sl.fetch[p]])


@dataclass(frozen=True)
class ModelParallelStep:
    """One model-parallel step.

    Attributes
    ----------
    loss
        The batch's mean loss before the update (as the serial step returns it).
    seconds
        Wall time of the step, from submitting it to every part having updated.
    bytes_forward, bytes_backward
        Activation (forward) and partial-error (backward) bytes that crossed workers.
    bytes_forward_local, bytes_backward_local
        The same between different parts on one worker (read from memory, not moved).
    predicted_bytes
        What the partition predicts for one direction, cross-worker and same-worker
        together: :meth:`ModelParallelTrainer.predicted_bytes` for this batch.
    bytes_readout
        The readout's traffic: partial logits to part 0 and ``dlogits`` back to every
        other worker (``rows x classes x 4`` each).
    bytes_inputs
        The input columns sent to the parts for layer 1 (their row ids, when the workers
        hold the rows).
    bytes_gradient, bytes_gradient_local
        The hybrid's gradients summed across row groups, across and within workers.
    row_groups, transport
        ``R``, and ``"graph"`` or ``"direct"``.
    wait_seconds, compute_seconds
        The longest a slot waited for pieces, and the slowest slot's compute (forward,
        backward, update; direct transport).
    slots
        Per slot, what its step measured (:func:`~.direct.run_slot`'s records; direct
        transport).
    """

    loss: float
    seconds: float
    bytes_forward: int
    bytes_backward: int
    bytes_forward_local: int
    bytes_backward_local: int
    predicted_bytes: int
    bytes_readout: int
    bytes_inputs: int
    bytes_gradient: int = 0
    bytes_gradient_local: int = 0
    row_groups: int = 1
    transport: str = "graph"
    wait_seconds: float = 0.0
    compute_seconds: float = 0.0
    slots: tuple = ()

    @property
    def overhead_seconds(self) -> float:
        """The step's seconds beyond the slowest slot's compute (direct transport)."""
        return self.seconds - self.compute_seconds


class ModelParallelTrainer:
    """Train one model by model parallelism (a neuron partition) on a Dask cluster.

    Parameters
    ----------
    client
        Any ``distributed.Client``.
    model
        A float32 model with square ``N x N`` layers (the challenge's shape); it is sliced
        over the parts and not changed.
    partition
        A :class:`~sdnn_dask.partition.NeuronPartition` of the model's pattern, or a method
        name (``"block"``, ``"hash"``, ``"random"``, ``"hypergraph"``) with ``k``.
    k
        Parts, when ``partition`` is a name.
    lr, momentum, weight_decay
        The SGD settings (:class:`~sdnn_dask.training.optim.SGD`).
    row_groups
        ``R`` of the hybrid: each step's rows are split into ``R`` contiguous groups, each
        run by its own copy of the ``k`` parts; each part's gradient is summed across the
        groups before the update (1: plain model parallelism). Direct transport only.
    transport
        ``"direct"`` (default: one task per part and step, the pieces sent worker to
        worker, :mod:`.direct`) or ``"graph"`` (one task per part and layer, the pieces
        moved by Dask's scheduler).
    workers
        Addresses of the workers to use (default: every worker). Part ``c`` of row group
        ``g`` runs on ``workers[(g * k + c) % len(workers)]``, as in hybrid inference.
    seed
        For the ``"random"`` and ``"hypergraph"`` partitions made here.

    Examples
    --------
    >>> trainer = ModelParallelTrainer(client, model, "block", k=2, lr=0.01)  # doctest: +SKIP
    >>> step = trainer.step(x, labels)  # doctest: +SKIP
    >>> step.bytes_forward == step.bytes_backward  # doctest: +SKIP
    True
    >>> trained = trainer.model()  # doctest: +SKIP
    """

    def __init__(self, client: Client, model: SparseModel,
                 partition: NeuronPartition | str, *, k: int | None = None, lr: float,
                 momentum: float = 0.0, weight_decay: float = 0.0, row_groups: int = 1,
                 transport: str = "direct", workers: list[str] | None = None, seed: int = 0):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got "
                             f"{transport!r}")
        if int(row_groups) != row_groups or row_groups < 1:
            raise ValueError(f"row_groups must be a positive integer, got {row_groups!r}")
        if row_groups > 1 and transport != "direct":
            raise ValueError("the hybrid (row_groups > 1) runs on the direct transport only")
        if model.dtype != np.float32:
            raise TypeError(f"model parallelism runs the compiled float32 kernels; the model "
                            f"is {model.dtype}")
        check_settings(lr, momentum, weight_decay)
        network = pattern_network(model)
        if isinstance(partition, str):
            if k is None:
                raise ValueError("a partition given by name needs k")
            partition = make_neuron_partition(network, k, partition, seed=seed)
        elif k is not None and k != partition.k:
            raise ValueError(f"k={k} but the partition has {partition.k} parts")
        partition._check_network(network)
        self.client, self.partition = client, partition
        self.k = partition.k
        self.workers = sorted(workers or client.scheduler_info()["workers"])
        if not self.workers:
            raise ValueError("the cluster has no workers")
        self.row_groups, self.transport = int(row_groups), transport
        n = len(self.workers)
        self.route = [[self.workers[(g * self.k + c) % n] for c in range(self.k)]
                      for g in range(self.row_groups)]
        self.home = self.route[0]
        self.id = f"sdnn-mptrain-{uuid.uuid4().hex}"
        self._loop: PersistentLoop | None = None
        self._held: tuple[np.ndarray, np.ndarray] | None = None
        self._shapes = model.copy()  # pattern and dtype of the assembled model
        states = slice_model(partition, model, lr, momentum, weight_decay)
        # per layer, part p's needed columns (needed for the inputs and the byte figures)
        self._needed = [[sl.needed for sl in (s.layers[layer] for s in states)]
                        for layer in range(model.n_layers)]
        self._sources = [[sorted(s.layers[layer].fetch) for s in states]
                         for layer in range(model.n_layers)]
        self._readers = [[sorted(s.layers[layer].send) for s in states]
                         for layer in range(model.n_layers)]
        self._volume = [sum(len(ix) for q, s in enumerate(states)
                            for p, ix in s.layers[layer].fetch.items() if p != q)
                        for layer in range(model.n_layers)]
        # scattered straight to each slot's worker, not embedded in the graph (tens of MB);
        # every row group gets its own copy of the parts (updated identically)
        placed = []
        for g, row in enumerate(self.route):
            for s in states:
                held = client.scatter(s, workers=[row[s.part]], hash=False)
                placed.append(client.submit(place_part, self._key(g), held,
                                            workers=[row[s.part]], allow_other_workers=False,
                                            pure=False))
        client.gather(placed)
        if transport == "direct":
            ensure_exchange(client)
            connect_peers(client, sorted(set(w for row in self.route for w in row)))
        # see sdnn_dask.parallel.allocator: the pieces and tiles of every step without page faults
        client.run(tune_allocator, workers=sorted({w for w in self.workers}))

    def _key(self, group: int) -> str:
        """The state key of row group ``group``'s parts on their workers."""
        return f"{self.id}/g{group}"

    def predicted_bytes(self, rows: int) -> int:
        """Bytes one direction moves for a batch of ``rows``, across and within workers:
        ``sum_{l>=2} sum_p |needed_p(l) - own_p(l-1)| x rows x 4`` (float32 columns)."""
        return int(sum(self._volume[1:])) * rows * 4

    def volume(self) -> list[int]:
        """Per layer, the (column, part) pairs where a part reads a column it does not own
        (the partition's ``volume`` on this model's pattern; layer 1's is not exchanged)."""
        return list(self._volume)

    def _submit(self, fn: Any, part: int, *args: Any) -> Any:
        return self.client.submit(fn, *args, workers=[self.home[part]],
                                  allow_other_workers=False, pure=False)

    def step(self, x: np.ndarray | sp.spmatrix, labels: np.ndarray) -> ModelParallelStep:
        """One step on the batch ``x`` (``rows x N``) with class ``labels``."""
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) != 2 or shape[1] != self._shapes.n_inputs:
            raise ValueError(f"inputs must be rows x {self._shapes.n_inputs}, got {shape}")
        rows = int(shape[0])
        if rows < self.row_groups:
            raise ValueError(f"a batch needs at least one row per row group: {rows} rows, "
                             f"{self.row_groups} row groups")
        labels = as_labels(labels, rows, self._shapes.n_classes)
        start = time.perf_counter()
        dense = x.toarray() if sp.issparse(x) else np.asarray(x)
        if self.transport == "graph":
            return self._step_graph(dense, labels, rows, start)
        return self._step_direct(dense, labels, rows, start)

    def _persistent(self) -> PersistentLoop:
        """The slots' loop, started on the first direct step (again after a failure)."""
        if self._loop is None or self._loop.closed:
            self._loop = PersistentLoop(
                self.client, name=self.id, keys=[self._key(g) for g in range(self.row_groups)],
                route=self.route, strategy="model" if self.row_groups == 1 else "hybrid")
        return self._loop

    def _step_direct(self, dense: np.ndarray, labels: np.ndarray, rows: int, start: float
                     ) -> ModelParallelStep:
        """A step on the direct transport: one feed of the slots' loop."""
        bounds = chunks(rows, self.row_groups)
        items, sent = [], 0
        for g in range(self.row_groups):
            lo, hi = int(bounds[g]), int(bounds[g + 1])
            block = dense[lo:hi]
            row = []
            for c in range(self.k):
                x_t = np.ascontiguousarray(block[:, self._needed[0][c]].T, dtype=np.float32)
                sent += x_t.nbytes
                row.append({"x": x_t, "labels": labels[lo:hi], "share": (hi - lo) / rows})
            items.append(row)
        [records] = self._persistent().run([items])
        return self._result(records, rows, time.perf_counter() - start, sent)

    def _result(self, records: list[list[dict]], rows: int, seconds: float, sent: int
                ) -> ModelParallelStep:
        done = [r for row in records for r in row]

        def total(which: str, counter: str) -> int:
            return int(sum(d[which][counter] for d in done))

        return ModelParallelStep(
            loss=float(sum(d["loss"] for d in done if d["loss"] is not None)),
            seconds=seconds,
            bytes_forward=total("moved", "forward"), bytes_backward=total("moved", "backward"),
            bytes_forward_local=total("local", "forward"),
            bytes_backward_local=total("local", "backward"),
            predicted_bytes=self.predicted_bytes(rows),
            bytes_readout=total("moved", "readout"), bytes_inputs=sent,
            bytes_gradient=total("moved", "gradient"),
            bytes_gradient_local=total("local", "gradient"), row_groups=self.row_groups,
            transport="direct", **timing_fields(done))

    def hold(self, x: np.ndarray | sp.spmatrix, labels: np.ndarray) -> None:
        """Keep the training rows on the workers, each slot the input columns its part
        reads, so that :meth:`steps` sends only row ids (on the graph transport, here
        only)."""
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) != 2 or shape[1] != self._shapes.n_inputs:
            raise ValueError(f"inputs must be rows x {self._shapes.n_inputs}, got {shape}")
        labels = as_labels(labels, int(shape[0]), self._shapes.n_classes)
        dense = np.asarray(x.toarray() if sp.issparse(x) else x, dtype=np.float32)
        self._held = (dense, labels)
        if self.transport != "direct":
            return
        placed = []
        for c in range(self.k):
            columns = self.client.scatter(
                np.ascontiguousarray(dense[:, self._needed[0][c]].T), hash=False,
                workers=sorted({row[c] for row in self.route}), broadcast=True)
            for g, row in enumerate(self.route):
                placed.append(self.client.submit(
                    hold_rows, self._key(g), c, columns, labels, workers=[row[c]],
                    allow_other_workers=False, pure=False))
        self.client.gather(placed)

    def steps(self, batches: list[np.ndarray]) -> list[ModelParallelStep]:
        """One step per array of row ids into the rows :meth:`hold` placed, in order; on
        the direct transport all of them in one feed of the slots' loop."""
        if self._held is None:
            raise RuntimeError("hold() the training rows before steps()")
        dense, labels = self._held
        if self.transport != "direct":
            return [self.step(dense[idx], labels[idx]) for idx in batches]
        items = []
        for idx in batches:
            idx = np.asarray(idx, np.int64)
            if len(idx) < self.row_groups:
                raise ValueError(f"a batch needs at least one row per row group: "
                                 f"{len(idx)} rows, {self.row_groups} row groups")
            bounds = chunks(len(idx), self.row_groups)
            items.append([[{"rows": idx[bounds[g]:bounds[g + 1]],
                            "share": (bounds[g + 1] - bounds[g]) / len(idx)}] * self.k
                          for g in range(self.row_groups)])
        records = self._persistent().run(items)
        return [self._result(step, len(idx), step_seconds(step), int(idx.nbytes))
                for step, idx in zip(records, batches, strict=True)]

    def _step_graph(self, dense: np.ndarray, labels: np.ndarray, rows: int, start: float
                    ) -> ModelParallelStep:
        """A step on the task graph: a task per part and layer, cut tasks between."""
        n_layers, k, home = self._shapes.n_layers, self.k, self.home
        key = self._key(0)
        inputs = [np.ascontiguousarray(dense[:, needed].T, dtype=np.float32)
                  for needed in self._needed[0]]
        fwd: list[list[Any]] = []
        for layer in range(1, n_layers + 1):
            level = []
            for p in range(k):
                if layer == 1:
                    level.append(self._submit(_forward, p, key, p, 1, inputs[p], {}, (),
                                              rows))
                    continue
                sources = self._sources[layer - 1][p]
                local = tuple(q for q in sources if home[q] == home[p])
                pieces = {q: self._submit(_cut_forward, q, key, q, layer - 1, p,
                                          fwd[-1][q])
                          for q in sources if home[q] != home[p]}
                after = [fwd[-1][q] for q in local] + [fwd[-1][p]]
                level.append(self._submit(_forward, p, key, p, layer, None, pieces,
                                          local, rows, *after))
            fwd.append(level)
        partials = [self._submit(_readout, p, key, p, fwd[-1][p]) for p in range(k)]
        top = self._submit(_loss, 0, key, partials, labels)
        bwd: list[list[Any]] = [[None] * k for _ in range(n_layers)]
        for layer in range(n_layers, 0, -1):
            for p in range(k):
                if layer == n_layers:
                    bwd[layer - 1][p] = self._submit(_backward, p, key, p, layer, top, {},
                                                     (), rows)
                    continue
                above = bwd[layer]
                readers = self._readers[layer - 1][p]  # parts that read p's level-l columns
                local = tuple(q for q in readers if home[q] == home[p])
                pieces = {q: self._submit(_cut_backward, q, key, q, layer + 1, p,
                                          above[q])
                          for q in readers if home[q] != home[p]}
                after = [above[q] for q in local] + [above[p], top]
                bwd[layer - 1][p] = self._submit(_backward, p, key, p, layer, None,
                                                 pieces, local, rows, *after)
        applied = [self._submit(_apply, p, key, p, bwd[0][p],
                                *(bwd[layer][p] for layer in range(1, n_layers)))
                   for p in range(k)]
        with self.client.as_current():
            wait(applied)
        seconds = time.perf_counter() - start
        counts = self.client.gather([f for level in fwd + bwd for f in level])
        n_fwd = n_layers * k
        loss = float(self.client.gather(top)[0])
        remote = sum(home[p] != home[0] for p in range(k))
        others = len({home[p] for p in range(k)} - {home[0]})
        return ModelParallelStep(
            loss=loss, seconds=seconds,
            bytes_forward=int(sum(c[0] for c in counts[:n_fwd])),
            bytes_backward=int(sum(c[0] for c in counts[n_fwd:])),
            bytes_forward_local=int(sum(c[1] for c in counts[:n_fwd])),
            bytes_backward_local=int(sum(c[1] for c in counts[n_fwd:])),
            predicted_bytes=self.predicted_bytes(rows),
            bytes_readout=(remote + others) * rows * self._shapes.n_classes * 4,
            bytes_inputs=int(sum(a.nbytes for a in inputs)))

    def model(self, group: int = 0) -> SparseModel:
        """The model assembled from row group ``group``'s parts (the original CSR order)."""
        held = self.client.gather([
            self.client.submit(fetch_part, self._key(group), p, workers=[self.route[group][p]],
                               allow_other_workers=False, pure=False) for p in range(self.k)])
        out = self._shapes.copy()
        for layers, readout, c in held:
            for w, b, (w_pos, data, own, bias) in zip(out.weights, out.biases, layers,
                                                       strict=True):
                w.data[w_pos] = data
                b[own] = bias
            out.readout[layers[-1][2]] = readout
            if c is not None:
                out.readout_bias[:] = c
        return out

    def close(self) -> None:
        """Stop the slots' loop and drop the parts' state from the workers."""
        try:
            if self._loop is not None:
                loop, self._loop = self._loop, None
                loop.close()
        finally:  # a worker lost mid-fit holds nothing any more: not waited for
            live = connected(self.client)
            self.client.gather([self.client.submit(drop_parts, self.id, workers=[w],
                                                   allow_other_workers=False, pure=False)
                                for w in sorted({w for row in self.route for w in row})
                                if w in live])

    def __enter__(self) -> ModelParallelTrainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
