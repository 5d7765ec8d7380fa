"""Stochastic gradient descent with momentum and weight decay, pattern-preserving."""

from __future__ import annotations

import math

import numba
import numpy as np

from .model import Gradients, SparseModel


@numba.njit(nogil=True, cache=True)
def sgd_update(p, g, v, lr, momentum, decay, use_velocity):  # pragma: no cover
    """One pass over flat ``p``: ``g + decay * p``, the velocity, the step (as numpy's
    in-place sequence would do it, without its temporaries)."""
    for k in range(p.shape[0]):
        d = g[k] + decay * p[k]
        if use_velocity:
            d = momentum * v[k] + d
            v[k] = d
        p[k] -= lr * d

__all__ = ["MAX_EPOCHS", "MAX_LR", "SGD", "check_epochs", "check_settings"]

#: The largest learning rate accepted. The update is made in the model's float32, where a
#: rate past 3.4e38 is infinite and every weight NaN at the first step; training diverges
#: long before that: on the digits (4 layers, batch 32, momentum 0.9) lr 1 already drives
#: the loss to 5e4, lr 1e15 to 7e20, and from lr 1e18 on the weights overflow to NaN in
#: the first epoch, and the check against the serial run compares NaNs. 1e3 is far past
#: any rate that learns and far below where float32 gives out.
MAX_LR = 1e3
#: The most epochs accepted: an epoch of the digits takes about a second a strategy, so
#: 10,000 of them are hours already; more is a typo (``1e20``), not a run that finishes.
MAX_EPOCHS = 10_000


def check_settings(lr: float, momentum: float, weight_decay: float) -> None:
    """Raise ``ValueError`` unless ``0 < lr <= MAX_LR``, ``0 <= momentum < 1`` and
    ``0 <= weight_decay < inf`` (what :class:`SGD` and the parallel trainers accept).

    An infinite or huge rate (:data:`MAX_LR`) or an infinite decay is refused here: it
    makes every weight NaN within an epoch, and the run would report NaN losses (every
    check failed, the serial run's against itself included) rather than the mistake.
    """
    number = isinstance(lr, int | float | np.floating | np.integer) and not isinstance(lr, bool)
    if not (number and 0 < lr <= MAX_LR):
        why = " (past it training diverges to NaN weights)" if number and lr > MAX_LR else ""
        raise ValueError(f"lr must be a number in (0, {MAX_LR:g}]{why}, got {lr!r:.40}")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r:.40}")
    if not (weight_decay >= 0 and math.isfinite(weight_decay)):
        raise ValueError(f"weight_decay must be >= 0 and finite, got {weight_decay!r:.40}")


def check_epochs(epochs: int, low: int = 0) -> None:
    """Raise ``ValueError`` unless ``epochs`` is an integer in ``[low, MAX_EPOCHS]``.

    Examples
    --------
    >>> check_epochs(5)
    >>> check_epochs(1e20)
    Traceback (most recent call last):
    ...
    ValueError: epochs must be an integer in [0, 10000], got 1e+20
    """
    if (not isinstance(epochs, int | np.integer) or isinstance(epochs, bool)
            or not low <= epochs <= MAX_EPOCHS):
        raise ValueError(f"epochs must be an integer in [{low}, {MAX_EPOCHS}], got "
                         f"{epochs!r:.40}")


class SGD:
    """Plain SGD, optionally with momentum and weight decay (PyTorch's update rule).

    For every parameter ``p`` with gradient ``g``::

        g <- g + weight_decay * p          (weights W_l and readout R only)
        v <- momentum * v + g              (v = g on the first step)
        p <- p - lr * v

    as ``torch.optim.SGD`` with ``dampening=0, nesterov=False``. Biases (``b_l`` and ``c``)
    are not decayed. Updates write into the parameters' arrays in place: a sparse layer's
    ``W.data`` changes, its ``indptr`` and ``indices`` never do, even where a weight
    becomes 0.0.

    Parameters
    ----------
    model
        The model to update.
    lr
        Learning rate.
    momentum
        Momentum factor (0: none).
    weight_decay
        L2 penalty factor on the weights and the readout.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sdnn_dask.training import init_model, reference
    >>> model = init_model([sp.identity(4, format="csr")], classes=2, seed=0)
    >>> opt = SGD(model, lr=0.1, momentum=0.9)
    >>> x, labels = np.eye(4), np.array([0, 1, 0, 1])
    >>> before = reference.loss(model, x, labels)
    >>> for _ in range(20):
    ...     opt.step(reference.backward(model, reference.forward(model, x), labels)[1])
    >>> bool(reference.loss(model, x, labels) < before)
    True
    """

    def __init__(self, model: SparseModel, lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0):
        check_settings(lr, momentum, weight_decay)
        self.model = model
        self.lr = float(lr)
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.steps = 0
        n = model.n_layers
        params = model.parameters()
        # which parameters decay: W_1..W_L and R, not b_1..b_L nor c
        self._decays = [True] * n + [False] * n + [True, False]
        self._velocity = [np.zeros_like(p) for p in params] if self.momentum else None

    def step(self, grads: Gradients) -> None:
        """Apply one update from ``grads`` (any float dtype; cast to the model's)."""
        params = self.model.parameters()
        arrays = grads.arrays()
        if len(arrays) != len(params):
            raise ValueError(f"{len(arrays)} gradients for {len(params)} parameters")
        for k, (p, g, decays) in enumerate(zip(params, arrays, self._decays, strict=True)):
            if g.shape != p.shape:
                raise ValueError(f"gradient {k} has shape {g.shape}, its parameter {p.shape}")
            flat = p.reshape(-1)  # a view: every parameter array is contiguous
            if not np.shares_memory(flat, p):
                raise ValueError(f"parameter {k} is not contiguous")
            g = np.ascontiguousarray(g, dtype=p.dtype).reshape(-1)
            v = self._velocity[k].reshape(-1) if self._velocity is not None else flat[:0]
            dtype = p.dtype.type
            # in place: W.data of a sparse layer changes, its pattern is untouched
            sgd_update(flat, g, v, dtype(self.lr), dtype(self.momentum),
                    dtype(self.weight_decay if decays else 0.0), self._velocity is not None)
        self.steps += 1
