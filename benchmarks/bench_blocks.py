"""Many-block data parallelism against two blocks, on 2 workers, in one process run.

Generated 1024-120 network, official-like inputs (survivors cluster along the rows as in
the official files). For each row partition, placement and block count, the wall seconds
of a data-parallel run with and without merging a worker's blocks
(``sdnn.data-parallel.merge-blocks``), as the median of ``--repeat`` interleaved rounds,
and the ratio to two static blocks (one per worker) measured in the same rounds::

    python benchmarks/bench_blocks.py [--rows 60000] [--repeat 3] [--blocks 8 32 128]

Every run is checked against the serial kernel's output.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import dask
from distributed import Client, LocalCluster

from sdnn_dask.core.kernels import forward_block
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel.data_executor import DataParallelExecutor
from sdnn_dask.partition import imbalance


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--layers", type=int, default=120)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--blocks", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--partitions", nargs="+", default=["block", "hash"])
    args = parser.parse_args(argv)

    network = make_network(1024, args.layers)
    inputs = make_inputs(args.rows, 1024, seed=0, order="official-like")
    expected = forward_block(network, inputs).to_csr()
    edges = args.rows * network.edges
    configs = [("block", "static", 2, True)]
    for partition in args.partitions:
        for placement in ("static", "dynamic"):
            for blocks in args.blocks:
                for merge in (True, False):
                    configs.append((partition, placement, blocks, merge))
    times: dict[tuple, list[float]] = {c: [] for c in configs}
    work: dict[tuple, float] = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        executor = DataParallelExecutor(client, network)
        executor.run(inputs, n_blocks=2)  # warm: weights placed, kernels compiled
        for r in range(args.repeat):
            for config in configs:
                partition, placement, blocks, merge = config
                with dask.config.set({"sdnn.data-parallel.merge-blocks": merge}):
                    result = executor.run(inputs, partition=partition, n_blocks=blocks,
                                          placement=placement)
                if (result.output != expected).nnz:
                    raise SystemExit(f"{config}: output differs from the serial kernel")
                times[config].append(result.wall_seconds)
                work[config] = imbalance(result.layers.groupby("block")["rows_in"].sum())
            print(f"round {r + 1}/{args.repeat} done", file=sys.stderr)
    base = statistics.median(times[configs[0]])
    print(f"1024-{args.layers}, {args.rows} official-like rows, 2 workers; median of "
          f"{args.repeat}; ratio = seconds / two static blocks ({base:.3f} s)")
    print(f"{'partition':9} {'placement':9} {'blocks':>6} {'merged':>6} {'seconds':>8} "
          f"{'ratio':>6} {'edges/s':>9} {'work imb':>8}")
    for config in configs:
        partition, placement, blocks, merge = config
        t = statistics.median(times[config])
        print(f"{partition:9} {placement:9} {blocks:6d} {'yes' if merge else 'no':>6} "
              f"{t:8.3f} {t / base:6.2f} {edges / t:9.2e} {work[config]:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
