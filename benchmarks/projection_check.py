"""Validate :mod:`sdnn_dask.projection` on held-out points.

Measures (or reads, ``--results DIR``) runs of data parallelism on 1 and 2 workers
(contiguous row blocks, one per worker), model parallelism (k = 2 contiguous neuron parts,
direct transport) and the hybrid (2 row groups x 2 parts), plus the serial kernel at the
calibration points (also with the dense step switched off, so the sparse step's costs are
measured). It calibrates a :class:`~sdnn_dask.projection.CostModel` on the N = 1024
calibration points only, then predicts the held-out points it never saw: N = 4096 at
several L and row counts, and N = 1024 at (L, rows) outside the calibration grid. The
survival profile of every point comes from one serial pass per N
(:meth:`~sdnn_dask.projection.Survival.measure`, no timing used). It prints point,
measured seconds (median of ``--repeat`` runs), predicted seconds and the error, then the
projection of the paper's 65536-neuron, 1920-layer network on 896 workers.

The machine has 2 cores, so nothing here runs more than 2 single-threaded workers: the
points are held out on N, L and rows, not on the number of workers. Rounds go over every
point in turn (a burst of load from another process then hits one repeat of many points,
not every repeat of one).

Run::

    python benchmarks/projection_check.py                 # measure (~4-5 min on 2 cores)
    python benchmarks/projection_check.py --out DIR       # ... and keep the records
    python benchmarks/projection_check.py --results DIR   # re-fit records kept before

``--results`` reads ``records.csv`` and ``layers.csv`` of a folder: those this script
wrote with ``--out``, or any with runs of generated networks (seed 0) at these points
(``sdnn-dask compare -N 4096 -L 60 -n 12000 --results DIR``, ...); the inputs' survival
profiles are recomputed from the same generator.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import dask
import numpy as np
import pandas as pd

from sdnn_dask.core.network import Network
from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.parallel import DataParallelExecutor, ModelParallelExecutor, run_serial
from sdnn_dask.projection import CostModel, Survival, project_published
from sdnn_dask.records import layer_records, records_frame, run_records

#: (N, L, rows) calibrated on.
CALIBRATION = [(1024, 24, 2000), (1024, 24, 20000), (1024, 60, 6000), (1024, 120, 1000),
               (1024, 120, 6000), (1024, 120, 20000)]
#: (N, L, rows) held out: another N, other L, other rows.
HELD_OUT = [(1024, 36, 12000), (1024, 90, 40000), (4096, 24, 6000), (4096, 24, 20000),
            (4096, 60, 12000), (4096, 120, 6000), (4096, 120, 20000)]
#: Configurations: label -> (strategy, workers, parts, row_groups).
CONFIGS = {"data-1": ("data", 1, None, 1), "data-2": ("data", 2, None, 1),
           "model-2": ("model", 2, 2, 1), "hybrid-2x2": ("hybrid", 2, 2, 2)}
#: Serial kernel runs at the calibration points: label -> dense threshold (2: never dense,
#: so the sparse step's costs are measured at N = 1024 too; only up to SPARSE_ROWS rows).
SERIAL = {"kernel": 0.05, "kernel-sparse": 2.0}
SPARSE_ROWS = 6000
STUDY = "projection-check"
SEED = 0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _prefix(network: Network, n_layers: int) -> Network:
    """The first ``n_layers`` layers of ``network`` (the same as generating them)."""
    if n_layers == network.n_layers:
        return network
    n = network.n_neurons
    return Network(network.layers[:n_layers], bias=network.bias, ymax=network.ymax,
                   name=f"radixnet-{n}-{n_layers}-s{SEED}",
                   _transposed=network.transposed[:n_layers],
                   _output_order=network.output_order[:n_layers])


def _record(result, label: str, threshold: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs = run_records(result, study=STUDY)
    runs["config"] = label
    runs["dense_threshold"] = threshold
    return runs, layer_records(result, study=STUDY)


def measure(points: list[tuple[int, int, int]], repeat: int
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run every configuration at every point, ``repeat`` rounds over all points."""
    from distributed import Client, LocalCluster

    runs, layers = [], []
    full = {n: make_network(n, max(p[1] for p in points if p[0] == n), seed=SEED)
            for n in sorted({p[0] for p in points})}
    inputs = {n: make_inputs(max(p[2] for p in points if p[0] == n), n, seed=SEED)
              for n in full}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2)
        first_worker = sorted(client.scheduler_info()["workers"])[:1]
        executors = {}
        for n, n_layers in sorted({(n, n_layers) for n, n_layers, _ in points}):
            net = _prefix(full[n], n_layers)
            executors[n, n_layers] = (net, DataParallelExecutor(client, net,
                                                                workers=first_worker),
                                      DataParallelExecutor(client, net),
                                      ModelParallelExecutor(client, net))
        log(f"networks and executors ready; {len(points)} points x {repeat} rounds")
        for round_ in range(repeat):
            t0 = time.perf_counter()
            for n, n_layers, rows in points:
                net, one, two, model = executors[n, n_layers]
                x = inputs[n][:rows]
                truth = None
                todo = list(CONFIGS.items())
                if (n, n_layers, rows) in CALIBRATION:
                    todo = [(label, ("kernel", 1, None, 1)) for label in SERIAL
                            if label == "kernel" or rows <= SPARSE_ROWS] + todo
                for label, (strategy, workers, parts, groups) in todo:
                    threshold = SERIAL.get(label, 0.05)
                    with dask.config.set({"sdnn.kernel.dense-threshold": threshold}):
                        if strategy == "kernel":
                            result = run_serial(net, x, "kernel")
                        elif strategy == "data":
                            result = (one if workers == 1 else two).run(
                                x, partition="block", n_blocks=workers)
                        else:
                            result = model.run(x, partition="block", k=parts,
                                               row_groups=groups, transport="direct")
                    cats = result.categories
                    if truth is None:
                        truth = cats
                    elif not np.array_equal(cats, truth):
                        raise SystemExit(f"{label} at N={n} L={n_layers} rows={rows}: other "
                                         "categories than the first run's")
                    r, lay = _record(result, label, threshold)
                    runs.append(r)
                    layers.append(lay)
            log(f"round {round_ + 1}/{repeat}: {time.perf_counter() - t0:.0f} s "
                f"(load average {os.getloadavg()[0]:.1f})")
    return records_frame(runs), records_frame(layers)


