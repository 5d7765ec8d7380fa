"""Model parallelism by neuron partition: seconds, edges/s, bytes moved, predicted volume.

On the official 1024-120 weights with the official rows 1..1200 tiled (``--tile``), runs
model-parallel inference on a LocalCluster for every neuron partition (contiguous blocks,
layer hashing, a random permutation, Mt-KaHyPar hypergraph partitioning) at each ``k``,
interleaved round by round, and prints per (k, partition) the median seconds and edges/s,
the bytes Dask moved between workers, the partition's predicted volume (km1, activation
columns), the time taken to partition, and the ratios against contiguous blocks and the
serial kernel measured in the same process. Every output is checked against the serial
kernel. Run::

    pip install -e ".[partition]"
    python benchmarks/bench_model_parallel.py [--data ../shared/data/graphchallenge]
        [--tile 20] [-k 2 4] [--workers 2 | --workers per-part] [--repeat 3]

``--workers per-part`` starts one worker per part (``k`` workers, even past the cores), so
every part-to-part exchange crosses workers, as in the papers; with fewer workers than
parts, parts on one worker share what they receive (see ``sdnn_dask.parallel.model``).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sdnn_dask import io
from sdnn_dask.cluster import local_client
from sdnn_dask.kernels import forward_block, warm_up_kernels
from sdnn_dask.parallel import ModelParallelExecutor
from sdnn_dask.partition import NEURON_PARTITIONS, make_neuron_partition
from sdnn_dask.result import compare_outputs

REPO = Path(__file__).resolve().parents[1]


def default_data() -> Path:
    env = os.environ.get("SDNN_GRAPHCHALLENGE_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data" / "graphchallenge"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--tile", type=int, default=20,
                        help="copies of the official 1200 rows (20: 24000 inputs)")
    parser.add_argument("-k", type=int, nargs="+", default=[2, 4], help="parts (2 4)")
    parser.add_argument("--workers", default="2",
                        help="LocalCluster workers, or 'per-part' for k workers (2)")
    parser.add_argument("--partitions", default=",".join(NEURON_PARTITIONS))
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians are shown (3)")
    args = parser.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    methods = [m for m in args.partitions.split(",") if m]

    if not (args.data / "neuron1024").is_dir():
        raise SystemExit(f"official data not found at {args.data} (--data or "
                         "$SDNN_GRAPHCHALLENGE_DATA)")
    net = io.read_network(args.data, 1024, 120)
    rows = io.read_inputs(args.data / "sparse-images-1024-rows1-1200.tsv.gz", 1024)
    inputs = sp.vstack([rows] * args.tile, format="csr")
    n = inputs.shape[0]
    print(f"network {net.name}: {net.edges:,} edges; inputs: official rows 1..1200 x "
          f"{args.tile} = {n:,}; cores: {os.cpu_count()}", flush=True)

    warm_up_kernels()
    serial = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        expected = forward_block(net, inputs).to_csr()
        serial.append(time.perf_counter() - start)
    kernel_s = statistics.median(serial)
    print(f"serial kernel: {kernel_s:.3f} s = {n * net.edges / kernel_s:.3g} edges/s",
          flush=True)

    rows_out = []
    for k in args.k:
        workers = k if args.workers == "per-part" else int(args.workers)
        parts = {}
        for m in methods:
            # hypergraph: the time it took to make (read back from the cache if made before)
            parts[m] = make_neuron_partition(net, k, m, cache=True)
            print(f"k={k} {m}: partitioned in {parts[m].seconds:.1f} s, km1 "
                  f"{int(parts[m].volume(net)['km1'].sum()):,}", flush=True)
        with local_client(workers) as client:
            executor = ModelParallelExecutor(client, net)
            times: dict[str, list[float]] = {m: [] for m in methods}
            moved: dict[str, list[int]] = {m: [] for m in methods}
            for r in range(args.repeat):
                for m in methods:  # interleaved: slow drifts of the VM hit every method alike
                    result = executor.run(inputs, partition=parts[m])
                    agreement = compare_outputs(result.output, expected)
                    if not agreement.ok:
                        print(f"FAIL k={k} {m}: {agreement.detail}", file=sys.stderr)
                        return 1
                    times[m].append(result.wall_seconds)
                    moved[m].append(result.bytes_moved)
                    print(f"  round {r + 1} k={k} {m:<10} {result.wall_seconds:7.2f} s  "
                          f"{result.bytes_moved / 1e6:8.1f} MB", flush=True)
        for m in methods:
            seconds = statistics.median(times[m])
            rows_out.append({
                "k": k, "workers": workers, "partition": m, "seconds": seconds,
                "edges_per_s": n * net.edges / seconds,
                "mb_moved": statistics.median(moved[m]) / 1e6,
                "km1": int(parts[m].volume(net)["km1"].sum()),
                "partition_s": parts[m].seconds,
                "max_imbalance": float(np.max(parts[m].imbalance(net))),
            })

    print(f"\n{'k':>2} {'workers':>7} {'partition':<10} {'seconds':>8} {'edges/s':>9} "
          f"{'MB moved':>9} {'km1':>9} {'part. s':>8} {'imbal.':>6} {'bytes/blk':>9} "
          f"{'speed/blk':>9} {'vs kernel':>9}")
    for row in rows_out:
        block = next(r for r in rows_out if r["k"] == row["k"] and r["partition"] == "block") \
            if "block" in methods else row
        print(f"{row['k']:>2} {row['workers']:>7} {row['partition']:<10} "
              f"{row['seconds']:>8.2f} {row['edges_per_s']:>9.3g} {row['mb_moved']:>9.1f} "
              f"{row['km1']:>9,} {row['partition_s']:>8.1f} {row['max_imbalance']:>6.3f} "
              f"{row['mb_moved'] / block['mb_moved'] if block['mb_moved'] else 0:>9.3f} "
              f"{block['seconds'] / row['seconds']:>9.2f} {kernel_s / row['seconds']:>9.3f}")
    print("\nbytes/blk: MB moved / contiguous blocks' (lower is better); speed/blk: blocks' "
          "seconds / these seconds (higher is better); vs kernel: serial kernel seconds / "
          "these seconds.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
