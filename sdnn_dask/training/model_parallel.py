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

The step runs on the direct transport: one long-running task per slot (row group x part,
:func:`~.slot_task.run_slot`), fed by the client through the trainer's persistent loop
(:class:`~.trainer.Trainer`), the pieces sent worker to worker; parts on the same worker
hand each other their columns in memory (nothing moved; those bytes are reported apart).
A task per part and layer with the pieces moved by the scheduler (the graph transport of
inference) took 4-15x a direct step at 1024-120 and is not offered for training
(docs/training.md).

Bytes counted (:class:`ModelParallelStep`): the ``nbytes`` of the float32 pieces as received, i.e.
``columns x rows x 4`` per piece, with no fixed overhead (the pickling's framing is not
counted). Layer 1 exchanges nothing (every part is sent the input columns it needs, counted
in ``bytes_inputs``) and no error flows below layer 1, so forward and backward both move the
activation columns of layers ``2..L``: ``sum_{l>=2} sum_p |needed_p(l) - own_p(l-1)| x rows
x 4`` in all (cross-worker plus same-worker), which :meth:`ModelParallelTrainer.predicted_bytes`
gives from the pattern and the partition alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from distributed import Client

from ..parallel.placement import slot_routes
from ..parallel.transport.collectives import chunks
from ..partition import NeuronPartition, make_neuron_partition
from ..registry import TRANSPORTS
from .losses import as_labels
from .model import SparseModel
from .model_parts import (
    add_layers,
    drop_parts,
    fetch_part,
    held_part_bytes,
    layer_slices,
    part_shell,
    pattern_network,
    place_part,
    routes_of,
    slice_bytes,
)
from .optim import check_settings
from .replicas import hold_rows
from .trainer import StepTiming, Trainer, timing_fields

__all__ = ["PLACE_BYTES", "ModelParallelStep", "ModelParallelTrainer"]

#: The least bytes of slices a part is sent at once while a trainer places its parts
#: (the client makes the next layers' slices only once these are placed).
PLACE_BYTES = 64 << 20


