"""Serial training loop: one step, whole epochs, prediction, on either backend."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import compiled, reference
from .losses import as_labels
from .model import Gradients, SparseModel
from .optim import SGD, check_epochs

__all__ = ["BACKENDS", "HISTORY_COLUMNS", "TRAINER_HISTORY_COLUMNS", "batches", "fit",
           "fit_trainer", "gradients", "predict", "step_bytes", "train_step"]

#: The training paths: the plain float64 reference and the compiled float32 kernels.
BACKENDS = ("reference", "compiled")

#: The columns of :func:`fit`'s per-epoch history.
HISTORY_COLUMNS = ["epoch", "loss", "train_accuracy", "test_accuracy", "seconds"]
#: :func:`fit_trainer`'s: the same and the bytes the epoch's steps moved between workers.
TRAINER_HISTORY_COLUMNS = [*HISTORY_COLUMNS, "bytes_moved"]


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def gradients(model: SparseModel, x: np.ndarray | sp.spmatrix, labels: np.ndarray,
              backend: str = "compiled", workspace: compiled.Workspace | None = None
              ) -> tuple[float, Gradients]:
    """Loss and gradients of ``model`` on one batch (forward then backward)."""
    _check_backend(backend)
    if backend == "reference":
        return reference.backward(model, reference.forward(model, x), labels)
    return compiled.backward(model, compiled.forward(model, x, workspace), labels)


def train_step(model: SparseModel, x: np.ndarray | sp.spmatrix, labels: np.ndarray,
               optimizer: SGD, backend: str = "compiled",
               workspace: compiled.Workspace | None = None) -> float:
    """One step: forward, backward, update. Returns the batch's loss before the update."""
    value, grads = gradients(model, x, labels, backend, workspace)
    optimizer.step(grads)
    return value


