"""Whole epochs through any trainer (fit_trainer)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from sdnn_dask.training import SGD, fit, fit_trainer, gradients, init_model, train_step
from sdnn_dask.training.loop import HISTORY_COLUMNS, TRAINER_HISTORY_COLUMNS, batches

# --------------------------------------------------------------------------- fit_trainer


@dataclass(frozen=True)
class _Step:
    loss: float
    seconds: float
    bytes_moved: int


class _SerialTrainer:
    """The serial step behind the trainer interface; ``skip``: compute, never update."""

    def __init__(self, model, lr, momentum, skip=False):
        self._model = model.copy()
        self.optimizer = SGD(self._model, lr, momentum=momentum)
        self.skip = skip
        self.labels_seen: list[np.ndarray] = []

    def step(self, x, labels):
        self.labels_seen.append(np.asarray(labels))
        if self.skip:
            loss = gradients(self._model, x, labels)[0]
        else:
            loss = train_step(self._model, x, labels, self.optimizer)
        return _Step(loss, 0.0, 7)

    def model(self):
        return self._model.copy()


def _problem():
    rng = np.random.default_rng(4)
    pattern = [sp.random(48, 48, density=0.2, format="csr", dtype=np.float32, rng=rng)
               for _ in range(3)]
    model = init_model(pattern, 4, seed=2)
    x = rng.random((150, 48), dtype=np.float32)
    y = rng.integers(0, 4, 150)
    return model, (x[:110], y[:110], x[110:], y[110:])


def test_fit_trainer_takes_fits_batches_and_gives_its_history():
    """A trainer wrapping the serial step, through fit_trainer, is fit to the bit: the same
    batches in the same order (the same rng use), the same losses and accuracies; and the
    bytes of its steps summed per epoch."""
    model, arrays = _problem()
    serial = model.copy()
    expected = fit(serial, *arrays, epochs=3, batch=16,
                   optimizer=SGD(serial, 0.05, momentum=0.9), seed=5)
    trainer = _SerialTrainer(model, 0.05, 0.9)
    history = fit_trainer(trainer, *arrays, epochs=3, batch=16, seed=5)
    assert list(expected.columns) == HISTORY_COLUMNS
    assert list(history.columns) == TRAINER_HISTORY_COLUMNS
    same = ["epoch", "loss", "train_accuracy", "test_accuracy"]
    pd.testing.assert_frame_equal(history[same], expected[same])
    rng = np.random.default_rng(5)
    order = [idx for _ in range(3) for idx in batches(110, 16, rng)]
    assert len(trainer.labels_seen) == len(order) == 21
    for seen, idx in zip(trainer.labels_seen, order, strict=True):
        np.testing.assert_array_equal(seen, arrays[1][idx])
    assert (history["bytes_moved"] == 7 * 7).all()  # 7 steps an epoch, 7 bytes each
    for p, q in zip(trainer.model().parameters(), serial.parameters(), strict=True):
        np.testing.assert_array_equal(p, q)
