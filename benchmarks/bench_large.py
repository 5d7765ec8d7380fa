"""What model parallelism buys at the challenge's large networks: memory and store reads
per worker, against data parallelism, on one network store; and the serial kernel
streamed from a cold page cache.

One process run, side by side:

1. **cold**: the serial kernel streaming ``--store`` (all its layers) on ``--cold-rows``
   rows (1000), with the store's pages dropped from the page cache first
   (``posix_fadvise(DONTNEED)``), then again warm;
2. **per worker**: on the store's first ``--layers`` layers (480) and ``--rows`` rows
   (2000): data parallelism streamed on 2 workers, and model parallelism k = 2 on
   per-part slices (``--partitions``, block and hash), each part streamed and resident,
   each configuration on a fresh 2-worker LocalCluster (so a worker's peak resident memory
   is that run's). Every output is checked against the serial kernel's on the same rows.
   Printed per configuration: seconds, edges/s, and per worker (the largest) its weights,
   its peak resident memory, the store bytes it read and their share of the store, and the
   bytes moved between workers; data parallelism's resident worker (the weights and their
   transpose, :func:`~sdnn_dask.data.streaming.resident_bytes`) is the yardstick of the
   memory ratios, as 2 such workers do not fit this machine::

    python benchmarks/bench_scale.py --sizes --headline data/stores --keep   # makes the store
    python benchmarks/bench_large.py --store data/stores/radixnet-65536-1920  # ~25 min

It exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from distributed import Client, LocalCluster

from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.streaming import StreamedNetwork, resident_bytes
from sdnn_dask.parallel import DataParallelExecutor, ModelParallelExecutor
from sdnn_dask.parallel.allocator import tune_allocator
from sdnn_dask.parallel.serial import run_serial
from sdnn_dask.testing import assert_same_result


def drop_from_page_cache(folder: Path) -> int:
    """Ask the kernel to drop every file of ``folder`` from the page cache; bytes."""
    total = 0
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            total += path.stat().st_size
    return total


def cold(store: Path, rows: int) -> None:
    network = StreamedNetwork(store)
    inputs = make_inputs(rows, network.n_neurons, seed=0)
    dropped = drop_from_page_cache(store)
    first = run_serial(network, inputs, "kernel")
    again = run_serial(network, inputs, "kernel")
    assert_same_result(first, again.output)
    edges = network.edges * rows
    print(f"{network.name} x {rows} rows, serial kernel streamed: cold {first.wall_seconds:.1f} s "
          f"({edges / first.wall_seconds:.3g} edges/s, {dropped / 1e9:.2f} GB of store "
          f"dropped from the page cache first), warm {again.wall_seconds:.1f} s; "
          f"{int(first.output.getnnz(axis=1).astype(bool).sum())} rows survive", flush=True)


def per_worker(store: Path, layers: int, rows: int, partitions: list[str]) -> int:
    network = StreamedNetwork(store, layers)
    inputs = make_inputs(rows, network.n_neurons, seed=0)
    serial = run_serial(network, inputs, "kernel")
    held = sum(f["bytes"] for e in network.store.manifest["layers"][:layers]
               for f in e["files"].values())
    yardstick = resident_bytes(network.store, layers)
    print(f"\n{network.name} x {rows} rows: serial kernel {serial.wall_seconds:.1f} s; the "
          f"store's {layers} layers are {held / 1e9:.2f} GB; a data-parallel worker holding "
          f"them resident would hold {yardstick / 1e9:.2f} GB", flush=True)
    configs = [("data", None, "streamed")]
    configs += [("model", p, w) for p in partitions for w in ("streamed", "resident")]
    failed = 0
    rows_out = []
    for strategy, partition, weights in configs:
        label = f"{strategy} {partition or 'block'} {weights}"
        try:
            with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) \
                    as cluster, Client(cluster) as client:
                if strategy == "data":
                    executor = DataParallelExecutor(client, network, weights=weights)
                    result = executor.run(inputs, partition="block")
                else:
                    executor = ModelParallelExecutor(client, network, weights=weights)
                    t0 = time.perf_counter()
                    executor.partition(partition, 2)
                    executor.run(inputs[:1], partition=partition, k=2)  # cut and open
                    placed = time.perf_counter() - t0
                    result = executor.run(inputs, partition=partition, k=2)
                    print(f"  {label}: slices cut (or found) and parts opened in "
                          f"{placed:.0f} s", flush=True)
        except Exception as error:  # a configuration that cannot run here: said, not hidden
            print(f"  {label}: FAILED to run: {type(error).__name__}: {error}", flush=True)
            failed += 1
            continue
        try:
            assert_same_result(result, serial.output)
            check = "PASS"
        except AssertionError as error:
            check, failed = f"FAIL ({error})", failed + 1
        workers = result.blocks.groupby("worker").agg(
            weight=("weight_bytes", "max"), peak=("peak_rss_bytes", "max"),
            read=("store_bytes_read", "max"))
        peak, weight, read = (float(workers[c].max()) for c in ("peak", "weight", "read"))
        moved = result.bytes_moved or 0
        rows_out.append((label, result.wall_seconds, peak, weight, read, moved))
        print(f"  {label}: {result.wall_seconds:.1f} s "
              f"({network.edges * rows / result.wall_seconds:.3g} edges/s), per worker: "
              f"weights {weight / 1e9:.2f} GB, peak {peak / 1e9:.2f} GB "
              f"({peak / yardstick:.2f}x a resident data-parallel worker's weights), store "
              f"read {read / 1e9:.2f} GB ({read / held:.2f} of the store); "
              f"{moved / 1e9:.2f} GB moved between workers; {check}", flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True,
                        help="a network store (e.g. radixnet-65536-1920 made by bench_scale)")
    parser.add_argument("--cold-rows", type=int, default=1000)
    parser.add_argument("--layers", type=int, default=480)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--partitions", nargs="+", default=["block", "hash"])
    parser.add_argument("--skip-cold", action="store_true")
    args = parser.parse_args(argv)
    tune_allocator()
    if not args.skip_cold:
        cold(args.store, args.cold_rows)
    failed = per_worker(args.store, args.layers, args.rows, args.partitions)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
