"""Training steps at the challenge's scale: serial against data and model parallelism.

Generated RadiX-Net 1024-120 network (random values on its pattern, 10 classes),
generated official-like inputs with random labels (this is about time and bytes per step,
not learning), 2 workers. For each batch size, the median seconds per step of the serial
reference (float64; once, it is slow), the serial compiled step, and, interleaved with
the compiled steps: data-parallel steps on the workers, model-parallel steps at k = 2 (one
part per worker) on each ``--partitions`` method, on the direct transport (data
parallelism also on the graph one, the baseline), and the hybrid of 2 row groups x 2
parts (4 slots on the 2 workers: each part's two copies share a worker); after each
serial step it waits :data:`SETTLE_SECONDS` (else the configuration right after it is slowed, see
``bench_training_loop.py``). Printed: the bytes each moves across
workers per step (data: gradients; model: activations forward plus partial errors
backward, with the partition's prediction for one direction; hybrid: both) and the
ratios::

    python benchmarks/bench_training.py [--layers 120] [--batches 64 512] [--steps 5]
        [--partitions block hypergraph] [--no-graph] [--rings 0 "16 MiB"]
        [--buckets 64KiB 1MiB]

``--buckets``: one direct data-parallel configuration per size of the gradient's buckets
(``DataParallelTrainer(bucket_bytes=)``) in the same steps.

``--rings``: one process cluster per size of the wire's shared-memory ring
(``sdnn.transport.wire-ring``; 0: the sockets carry every byte), each with its own
compiled baseline, to measure what the ring buys.

Every parallel step's loss is checked against the serial step's on the same batch (all
models start equal and take the same steps; to 1e-3: float32 sums in another order make
them drift apart slowly over 120 layers). The hypergraph partition needs the
``partition`` extra (mtkahypar) and is cached under ``cache_dir() / "partitions"``.
"""

from __future__ import annotations

import argparse
import faulthandler
import statistics
import sys
import time

import dask.config
import numpy as np
from dask.utils import format_bytes, parse_bytes
from distributed import Client, LocalCluster

from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.parallel.allocator import tune_allocator
from sdnn_dask.partition import make_neuron_partition
from sdnn_dask.training import SGD, init_model, train_step
from sdnn_dask.training.compiled import Workspace
from sdnn_dask.training.data_parallel import DataParallelTrainer
from sdnn_dask.training.model_parallel import ModelParallelTrainer
from sdnn_dask.training.replicas import BUCKET_BYTES

#: The wait after each serial step (see ``bench_training_loop.py``).
SETTLE_SECONDS = 0.25


def _trainers(client: Client, model, partitions: dict, graph: bool,
              buckets: list[int] | None = None) -> dict[str, object]:
    """Every parallel configuration, by name (all start from ``model``)."""
    opts = {"lr": 0.01, "momentum": 0.9}
    sizes = buckets or [BUCKET_BYTES]
    out: dict[str, object] = {
        ("data, direct" if len(sizes) == 1 else f"data, direct, buckets {format_bytes(b)}"):
        DataParallelTrainer(client, model, transport="direct", bucket_bytes=b, **opts)
        for b in sizes}
    if graph:
        out["data, graph"] = DataParallelTrainer(client, model, transport="graph", **opts)
    for m, part in partitions.items():
        # model parallelism runs on the direct transport only (docs/training.md)
        out[f"model k=2 {m}, direct"] = ModelParallelTrainer(client, model, part, **opts)
    for m, part in partitions.items():
        out[f"hybrid 2x2 {m}"] = ModelParallelTrainer(client, model, part, row_groups=2,
                                                      **opts)
    return out


def _moved(step) -> tuple[int, int, int, int]:
    """(forward, backward, gradient, predicted one-way) bytes across workers."""
    if hasattr(step, "bytes_moved"):  # data parallelism: gradients only
        return 0, 0, step.bytes_moved, 0
    return (step.bytes_forward, step.bytes_backward, step.bytes_gradient,
            step.predicted_bytes)


