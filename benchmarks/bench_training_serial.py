"""Seconds per forward, backward and training step: the reference against the compiled path.

On generated RadiX-Net 1024-neuron patterns (``make_network(1024, L)``, random He-scaled
values, 10 classes) with random inputs in [0, 1] (about half zeros), prints for each
(layers, batch) the median seconds of

* ``forward``: all layers and the readout;
* ``backward``: loss, every gradient (on the cached forward);
* ``step``: forward + backward + an SGD update with momentum and weight decay,

for the float64 reference and the float32 compiled path, and the ratios the project tracks
(reference step / compiled step, target >= 5; compiled backward / compiled forward,
target <= 2). The two paths are measured in alternating rounds (medians of the rounds'
medians), so a machine whose speed drifts slows both alike. Single-threaded throughout
(BLAS included) unless ``--threads``. Run::

    python benchmarks/bench_training_serial.py [--layers 4 24] [--batch 64 512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _set_threads(threads: int) -> None:
    # before numpy is imported: the BLAS reads these once
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 24])
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per round of the "
                        "compiled path (the reference gets half as many, at least 2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    _set_threads(args.threads)

    import numpy as np

    from sdnn_dask.data.radixnet import make_network
    from sdnn_dask.training import SGD, compiled, init_model, reference

    def median_seconds(fn, repeat: int) -> float:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def time_path(path, model, x, labels, repeat, workspace=None):
        extra = () if path is reference else (workspace,)
        opt = SGD(model, lr=1e-6, momentum=0.9, weight_decay=1e-4)  # tiny: values stay put
        forward = median_seconds(lambda: path.forward(model, x, *extra), repeat)
        cache = path.forward(model, x, *extra)
        backward = median_seconds(lambda: path.backward(model, cache, labels), repeat)
        step = median_seconds(
            lambda: opt.step(path.backward(model, path.forward(model, x, *extra), labels)[1]),
            repeat)
        return forward, backward, step

    rows = []
    ref_repeat = max(2, args.repeat // 2)
    print(f"training step on RadiX-Net 1024, threads={args.threads}; median seconds over "
          f"{args.rounds} rounds (compiled: {args.repeat} runs a round, reference: "
          f"{ref_repeat})")
    for layers in args.layers:
        net = make_network(1024, layers, seed=0)
        for batch in args.batch:
            rng = np.random.default_rng(batch)
            x = rng.random((batch, 1024), dtype=np.float32)
            x[rng.random(x.shape) < 0.5] = 0.0
            labels = rng.integers(0, 10, batch)
            model = init_model(net, classes=10, seed=0)
            workspace = compiled.Workspace()
            compiled.backward(model, compiled.forward(model, x, workspace), labels)  # compile
            comp_model, ref_model = model.copy(), model.copy()
            comp, ref = [], []
            for _ in range(args.rounds):  # alternate, so drift hits both paths alike
                comp.append(time_path(compiled, comp_model, x, labels, args.repeat, workspace))
                ref.append(time_path(reference, ref_model, x, labels, ref_repeat))
            rows.append((layers, batch, *np.median(ref, axis=0), *np.median(comp, axis=0)))

    header = (f"{'layers':>6} {'batch':>5} | {'ref fwd':>8} {'ref bwd':>8} {'ref step':>8} | "
              f"{'fwd':>8} {'bwd':>8} {'step':>8} | {'step ref/comp':>13} "
              f"{'bwd/fwd':>7} {'GFMA/s fwd':>10}")
    print(header)
    print("-" * len(header))
    for layers, batch, rf, rb, rs, cf, cb, cs in rows:
        fma = layers * 32 * 1024 * batch  # multiply-adds of the sparse layers' forward
        print(f"{layers:>6} {batch:>5} | {rf:8.4f} {rb:8.4f} {rs:8.4f} | {cf:8.4f} {cb:8.4f} "
              f"{cs:8.4f} | {rs / cs:13.1f} {cb / cf:7.2f} {fma / cf / 1e9:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
