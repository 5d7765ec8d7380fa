"""Model parallelism's exchange forecast: the compiled step against scipy's, in one process.

``forecast_exchange`` runs a 4000-row sample of the inputs through every layer
(:class:`~sdnn_dask.partition.traffic.SampledForward`). Its step is the serial kernel's
compiled ``sparse_step``; the baseline here is the scipy product, sort and clip it
replaced, swapped in for the same call. Both must forecast the same bytes to the byte
(the same rows survive and merge); the script prints seconds, sampled edges per second and
the ratio::

    python benchmarks/bench_forecast.py [--sizes 4096-120 16384-60] [--rows 20000]

Measured 2026-12-07 on the 2-core machine: 4096-120 1.29 s against 2.09 (1.6x),
16384-60 5.3 s against 11.9 (2.3x). A study of the challenge table forecasts five times
per problem (hash, hypergraph, the hybrid's two row groups, the hypergraph's traffic
profile), which was a third of its client's time at N = 65536.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel.exchange_forecast import forecast_exchange
from sdnn_dask.partition import make_neuron_partition, traffic


def scipy_step(y: sp.csr_matrix, w: sp.csr_matrix, bias: np.ndarray, ymax: np.float32
               ) -> sp.csr_matrix:
    """The step ``SampledForward`` used before: scipy's product, then bias and clip."""
    z = sp.csr_matrix(y @ w, dtype=np.float32)
    z.sum_duplicates()
    z.data += bias[z.indices]
    np.clip(z.data, 0, ymax, out=z.data)
    z.eliminate_zeros()
    return z


def timed(step, net, part, x) -> tuple[float, float]:
    compiled = traffic._step
    traffic._step = step
    try:
        start = time.perf_counter()
        forecast = forecast_exchange(net, part, x)
        return time.perf_counter() - start, float(forecast["predicted_bytes_in"].sum())
    finally:
        traffic._step = compiled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["4096-120", "16384-60"])
    parser.add_argument("--rows", type=int, default=20000)
    args = parser.parse_args()
    for size in args.sizes:
        n, layers = (int(v) for v in size.split("-"))
        net = make_network(n, layers)
        x = make_inputs(args.rows, n)
        part = make_neuron_partition(net, 2, "hash")
        timed(traffic._step, net, part, x[:200])  # compile (or load) the kernel first
        new, new_bytes = timed(traffic._step, net, part, x)
        old, old_bytes = timed(scipy_step, net, part, x)
        if new_bytes != old_bytes:
            raise SystemExit(f"{size}: the forecasts differ: {new_bytes:.0f} against "
                             f"{old_bytes:.0f} bytes")
        edges = min(args.rows, traffic.DEFAULT_SAMPLE) * net.edges / n  # per sampled row
        print(f"{size}: compiled {new:.2f} s ({edges / new:.3g} sampled edges/s), scipy "
              f"{old:.2f} s ({edges / old:.3g}): {old / new:.2f}x; "
              f"{new_bytes / 1e6:.1f} MB forecast by both")


if __name__ == "__main__":
    main()
