"""The check policy over a sweep: no false FAIL, and every wrong answer FAILs.

For generated RadiX-Net networks and inputs (``--seeds``, ``--layers``, ``--rows``), runs
every strategy (the scipy reference, the kernel, data parallelism, model parallelism and
the hybrid on a LocalCluster) and checks each against the float64 reference with float32
rounding bounds (:mod:`sdnn_dask.core.check`); then injects wrong answers into the kernel's
output (one value off by 1e-3 relative, a surviving row dropped, a dead row revived) and
checks that each FAILs. For contrast it also counts what the old check (two float32
results, one tolerance) called a FAIL. Run::

    python benchmarks/check_sweep.py [--seeds 0 1 2] [--layers 12 24 48 120] [--rows 6000]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

from sdnn_dask.cluster import local_client
from sdnn_dask.core.check import bounded_reference, check_result
from sdnn_dask.core.result import compare_outputs
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import DataParallelExecutor, ModelParallelExecutor, run_serial


def _wrong_answers(output, reference, rng):
    """The kernel's output made wrong three ways, each on a checkable row (a value off by
    1e-3 relative: far beyond float32 rounding)."""
    decided = np.setdiff1d(reference.categories, reference.undecided)
    dead = np.setdiff1d(np.arange(output.shape[0]),
                        np.concatenate([reference.categories, reference.undecided]))
    row = int(rng.choice(decided))
    value = output.tolil()
    col = value.rows[row][0]
    value[row, col] = value[row, col] * (1 + 1e-3)
    missing = output.tolil()
    missing[row, :] = 0
    extra = output.tolil()
    extra[int(rng.choice(dead)), 0] = 0.5
    return {"value": value.tocsr(), "missing row": missing.tocsr(),
            "extra row": extra.tocsr()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--layers", type=int, nargs="+", default=[12, 24, 48, 120])
    parser.add_argument("--rows", type=int, default=6000)
    args = parser.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    runs = passes = old_fails = wrong = caught = undecided = 0
    start = time.perf_counter()
    with local_client(2) as client:
        for layers in args.layers:
            for seed in args.seeds:
                net = make_network(1024, layers, seed=seed)
                x = make_inputs(args.rows, 1024, seed=seed)
                reference = bounded_reference(net, x)
                undecided += len(reference.undecided)
                scipy_out = run_serial(net, x, "reference")
                data = DataParallelExecutor(client, net)
                model = ModelParallelExecutor(client, net)
                results = {
                    "reference": scipy_out,
                    "kernel": run_serial(net, x, "kernel"),
                    "data hash": data.run(x, partition="hash"),
                    "model hash": model.run(x, partition="hash", k=2),
                    "hybrid 2x2": model.run(x, partition="hash", k=2, row_groups=2),
                    "model graph": model.run(x, partition="block", k=2, transport="graph"),
                }
                line = []
                for name, result in results.items():
                    verdict = check_result(result.output, reference)
                    runs += 1
                    passes += verdict.passed
                    old_fails += not compare_outputs(result.output, scipy_out.output).ok
                    if not verdict.passed:
                        line.append(f"{name}: {verdict}")
                rng = np.random.default_rng(seed)
                for name, output in _wrong_answers(results["kernel"].output, reference,
                                                   rng).items():
                    wrong += 1
                    failed = not check_result(output, reference).passed
                    caught += failed
                    if not failed:
                        line.append(f"wrong answer ({name}) passed")
                print(f"L={layers:>3} seed={seed}: {len(reference.categories)} categories, "
                      f"{len(reference.undecided)} unchecked rows; "
                      + ("; ".join(line) if line else "all as expected"), flush=True)
    print(f"\n{runs} runs: {passes} PASS, {runs - passes} FAIL (the old check: {old_fails} "
          f"FAIL); {wrong} wrong answers: {caught} FAIL; {undecided} rows unchecked in all; "
          f"{time.perf_counter() - start:.0f} s")
    return 0 if passes == runs and caught == wrong else 1


if __name__ == "__main__":
    sys.exit(main())
