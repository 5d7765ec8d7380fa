"""Whole epochs of the digits through the persistent loop: where a parallel step's time goes.

The digits task (scikit-learn's 8 x 8 digits upsampled to 1024 features, 1437 training
rows; ``sdnn_dask.training.digits``) on ``--layers`` sparse layers, 2 worker processes
(a LocalCluster), k = 2. For each layer count and batch size, every configuration takes
the same epochs from the same model, interleaved (serial epoch, then each parallel one,
``--epochs`` times), so the machine's drift hits them alike. After the serial epoch the
benchmark waits :data:`SETTLE_SECONDS` before the next: without it the configuration run
right after the serial epoch runs slower (at 4 layers, batch 256: 0.62-0.73x serial,
against 0.96-1.24x in the same runs for an identical configuration run second; the same
with a 0.02 s wait, 1.17x with 0.2 s, and no loss when the serial epoch is replaced by a
sleep: the serial's compute in this process slows the workers for a while after):

* ``serial``: the compiled step in this process (tiles reused, the workers' allocator
  settings), the baseline;
* ``data``: data parallelism, one persistent loop per worker, the epoch's batches fed as
  row ids into rows held on the workers (``trainer.hold`` and ``trainer.steps``: one feed
  an epoch), the gradient exchanged in buckets during the backward;
* ``model <partition>``: model parallelism on each ``--partitions`` method, the same way.

``--buckets 64KiB 1MiB``: one data-parallel configuration per size of the gradient's
buckets (``DataParallelTrainer(bucket_bytes=)``, the least bytes sent at once during the
backward; default: :data:`~sdnn_dask.training.replicas.BUCKET_BYTES` alone), each in
the same epochs, so what a size buys is measured against the others in one run; their
steps are checked equal bit for bit (a bucket's size changes when it goes, not its sum).

Printed per configuration: the median epoch seconds and its ratio to the serial epoch;
per step (medians over the epoch's steps): the step's wall time (first slot's start to
the last one's end), the slowest slot's compute (forward, backward, update), the longest
wait for pieces, sends, the gradient exchange, and the overhead (step minus the slowest
slot's compute); MB moved per step; and the largest relative difference of an epoch's
mean loss from the serial one's. The first three steps' losses are checked against the
serial ones (relative 1e-3: sums in another order); a FAIL is printed and sets the exit
status. Later epochs are not checked: beyond a few layers training amplifies the
rounding of sums in another order until the trajectories part (see
``sdnn_dask.study.training_comparison.EPOCH_LOSS_RTOL``), so the deviation is reported instead::

    python benchmarks/bench_training_loop.py [--layers 4 16 120] [--batches 32 256]
        [--epochs 5] [--partitions block hypergraph] [--buckets 64KiB 1MiB]

The hypergraph partition needs the ``partition`` extra (mtkahypar).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from dask.utils import format_bytes, parse_bytes
from distributed import Client, LocalCluster

from sdnn_dask.parallel.allocator import tune_allocator
from sdnn_dask.training import SGD, train_step
from sdnn_dask.training.compiled import Workspace
from sdnn_dask.training.data_parallel import DataParallelTrainer
from sdnn_dask.training.digits import digits_model, load_digits_1024
from sdnn_dask.training.loop import batches, step_bytes
from sdnn_dask.training.model_parallel import ModelParallelTrainer
from sdnn_dask.training.replicas import BUCKET_BYTES
from sdnn_dask.training.trainer import slot_compute

LOSS_RTOL = 1e-3
#: The wait after each serial epoch (see the module docstring).
SETTLE_SECONDS = 0.25
OPTS = {"lr": 0.01, "momentum": 0.9}


def _breakdown(results) -> dict[str, float]:
    """Per-step medians (ms) of what the slots' records say."""
    def med(values) -> float:
        return statistics.median(values) * 1e3
    return {
        "step": med([r.seconds for r in results]),
        "compute": med([max(slot_compute(s) for s in r.slots) for r in results]),
        "wait": med([max(s["wait_s"] for s in r.slots) for r in results]),
        "send": med([max(s["send_s"] for s in r.slots) for r in results]),
        "exchange": med([max(s["allreduce_s"] for s in r.slots) for r in results]),
        "overhead": med([r.overhead_seconds for r in results]),
        "mb": statistics.median([step_bytes(r) for r in results]) / 1e6,
    }


