"""Training steps at the challenge's scale: serial against data parallelism, one run.

Generated RadiX-Net 1024-120 network (random values on its pattern, 10 classes),
generated official-like inputs with random labels (this is about time and bytes per step,
not learning), 2 workers. For each batch size, the median seconds per step of the serial
reference (float64; once, it is slow), the serial compiled step and data-parallel steps
on the workers (interleaved with the compiled ones), the gradient bytes data parallelism
moves per step, and the ratios::

    python benchmarks/bench_training.py [--layers 120] [--batches 64 512] [--steps 5]

Every data-parallel step's loss is checked against the serial step's on the same batch
(both models start equal and take the same steps; to 1e-3: the gradient's float32 sums
in another order make the two drift apart slowly over 120 layers).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from distributed import Client, LocalCluster

from sdnn_dask.images import make_inputs
from sdnn_dask.radixnet import make_network
from sdnn_dask.training import SGD, init_model, train_step
from sdnn_dask.training.data_parallel import DataParallelTrainer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=120)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)

    network = make_network(1024, args.layers)
    rng = np.random.default_rng(0)
    rows = max(args.batches) * (args.steps + 1)
    inputs = make_inputs(rows, 1024, seed=0).toarray()
    labels = rng.integers(0, 10, rows)
    print(f"1024-{args.layers}, {network.edges:,} weights; batches {args.batches}, "
          f"{args.steps} steps each (medians); 2 workers", file=sys.stderr)
    lines = []
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for batch in args.batches:
            model = init_model(network, 10, seed=1)
            serial = model.copy()
            optimizer = SGD(serial, 0.01, momentum=0.9)
            reference = model.astype(np.float64)
            ref_opt = SGD(reference, 0.01, momentum=0.9)
            start = time.perf_counter()
            train_step(reference, inputs[:batch], labels[:batch], ref_opt, "reference")
            ref_s = time.perf_counter() - start
            with DataParallelTrainer(client, model, lr=0.01, momentum=0.9) as trainer:
                # one untimed step each: compilation, placement
                train_step(serial, inputs[:batch], labels[:batch], optimizer)
                trainer.step(inputs[:batch], labels[:batch])
                comp, data, moved = [], [], 0
                for s in range(1, args.steps + 1):
                    x, y = inputs[s * batch:(s + 1) * batch], labels[s * batch:(s + 1) * batch]
                    start = time.perf_counter()
                    expected = train_step(serial, x, y, optimizer)
                    comp.append(time.perf_counter() - start)
                    step = trainer.step(x, y)
                    data.append(step.seconds)
                    moved = step.bytes_moved
                    # float32 sums in another order drift apart slowly over 120 layers
                    if not np.isclose(step.loss, expected, rtol=1e-3):
                        raise SystemExit(f"batch {batch}, step {s}: loss {step.loss} against "
                                         f"{expected} serially")
            c, d = statistics.median(comp), statistics.median(data)
            lines.append((batch, ref_s, c, d, moved))
    print(f"{'batch':>6} {'reference s':>12} {'compiled s':>11} {'data (2 w) s':>13} "
          f"{'compiled/ref':>12} {'data/compiled':>13} {'MB moved/step':>13}")
    for batch, ref_s, c, d, moved in lines:
        print(f"{batch:6d} {ref_s:12.3f} {c:11.3f} {d:13.3f} {ref_s / c:12.1f} {c / d:13.2f} "
              f"{moved / 1e6:13.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