def _ring_bytes(dask_worker) -> int:
    """Bytes this worker's wire sent through its shared-memory rings."""
    from sdnn_dask.parallel.transport import exchange

    found = exchange._IN_PROCESS.get(dask_worker.address)
    wire = getattr(found, "wire", None)
    return wire.ring_bytes() if wire is not None else 0


def _run(client: Client, kind: str, network, partitions: dict, inputs, labels, args,
         graph: bool) -> list[tuple]:
    """Every configuration at every batch size on one cluster; one line per batch."""
    lines = []
    for batch in args.batches:
        model = init_model(network, 10, seed=1)
        serial = model.copy()
        optimizer = SGD(serial, 0.01, momentum=0.9)
        reference = model.astype(np.float64)
        ref_opt = SGD(reference, 0.01, momentum=0.9)
        start = time.perf_counter()
        train_step(reference, inputs[:batch], labels[:batch], ref_opt, "reference")
        ref_s = time.perf_counter() - start
        trainers = _trainers(client, model, partitions, graph, args.buckets)
        try:
            # one untimed step each: compilation, placement, connections
            workspace = Workspace()  # the serial step at its best: tiles reused
            train_step(serial, inputs[:batch], labels[:batch], optimizer, workspace=workspace)
            for trainer in trainers.values():
                trainer.step(inputs[:batch], labels[:batch])
            comp = []
            took: dict[str, list[float]] = {name: [] for name in trainers}
            parts: dict[str, list] = {name: [] for name in trainers}
            moved: dict[str, tuple[int, int, int, int]] = {}
            for s in range(1, args.steps + 1):
                x, y = inputs[s * batch:(s + 1) * batch], labels[s * batch:(s + 1) * batch]
                start = time.perf_counter()
                expected = train_step(serial, x, y, optimizer, workspace=workspace)
                comp.append(time.perf_counter() - start)
                time.sleep(SETTLE_SECONDS)  # else the next configuration is slowed
                for name, trainer in trainers.items():
                    step = trainer.step(x, y)
                    took[name].append(step.seconds)
                    if step.slots:
                        parts[name].append(step)
                    moved[name] = _moved(step)
                    # float32 sums in another order drift apart slowly over 120 layers
                    if not np.isclose(step.loss, expected, rtol=1e-3):
                        raise SystemExit(f"batch {batch}, step {s}, {name}: loss "
                                         f"{step.loss} against {expected} serially")
        finally:
            for trainer in trainers.values():
                trainer.close()
        c = statistics.median(comp)
        lines.append((kind, batch, ref_s, c,
                      {n: statistics.median(t) for n, t in took.items()}, moved,
                      {n: _breakdown(p) for n, p in parts.items() if p}))
    return lines