def _one(client: Client, data, layers: int, batch: int, args) -> list[tuple]:
    """Every configuration at one layer count and batch size; one line each."""
    model = digits_model(layers, 0)
    serial = model.copy()
    optimizer = SGD(serial, **OPTS)
    workspace = Workspace()
    sizes = args.buckets or [BUCKET_BYTES]
    trainers = {("data" if len(sizes) == 1 else f"data, buckets {format_bytes(b)}"):
                DataParallelTrainer(client, model, bucket_bytes=b, **OPTS) for b in sizes}
    for method in args.partitions:
        trainers[f"model {method}"] = ModelParallelTrainer(client, model, method, k=2,
                                                           **OPTS)
    for trainer in trainers.values():
        trainer.hold(data.x_train, data.y_train)
    rng = np.random.default_rng(0)
    seconds: dict[str, list[float]] = {"serial": [], **{n: [] for n in trainers}}
    steps: dict[str, list] = {n: [] for n in trainers}
    deviation = dict.fromkeys(trainers, 0.0)
    failures = []
    try:
        for epoch in range(args.epochs + 1):  # epoch 0 untimed: compilation, first sends
            ids = list(batches(data.x_train.shape[0], batch, rng))
            data_losses: list[tuple[str, list[float]]] = []
            t0 = time.perf_counter()
            losses = [train_step(serial, data.x_train[i], data.y_train[i], optimizer,
                                 workspace=workspace) for i in ids]
            elapsed = time.perf_counter() - t0
            time.sleep(SETTLE_SECONDS)
            expected = sum(v * len(i) for v, i in zip(losses, ids, strict=True))
            expected /= data.x_train.shape[0]
            if epoch:
                seconds["serial"].append(elapsed)
            for name, trainer in trainers.items():
                t0 = time.perf_counter()
                results = trainer.steps(ids)
                elapsed = time.perf_counter() - t0
                loss = sum(r.loss * len(i) for r, i in zip(results, ids, strict=True))
                loss /= data.x_train.shape[0]
                deviation[name] = max(deviation[name], abs(loss - expected) / expected)
                if name.startswith("data"):
                    data_losses.append((name, [r.loss for r in results]))
                if epoch == 0:
                    got = [r.loss for r in results[:3]]
                    if not np.allclose(got, losses[:3], rtol=LOSS_RTOL, atol=0.0):
                        failures.append(f"{layers} layers, batch {batch}, {name}: first "
                                        f"steps' losses {got}, serial {losses[:3]}")
                if epoch:
                    seconds[name].append(elapsed)
                    steps[name] += results
            for name, got in data_losses[1:]:  # buckets of another size: the same steps
                if got != data_losses[0][1]:
                    failures.append(f"{layers} layers, batch {batch}, epoch {epoch}: "
                                    f"{name} took other steps than {data_losses[0][0]}")
    finally:
        for trainer in trainers.values():
            trainer.close()
    base = statistics.median(seconds["serial"])
    lines = [(layers, batch, "serial", base, 1.0, None)]
    for name in trainers:
        epoch_s = statistics.median(seconds[name])
        lines.append((layers, batch, name, epoch_s, base / epoch_s,
                      {**_breakdown(steps[name]), "deviation": deviation[name]}))
    for failure in failures:
        print("FAIL", failure, flush=True)
    return lines, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 16, 120])
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--partitions", nargs="*", default=["block", "hypergraph"],
                        help="model parallelism on each (none: data parallelism only)")
    parser.add_argument("--buckets", nargs="+", type=parse_bytes, default=None,
                        help="data parallelism once per gradient bucket size (64KiB, "
                             f"1MiB, ...); default {format_bytes(BUCKET_BYTES)}")
    args = parser.parse_args(argv)
    tune_allocator()  # the serial step gets the workers' allocator settings
    data = load_digits_1024(0)
    print(f"digits: {data.x_train.shape[0]} training rows; 2 worker processes, k = 2; "
          f"medians of {args.epochs} epochs, interleaved", flush=True)
    header = ("| layers | batch | configuration | epoch s | vs serial | step ms | compute ms "
              "| wait ms | send ms | exchange ms | overhead ms | MB/step | loss diff |")
    rows, failed = [], []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        for layers in args.layers:
            for batch in args.batches:
                lines, failures = _one(client, data, layers, batch, args)
                failed += failures
                for layers_, batch_, name, epoch_s, ratio, b in lines:
                    cells = [str(layers_), str(batch_), name, f"{epoch_s:.3f}",
                             f"{ratio:.2f}"]
                    cells += (["-"] * 8 if b is None else
                              [f"{b[k]:.2f}" for k in ("step", "compute", "wait", "send",
                                                       "exchange", "overhead")]
                              + [f"{b['mb']:.3g}", f"{b['deviation']:.1e}"])
                    rows.append("| " + " | ".join(cells) + " |")
                    print(rows[-1], flush=True)
    print()
    print(header)
    print("|" + "---|" * 13)
    print("\n".join(rows))
    if failed:
        print(f"\n{len(failed)} configurations FAILED their loss check", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
