"""An expectation independent of the package: the challenge recurrence in dense float64 NumPy.

Nothing here imports ``sdnn_dask``, so a bug shared by the kernel, the slabs and scipy's
reference cannot hide. :func:`integer_network` draws networks whose every value is a small
integer, so float32 sums are exact and the package must match this recurrence *exactly*,
including which sums cancel to 0.0 (those get no bias: ``logical(Z)`` in the MATLAB code).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

BIAS_KINDS = ("negative", "zero", "positive", "mixed")


def dense_infer(weights: list, bias, ymax: float, inputs) -> np.ndarray:
    """``Y <- min(max(Y W + b * (Y W != 0), 0), ymax)`` for every layer, densely, in float64."""
    y = np.asarray(inputs.toarray() if sp.issparse(inputs) else inputs, dtype=np.float64)
    b = np.broadcast_to(np.asarray(bias, dtype=np.float64), (y.shape[1],))
    for w in weights:
        z = y @ np.asarray(w.toarray(), dtype=np.float64)
        z = np.where(z != 0.0, z + b, 0.0)  # bias on the nonzeros of Z only
        y = np.clip(z, 0.0, ymax)
    return y


def integer_network(rng: np.random.Generator, n: int, layers: int, density: float,
                    bias_kind: str) -> tuple[list[sp.csr_matrix], np.ndarray, float]:
    """Weights in {-2, -1, 1, 2} (no stored zeros), an integer bias, an integer ymax.

    With ``ymax <= 32`` and ``n <= 2048`` every partial sum stays below 2**24 in magnitude,
    so float32 arithmetic is exact and cancellations to exactly zero are common.
    """
    weights = []
    for _ in range(layers):
        w = sp.random(n, n, density=density, format="csr", dtype=np.float32, rng=rng)
        w.data = rng.choice(np.array([-2, -1, 1, 2], dtype=np.float32), size=w.nnz)
        weights.append(w)
    bias = {"negative": np.full(n, -1.0), "zero": np.zeros(n), "positive": np.full(n, 1.0),
            "mixed": rng.integers(-2, 3, size=n).astype(np.float64)}[bias_kind]
    return weights, bias.astype(np.float32), float(rng.choice([1.0, 4.0, 32.0]))


def integer_inputs(rng: np.random.Generator, rows: int, n: int, density: float
                   ) -> sp.csr_matrix:
    """Rows of small positive integers (1..4)."""
    y = sp.random(rows, n, density=density, format="csr", dtype=np.float32, rng=rng)
    y.data = rng.integers(1, 5, size=y.nnz).astype(np.float32)
    return y
