"""Serial training loop: one step, whole epochs, prediction, on either backend."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import compiled, reference
from .losses import as_labels
from .model import Gradients, SparseModel
from .optim import SGD

__all__ = ["BACKENDS", "batches", "fit", "gradients", "predict", "train_step"]

#: The training paths: the plain float64 reference and the compiled float32 kernels.
BACKENDS = ("reference", "compiled")

HISTORY_COLUMNS = ["epoch", "loss", "train_accuracy", "test_accuracy", "seconds"]


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
        Seeds the shuffling.

    Returns
    -------
    pandas.DataFrame
        One row per epoch: ``epoch`` (1-based), ``loss`` (mean over the epoch's steps,
        weighted by rows), ``train_accuracy`` and ``test_accuracy`` (after the epoch),
        ``seconds`` (the epoch's training steps, evaluation excluded).
    """
    _check_backend(backend)
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {epochs}")
    y_train = as_labels(y_train, x_train.shape[0], model.n_classes)
    y_test = as_labels(y_test, x_test.shape[0], model.n_classes)
    rng = np.random.default_rng(seed)
    workspace = compiled.Workspace()
    rows = []
    for epoch in range(1, epochs + 1):
        total, seen = 0.0, 0
        t0 = time.perf_counter()
        for idx in batches(x_train.shape[0], batch, rng):
            total += train_step(model, x_train[idx], y_train[idx], optimizer, backend,
                                workspace) * len(idx)
            seen += len(idx)
        seconds = time.perf_counter() - t0
        rows.append({
            "epoch": epoch,
            "loss": total / max(seen, 1),
            "train_accuracy": float(np.mean(predict(model, x_train, backend) == y_train)),
            "test_accuracy": float(np.mean(predict(model, x_test, backend) == y_test)),
            "seconds": seconds,
        })
    return pd.DataFrame(rows, columns=HISTORY_COLUMNS).astype(
        {"epoch": "int64", "loss": "float64", "train_accuracy": "float64",
         "test_accuracy": "float64", "seconds": "float64"})
