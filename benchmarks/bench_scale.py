"""The kernel at every challenge size: N = 1024 to 65536, one process run.

For each N: a generated RadiX-Net N-L network (L = 120 by default) and the same number of
generated official-like rows, the scipy reference (``infer_reference``, once: it is slow),
the serial kernel (best of ``--repeat``) and data parallelism on 2 workers (contiguous
blocks, best of ``--repeat``), every output checked against the reference. Printed per N:
seconds and edges/s (rows x edges / seconds, the challenge's rate), the kernel against the
reference, data parallelism against the kernel, the kernel's rate against its rate at
N = 1024, the rows that survive, and the peak memory of this process and of the workers::

    python benchmarks/bench_scale.py [--sizes 1024 4096 16384 65536] [--layers 120]
        [--rows 1000] [--repeat 2] [--headline FOLDER [--keep]]

At N = 65536 the network is 251 M edges (about 3 GB with its transpose, in this process
and in each worker). The headline 65536-1920 network of issue 11 does not fit that way:
it needs the layers streamed from a network store, which no run does yet. With
``--headline FOLDER`` (and ``--sizes`` empty to skip the sweep) the script instead writes
the generated 65536-1920 network as a store there while generating it
(:func:`~sdnn_dask.radixnet.iter_layers`; about 32 GB on disk), then reads every layer
back through a window of 2, and prints the seconds, the size and this process's peak
memory; the store is removed afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from pathlib import Path

from distributed import Client, LocalCluster

from sdnn_dask.allocator import tune_allocator
from sdnn_dask.images import make_inputs
from sdnn_dask.kernels import forward_block
from sdnn_dask.parallel import DataParallelExecutor
from sdnn_dask.radixnet import make_network
from sdnn_dask.reference import infer_reference
from sdnn_dask.testing import assert_same_result


def _peak_gb() -> float:
    """This process's peak resident memory (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _worker_peak(dask_worker=None) -> float:  # run on each worker by client.run
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def headline(folder: Path, keep: bool) -> None:
    """Write generated 65536-1920 as a store while generating it; read it back."""
    from sdnn_dask import store
    from sdnn_dask.radixnet import iter_layers

    n, layers = 65536, 1920
    t0 = time.perf_counter()
    store.write_store(folder, iter_layers(n, layers, seed=0), n_neurons=n,
                      name=f"radixnet-{n}-{layers}-s0", n_layers=layers)
    write_s = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in folder.iterdir())
    held = store.open_store(folder)
    t0 = time.perf_counter()
    edges = sum(w.nnz for w in held.layers(window=2))
    read_s = time.perf_counter() - t0
    print(f"65536-1920 store: {edges:.3g} edges, written in {write_s:.0f} s while generated, "
          f"{size / 1e9:.1f} GB; every layer read back (window 2, checked) in {read_s:.0f} s; "
          f"peak memory of this process {_peak_gb():.2f} GB")
    if not keep:
        shutil.rmtree(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--layers", type=int, default=120)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--headline", type=Path, default=None,
                        help="write generated 65536-1920 as a store in this new folder")
    parser.add_argument("--keep", action="store_true", help="keep the headline store")
    args = parser.parse_args(argv)
    if args.headline is not None:
        headline(args.headline, args.keep)
    if not args.sizes:
        return 0
    tune_allocator()  # as the workers: the kernel's tiles without page faults
    print(f"L = {args.layers}, {args.rows} rows at every N, best of {args.repeat}; "
          "2 workers for data parallelism", file=sys.stderr)
    lines = []
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for n in args.sizes:
            network = make_network(n, args.layers, seed=0)
            inputs = make_inputs(args.rows, n, seed=0)
            edges = network.edges * args.rows
            t0 = time.perf_counter()
            expected = infer_reference(network, inputs)
            ref_s = time.perf_counter() - t0
            forward_block(network, inputs[:50])  # compiled, tiles allocated
            kernel_s, out = float("inf"), None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                out = forward_block(network, inputs)
                kernel_s = min(kernel_s, time.perf_counter() - t0)
            assert_same_result(out.to_csr(), expected)
            executor = DataParallelExecutor(client, network)
            data_s = float("inf")
            for _ in range(args.repeat):
                result = executor.run(inputs, partition="block")
                data_s = min(data_s, result.wall_seconds)
                assert_same_result(result, expected)
            workers_gb = max(client.run(_worker_peak).values())
            lines.append((n, ref_s, kernel_s, data_s, edges, len(out.rows), _peak_gb(),
                          workers_gb))
            print(f"N = {n} done", file=sys.stderr, flush=True)
            del network, inputs, expected, out, executor
            client.restart()  # the workers' copies go; the next N's peak is its own
    base = lines[0][4] / lines[0][2]
    print(f"{'N':>6} {'reference s':>12} {'kernel s':>9} {'data 2w s':>10} "
          f"{'kernel edges/s':>15} {'kernel/ref':>10} {'data/kernel':>11} "
          f"{'vs N=' + str(lines[0][0]):>10} {'survivors':>9} {'peak GB':>8} {'worker GB':>9}")
    for n, ref_s, kernel_s, data_s, edges, survivors, peak, workers in lines:
        rate = edges / kernel_s
        print(f"{n:6d} {ref_s:12.2f} {kernel_s:9.3f} {data_s:10.3f} {rate:15.3g} "
              f"{ref_s / kernel_s:10.1f} {kernel_s / data_s:11.2f} {rate / base:10.2f} "
              f"{survivors:9d} {peak:8.1f} {workers:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
