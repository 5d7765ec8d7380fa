"""The serial reference: the challenge recurrence written plainly, and the PASS/FAIL check.

This is the ground truth every strategy is checked against, so it stays simple and
obviously right (scipy's ``Y @ W``, bias, clip, drop zeros), not fast. Speed lives in
:mod:`sdnn_dask.core.kernels`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .network import Network, as_csr32


def layer_reference(y: sp.csr_matrix, w: sp.csr_matrix, bias: np.ndarray, ymax: float
                    ) -> sp.csr_matrix:
    """One challenge layer: ``Z = Y @ W``; bias on the nonzeros of Z; clamp to [0, ymax].

    scipy's product drops entries that sum to exactly zero, so the bias reaches exactly the
    nonzeros of ``Z`` (MATLAB's ``logical(Z)``).
    """
    z = (y @ w).tocsr()
    z.data += bias[z.indices]
    np.clip(z.data, 0.0, ymax, out=z.data)
    z.eliminate_zeros()
    return z


def categories(y: sp.spmatrix | sp.sparray) -> np.ndarray:
    """0-based ids of the rows of ``y`` that hold a nonzero (sorted int64)."""
    csr = sp.csr_matrix(y)
    csr.eliminate_zeros()
    return np.flatnonzero(np.diff(csr.indptr)).astype(np.int64)


@dataclass
class Inference:
    """The outcome of running inputs through a network.

    Attributes
    ----------
    output
        The final activations, ``rows x N`` float32 CSR, in the inputs' row order.
    categories
        0-based ids of the rows still nonzero after the last layer.
    seconds
        Time spent in inference only (no reading, no checking).
    trace
        One row per layer: ``layer, rows_out, nnz_out, seconds``.
    """

    output: sp.csr_matrix
    categories: np.ndarray
    seconds: float
    trace: pd.DataFrame = field(repr=False)


def infer_reference(network: Network, inputs: sp.spmatrix | sp.sparray) -> Inference:
    """Run the plain challenge recurrence over every layer.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sdnn_dask.core.network import Network
    >>> net = Network([sp.identity(3, format="csr") * 2] * 2, bias=-1.0, ymax=32)
    >>> infer_reference(net, sp.csr_matrix([[1, 0, 0], [0, 0, 0], [0, 3, 0]])).categories
    array([0, 2])
    """
    y = as_csr32(inputs)
    if y.shape[1] != network.n_neurons:
        raise ValueError(
            f"inputs have {y.shape[1]} columns, the network has {network.n_neurons} neurons"
        )
    bias, ymax = network.bias, np.float32(network.ymax)
    trace = []
    start = time.perf_counter()
    for k, w in enumerate(network.layers, start=1):
        t0 = time.perf_counter()
        y = layer_reference(y, w, bias, ymax)
        rows_out = int(np.count_nonzero(np.diff(y.indptr)))
        trace.append((k, rows_out, int(y.nnz), time.perf_counter() - t0))
    seconds = time.perf_counter() - start
    return Inference(
        output=y,
        categories=categories(y),
        seconds=seconds,
        trace=pd.DataFrame(trace, columns=["layer", "rows_out", "nnz_out", "seconds"]),
    )


@dataclass(frozen=True)
class Check:
    """PASS/FAIL of categories against a truth set (both 0-based).

    ``missing`` are truth rows not found, ``extra`` rows found that the truth lacks.
    """

    passed: bool
    n_found: int
    n_truth: int
    missing: np.ndarray
    extra: np.ndarray

    @property
    def verdict(self) -> str:
        """``"PASS"`` or ``"FAIL"``."""
        return "PASS" if self.passed else "FAIL"

    def __str__(self) -> str:
        text = f"{self.verdict}: {self.n_found} categories, truth has {self.n_truth}"
        if not self.passed:
            text += (f"; {len(self.missing)} missing (first: {(self.missing[:5] + 1).tolist()}),"
                     f" {len(self.extra)} extra (first: {(self.extra[:5] + 1).tolist()}),"
                     " as 1-based row ids")
        return text


def check_categories(found: np.ndarray, truth: np.ndarray) -> Check:
    """Compare found categories with the truth: PASS iff the two sets are equal."""
    found = np.unique(np.asarray(found, dtype=np.int64))
    truth = np.unique(np.asarray(truth, dtype=np.int64))
    missing = np.setdiff1d(truth, found, assume_unique=True)
    extra = np.setdiff1d(found, truth, assume_unique=True)
    return Check(
        passed=len(missing) == 0 and len(extra) == 0,
        n_found=len(found),
        n_truth=len(truth),
        missing=missing,
        extra=extra,
    )
