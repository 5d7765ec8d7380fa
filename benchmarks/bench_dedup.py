"""Identical survivors computed once: the serial kernel with and without deduplication,
side by side in one process, on generated official-like inputs (never tiled: repeated
rows would flatter the method).

    python benchmarks/bench_dedup.py                       # 1024-120 x 60000, 4096-480 x 20000
    python benchmarks/bench_dedup.py --sizes 1024-120x6000 --repeat 5

Prints seconds, edges/s and the ratio per size (best of ``--repeat``, runs interleaved),
checks both outputs are the same bits, and where the time went: layers 1-20 and 21-L.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sdnn_dask.core.kernels import KernelSettings, forward_block, warm_up_kernels
from sdnn_dask.data.radixnet import make_inputs, make_network


def _size(text: str) -> tuple[int, int, int]:
    network, rows = text.split("x")
    n, layers = network.split("-")
    return int(n), int(layers), int(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=_size,
                        default=[_size("1024-120x60000"), _size("4096-480x20000")],
                        help="N-LxROWS, e.g. 1024-120x60000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warm_up_kernels()
    settings = {False: KernelSettings.resolve(dedup=False),
                True: KernelSettings.resolve(dedup=True)}
    print(f"{'size':>18} {'dedup':>5} {'seconds':>8} {'edges/s':>9} {'L1-20 s':>8} "
          f"{'L21+ s':>7} {'computed':>8} {'ratio':>6}")
    for n, n_layers, rows in args.sizes:
        net = make_network(n, n_layers, seed=args.seed)
        x = make_inputs(rows, n, seed=args.seed)
        _ = net.output_order  # transposes built outside the clock
        forward_block(net, x[:256], settings=settings[True])
        best: dict[bool, float] = {False: np.inf, True: np.inf}
        outs = {}
        for _ in range(args.repeat):
            for dedup in (False, True):  # interleaved: a drifting machine hits both
                start = time.perf_counter()
                outs[dedup] = forward_block(net, x, settings=settings[dedup])
                best[dedup] = min(best[dedup], time.perf_counter() - start)
        a, b = outs[False].to_csr(), outs[True].to_csr()
        same = (np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
                and np.array_equal(a.data.view(np.uint32), b.data.view(np.uint32)))
        if not same:
            raise SystemExit(f"{n}-{n_layers}: outputs differ with deduplication")
        edges = net.edges * rows
        for dedup in (False, True):
            t = outs[dedup].trace
            ratio = f"{best[False] / best[True]:6.2f}" if dedup else ""
            print(f"{f'{n}-{n_layers} x {rows}':>18} {'on' if dedup else 'off':>5} "
                  f"{best[dedup]:8.3f} {edges / best[dedup]:9.2e} "
                  f"{t['seconds'][:20].sum():8.3f} {t['seconds'][20:].sum():7.3f} "
                  f"{int(t['distinct_out'].iloc[-1]):>8} {ratio}")


if __name__ == "__main__":
    main()
