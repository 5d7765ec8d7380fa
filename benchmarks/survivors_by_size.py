"""Survivors of generated inputs at every challenge size, against the official truth counts.

60000 generated rows (``make_inputs``, seed 0, ``--order``) through the first ``--layers``
layers of the generated RadiX-Net network of each size (``make_network(N, L)``: its first
layers are those of ``make_network(N, 1920)`` and of the stores); prints the survivors,
the official count (:data:`~sdnn_dask.data.images.CHALLENGE_SURVIVORS`) and the rows
alive after layers 1, 2, 4, 8 and 16.  The rows are drawn and run 1024 at a time (rows
are independent, so the count is exact and the same rows as ``make_inputs(60000, N)``),
which keeps N = 65536 under 3 GB and about half a minute on one core::

    python benchmarks/survivors_by_size.py [--sizes 1024 4096 16384 65536] [--layers 64]

At 65536 the survivors of the first 64 layers are those of all 1920 (checked once from the
store: 2003 and 2003).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import scipy.sparse as sp

from sdnn_dask.core.kernels import forward_block
from sdnn_dask.data.images import CHALLENGE_SURVIVORS, inputs
from sdnn_dask.data.images.glyphs import BLOCK_ROWS
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.registry import ORDERS

ROWS = 60000
SHOWN = (1, 2, 4, 8, 16)


def survivors(n_neurons: int, n_layers: int, seed: int, order: str) -> tuple[int, np.ndarray]:
    """Survivors of ``make_inputs(ROWS, n_neurons, seed=seed, order=order)`` after
    ``n_layers`` generated layers, and the rows alive after each layer."""
    network = make_network(n_neurons, n_layers)
    side = math.isqrt(n_neurons)
    scale = inputs._pen_scale_for(side, inputs._target_density(n_neurons))
    writer = inputs._writer_factors(seed, ROWS) if order == "official-like" else None
    alive, after = 0, np.zeros(n_layers, np.int64)
    for block in range(-(-ROWS // BLOCK_ROWS)):
        start = block * BLOCK_ROWS
        n = min(BLOCK_ROWS, ROWS - start)
        idx, counts = inputs._render_rows(seed, block, n, side, scale,
                                          None if writer is None else writer[start:start + n])
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        y = sp.csr_matrix((np.ones(len(idx), np.float32), idx, indptr), shape=(n, n_neurons))
        out = forward_block(network, y)
        alive += len(out.rows)
        after += out.trace["rows_out"].to_numpy()[:n_layers]
    return alive, after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=sorted(CHALLENGE_SURVIVORS))
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--order", choices=ORDERS, default=ORDERS[0])
    args = parser.parse_args(argv)
    for n in args.sizes:
        t = time.perf_counter()
        alive, after = survivors(n, args.layers, args.seed, args.order)
        official = CHALLENGE_SURVIVORS.get(n)
        versus = f"official {official} ({alive / official - 1:+.1%})" if official else ""
        shown = ", ".join(str(int(after[k - 1])) for k in SHOWN if k <= args.layers)
        print(f"N={n}: {alive} survivors of {ROWS} after {args.layers} layers {versus}; "
              f"alive after layers {', '.join(str(k) for k in SHOWN if k <= args.layers)}: "
              f"{shown} [{time.perf_counter() - t:.0f} s]", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
