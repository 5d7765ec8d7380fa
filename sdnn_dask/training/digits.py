"""A real task for the serial trainer: scikit-learn's handwritten digits at 1024 features.

``sklearn.datasets.load_digits`` (1797 images of 8 x 8 pixels, values 0..16, ten classes)
ships inside scikit-learn, so nothing is downloaded. Each image is upsampled 4x to 32 x 32
(bilinear by default) and scaled to [0, 1], flattened row-major: 1024 features, one per
neuron of a 1024-neuron RadiX-Net network. scikit-learn is the optional extra ``train``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.ndimage

from ..data.radixnet import make_network
from .loop import BACKENDS, fit
from .model import SparseModel, init_model
from .optim import SGD, check_epochs, check_settings

__all__ = ["DigitsData", "digits_model", "load_digits_1024", "train_digits"]

#: Side of the upsampled image: 32 x 32 = 1024 features.
SIDE = 32
UPSAMPLING = ("bilinear", "nearest")


def _sklearn_datasets():
    try:
        from sklearn import datasets, model_selection
    except ImportError as error:
        raise ImportError(
            "the digits task needs scikit-learn: pip install 'sdnn_dask[train]'") from error
    return datasets, model_selection


@dataclass
class DigitsData:
    """The digits, split into training and held-out rows.

    Attributes
    ----------
    x_train, x_test
        ``rows x 1024`` float32 in [0, 1].
    y_train, y_test
        Class ids 0..9 (int64).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def upsample(images: np.ndarray, factor: int = 4, method: str = "bilinear") -> np.ndarray:
    """``images`` (``n x h x w``) enlarged ``factor`` times in both directions.

    ``"nearest"`` repeats each pixel; ``"bilinear"`` interpolates linearly between pixel
    centres (``scipy.ndimage.zoom``, order 1, edges kept).
    """
    if method not in UPSAMPLING:
        raise ValueError(f"upsample must be one of {', '.join(UPSAMPLING)}, got {method!r}")
    if method == "nearest":
        return images.repeat(factor, axis=1).repeat(factor, axis=2)
    return scipy.ndimage.zoom(images, (1, factor, factor), order=1, mode="nearest",
                              grid_mode=True)


def load_digits_1024(seed: int = 0, test_size: float = 0.2, method: str = "bilinear"
                     ) -> DigitsData:
    """scikit-learn's digits as 1024 features in [0, 1], with a seeded held-out split.

    Parameters
    ----------
    seed
        Seeds the split (stratified by class): same seed, same rows held out.
    test_size
        Fraction of the 1797 images held out.
    method
        Upsampling of the 8 x 8 images: ``"bilinear"`` or ``"nearest"``.

    Raises
    ------
    ImportError
        Without scikit-learn (the ``train`` extra).
    """
    datasets, model_selection = _sklearn_datasets()
    digits = datasets.load_digits()
    images = upsample(digits.images.astype(np.float64), SIDE // 8, method)
    x = np.clip(images / 16.0, 0.0, 1.0).reshape(len(images), SIDE * SIDE).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = model_selection.train_test_split(
        x, y, test_size=test_size, random_state=seed, stratify=y)
    return DigitsData(np.ascontiguousarray(x_train), y_train, np.ascontiguousarray(x_test),
                      y_test)


def digits_model(layers: int = 4, seed: int = 0, dtype: type = np.float32) -> SparseModel:
    """The untrained model of the digits task: ``make_network(1024, layers, seed=seed)``'s
    pattern with :func:`~sdnn_dask.training.init_model`'s values, ten classes."""
    return init_model(make_network(SIDE * SIDE, layers, seed=seed), classes=10, seed=seed,
                      dtype=dtype)


def train_digits(
    layers: int = 4,
    epochs: int = 10,
    batch: int = 32,
    lr: float = 0.01,
    *,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    seed: int = 0,
    backend: str = "compiled",
    test_size: float = 0.2,
    method: str = "bilinear",
    return_model: bool = False,
) -> pd.DataFrame | tuple[pd.DataFrame, SparseModel]:
    """Train a 1024-neuron RadiX-Net-pattern network on the digits; per-epoch figures.

    The pattern is ``make_network(1024, layers, seed=seed)``'s, with random values on it
    (:func:`~sdnn_dask.training.init_model`: He scaling, bias 0), a dense readout to the
    ten classes, softmax cross-entropy, and SGD with momentum.

    Parameters
    ----------
    layers
        Sparse layers.
    epochs, batch, lr, momentum, weight_decay
        The optimisation (see :class:`~sdnn_dask.training.SGD`).
    seed
        Seeds the pattern's permutations, the initial values, the split and the shuffling.
    backend
        ``"compiled"`` (float32 kernels) or ``"reference"`` (float64, slow).
    test_size, method
        As in :func:`load_digits_1024`.
    return_model
        Also return the trained model.

    Returns
    -------
    pandas.DataFrame
        ``epoch, loss, train_accuracy, test_accuracy, seconds`` (see
        :func:`~sdnn_dask.training.fit`); with ``return_model``, ``(history, model)``.

    Examples
    --------
    >>> history = train_digits(layers=2, epochs=2)  # doctest: +SKIP
    >>> history.test_accuracy.iloc[-1] > 0.9  # doctest: +SKIP
    True
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    data = load_digits_1024(seed, test_size, method)
    dtype = np.float32 if backend == "compiled" else np.float64
    model = digits_model(layers, seed, dtype)
    optimizer = SGD(model, lr=lr, momentum=momentum, weight_decay=weight_decay)
    history = fit(model, data.x_train, data.y_train, data.x_test, data.y_test, epochs=epochs,
                  batch=batch, optimizer=optimizer, backend=backend, seed=seed)
    return (history, model) if return_model else history


def main(argv: list[str] | None = None) -> int:
    """``python -m sdnn_dask.training``: train on the digits, print the per-epoch figures."""
    import argparse

    parser = argparse.ArgumentParser(description="Train a 1024-neuron RadiX-Net-pattern "
                                     "network on scikit-learn's digits (upsampled to 32 x 32).")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=BACKENDS, default="compiled")
    args = parser.parse_args(argv)
    try:  # argparse's error: exit 2 with the message, not a traceback from the first step
        check_settings(args.lr, args.momentum, args.weight_decay)
        check_epochs(args.epochs, low=1)
    except ValueError as error:
        parser.error(str(error))
    for option, value in (("--layers", args.layers), ("--batch", args.batch)):
        if value < 1:
            parser.error(f"{option} must be >= 1, got {value}")
    history = train_digits(args.layers, args.epochs, args.batch, args.lr,
                           momentum=args.momentum, weight_decay=args.weight_decay,
                           seed=args.seed, backend=args.backend)
    print(history.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"held-out accuracy {history.test_accuracy.iloc[-1]:.4f} after {len(history)} "
          f"epochs, {history.seconds.sum():.1f} s of training")
    return 0