def predict(model: SparseModel, x: np.ndarray | sp.spmatrix, backend: str = "compiled",
            batch: int = 1024) -> np.ndarray:
    """Class ids (argmax of the logits) of the rows of ``x``, ``batch`` rows at a time."""
    _check_backend(backend)
    workspace = compiled.Workspace()
    out = []
    for s in range(0, x.shape[0], batch):
        part = x[s : s + batch]
        if backend == "reference":
            logits = reference.forward(model, part).logits
        else:
            logits = compiled.forward(model, part, workspace).logits
        out.append(np.argmax(logits, axis=1))
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def batches(rows: int, batch: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """A random permutation of ``0..rows-1`` in slices of ``batch`` (the last may be short)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    order = rng.permutation(rows)
    for s in range(0, rows, batch):
        yield order[s : s + batch]


def step_bytes(step: object) -> int:
    """Bytes a parallel trainer's step moved between workers: ``bytes_moved`` where the
    step has it (data parallelism), else ``bytes_forward + bytes_backward`` (model
    parallelism) plus ``bytes_gradient`` (the hybrid's gradients across row groups)."""
    moved = getattr(step, "bytes_moved", None)
    if moved is None:
        moved = (step.bytes_forward + step.bytes_backward
                 + getattr(step, "bytes_gradient", 0))
    return int(moved)


def _epochs(take_steps: Callable[[np.ndarray, np.ndarray, list[np.ndarray]],
                                  list[tuple[float, int]]],
            current: Callable[[], SparseModel], x_train: np.ndarray, y_train: np.ndarray,
            x_test: np.ndarray, y_test: np.ndarray, *, epochs: int, batch: int,
            backend: str, seed: int,
            prepare: Callable[[np.ndarray, np.ndarray], Any] | None = None) -> pd.DataFrame:
    """The loop :func:`fit` and :func:`fit_trainer` share: ``epochs`` passes of
    :func:`batches` (one ``default_rng(seed)`` for the whole run),
    ``take_steps(x_train, y_train, ids)`` taking an epoch's steps (``ids``: each step's
    row ids, in order) and giving each step's loss and bytes moved, the accuracies of
    ``current()`` after each epoch; ``prepare(x_train, y_train)`` first, untimed."""
    _check_backend(backend)
    check_epochs(epochs)
    classes = current().n_classes
    y_train = as_labels(y_train, x_train.shape[0], classes)
    y_test = as_labels(y_test, x_test.shape[0], classes)
    rng = np.random.default_rng(seed)
    if prepare is not None and epochs:
        prepare(x_train, y_train)
    rows = []
    for epoch in range(1, epochs + 1):
        total, seen, moved = 0.0, 0, 0
        ids = list(batches(x_train.shape[0], batch, rng))
        t0 = time.perf_counter()
        for idx, (loss, step_moved) in zip(ids, take_steps(x_train, y_train, ids),
                                           strict=True):
            total += loss * len(idx)
            seen += len(idx)
            moved += step_moved
        seconds = time.perf_counter() - t0
        model = current()
        rows.append({
            "epoch": epoch,
            "loss": total / max(seen, 1),
            "train_accuracy": float(np.mean(predict(model, x_train, backend) == y_train)),
            "test_accuracy": float(np.mean(predict(model, x_test, backend) == y_test)),
            "seconds": seconds,
            "bytes_moved": moved,
        })
    return pd.DataFrame(rows, columns=TRAINER_HISTORY_COLUMNS).astype(
        {"epoch": "int64", "loss": "float64", "train_accuracy": "float64",
         "test_accuracy": "float64", "seconds": "float64", "bytes_moved": "int64"})


def _one_by_one(take_step: Callable[[np.ndarray, np.ndarray], tuple[float, int]]
                ) -> Callable[[np.ndarray, np.ndarray, list[np.ndarray]],
                              list[tuple[float, int]]]:
    """An epoch's steps taken one ``take_step(x, labels)`` at a time."""
    def take_steps(x: np.ndarray, y: np.ndarray, ids: list[np.ndarray]
                   ) -> list[tuple[float, int]]:
        return [take_step(x[idx], y[idx]) for idx in ids]
    return take_steps


def fit(model: SparseModel, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
        y_test: np.ndarray, *, epochs: int, batch: int, optimizer: SGD,
        backend: str = "compiled", seed: int = 0) -> pd.DataFrame:
    """Train ``model`` in place for ``epochs`` epochs of shuffled mini-batches.

    Parameters
    ----------
    model
        Trained in place.
    x_train, y_train, x_test, y_test
        Rows and class ids; the test rows are only evaluated.
    epochs, batch
        Passes over the training rows, and rows per step.
    optimizer
        Updates ``model``.
    backend
        ``"compiled"`` (float32 kernels) or ``"reference"``.
    seed
        Seeds the shuffling (:func:`fit_trainer` with the same seed takes the same batches).

    Returns
    -------
    pandas.DataFrame
        One row per epoch, :data:`HISTORY_COLUMNS`: ``epoch`` (1-based), ``loss`` (mean
        over the epoch's steps, weighted by rows), ``train_accuracy`` and ``test_accuracy``
        (after the epoch), ``seconds`` (the epoch's training steps, evaluation excluded).
    """
    _check_backend(backend)
    workspace = compiled.Workspace()

    def take_step(x: np.ndarray, labels: np.ndarray) -> tuple[float, int]:
        return train_step(model, x, labels, optimizer, backend, workspace), 0

    history = _epochs(_one_by_one(take_step), lambda: model, x_train, y_train, x_test, y_test,
                      epochs=epochs, batch=batch, backend=backend, seed=seed)
    return history[HISTORY_COLUMNS]


def fit_trainer(trainer: Any, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
                y_test: np.ndarray, *, epochs: int, batch: int, seed: int = 0,
                backend: str = "compiled") -> pd.DataFrame:
    """:func:`fit` for any trainer: the same shuffled batches, each through
    ``trainer.step(x, labels)``; the accuracies of ``trainer.model()`` after each epoch.

    Parameters
    ----------
    trainer
        Anything with ``.step(x, labels)`` (returning a result with ``.loss`` and the bytes
        moved, see :func:`step_bytes`) and ``.model()`` (a copy of the current weights):
        :class:`~.data_parallel.DataParallelTrainer`,
        :class:`~.model_parallel.ModelParallelTrainer`, ... It is not closed here. One
        with ``.hold(x, labels)`` and ``.steps(ids)`` (both parallel trainers) is given
        the training rows once, before the first epoch, and then each epoch's batches as
        row ids in one call (one feed of its persistent loop).
    x_train, y_train, x_test, y_test, epochs, batch, seed
        As in :func:`fit`: with the same ``seed``, the same batches in the same order.
    backend
        The path :func:`predict` evaluates ``trainer.model()`` with.

    Returns
    -------
    pandas.DataFrame
        :data:`TRAINER_HISTORY_COLUMNS`: :func:`fit`'s columns and ``bytes_moved``, the
        bytes the epoch's steps moved between workers. ``seconds`` is the wall time of the
        epoch's steps as the client sees it (the first epoch's includes the workers' first
        calls of the kernels).
    """
    def take_step(x: np.ndarray, labels: np.ndarray) -> tuple[float, int]:
        step = trainer.step(x, labels)
        return float(step.loss), step_bytes(step)

    def take_epoch(x: np.ndarray, y: np.ndarray, ids: list[np.ndarray]
                   ) -> list[tuple[float, int]]:
        return [(float(s.loss), step_bytes(s)) for s in trainer.steps(ids)]

    if hasattr(trainer, "hold") and hasattr(trainer, "steps"):
        # the rows placed on the workers once; every epoch one feed of row ids
        return _epochs(take_epoch, trainer.model, x_train, y_train, x_test, y_test,
                       epochs=epochs, batch=batch, backend=backend, seed=seed,
                       prepare=trainer.hold)
    return _epochs(_one_by_one(take_step), trainer.model, x_train, y_train, x_test,
                   y_test, epochs=epochs, batch=batch, backend=backend, seed=seed)