@dataclass(frozen=True)
class ModelParallelStep(StepTiming):
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
        Per slot, what its step measured (:func:`~.slot_task.run_slot`'s records; direct
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


class ModelParallelTrainer(Trainer):
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
        worker, :mod:`.slot_task`) or ``"graph"`` (one task per part and layer, the pieces
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
        if transport != "direct":
            # a task per part and layer, the pieces moved by the scheduler, took 4-9x a
            # direct step's time (docs/training.md): retired for training
            raise ValueError("model-parallel and hybrid training run on the direct "
                             "transport only")
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
        del network  # its values (4 bytes an edge) are not needed past the partition
        super().__init__(client, workers, prefix="sdnn-mptrain")
        self.partition, self.k = partition, partition.k
        self.row_groups, self.transport = int(row_groups), transport
        self.strategy = "model" if self.row_groups == 1 else "hybrid"
        self.route = slot_routes(self.workers, self.row_groups, self.k)
        # the assembled model's shape: the pattern referred to (never written), no values
        self._pattern = [(w.indptr, w.indices, w.shape) for w in model.weights]
        self._n_inputs, self._n_classes = model.n_inputs, model.n_classes
        self._ymax = model.ymax
        routes = routes_of(model, partition)
        # part p's input columns of layer 1 (what the client sends it), and per layer
        # the (column, part) pairs read from another part (the byte figures)
        self._needed = [route.needed for route in routes[0].parts]
        self._volume = [sum(len(ix) for q, route in enumerate(layer.parts)
                            for p, ix in route.receive.items() if p != q)
                        for layer in routes]
        self._place(model, routes, lr, momentum, weight_decay)
        self._connect()

    def _place(self, model: SparseModel, routes: list, lr: float, momentum: float,
               weight_decay: float) -> None:
        """Each part's shell, then its layers a few at a time (at least
        :data:`PLACE_BYTES` a part, straight to its workers), so the client holds one
        batch of slices at a time, not every part's (32 bytes an edge in all); every row
        group gets its own copy of the parts (updated identically)."""
        client = self.client
        client.gather([client.submit(
            place_part, self._key(g), part_shell(model, routes, p, lr, momentum,
                                                 weight_decay),
            workers=[row[p]], allow_other_workers=False, pure=False)
            for g, row in enumerate(self.route) for p in range(self.k)])
        pending: list[list] = [[] for _ in range(self.k)]

        def ship() -> None:
            placed = []
            for g, row in enumerate(self.route):
                for p, slices in enumerate(pending):
                    held = client.scatter(slices, workers=[row[p]], hash=False)
                    placed.append(client.submit(add_layers, self._key(g), p, held,
                                                workers=[row[p]], allow_other_workers=False,
                                                pure=False))
            client.gather(placed)
            for slices in pending:
                slices.clear()

        for slices in layer_slices(model, routes, momentum):
            for p, sl in enumerate(slices):
                pending[p].append(sl)
            del slices, sl
            if min(sum(slice_bytes(x) for x in part) for part in pending) >= PLACE_BYTES:
                ship()
        if pending[0]:
            ship()

    def held_bytes(self) -> dict[tuple[int, int], int]:
        """Per slot ``(g, c)``, the bytes its worker holds for the part's slices and
        readout (each about ``1/k`` of the model's)."""
        got = self.client.run(held_part_bytes, self.id, workers=self._hosts())
        out: dict[tuple[int, int], int] = {}
        for g, row in enumerate(self.route):
            for c, where in enumerate(row):
                out[(g, c)] = got[where][(self._key(g), c)]
        return out

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

    def step(self, x: np.ndarray | sp.spmatrix, labels: np.ndarray) -> ModelParallelStep:
        """One step on the batch ``x`` (``rows x N``) with class ``labels``."""
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) != 2 or shape[1] != self._n_inputs:
            raise ValueError(f"inputs must be rows x {self._n_inputs}, got {shape}")
        rows = int(shape[0])
        if rows < self.row_groups:
            raise ValueError(f"a batch needs at least one row per row group: {rows} rows, "
                             f"{self.row_groups} row groups")
        labels = as_labels(labels, rows, self._n_classes)
        start = time.perf_counter()
        dense = x.toarray() if sp.issparse(x) else np.asarray(x)
        return self._step_direct(dense, labels, rows, start)

    def _loop_keys(self) -> list[str]:
        return [self._key(g) for g in range(self.row_groups)]

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
                x_t = np.ascontiguousarray(block[:, self._needed[c]].T, dtype=np.float32)
                sent += x_t.nbytes
                row.append({"x": x_t, "labels": labels[lo:hi], "share": (hi - lo) / rows})
            items.append(row)
        [records] = self._persistent().run([items])
        return self._result(records, rows, time.perf_counter() - start, sent)

    def _result(self, records: list[list[dict]], rows: int, seconds: float,
                sent: int) -> ModelParallelStep:
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
        reads, so that :meth:`steps` sends only row ids."""
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) != 2 or shape[1] != self._n_inputs:
            raise ValueError(f"inputs must be rows x {self._n_inputs}, got {shape}")
        labels = as_labels(labels, int(shape[0]), self._n_classes)
        dense = np.asarray(x.toarray() if sp.issparse(x) else x, dtype=np.float32)
        self._held = (dense, labels)
        placed = []
        for c in range(self.k):
            columns = self.client.scatter(
                np.ascontiguousarray(dense[:, self._needed[c]].T), hash=False,
                workers=sorted({row[c] for row in self.route}), broadcast=True)
            for g, row in enumerate(self.route):
                placed.append(self.client.submit(
                    hold_rows, self._key(g), c, columns, labels, workers=[row[c]],
                    allow_other_workers=False, pure=False))
        self.client.gather(placed)

    def _feed_items(self, idx: np.ndarray) -> list[list[dict[str, Any]]]:
        if len(idx) < self.row_groups:
            raise ValueError(f"a batch needs at least one row per row group: "
                             f"{len(idx)} rows, {self.row_groups} row groups")
        bounds = chunks(len(idx), self.row_groups)
        return [[{"rows": idx[bounds[g]:bounds[g + 1]],
                  "share": (bounds[g + 1] - bounds[g]) / len(idx)}] * self.k
                for g in range(self.row_groups)]

    def model(self, group: int = 0) -> SparseModel:
        """The model assembled from row group ``group``'s parts (the original CSR order)."""
        held = self.client.gather([
            self.client.submit(fetch_part, self._key(group), p, workers=[self.route[group][p]],
                               allow_other_workers=False, pure=False) for p in range(self.k)])
        out = self._assembled()
        for layers, readout, c in held:
            for w, b, (w_pos, data, own, bias) in zip(out.weights, out.biases, layers,
                                                       strict=True):
                w.data[w_pos] = data
                b[own] = bias
            out.readout[layers[-1][2]] = readout
            if c is not None:
                out.readout_bias[:] = c
        return out

    def _assembled(self) -> SparseModel:
        """A model of the trainer's pattern (its own copy) with zero values."""
        weights = []
        for indptr, indices, shape in self._pattern:
            w = sp.csr_matrix((np.zeros(len(indices), np.float32), indices.copy(),
                               indptr.copy()), shape=shape, copy=False)
            w.has_sorted_indices = True
            weights.append(w)
        return SparseModel(weights, [np.zeros(w.shape[1], np.float32) for w in weights],
                           np.zeros((weights[-1].shape[1], self._n_classes), np.float32),
                           np.zeros(self._n_classes, np.float32), self._ymax)

    _drop = drop_parts