def _breakdown(steps) -> dict[str, float]:
    """Per-step medians (seconds) of where a direct step's time went, its slots' records."""
    def med(values) -> float:
        return statistics.median(values)
    return {
        "forward": med([max(s["forward_s"] for s in r.slots) for r in steps]),
        "backward": med([max(s["backward_s"] for s in r.slots) for r in steps]),
        "update": med([max(s["update_s"] for s in r.slots) for r in steps]),
        "compute": med([r.compute_seconds for r in steps]),
        "wait": med([max(s["wait_s"] for s in r.slots) for r in steps]),
        "send": med([max(s["send_s"] for s in r.slots) for r in steps]),
        "exchange": med([max(s["allreduce_s"] for s in r.slots) for r in steps]),
        "overhead": med([r.overhead_seconds for r in steps]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=120)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--partitions", nargs="*", default=["block", "hypergraph"],
                        help="model parallelism and the hybrid on each (none: leave "
                             "them out)")
    parser.add_argument("--clusters", nargs="+", choices=["processes", "threads"],
                        default=["processes", "threads"],
                        help="LocalClusters to run on: 2 worker processes (the comms of a "
                             "real cluster), 2 worker threads of this process (one machine)")
    parser.add_argument("--no-graph", dest="graph", action="store_false",
                        help="leave out the data-parallel graph-transport baseline")
    parser.add_argument("--rings", nargs="+", default=None,
                        help="process clusters: one per wire ring size (0, '16 MiB', ...); "
                             "default: one, at sdnn.transport.wire-ring")
    parser.add_argument("--buckets", nargs="+", type=parse_bytes, default=None,
                        help="data parallelism (direct) once per gradient bucket size "
                             f"(64KiB, 1MiB, ...); default {format_bytes(BUCKET_BYTES)}")
    args = parser.parse_args(argv)
    faulthandler.enable()  # a crash in a kernel or a thread leaves its traceback
    # the serial baseline runs here: the same allocator settings as the workers (without
    # them its fresh tiles page-fault, and a threaded cluster's run_on_workers would
    # set them here anyway: the baseline would differ between the two clusters)
    tune_allocator()

    network = make_network(1024, args.layers)
    partitions = {m: make_neuron_partition(network, 2, m, cache=m == "hypergraph")
                  for m in args.partitions}
    rng = np.random.default_rng(0)
    rows = max(args.batches) * (args.steps + 1)
    inputs = make_inputs(rows, 1024, seed=0).toarray()
    labels = rng.integers(0, 10, rows)
    print(f"1024-{args.layers}, {network.edges:,} weights; batches {args.batches}, "
          f"{args.steps} steps each (medians); 2 workers: {', '.join(args.clusters)}",
          file=sys.stderr)
    lines = []
    runs = [(kind, ring) for kind in args.clusters
            for ring in (args.rings if kind == "processes" and args.rings else [None])]
    for kind, ring in runs:
        label = kind if ring is None else f"{kind}, ring {ring}"
        # the workers take the config they are started with
        with dask.config.set({} if ring is None else {"sdnn.transport.wire-ring": ring}), \
                LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                             processes=kind == "processes") as cluster, \
                Client(cluster) as client:
            lines += _run(client, label, network, partitions, inputs, labels, args,
                          graph=args.graph and kind == "processes")
            if kind == "processes":  # the ring's share, so a run says it took the ring
                ringed = sum(client.run(_ring_bytes).values())
                print(f"{label}: {ringed / 1e6:.1f} MB went by the wires' rings",
                      file=sys.stderr)
    print(f"{'workers':>20} {'batch':>6} {'reference s':>12} {'compiled s':>11} "
          f"{'compiled/ref':>12}")
    for kind, batch, ref_s, c, *_ in lines:
        print(f"{kind:>20} {batch:6d} {ref_s:12.3f} {c:11.3f} {ref_s / c:12.1f}")
    print(f"\n{'workers':>20} {'batch':>6} {'strategy':>34} {'s/step':>8} {'vs compiled':>11} "
          f"{'MB fwd':>8} {'MB bwd':>8} {'MB grad':>8} {'MB predicted':>12}")
    for kind, batch, _, c, took, moved, _ in lines:
        for name in took:
            fwd, bwd, grad, predicted = moved[name]
            print(f"{kind:>20} {batch:6d} {name:>34} {took[name]:8.3f} {c / took[name]:11.2f} "
                  f"{fwd / 1e6:8.2f} {bwd / 1e6:8.2f} {grad / 1e6:8.2f} "
                  f"{predicted / 1e6:12.2f}")
    keys = ("forward", "backward", "update", "compute", "wait", "send", "exchange", "overhead")
    print("\nWhere a direct step's time goes (ms; per step, the slowest slot's, medians; "
          "compute = forward + backward + update without waits and sends; overhead = the "
          "step minus the slowest slot's compute):")
    print(f"{'workers':>20} {'batch':>6} {'strategy':>34} " + " ".join(f"{k:>9}" for k in keys))
    for kind, batch, _, _, _, _, parts in lines:
        for name, b in parts.items():
            print(f"{kind:>20} {batch:6d} {name:>34} "
                  + " ".join(f"{b[k] * 1e3:9.1f}" for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
