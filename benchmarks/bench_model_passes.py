"""Model parallelism and the hybrid at the challenge's large sizes, in row passes (issue 45).

For each problem (``N-L x rows`` and a network store; 60000 generated inputs by default):
the serial kernel in this process (the baseline, and what every run is checked against),
then on a fresh 2-worker LocalCluster model parallelism k = 2 (hash partition, direct
transport) and, with ``--hybrid``, the hybrid (2 row groups x k = 2), their rows in passes
of ``sdnn.store.pass-bytes`` (``--pass-rows`` to choose), the passes' survivors joined for the
deep layers. Printed per run: seconds, edges/s, the ratio to the serial kernel, passes and the
layer they joined after, bytes moved, every worker's peak resident memory in the run (VmHWM,
reset before it), and the
peak of the summed PSS of every process (this one and the cluster's, sampled every 0.25 s;
target <= 12 GB at 65536-1920 x 60000). Exits 1 if a check fails or the PSS target is missed.
From the repository root (the stores: ``sdnn-dask generate -N 65536 -L 1920 --store-only
data/stores``)::

    python benchmarks/bench_model_passes.py --problems \\
        16384-1920x60000:data/stores/neuron16384-l1920.store \\
        65536-1920x60000:data/stores/neuron65536-l1920.store --hybrid

The first run of a partition cuts the store into per-part slices beside it (minutes at
65536, once; kept for later runs).
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import time

from bench_scale import MemorySampler
from distributed import Client, LocalCluster

from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.streaming import StreamedNetwork
from sdnn_dask.parallel import ModelParallelExecutor
from sdnn_dask.parallel.peak_memory import read_workers, reset_workers
from sdnn_dask.parallel.serial import run_serial
from sdnn_dask.testing import assert_same_result

_PROBLEM = re.compile(r"^(\d+)-(\d+)x(\d+):(.+)$")


def run_problem(n: int, layers: int, rows: int, folder: str, hybrid: bool,
                pass_rows: int | None) -> int:
    net = StreamedNetwork(folder, layers)
    x = make_inputs(rows, n, seed=0)
    edges = rows * net.edges
    print(f"{n}-{layers} x {rows} ({folder})", flush=True)
    with MemorySampler() as memory:
        start = time.perf_counter()
        serial = run_serial(net, x)
        base = time.perf_counter() - start
    print(f"  serial kernel   {base:8.2f} s   peak PSS {memory.peak_pss / 1e9:5.2f} GB",
          flush=True)
    failed = 0
    configs = [("model", 1)] + ([("hybrid", 2)] if hybrid else [])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      memory_limit=0) as cluster, Client(cluster) as client:
        ex = ModelParallelExecutor(client, net, weights="streamed")
        for name, groups in configs:
            ex.run(x[:64], partition="hash", k=2, row_groups=groups)  # cut, open, warm
            gc.collect()
            reset_workers(client, ex.workers)
            with MemorySampler() as memory:
                result = ex.run(x, partition="hash", k=2, row_groups=groups,
                                pass_rows=pass_rows)
            try:
                assert_same_result(result.output, serial.output)
                verdict = "same as serial"
            except AssertionError as error:
                verdict, failed = f"DIFFERS: {error}", failed + 1
            peaks = read_workers(client, ex.workers)["peak_rss_bytes"] / 1e9
            rate = f"{edges / result.wall_seconds:.3g} edges/s"
            ok = memory.peak_pss <= 12e9
            failed += 0 if ok or n < 65536 else 1
            print(f"  {name:<6} k=2 R={groups} {result.wall_seconds:8.2f} s  {rate}  "
                  f"{result.wall_seconds / base:.2f}x serial  passes "
                  f"{result.params.get('passes')} joined after layer "
                  f"{result.params.get('joined_at', '-')}  moved "
                  f"{result.bytes_moved / 1e9:.2f} GB  worker peaks "
                  f"{', '.join(f'{p:.2f}' for p in peaks)} GB  summed PSS "
                  f"{memory.peak_pss / 1e9:.2f} GB{'' if ok else ' (> 12 GB)'}  {verdict}",
                  flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", required=True,
                        help="N-LxROWS:STORE, e.g. 65536-1920x60000:data/stores/x.store")
    parser.add_argument("--hybrid", action="store_true", help="also the hybrid (R = 2)")
    parser.add_argument("--pass-rows", type=int, default=None,
                        help="rows a pass takes (default: sdnn.store.pass-bytes / 8N)")
    args = parser.parse_args(argv)
    failed = 0
    for spec in args.problems:
        m = _PROBLEM.match(spec)
        if m is None:
            parser.error(f"--problems {spec!r}: expected N-LxROWS:STORE")
        n, layers, rows = (int(v) for v in m.groups()[:3])
        failed += run_problem(n, layers, rows, m.group(4), args.hybrid, args.pass_rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
