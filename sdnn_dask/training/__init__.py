"""Training sparse DNNs on a fixed pattern: a Dask-free core, and parallel trainers on it.

The core (this package's namespace: :mod:`.model`, :mod:`.reference_backprop`,
:mod:`.compiled`, :mod:`.losses`, :mod:`.optim`, :mod:`.loop`, :mod:`.digits`) knows
nothing of Dask. The parallel trainers are imported from their modules:
:class:`~.data_parallel.DataParallelTrainer` and
:class:`~.model_parallel.ModelParallelTrainer` (model parallelism and the hybrid), on the
base :class:`~.trainer.Trainer` and the workers' side in :mod:`.slot_task`,
:mod:`.model_parts` and :mod:`.replicas`; they move their bytes through
:mod:`sdnn_dask.parallel.transport`. Comparing them is
:mod:`sdnn_dask.study.training_comparison`'s, reporting on it :mod:`sdnn_dask.report.training`'s.

The forward is the challenge recurrence (``Z = Y @ W``; bias, ReLU and clamp on the
nonzeros of ``Z``) followed by a dense readout and softmax cross-entropy; gradients flow
back through ``[0 < Y < ymax]`` and the weight gradient is sampled on each layer's
pattern only. Two paths compute the same thing:

* :mod:`~sdnn_dask.training.reference_backprop` (``training.reference``): plain float64
  NumPy/SciPy, obviously right;
* :mod:`~sdnn_dask.training.compiled`: numba float32 kernels on dense transposed tiles,
  the inference kernel's design.

Both expose ``forward(model, x)``, ``backward(model, cache, labels)`` and
``loss(model, x, labels)``, and per-layer pieces (forward of one layer, backward of one
layer, the sampled weight gradient) for parallel trainers to build on.
:func:`train_digits` trains on scikit-learn's digits (the ``train`` extra).

Examples
--------
>>> import numpy as np
>>> from sdnn_dask.data.radixnet import make_network
>>> from sdnn_dask.training import SGD, init_model, train_step
>>> model = init_model(make_network(1024, 2), classes=10, seed=0)
>>> rng = np.random.default_rng(0)
>>> x, labels = rng.random((8, 1024), dtype=np.float32), rng.integers(0, 10, 8)
>>> loss = train_step(model, x, labels, SGD(model, lr=0.01))
"""

from . import compiled
from . import reference_backprop as reference
from .digits import DigitsData, load_digits_1024, train_digits
from .loop import BACKENDS, batches, fit, fit_trainer, gradients, predict, train_step
from .losses import softmax_cross_entropy
from .model import Gradients, SparseModel, init_model, pattern_of
from .optim import MAX_EPOCHS, MAX_LR, SGD

__all__ = [
    "BACKENDS",
    "MAX_EPOCHS",
    "MAX_LR",
    "SGD",
    "DigitsData",
    "Gradients",
    "SparseModel",
    "batches",
    "compiled",
    "fit",
    "fit_trainer",
    "gradients",
    "init_model",
    "load_digits_1024",
    "pattern_of",
    "predict",
    "reference",
    "softmax_cross_entropy",
    "train_digits",
    "train_step",
]
