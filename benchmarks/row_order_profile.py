"""Survivors' max/mean per contiguous block of rows, generated against official.

For seeds 0..S-1, 60000 generated rows (``make_inputs``, ``--order``) through the generated
1024-120 network (serial kernel); prints each seed's max/mean at 2, 8, 32 and 128 blocks,
the mean and sd over seeds, how many seeds are within 15% of the official figures, and
where the official figures fall among the seeds::

    python benchmarks/row_order_profile.py [--seeds 16] [--order official-like]
"""

from __future__ import annotations

import argparse

import numpy as np

from sdnn_dask.core.kernels import forward_block
from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.registry import ORDERS

ROWS = 60000
BLOCKS = (2, 8, 32, 128)
#: The official truth (1812 survivors of the 60000 official rows, 1024-120).
OFFICIAL = np.array([1.128, 1.404, 1.784, 3.815])


def profile(rows: np.ndarray) -> np.ndarray:
    out = []
    for b in BLOCKS:
        counts = np.bincount((rows * b) // ROWS, minlength=b)
        out.append(counts.max() / counts.mean())
    return np.array(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--order", choices=ORDERS, default=ORDERS[0])
    args = parser.parse_args(argv)
    network = make_network(1024, 120)
    found = []
    for seed in range(args.seeds):
        rows = forward_block(network, make_inputs(ROWS, 1024, seed=seed, order=args.order)).rows
        found.append(profile(np.sort(rows)))
        print(f"seed {seed:2d}: survival {len(rows) / ROWS:.2%}, max/mean "
              + " / ".join(f"{v:.2f}" for v in found[-1]), flush=True)
    p = np.array(found)
    print("blocks                 " + "  ".join(f"{b:>11d}" for b in BLOCKS))
    print("official               " + "  ".join(f"{v:11.2f}" for v in OFFICIAL))
    print("mean +- sd             " + "  ".join(f"{m:5.2f} +- {s:.2f}" for m, s
                                                in zip(p.mean(0), p.std(0), strict=True)))
    within = (np.abs(p / OFFICIAL - 1) <= 0.15).sum(0)
    print("seeds within 15%       " + "  ".join(f"{w:>8d}/{len(p)}" for w in within))
    print("official's percentile  " + "  ".join(f"{(p[:, i] < OFFICIAL[i]).mean():11.0%}"
                                                for i in range(len(BLOCKS))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
