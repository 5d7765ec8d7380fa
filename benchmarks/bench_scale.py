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
and in each worker). The headline networks do not fit that way. With ``--headline FOLDER``
the script then runs generated 16384-1920 and 65536-1920 (``--headline-sizes``) streamed
from network stores in FOLDER (written there while generated if missing, about 2 and 8 GB
in store version 2, 8 and 33 GB in version 1; removed afterwards unless ``--keep``): on
``--headline-rows`` rows (60000, the challenge's, generated official-like; streamed runs
take them in passes of ``sdnn.store.pass-bytes``), the serial kernel in this process and
data parallelism on 2 workers (weights chosen by ``auto``: streamed),
the two checked against each other on every row and against the scipy reference on
``--check-rows`` of them (8: half that survive, half that do not), with the peak memory of
all processes (this one and the cluster's, sampled: the sum of their PSS, so the store's
pages that both workers map count once). A store that fits in half the memory is read once
first, so both runs find it in the page cache; a larger one is read from disk by both.
For 65536-1920 it then projects the same run to the seed's 896 cores (the cost model
calibrated on the curated quick study in ``results/``) beside the published 51 s. It exits
1 if that peak exceeds 12 GB::

    python benchmarks/bench_scale.py --sizes --headline data/stores --keep   # ~1 h
    python benchmarks/bench_scale.py --sizes --headline data/stores --headline-rows 1000
"""

from __future__ import annotations

import argparse
import gc
import resource
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
from distributed import Client, LocalCluster

from sdnn_dask.core.kernels import forward_block
from sdnn_dask.core.reference import infer_reference
from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.parallel import DataParallelExecutor
from sdnn_dask.parallel.allocator import tune_allocator
from sdnn_dask.testing import assert_same_result


def _peak_gb() -> float:
    """This process's peak resident memory (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _worker_peak(dask_worker=None) -> float:  # run on each worker by client.run
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


class MemorySampler:
    """Peak memory of this process and all its children (the cluster's workers and
    nannies), sampled every ``interval`` seconds in a thread: the sum of their
    proportional set sizes (PSS: a page shared by k processes, such as a store's page in
    the page cache mapped by both workers, counts 1/k in each) and of their RSS."""

    def __init__(self, interval: float = 0.25):
        self.interval, self.peak_pss, self.peak_rss = interval, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            pss = rss = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    info = proc.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                pss += getattr(info, "pss", info.rss)
                rss += info.rss
            self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _headline_store(folder: Path, n: int, layers: int) -> tuple[Path, str]:
    """The generated ``n``-``layers`` network's store in ``folder`` (written while
    generated, unless a whole one is there), and what was done, in words."""
    from sdnn_dask.data import store
    from sdnn_dask.data.radixnet import iter_layers

    path = folder / f"radixnet-{n}-{layers}"
    name = f"radixnet-{n}-{layers}-s0"
    if (path / store.MANIFEST).is_file():
        held = store.open_store(path)
        if held.name == name and held.n_layers == layers:
            return path, f"store {path} reused ({held.nbytes() / 1e9:.1f} GB)"
        raise SystemExit(f"{path} holds {held.name} with {held.n_layers} layers, not {name}")
    t0 = time.perf_counter()
    store.write_store(path, iter_layers(n, layers, seed=0), n_neurons=n, name=name,
                      n_layers=layers)
    size = sum(p.stat().st_size for p in path.iterdir())
    return path, (f"store written while generated in {time.perf_counter() - t0:.0f} s, "
                  f"{size / 1e9:.1f} GB")


def _warm(held) -> str:
    """Read a store's files once if they fit in half the memory, so both runs find them
    in the page cache (else neither can: each reads from disk); what was done, in words."""
    size = held.nbytes()
    if size > 0.5 * psutil.virtual_memory().total:
        return (f"the store ({size / 1e9:.1f} GB) exceeds half the memory: both runs read "
                "its layers from disk")
    t0 = time.perf_counter()
    for path in held.folder.iterdir():
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass
    seconds = time.perf_counter() - t0
    return (f"page cache warmed: {size / 1e9:.1f} GB read in {seconds:.1f} s "
            f"({size / 1e9 / seconds:.2f} GB/s)")


