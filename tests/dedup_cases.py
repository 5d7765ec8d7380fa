"""Random networks and inputs of the identical-rows tests, and the bitwise comparison:
shared by tests/core/test_dedup.py and tests/parallel/test_model_dedup.py (imported from
tests/, which is on the path of every test module, so each runs alone)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from dense_reference import integer_inputs, integer_network

from sdnn_dask.core.network import Network


def assert_bitwise(a: sp.csr_matrix, b: sp.csr_matrix) -> None:
    """``a`` and ``b`` are the same matrix to the bit (pattern and float32 values)."""
    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    assert a.shape == b.shape
    assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
    assert np.array_equal(a.data.view(np.uint32), b.data.view(np.uint32))


def random_network(seed: int, n: int, layers: int, *, bias, ymax: float,
                   low: float, high: float, density: float = 0.3) -> Network:
    """A network of ``layers`` random ``n x n`` layers, weights uniform in [low, high);
    ``bias="random"`` draws a bias per neuron."""
    rng = np.random.default_rng(seed)
    mats = []
    for _ in range(layers):
        w = sp.random(n, n, density=density, format="csr", dtype=np.float32, rng=rng)
        w.data = rng.uniform(low, high, w.nnz).astype(np.float32)
        w.data[w.data == 0] = 0.125
        mats.append(w)
    if isinstance(bias, str):
        bias = rng.uniform(-0.3, 0.1, n).astype(np.float32)
    return Network(mats, bias=bias, ymax=ymax, name=f"random-{seed}")


def random_inputs(seed: int, rows: int, n: int, density: float = 0.3) -> sp.csr_matrix:
    """``rows`` random sparse input rows of ``n`` features in [0.1, 1)."""
    rng = np.random.default_rng(seed)
    x = sp.random(rows, n, density=density, format="csr", dtype=np.float32, rng=rng)
    x.data = rng.uniform(0.1, 1.0, x.nnz).astype(np.float32)
    return x


def several_groups(seed: int = 7, n: int = 64, layers: int = 12, classes: int = 5,
                   copies: int = 24, unique: int = 120) -> tuple[Network, sp.csr_matrix]:
    """An integer network (exact float32 sums) and inputs holding ``classes`` classes of
    ``copies`` identical rows and ``unique`` rows of their own, shuffled together: every
    row survives, and the survivors end in ``classes`` groups of several rows beside
    the unique ones (the radixnet tests end in one group, where any mapping of members
    to representatives gives the right answer)."""
    rng = np.random.default_rng(seed)
    weights, bias, ymax = integer_network(rng, n, layers, 0.15, "mixed")
    base = integer_inputs(rng, classes, n, 0.3).toarray()
    own = integer_inputs(rng, unique, n, 0.3).toarray()
    rows = np.vstack([base[np.repeat(np.arange(classes), copies)], own])
    x = sp.csr_matrix(rows[rng.permutation(len(rows))])
    return Network(weights, bias=bias, ymax=ymax, name=f"groups-{seed}"), x
