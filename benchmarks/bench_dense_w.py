"""The streamed dense step on ``W`` against the resident one on ``W^T``, one layer.

A network streamed from a store runs its dense layers with
:func:`~sdnn_dask.core.kernels.dense_step_w` on ``W`` itself (no transpose to build per
layer); a network in memory with :func:`~sdnn_dask.core.kernels.dense_step` on ``W^T``. For
one generated RadiX-Net layer at each N and a few row counts (a tile of random
activations, half of them zero): the seconds of ``dense_step`` on ``W^T``, of
``dense_step_w`` one input at a time, and four at a time where four inputs feed the same
outputs (the default), medians of ``--repeat`` interleaved rounds, with the rate in
multiply-adds per second, and the time to build ``W^T`` and the inputs' order once. Every
output is checked: four at a time equal to one at a time bit for bit, and both to
``dense_step`` to float rounding::

    python benchmarks/bench_dense_w.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import numpy as np

from sdnn_dask.core.csr import transpose
from sdnn_dask.core.kernels import ROW_TILE, dense_step, dense_step_w, input_order
from sdnn_dask.core.network import as_csr32, pattern_order
from sdnn_dask.data.radixnet import radixnet_layer
from sdnn_dask.parallel.allocator import tune_allocator

CASES = [(1024, 256), (16384, 32), (65536, 17), (65536, 34), (65536, 256)]


def _timed(f, repeat: int) -> float:
    f()  # compiled, buffers touched
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    tune_allocator()
    tiny = as_csr32(radixnet_layer(32, 1))
    transpose(tiny), input_order(tiny)  # compiled (or loaded) before anything is timed
    print(f"{'N':>6} {'rows':>5} {'W^T s':>9} {'W one s':>9} {'W four s':>9} "
          f"{'four GFMA/s':>11} {'four vs W^T':>11} {'transpose s':>11} {'order s':>8}")
    for n, rows in CASES:
        w = as_csr32(radixnet_layer(n, 3, np.random.default_rng(0).permutation(n)))
        t0 = time.perf_counter()
        wt = transpose(w)
        transpose_s = time.perf_counter() - t0
        out_order = pattern_order(wt)
        t0 = time.perf_counter()
        walk = input_order(w)
        order_s = time.perf_counter() - t0
        rng = np.random.default_rng(1)
        yt = (rng.random((n, rows), dtype=np.float32)
              * (rng.random((n, rows)) < 0.5)).astype(np.float32)
        bias, ymax = np.full(n, -0.3, np.float32), np.float32(32)
        z_t, z_one, z_four = (np.empty((n, rows), np.float32) for _ in range(3))
        single = np.zeros(n, np.bool_)
        runs = {
            "t": partial(dense_step, yt, wt.indptr, wt.indices, wt.data, bias, ymax, z_t,
                         ROW_TILE, out_order),
            "one": partial(dense_step_w, yt, w.indptr, w.indices, w.data, bias, ymax, z_one,
                           ROW_TILE, walk.order, single),
            "four": partial(dense_step_w, yt, w.indptr, w.indices, w.data, bias, ymax,
                            z_four, ROW_TILE, walk.order, walk.fours),
        }
        seconds = {name: [] for name in runs}
        for _ in range(3):  # interleaved: a burst of load hits every kernel alike
            for name, f in runs.items():
                seconds[name].append(_timed(f, max(1, args.repeat // 3)))
        s = {name: float(np.median(v)) for name, v in seconds.items()}
        assert np.array_equal(z_one, z_four), "four at a time differs from one at a time"
        np.testing.assert_allclose(z_four, z_t, rtol=1e-5, atol=1e-5)
        fma = w.nnz * rows
        print(f"{n:6d} {rows:5d} {s['t']:9.5f} {s['one']:9.5f} {s['four']:9.5f} "
              f"{fma / s['four'] / 1e9:11.1f} {s['t'] / s['four']:11.2f} "
              f"{transpose_s:11.4f} {order_s:8.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