def headline(folder: Path, sizes: list[int], layers: int, rows: int, check: int,
             keep: bool) -> int:
    """Generated N-1920 networks streamed from stores, on a row subset; checked."""
    from sdnn_dask.data.streaming import StreamedNetwork
    from sdnn_dask.parallel.serial import run_serial

    folder.mkdir(parents=True, exist_ok=True)
    tune_allocator()
    failed = 0
    for n in sizes:
        path, how = _headline_store(folder, n, layers)
        network = StreamedNetwork(path)
        inputs = make_inputs(rows, n, seed=0)
        edges = network.edges * rows
        print(f"{n}-{layers}: {network.edges:.3g} edges; {how}", flush=True)
        print(f"  {_warm(network.store)}", flush=True)
        with MemorySampler() as memory, \
                LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) \
                as cluster, Client(cluster) as client:
            serial = run_serial(network, inputs, "kernel")
            executor = DataParallelExecutor(client, network)
            data = executor.run(inputs, partition="block")
            client.run(gc.collect)
        assert_same_result(data, serial.output)  # the two strategies agree ...
        survivors = np.flatnonzero(serial.output.getnnz(axis=1))
        dead = np.setdiff1d(np.arange(rows), survivors)
        # ... and the reference agrees with both on a few rows that survive and a few
        # that do not (every row through every layer: the reference is slow)
        picked = np.sort(np.concatenate([survivors[: check // 2],
                                         dead[: check - min(check // 2, len(survivors))]]))
        t0 = time.perf_counter()
        expected = infer_reference(network, inputs[picked])
        ref_s = time.perf_counter() - t0
        assert_same_result(serial.output[picked], expected)
        ok = memory.peak_pss <= 12e9
        failed += not ok
        print(f"  {executor.weights_reason}")
        print(f"  {rows} rows, {len(survivors)} survive: serial kernel {serial.wall_seconds:.1f} s "
              f"({edges / serial.wall_seconds:.3g} edges/s), data parallel 2 workers "
              f"{data.wall_seconds:.1f} s ({edges / data.wall_seconds:.3g} edges/s, "
              f"{serial.wall_seconds / data.wall_seconds:.2f}x the kernel)")
        print(f"  reference on {len(picked)} of the rows ({min(check // 2, len(survivors))} "
              f"that survive): {ref_s:.0f} s, equal to the kernel's; data parallel equal "
              "to the kernel on every row")
        print(f"  peak memory of all processes: {memory.peak_pss / 1e9:.2f} GB PSS "
              f"({memory.peak_rss / 1e9:.2f} GB summed RSS): "
              f"{'within' if ok else 'OVER'} 12 GB", flush=True)
        if n == 65536 and layers == 1920:
            print(f"  {_projection(rows)}", flush=True)
        if not keep:
            shutil.rmtree(path)
    return 1 if failed else 0


def _projection(rows: int) -> str:
    """The same run projected to the seed's 896 cores (Mofrad et al., HPEC 2020) with the
    cost model calibrated on the curated quick study (``results/``), in words."""
    import pandas as pd

    from sdnn_dask.data.radixnet import make_network as generated
    from sdnn_dask.projection import CostModel, Survival, project_published

    results = Path(__file__).resolve().parents[1] / "results"
    if not (results / "records.csv").is_file():
        return f"no projection: {results / 'records.csv'} (the quick study's records) missing"
    model = CostModel.calibrate(pd.read_csv(results / "records.csv"),
                                pd.read_csv(results / "layers.csv"))
    # survivors plateau by layer 20: a profile of 40 layers, extended to 1920
    profile = Survival.measure(generated(65536, 40, seed=0), make_inputs(2000, 65536, seed=0))
    result = project_published(model, profile)
    p = result["prediction"]
    return (f"projected to {result.get('workers', 896)} cores (data parallelism, {rows} rows, "
            f"the model calibrated on results/): {p.seconds:.1f} s ({p.edges_per_s:.3g} "
            f"edges/s) against the published {result['published_s']:g} s; the slowest "
            f"worker's block {result['max_block_s']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--layers", type=int, default=120)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--headline", type=Path, default=None, metavar="FOLDER",
                        help="then stream generated N-1920 from stores in FOLDER (written "
                             "there if missing)")
    parser.add_argument("--headline-sizes", type=int, nargs="+", default=[16384, 65536])
    parser.add_argument("--headline-layers", type=int, default=1920)
    parser.add_argument("--headline-rows", type=int, default=60000,
                        help="rows of the headline runs (60000: the challenge's)")
    parser.add_argument("--check-rows", type=int, default=8,
                        help="rows the reference checks in the headline runs")
    parser.add_argument("--keep", action="store_true", help="keep the headline stores")
    args = parser.parse_args(argv)
    status = 0
    if args.sizes:
        sweep(args)
    if args.headline is not None:
        status = headline(args.headline, args.headline_sizes, args.headline_layers,
                          args.headline_rows, args.check_rows, args.keep)
    return status


def sweep(args: argparse.Namespace) -> None:
    """The N sweep at L = ``args.layers``, networks in memory."""
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


if __name__ == "__main__":
    raise SystemExit(main())