def profiles_for(points: list[tuple[int, int, int]]) -> dict[tuple[int, int, int], Survival]:
    """One per-row survival profile per N, for the most layers and rows of its points
    (every point's inputs are a prefix of those rows, its network of those layers)."""
    out = {}
    for n in sorted({p[0] for p in points}):
        n_layers = max(p[1] for p in points if p[0] == n)
        rows = max(p[2] for p in points if p[0] == n)
        t0 = time.perf_counter()
        out[n, n_layers, rows] = Survival.measure(make_network(n, n_layers, seed=SEED),
                                                  make_inputs(rows, n, seed=SEED))
        log(f"survival profile N={n} L={n_layers} rows={rows}: "
            f"{time.perf_counter() - t0:.1f} s")
    return out


def published_profile(rows: int = 600, n_layers: int = 32) -> Survival:
    """A per-row survival profile of the 65536-neuron network: ``rows`` generated inputs
    through its first ``n_layers`` layers (the survivors have plateaued by then)."""
    t0 = time.perf_counter()
    profile = Survival.measure(make_network(65536, n_layers, seed=SEED),
                               make_inputs(rows, 65536, seed=SEED))
    log(f"survival profile N=65536 L={n_layers} rows={rows}: "
        f"{time.perf_counter() - t0:.1f} s")
    return profile


def point_of(runs: pd.DataFrame) -> pd.Series:
    return pd.Series(list(zip(runs["neurons"], runs["layers"], runs["inputs"], strict=True)),
                     index=runs.index)


def config_of(runs: pd.DataFrame) -> pd.Series:
    """The configuration label of each record (the ``config`` column, else derived)."""
    derived = pd.Series("other", index=runs.index)
    for label, (strategy, workers, _, groups) in CONFIGS.items():
        derived[(runs["strategy"] == strategy) & (runs["workers"] == workers)
                & (runs["row_groups"] == (groups if strategy != "data" else workers))] = label
    kernel = runs["strategy"] == "kernel"
    if "dense_threshold" in runs:
        derived[kernel] = np.where(runs.loc[kernel, "dense_threshold"].fillna(0.05) > 1,
                                   "kernel-sparse", "kernel")
    else:
        derived[kernel] = "kernel"
    if "config" in runs:
        return runs["config"].fillna(derived)
    return derived


