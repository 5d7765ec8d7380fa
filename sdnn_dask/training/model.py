"""A trainable sparse DNN on a fixed pattern, its gradients, and its initialisation.

The model is the challenge network plus a dense readout, in the row-vector convention of
inference (``Y = Y @ W``)::

    Z_l = Y_{l-1} @ W_l
    Y_l = min(max(Z_l + b_l, 0), ymax)   on the nonzeros of Z_l;  0 where Z_l == 0
    logits = Y_L @ R + c

``W_l`` is CSR whose pattern (``indptr``, ``indices``) never changes: training only writes
``W_l.data``, so a weight that passes through 0.0 stays an edge. Everything here is plain
NumPy/SciPy and knows nothing of Dask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..core.network import Network

__all__ = ["Gradients", "SparseModel", "init_model", "pattern_of"]


def pattern_of(matrix: sp.spmatrix | sp.sparray | np.ndarray) -> sp.csr_matrix:
    """The stored entries of ``matrix`` as a canonical CSR pattern (values kept).

    Indices are sorted and duplicates summed, but stored zeros are **kept**: in a pattern
    an entry is an edge whatever its value.
    """
    csr = sp.csr_matrix(matrix, copy=True)
    csr.sum_duplicates()  # sorts indices; keeps explicit zeros (no eliminate_zeros)
    return csr


@dataclass(eq=False)
class SparseModel:
    """Sparse layers on a fixed pattern, per-layer biases, a clamp and a dense readout.

    Parameters
    ----------
    weights
        ``W_1 .. W_L`` as CSR, ``W_l`` of shape ``n_{l-1} x n_l`` (``N x N`` for the
        challenge's networks), sorted indices. Their pattern is fixed for the model's life;
        only ``W_l.data`` changes.
    biases
        ``b_1 .. b_L``, one vector of length ``n_l`` per layer.
    readout
        ``R``, dense ``n_L x classes``.
    readout_bias
        ``c``, length ``classes``.
    ymax
        The clamp of the activations (32 in the challenge).

    Notes
    -----
    Every array shares one dtype (float32 or float64); :meth:`parameters` lists them in a
    fixed order that :class:`Gradients` and the optimiser follow.
    """

    weights: list[sp.csr_matrix]
    biases: list[np.ndarray]
    readout: np.ndarray
    readout_bias: np.ndarray
    ymax: float
    _layout: object | None = field(default=None, repr=False)  # the compiled path's cache

    def __post_init__(self) -> None:
        if not self.weights:
            raise ValueError("a model needs at least one layer")
        if len(self.biases) != len(self.weights):
            raise ValueError(f"{len(self.weights)} layers but {len(self.biases)} bias vectors")
        dtype = np.dtype(self.weights[0].dtype)
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"weights must be float32 or float64, got {dtype}")
        n_in = self.weights[0].shape[0]
        for k, (w, b) in enumerate(zip(self.weights, self.biases, strict=True), start=1):
            if not sp.issparse(w) or w.format != "csr":
                raise TypeError(f"layer {k}: weights must be CSR")
            if w.shape[0] != n_in:
                raise ValueError(f"layer {k} has {w.shape[0]} inputs, the layer before gives "
                                 f"{n_in}")
            if b.shape != (w.shape[1],):
                raise ValueError(f"layer {k}: bias of shape {b.shape}, expected "
                                 f"({w.shape[1]},)")
            for name, a in (("weights", w.data), ("bias", b)):
                if a.dtype != dtype:
                    raise TypeError(f"layer {k}: {name} are {a.dtype}, the model is {dtype}")
            n_in = w.shape[1]
        if self.readout.shape[0] != n_in or self.readout.ndim != 2:
            raise ValueError(f"readout has shape {self.readout.shape}, expected ({n_in}, classes)")
        if self.readout_bias.shape != (self.readout.shape[1],):
            raise ValueError(f"readout_bias has shape {self.readout_bias.shape}, expected "
                             f"({self.readout.shape[1]},)")
        if self.readout.dtype != dtype or self.readout_bias.dtype != dtype:
            raise TypeError(f"the readout must be {dtype} like the weights")
        self.ymax = float(self.ymax)
        if not self.ymax > 0:
            raise ValueError(f"ymax must be positive, got {self.ymax}")

    @property
    def dtype(self) -> np.dtype:
        """The dtype of every parameter."""
        return np.dtype(self.weights[0].dtype)

    @property
    def n_layers(self) -> int:
        """Sparse layers (L)."""
        return len(self.weights)

    @property
    def n_inputs(self) -> int:
        """Features of an input row (rows of ``W_1``)."""
        return int(self.weights[0].shape[0])

    @property
    def n_classes(self) -> int:
        """Columns of the readout."""
        return int(self.readout.shape[1])

    @property
    def edges(self) -> int:
        """Entries of the sparse layers' patterns."""
        return int(sum(w.nnz for w in self.weights))

    @property
    def parameter_bytes(self) -> int:
        """Bytes of every trainable value (:meth:`parameters`)."""
        return int(sum(p.nbytes for p in self.parameters()))

    @property
    def pattern_bytes(self) -> int:
        """Bytes of the layers' patterns (``indptr`` and ``indices``)."""
        return int(sum(w.indptr.nbytes + w.indices.nbytes for w in self.weights))

    def parameters(self) -> list[np.ndarray]:
        """Every trainable array, as views that updates write through.

        Order: ``W_1.data .. W_L.data, b_1 .. b_L, R, c`` (as :meth:`Gradients.arrays`).
        """
        return [w.data for w in self.weights] + list(self.biases) + [self.readout,
                                                                     self.readout_bias]

    def copy(self, *, share_pattern: bool = False) -> SparseModel:
        """A deep copy (new arrays; the compiled path's cache is not shared).

        With ``share_pattern``, the layers' ``indptr`` and ``indices`` are this model's
        own arrays, not copies: training never writes them, and at 65536-120 they are
        1 GB a copy (:attr:`pattern_bytes`)."""
        return self.astype(self.dtype, share_pattern=share_pattern)

    def astype(self, dtype: type | np.dtype, *, share_pattern: bool = False) -> SparseModel:
        """The same model with every parameter converted to ``dtype`` (always a copy of
        the values; of the pattern too unless ``share_pattern``, see :meth:`copy`)."""
        dtype = np.dtype(dtype)
        weights = []
        for w in self.weights:
            indices, indptr = ((w.indices, w.indptr) if share_pattern
                               else (w.indices.copy(), w.indptr.copy()))
            c = sp.csr_matrix((w.data.astype(dtype), indices, indptr), shape=w.shape,
                              copy=False)
            c.has_sorted_indices = True
            weights.append(c)
        return SparseModel(weights, [b.astype(dtype) for b in self.biases],
                           self.readout.astype(dtype), self.readout_bias.astype(dtype),
                           self.ymax)

    def same_pattern(self, other: SparseModel) -> bool:
        """Whether ``other``'s layers have exactly this model's patterns."""
        return len(self.weights) == len(other.weights) and all(
            a.shape == b.shape and np.array_equal(a.indptr, b.indptr)
            and np.array_equal(a.indices, b.indices)
            for a, b in zip(self.weights, other.weights, strict=True))


@dataclass(eq=False)
class Gradients:
    """Gradients of the loss for every parameter of a :class:`SparseModel`.

    Attributes
    ----------
    weights
        Per layer, ``dL/dW_l`` on the pattern only: aligned with ``W_l.data`` (entry ``q``
        is the gradient of the ``q``-th stored weight in CSR order).
    biases
        Per layer, ``dL/db_l``.
    readout, readout_bias
        ``dL/dR`` and ``dL/dc``.
    """

    weights: list[np.ndarray]
    biases: list[np.ndarray]
    readout: np.ndarray
    readout_bias: np.ndarray

    def arrays(self) -> list[np.ndarray]:
        """Every gradient, in the order of :meth:`SparseModel.parameters`."""
        return list(self.weights) + list(self.biases) + [self.readout, self.readout_bias]


def init_model(
    network_or_pattern: Network | Sequence[sp.spmatrix | sp.sparray | np.ndarray],
    classes: int,
    seed: int = 0,
    *,
    dtype: type | np.dtype = np.float32,
    gain: float = 2.0,
    bias: float = 0.0,
    ymax: float | None = None,
) -> SparseModel:
    """A model with random values on a fixed sparse pattern.

    Parameters
    ----------
    network_or_pattern
        A :class:`~sdnn_dask.core.network.Network` (its layers' patterns and ``ymax`` are used;
        its weight values and bias are not), or a list of sparse matrices whose stored
        entries are the patterns (``n_{l-1} x n_l`` each).
    classes
        Columns of the readout.
    seed
        Seeds every random value: same seed, same model.
    dtype
        float32 (the compiled path's) or float64.
    gain
        Each weight is drawn from ``N(0, gain / fan_in)`` with ``fan_in`` the nonzeros of
        its column (the inputs of its neuron): 2 is He's scaling for ReLU, which keeps the
        activations' scale through a few layers (32 inputs per neuron in RadiX-Net: a
        standard deviation of 0.25).
    bias
        Initial value of every layer's bias (0: no row dies at the start for want of it).
    ymax
        The clamp; default the network's (or 32 for a bare pattern).

    Returns
    -------
    SparseModel
        Readout ``R`` drawn from ``N(0, 1 / n_L)``, readout bias 0.

    Examples
    --------
    >>> from sdnn_dask.data.radixnet import make_network
    >>> model = init_model(make_network(1024, 3), classes=10, seed=0)
    >>> model.n_layers, model.edges, model.readout.shape, model.dtype.name
    (3, 98304, (1024, 10), 'float32')
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {dtype}")
    if isinstance(network_or_pattern, Network):
        patterns = list(network_or_pattern.layers)
        ymax = network_or_pattern.ymax if ymax is None else ymax
    else:
        patterns = list(network_or_pattern)
        ymax = 32.0 if ymax is None else ymax
    if not patterns:
        raise ValueError("a model needs at least one layer")
    if classes < 1:
        raise ValueError(f"classes must be >= 1, got {classes}")
    rng = np.random.default_rng(seed)
    weights, biases = [], []
    for p in patterns:
        # a network's layers are canonical CSR already: their pattern is shared, not
        # copied (training never writes it; 1 GB at 65536-120)
        w = p if isinstance(network_or_pattern, Network) else pattern_of(p)
        fan_in = np.bincount(w.indices, minlength=w.shape[1])  # inputs of each neuron
        scale = np.sqrt(gain / np.maximum(fan_in, 1))[w.indices]
        values = (rng.standard_normal(w.nnz) * scale).astype(dtype)
        c = sp.csr_matrix((values, w.indices, w.indptr), shape=w.shape, copy=False)
        c.has_sorted_indices = True
        weights.append(c)
        biases.append(np.full(w.shape[1], bias, dtype=dtype))
    n_last = weights[-1].shape[1]
    readout = (rng.standard_normal((n_last, classes)) / np.sqrt(n_last)).astype(dtype)
    return SparseModel(weights, biases, readout, np.zeros(classes, dtype), float(ymax))


def flatten(arrays: list[np.ndarray]) -> np.ndarray:
    """``arrays`` end to end as one vector (a copy)."""
    return np.concatenate([np.asarray(a).reshape(-1) for a in arrays])


def unflatten(vector: np.ndarray, like: list[np.ndarray]) -> list[np.ndarray]:
    """Views of ``vector`` shaped as ``like``, in order (the inverse of :func:`flatten`)."""
    out, at = [], 0
    for a in like:
        out.append(vector[at:at + a.size].reshape(a.shape))
        at += a.size
    return out
