"""SuiteSparse:GraphBLAS on one thread, the challenge's usual anchor, for the benchmarks.

Shared by ``bench_inference.py`` and ``bench_graphblas.py`` (imported from this folder,
which Python puts first on ``sys.path`` when it runs a script in it). Needs the ``bench``
extra, python-graphblas: without it :func:`graphblas_infer` exits with status 2 and says so.
"""

from __future__ import annotations

import sys
import time
from types import ModuleType

import numpy as np
import scipy.sparse as sp

from sdnn_dask.core.network import Network

MISSING = ('python-graphblas is not installed: the GraphBLAS anchor needs the bench extra, '
           'pip install -e ".[bench]"')


def import_graphblas() -> ModuleType:
    """python-graphblas, set to one thread; exits with status 2 if it is missing."""
    try:
        import graphblas as gb
    except ImportError:
        print(MISSING, file=sys.stderr)
        raise SystemExit(2) from None
    gb.ss.config["nthreads"] = 1
    return gb


def graphblas_infer(network: Network, inputs: sp.csr_matrix) -> tuple[sp.csr_matrix, float]:
    """The challenge recurrence in SuiteSparse:GraphBLAS, one thread; returns (Y, seconds).

    The seconds are the layers' loop only: converting the weights and inputs from scipy
    before it, and the output back after it, are not timed.
    """
    gb = import_graphblas()
    from graphblas import binary, select, semiring

    bias = float(network.bias[0])
    if not np.all(network.bias == network.bias[0]):
        raise SystemExit("the GraphBLAS anchor here handles a uniform bias only")
    ymax = float(network.ymax)
    # FP64: the PyPI SuiteSparse build has no compiled FP32 plus_times kernel (and no JIT
    # compiler), so FP32 runs a generic kernel ~5x slower; FP64 is its fastest path.
    layers = [gb.io.from_scipy_sparse(w.astype(np.float64)) for w in network.layers]
    y = gb.io.from_scipy_sparse(inputs.astype(np.float64))
    start = time.perf_counter()
    for w in layers:
        z = y.mxm(w, semiring.plus_times).new()
        y.clear()  # python-graphblas keeps the old matrix alive otherwise (GBs over 120 layers)
        z = z.apply(binary.plus, right=bias).new()  # on stored entries only
        z = select.valuegt(z, 0).new()  # ReLU and drop zeros
        y = z.apply(binary.min, right=ymax).new()
    seconds = time.perf_counter() - start
    return gb.io.to_scipy_sparse(y, format="csr"), seconds
