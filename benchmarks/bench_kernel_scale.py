"""The kernel at the challenge's sizes: issue 44's targets, measured in one process.

For each problem (``N-L x rows``; a network store for N = 16384 and 65536, whose weights
are streamed), on 60000 generated inputs by default:

* the serial kernel (``run_serial``), with neuron classes on and, with ``--classes on off``,
  off (the kernel before them: one value per neuron), in the same process, so the ratio
  is measured, not recalled;
* data parallelism on a fresh 2-worker LocalCluster (hash rows; the store's weights
  streamed by each worker), classes on, the workers' survivors joined on one worker after
  the early layers (``--join on off``: also each worker to the end on its own);
* with ``--model``, model parallelism k = 2 (hash partition), with classes on and/or off
  as ``--classes`` says (its part steps compute each class they own once and copy it:
  ``LayerPlan.copy_of``).

Every result is checked against the first serial run: the same survivors, the values to
float tolerance (``assert_same_result``). Printed per run: seconds (wall), edges/s (the
challenge's: rows x edges / s), the seconds of layers 1-20 (the kernel's trace, serial
runs), and the ratio to the classes-off run where there is one. Exits 1 if a check fails.

The stores come from ``sdnn-dask generate -N 65536 -L 1920 --store-only data/stores``
(and ``-N 16384``); from the repository root, issue 44's figures::

    python benchmarks/bench_kernel_scale.py --problems 1024-120x60000 \\
        16384-1920x60000:data/stores/neuron16384-l1920.store \\
        65536-1920x60000:data/stores/neuron65536-l1920.store --join on off
    python benchmarks/bench_kernel_scale.py --problems \\
        16384-120x20000:data/stores/neuron16384-l1920.store --model --classes on off

About 10 minutes for the first (add ``--classes on off`` for the kernel without classes:
2-3 minutes more at 65536-1920 alone).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import dask
from distributed import Client, LocalCluster

from sdnn_dask.core.kernels import warm_up_kernels
from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.data.streaming import StreamedNetwork
from sdnn_dask.parallel import DataParallelExecutor, ModelParallelExecutor
from sdnn_dask.parallel.allocator import tune_allocator
from sdnn_dask.parallel.serial import run_serial
from sdnn_dask.testing import assert_same_result

_PROBLEM = re.compile(r"^(\d+)-(\d+)x(\d+)(?::(.+))?$")


def parse_problem(text: str) -> tuple[int, int, int, Path | None]:
    """``N-L x rows[:store]`` -> (N, L, rows, store or None)."""
    found = _PROBLEM.match(text)
    if not found:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected N-LxROWS or N-LxROWS:STORE, e.g. 1024-120x60000")
    n, layers, rows, store = found.groups()
    return int(n), int(layers), int(rows), Path(store) if store else None


def line(label: str, seconds: float, edges: int, extra: str = "") -> str:
    return f"  {label:<34} {seconds:8.2f} s  {edges / seconds:9.3g} edges/s  {extra}"


def run_problem(n: int, layers: int, rows: int, store: Path | None, classes: list[str],
                join: list[str], model: bool, workers: int) -> int:
    network = StreamedNetwork(store, layers) if store else make_network(n, layers)
    if network.n_neurons != n:
        raise SystemExit(f"{store}: the store holds N = {network.n_neurons}, not {n}")
    inputs = make_inputs(rows, n, seed=0)
    edges = network.edges * rows
    where = f"streamed from {store}" if store else "in memory"
    print(f"\n{n}-{layers} x {rows} rows ({where}; {edges:.3g} edges)", flush=True)
    failed, first, seconds = 0, None, {}
    for mode in classes:
        with dask.config.set({"sdnn.kernel.classes": mode == "on"}):
            result = run_serial(network, inputs, "kernel")
        early = float(result.layers.loc[result.layers["layer"] <= 20, "seconds"].sum())
        seconds[mode] = result.wall_seconds
        if first is None:
            first = result
        else:
            failed += check(result, first.output, f"kernel, classes {mode}")
        survivors = int((result.output.getnnz(axis=1) > 0).sum())
        print(line(f"serial kernel, classes {mode}", result.wall_seconds, edges,
                   f"layers 1-20 {early:.2f} s; {survivors} survivors"), flush=True)
    if len(seconds) == 2:
        print(f"  classes on: {seconds['off'] / seconds['on']:.2f}x the kernel without them",
              flush=True)
    weights = "streamed" if store else "resident"
    configs = [("data", "hash", j, "on") for j in (join if store else ["on"])]
    configs += [("model", "hash", "", mode) for mode in classes] if model else []
    for strategy, partition, joined, mode in configs:
        with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) \
                as cluster, Client(cluster) as client, \
                dask.config.set({"sdnn.kernel.classes": mode == "on"}):
            if strategy == "data":
                result = DataParallelExecutor(client, network, weights=weights).run(
                    inputs, partition=partition, join=joined == "on")
            else:
                executor = ModelParallelExecutor(client, network, weights=weights)
                start = time.perf_counter()
                executor.partition(partition, 2)
                executor.run(inputs[:1], partition=partition, k=2)  # parts cut and opened
                print(f"  (model parts cut and opened in {time.perf_counter() - start:.0f} s)",
                      flush=True)
                result = executor.run(inputs, partition=partition, k=2)
        said = "on" if result.params.get("classes") else "off"
        label = f"{strategy} ({partition}, {workers} workers, classes {said}" + \
            (f", join {joined})" if joined and store else ")")
        failed += check(result, first.output, label)
        print(line(label, result.wall_seconds, edges,
                   f"{seconds[classes[0]] / result.wall_seconds:.2f}x the serial kernel "
                   f"(classes {classes[0]})"), flush=True)
    return failed


def check(result, expected, label: str) -> int:
    try:
        assert_same_result(result, expected)
        return 0
    except AssertionError as error:
        print(f"  {label}: FAIL: {error}", flush=True)
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", type=parse_problem,
                        default=[parse_problem("1024-120x60000")],
                        help="N-LxROWS[:STORE] (default 1024-120x60000)")
    parser.add_argument("--classes", nargs="+", choices=["on", "off"], default=["on"],
                        help="serial runs with neuron classes on and/or off (default on)")
    parser.add_argument("--join", nargs="+", choices=["on", "off"], default=["on"],
                        help="data parallelism on a store with the workers' survivors "
                             "joined after the early layers and/or not (default on)")
    parser.add_argument("--model", action="store_true", help="also model parallelism k = 2")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    tune_allocator()
    warm_up_kernels()
    print(f"{os.uname().nodename}: {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")
    failed = sum(run_problem(*problem, args.classes, args.join, args.model, args.workers)
                 for problem in args.problems)
    said = "all checks passed" if not failed else f"{failed} checks FAILED"
    print(f"\nload at the end {os.getloadavg()[0]:.2f}; {said}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
