"""The sparse DNN: weight layers, bias and clamp, as every strategy consumes it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .. import config
from .csr import as_csr32, pattern_order, transpose


@dataclass(eq=False)
class Network:
    """A sparse DNN in the challenge's row-vector convention (``Y = Y @ W``).

    Parameters
    ----------
    layers
        Weight matrices ``W_1 .. W_L``, each ``N x N``; converted to float32 CSR.
    bias
        One bias for every neuron and layer (scalar), or a per-neuron vector of length N.
        ``None`` takes the challenge value for N (``-0.3`` for N = 1024, ...).
    ymax
        Clamp of the activations (32 in the challenge). ``None`` takes ``sdnn.ymax``.
    name
        Label used in records and reports, e.g. ``"radixnet-1024-120"``.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> net = Network([sp.identity(4, format="csr")] * 3, bias=-0.1, ymax=32)
    >>> net.n_neurons, net.n_layers, net.edges
    (4, 3, 12)
    """

    layers: Sequence[sp.csr_matrix]
    bias: float | np.ndarray | None = None
    ymax: float | None = None
    name: str = "network"
    _transposed: list[sp.csr_matrix] | None = field(default=None, repr=False)
    _output_order: list[np.ndarray] | None = field(default=None, repr=False)
    _class_layers: dict | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.layers) == 0:
            raise ValueError("a network needs at least one layer")
        layers = [as_csr32(w) for w in self.layers]
        n = layers[0].shape[0]
        for k, w in enumerate(layers, start=1):
            if w.shape != (n, n):
                raise ValueError(
                    f"layer {k} has shape {w.shape}; every layer must be {n} x {n} "
                    "(the first layer's size)"
                )
        self.layers = layers
        if self.bias is None:
            self.bias = config.default_bias(n)
        bias = np.asarray(self.bias, dtype=np.float32)
        if bias.ndim == 0:
            bias = np.full(n, float(bias), dtype=np.float32)
        if bias.shape != (n,):
            raise ValueError(f"bias must be a scalar or a vector of length {n}, got {bias.shape}")
        self.bias = bias
        self.ymax = float(config.get("ymax") if self.ymax is None else self.ymax)
        if not self.ymax > 0:
            raise ValueError(f"ymax must be positive, got {self.ymax}")

    @property
    def n_neurons(self) -> int:
        """Neurons per layer (N)."""
        return int(self.layers[0].shape[0])

    @property
    def n_layers(self) -> int:
        """Number of weight layers (L)."""
        return len(self.layers)

    @property
    def edges(self) -> int:
        """Total nonzero weights, ``sum_k nnz(W_k)`` (the challenge's edge count)."""
        return int(sum(w.nnz for w in self.layers))

    @property
    def transposed(self) -> list[sp.csr_matrix]:
        """``W_k^T`` in CSR (the CSC of ``W_k``), built once, for the dense kernel."""
        if self._transposed is None:
            self._transposed = [transpose(w) for w in self.layers]
        return self._transposed

    @property
    def class_layers(self) -> dict:
        """Layer index (0-based) -> its output neurons in classes, or ``None``, as the
        kernel found them (:mod:`sdnn_dask.core.kernels.classes`); filled as a run needs
        them, kept for the next."""
        if self._class_layers is None:
            self._class_layers = {}
        return self._class_layers

    @property
    def output_order(self) -> list[np.ndarray]:
        """Per layer, an order of the output neurons that groups similar input patterns.

        Neurons fed by the same inputs are visited one after another by the dense kernel,
        so the input rows they read are still in L1 (RadiX-Net: 16 neurons share each
        pattern). Sorting by (first input, last input) groups identical patterns and costs
        one ``lexsort`` per layer.
        """
        if self._output_order is None:
            self._output_order = [pattern_order(wt) for wt in self.transposed]
        return self._output_order