def validation_table(model: CostModel, runs: pd.DataFrame,
                     profiles: dict[tuple[int, int, int], Survival]) -> pd.DataFrame:
    """Per (point, configuration): median measured wall seconds and the prediction."""
    first = runs.drop_duplicates("run_id")
    first = first.assign(config=config_of(first))
    first = first[first["config"] != "other"]
    rows = []
    for (point, label), group in first.groupby([point_of(first), "config"], sort=False):
        if point not in CALIBRATION + HELD_OUT:
            continue
        strategy, workers, parts, groups = CONFIGS.get(label, ("kernel", 1, None, 1))
        n, n_layers, n_rows = point
        profile = next(p for (pn, pl, pr), p in profiles.items()
                       if pn == n and pl >= n_layers and pr >= n_rows)
        settings = model.settings
        if label in SERIAL:
            settings = type(settings)(SERIAL[label], settings.chunk_bytes)
        predicted = model.predict(strategy, workers=workers, neurons=n, layers=n_layers,
                                  rows=n_rows, parts=parts, row_groups=groups,
                                  survival=profile, settings=settings)
        measured = float(group["wall_s"].median())
        rows.append({"point": f"N={n} L={n_layers} rows={n_rows}", "config": label,
                     "held_out": point not in CALIBRATION, "runs": len(group),
                     "measured_s": measured, "predicted_s": predicted.seconds,
                     "error_pct": 100 * (predicted.seconds - measured) / measured,
                     "compute_s": predicted.compute_s,
                     "exchange_s": predicted.latency_s + predicted.communication_s,
                     "overhead_s": predicted.overhead_s})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path,
                        help="read records.csv and layers.csv from here instead of measuring")
    parser.add_argument("--out", type=Path, help="write the measured records here")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (3); medians shown")
    parser.add_argument("--no-published", action="store_true",
                        help="skip the 65536-neuron survival pass and projection")
    args = parser.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    start = time.perf_counter()
    points = sorted(set(CALIBRATION + HELD_OUT))
    if args.results:
        runs = pd.read_csv(args.results / "records.csv")
        layers = pd.read_csv(args.results / "layers.csv")
    else:
        order = [p for pair in zip(CALIBRATION, HELD_OUT, strict=False) for p in pair]
        order += [p for p in CALIBRATION + HELD_OUT if p not in order]
        runs, layers = measure(order, args.repeat)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            runs.to_csv(args.out / "records.csv", index=False)
            layers.to_csv(args.out / "layers.csv", index=False)
    calibration = runs[point_of(runs).isin(CALIBRATION)]
    if calibration.empty:
        raise SystemExit("no records at the calibration points " + ", ".join(
            f"N={n} L={n_layers} rows={rows}" for n, n_layers, rows in CALIBRATION))
    recorded = set(point_of(runs))
    profiles = profiles_for([p for p in points if p in recorded])
    model = CostModel.calibrate(calibration, layers, profiles=profiles)
    table = validation_table(model, runs, profiles)
    pd.set_option("display.width", 200)
    print("\ncoefficients (fitted on the N = 1024 calibration points):")
    print(model.terms()[["term", "value", "unit"]].to_string(index=False))
    for held_out, title in ((False, "calibration points (fitted on)"),
                            (True, "held-out points (not fitted on)")):
        part = table[table["held_out"] == held_out]
        print(f"\n{title}:")
        print(part.drop(columns="held_out").to_string(index=False, float_format="%.3f"))
    held = table[table["held_out"]]
    worst = held.loc[held["error_pct"].abs().idxmax()]
    print(f"\nheld out: {len(held)} points, |error| <= 20% on "
          f"{int((held['error_pct'].abs() <= 20).sum())}; worst {worst['error_pct']:+.1f}% "
          f"({worst['point']}, {worst['config']}); median |error| "
          f"{held['error_pct'].abs().median():.1f}%")
    if not args.no_published:
        result = project_published(model, published_profile())
        p = result["prediction"]
        print(f"\nprojection of 65536-1920 (60000 inputs) on 896 workers: {p.seconds:.1f} s "
              f"({p.edges_per_s:.3g} edges/s) against the published {result['published_s']:g}"
              f" s: the slowest worker's block {result['max_block_s']:.1f} s "
              f"({result['survivors']['max']:.0f} survivors), the mean block "
              f"{result['mean_block_s']:.1f} s ({result['survivors']['mean']:.1f} survivors: "
              f"the time with perfectly balanced survivors); overhead {p.overhead_s:.2f} s")
        for line in result["assumptions"]:
            print(f"  - {line}")
    print(f"\n({time.perf_counter() - start:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
