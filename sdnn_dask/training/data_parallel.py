"""Data-parallel training on Dask: rows of each mini-batch split over the workers.

Every worker holds its own copy of the whole model and optimiser (placed once, kept in the
worker's memory between steps). A step:

1. sends worker ``w`` its block of the batch's rows (contiguous, as even as possible);
2. each worker computes its block's loss and gradients (:func:`~.loop.gradients`, the
   serial kernels), scaled by its share of the rows, so their sum is the batch mean the
   serial step uses;
3. the gradients are summed by a binary tree of pairwise additions, each on the worker
   that already holds the left operand (``ceil(log2 P)`` levels; no worker receives more
   than one gradient per level);
4. the sum goes to every worker, and each applies the same SGD update to its copy, so the
   copies stay identical.

Every gradient moved is ``nnz(W)`` weights plus biases and readout, whatever the batch:
``bytes_moved`` counts them (``2 (P - 1)`` gradients a step: the reduction and the
broadcast of the sum). The rows themselves are sent too, and are counted apart
(``bytes_rows``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from distributed import Client, wait

from ..parallel.transport.collectives import chunks
from ..registry import TRANSPORTS
from .loop import BACKENDS, gradients
from .model import Gradients, SparseModel
from .optim import check_settings
from .replicas import BUCKET_BYTES, drop_replica, held, hold_rows, place_replica
from .trainer import StepTiming, Trainer, timing_fields

__all__ = ["TRANSPORTS", "DataParallelTrainer", "StepResult"]

def _block_gradients(trainer: str, x: Any, labels: np.ndarray, share: float,
                     backend: str) -> tuple[float, Gradients]:
    model, _, workspace = held(trainer)
    loss, grads = gradients(model, x, labels, backend,
                            workspace if backend == "compiled" else None)
    return loss * share, _scaled(grads, share)


def _scaled(grads: Gradients, factor: float) -> Gradients:
    def scale(a: np.ndarray) -> np.ndarray:
        return a * a.dtype.type(factor)
    return Gradients([scale(g) for g in grads.weights], [scale(g) for g in grads.biases],
                     scale(grads.readout), scale(grads.readout_bias))


def _add(a: tuple[float, Gradients], b: tuple[float, Gradients]) -> tuple[float, Gradients]:
    (la, ga), (lb, gb) = a, b
    return la + lb, Gradients([x + y for x, y in zip(ga.weights, gb.weights, strict=True)],
                              [x + y for x, y in zip(ga.biases, gb.biases, strict=True)],
                              ga.readout + gb.readout, ga.readout_bias + gb.readout_bias)


def _apply(trainer: str, total: tuple[float, Gradients]) -> float:
    _, optimizer, _ = held(trainer)
    optimizer.step(total[1])
    return total[0]


def _fetch(trainer: str) -> SparseModel:
    return held(trainer)[0]


def gradient_bytes(model: SparseModel) -> int:
    """Bytes of one full gradient of ``model`` (what data parallelism moves per transfer)."""
    return int(sum(p.nbytes for p in model.parameters()))


@dataclass(frozen=True)
class StepResult(StepTiming):
    """One data-parallel step.

    Attributes
    ----------
    loss
        The batch's mean loss before the update (as the serial step returns it).
    seconds
        Wall time of the step, from sending the rows to every worker having updated.
    bytes_moved
        Gradient bytes moved between workers (reduction and broadcast).
    bytes_rows
        Bytes of the batch's rows sent to the workers (of their ids, when the workers
        hold the rows).
    transport
        ``"graph"`` or ``"direct"``.
    wait_seconds
        The longest a worker waited for the others' gradient pieces (direct transport).
    compute_seconds
        The slowest worker's compute: forward, backward and update (direct transport).
    slots
        Per worker, what its step measured (:func:`~.slot_task.run_slot`'s records: the
        seconds of :data:`~.collectives.TIMING_KEYS`, bytes; direct transport).
    """

    loss: float
    seconds: float
    bytes_moved: int
    bytes_rows: int


class DataParallelTrainer(Trainer):
    """Train one model by data parallelism on a Dask cluster.

    Parameters
    ----------
    client
        Any ``distributed.Client``.
    model
        The model to train; every worker gets its own copy (this object is not changed).
    lr, momentum, weight_decay
        The SGD settings (:class:`~sdnn_dask.training.optim.SGD`), the same on every worker.
    workers
        Addresses of the workers to use (default: every worker of the cluster).
    backend
        ``"compiled"`` (default) or ``"reference"``.
    transport
        ``"direct"`` (default: one task per worker and step; the gradient is all-reduced
        worker to worker, :func:`.collectives.allreduce`) or ``"graph"`` (the tree of tasks
        described above, the gradients moved by Dask).
    bucket_bytes
        Direct transport, two workers: the least bytes of gradient a worker sends to the
        other at once while its backward runs (default
        :data:`~.replicas.BUCKET_BYTES`; a message costs about 0.1 ms whatever its
        size, so small buckets cost more than their early start saves on small models).

    Examples
    --------
    >>> trainer = DataParallelTrainer(client, init_model(net, 10), lr=0.01)  # doctest: +SKIP
    >>> step = trainer.step(x, labels)  # doctest: +SKIP
    >>> trained = trainer.model()  # doctest: +SKIP
    """

    strategy = "data"

    def __init__(self, client: Client, model: SparseModel, *, lr: float,
                 momentum: float = 0.0, weight_decay: float = 0.0,
                 workers: list[str] | None = None, backend: str = "compiled",
                 transport: str = "direct", bucket_bytes: int = BUCKET_BYTES):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got "
                             f"{transport!r}")
        check_settings(lr, momentum, weight_decay)  # here, not in a worker's traceback
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) \
                or bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be a positive integer, got {bucket_bytes!r}")
        super().__init__(client, workers, prefix="sdnn-train")
        self.backend, self.transport, self.bucket_bytes = backend, transport, bucket_bytes
        self.route = [[w] for w in self.workers]
        self._gradient_bytes = gradient_bytes(model)
        shared = client.scatter(model, workers=self.workers, broadcast=True, hash=False)
        placed = [client.submit(place_replica, self.id, shared, lr, momentum, weight_decay,
                                workers=[w], allow_other_workers=False, pure=False)
                  for w in self.workers]
        client.gather(placed)
        client.cancel(shared)  # each worker has made its own copy
        self._connect(direct=transport == "direct")

    def step(self, x: np.ndarray | sp.spmatrix, labels: np.ndarray) -> StepResult:
        """One step on the batch ``x`` (``rows x N``) with class ``labels``."""
        rows = x.shape[0]
        if rows < 1 or len(labels) != rows:
            raise ValueError(f"a batch needs rows and one label a row; got {rows} rows and "
                             f"{len(labels)} labels")
        labels = np.asarray(labels)
        if self.transport == "direct":
            return self._step_direct(x, labels, rows)
        used = self.workers[: min(self.n_workers, rows)]
        bounds = np.linspace(0, rows, len(used) + 1).round().astype(int)
        start = time.perf_counter()
        parts = []
        sent = 0
        for w, lo, hi in zip(used, bounds[:-1], bounds[1:], strict=True):
            block, block_labels = x[lo:hi], labels[lo:hi]
            sent += _nbytes(block) + block_labels.nbytes
            parts.append((self.client.submit(
                _block_gradients, self.id, block, block_labels, (hi - lo) / rows,
                self.backend, workers=[w], allow_other_workers=False, pure=False), w))
        moved = 0
        while len(parts) > 1:  # a binary tree: the left operand's worker adds
            level = []
            for i in range(0, len(parts) - 1, 2):
                (a, wa), (b, _) = parts[i], parts[i + 1]
                level.append((self.client.submit(_add, a, b, workers=[wa],
                                                 allow_other_workers=False, pure=False), wa))
                moved += self._gradient_bytes
            if len(parts) % 2:
                level.append(parts[-1])
            parts = level
        total, home = parts[0]
        applied = [self.client.submit(_apply, self.id, total, workers=[w],
                                      allow_other_workers=False, pure=False)
                   for w in self.workers]
        moved += self._gradient_bytes * sum(w != home for w in self.workers)
        with self.client.as_current():
            wait(applied)
        losses = self.client.gather(applied)
        seconds = time.perf_counter() - start
        return StepResult(float(losses[0]), seconds, moved, sent, transport="graph")

    def _loop_keys(self) -> list[str]:
        return [self.id] * self.n_workers

    def _loop_options(self) -> dict[str, Any]:
        return {"whole": True, "backend": self.backend, "bucket_bytes": self.bucket_bytes}

    def _step_direct(self, x: Any, labels: np.ndarray, rows: int) -> StepResult:
        """Every worker's block through its slot's loop, the gradient all-reduced."""
        bounds = chunks(rows, self.n_workers)
        start = time.perf_counter()
        items, sent = [], 0
        for g in range(self.n_workers):
            lo, hi = int(bounds[g]), int(bounds[g + 1])
            block, block_labels = x[lo:hi], labels[lo:hi]
            sent += _nbytes(block) + block_labels.nbytes
            items.append([{"x": block, "labels": block_labels, "share": (hi - lo) / rows}])
        [records] = self._persistent().run([items])
        return self._result(records, rows, time.perf_counter() - start, sent)

    def _result(self, records: list[list[dict]], rows: int, seconds: float,
                sent: int) -> StepResult:
        done = [r for row in records for r in row]
        return StepResult(float(sum(d["loss"] for d in done)), seconds,
                          int(sum(d["moved"]["gradient"] for d in done)), sent,
                          transport="direct", **timing_fields(done))

    def hold(self, x: np.ndarray | sp.spmatrix, labels: np.ndarray) -> None:
        """Keep the training rows ``x`` and their ``labels`` on every worker, so that
        :meth:`steps` sends only row ids (on the graph transport, here only)."""
        labels = np.asarray(labels)
        if x.shape[0] != len(labels):
            raise ValueError(f"{x.shape[0]} rows and {len(labels)} labels")
        self._held = (x, labels)
        if self.transport == "direct":
            shared = self.client.scatter(x, workers=self.workers, broadcast=True,
                                         hash=False)
            self.client.gather([self.client.submit(
                hold_rows, self.id, 0, shared, labels, workers=[w],
                allow_other_workers=False, pure=False) for w in self.workers])
            self.client.cancel(shared)

    def steps(self, batches: list[np.ndarray]) -> list[StepResult]:
        """One step per array of row ids into the rows :meth:`hold` placed, in order; on
        the direct transport all of them in one feed of the slots' loop."""
        if self._held is not None and self.transport != "direct":
            x, labels = self._held
            return [self.step(x[idx], labels[idx]) for idx in batches]
        return super().steps(batches)

    def _feed_items(self, idx: np.ndarray) -> list[list[dict[str, Any]]]:
        if len(idx) < 1:
            raise ValueError("a batch needs rows")
        bounds = chunks(len(idx), self.n_workers)
        return [[{"rows": idx[bounds[g]:bounds[g + 1]],
                  "share": (bounds[g + 1] - bounds[g]) / len(idx)}]
                for g in range(self.n_workers)]

    def model(self, worker: int = 0) -> SparseModel:
        """A copy of the model as worker ``worker`` holds it now."""
        held = self.client.submit(_fetch, self.id, workers=[self.workers[worker]],
                                  allow_other_workers=False, pure=False).result()
        return held.copy()  # never the worker's own object (a threaded cluster shares it)

    _drop = drop_replica


def _nbytes(block: Any) -> int:
    if sp.issparse(block):
        return int(block.data.nbytes + block.indices.nbytes + block.indptr.nbytes)
    return int(np.asarray(block).nbytes)
