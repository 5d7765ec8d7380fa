"""What the sampled check (a problem's ``check_rows``) costs beside the run it checks: the
serial kernel on generated inputs read from a network store, then its check on every
survivor and ``check_rows`` other rows (:class:`sdnn_dask.study.sampling.SampledCheck`).

    python benchmarks/bench_sampled_check.py --store data/stores/neuron16384-l1920.store \\
        -N 16384 -L 1920 --inputs 60000

Prints the run's seconds and survivors, then the check's parts: the float64 reference of
every survivor (identical rows stepped once: rows stepped per layer, first layers and
deepest), the whole check (the other rows' reference, the kernel without deduplication
on the sample, the comparisons), and the verdict.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from sdnn_dask.core.kernels import KernelSettings
from sdnn_dask.parallel import run_serial
from sdnn_dask.study import ProblemSpec
from sdnn_dask.study.problem import load_problem


def _peak_gb() -> float:
    """This process's peak resident memory so far, GB (Linux: ru_maxrss in kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="the network store")
    parser.add_argument("-N", "--neurons", type=int, required=True)
    parser.add_argument("-L", "--layers", type=int, required=True)
    parser.add_argument("--inputs", type=int, default=60000)
    parser.add_argument("--check-rows", type=int, default=64)
    args = parser.parse_args()
    spec = ProblemSpec(neurons=args.neurons, layers=args.layers, inputs=args.inputs,
                       data=args.store, check_rows=args.check_rows)
    start = time.perf_counter()
    problem = load_problem(spec)
    print(f"problem {spec.label}: loaded in {time.perf_counter() - start:.1f} s", flush=True)
    start, cpu = time.perf_counter(), time.process_time()
    result = run_serial(problem.network, problem.inputs, "kernel")
    run_s, run_cpu = time.perf_counter() - start, time.process_time() - cpu
    check = problem.sampled
    survivors = check.survivors(result.output)
    print(f"serial kernel (dedup={KernelSettings.resolve().dedup}): {run_s:.1f} s "
          f"({run_cpu:.1f} s CPU, peak memory so far {_peak_gb():.1f} GB), "
          f"{len(survivors)} survivors", flush=True)
    start, cpu = time.perf_counter(), time.process_time()
    reference = check.reference(survivors, keep=True)  # verify uses it
    ref_s, ref_cpu = time.perf_counter() - start, time.process_time() - cpu
    steps = reference.rows_per_layer
    deep = steps[30:] if len(steps) > 30 else steps[-1:]
    print(f"float64 reference of the {len(survivors)} survivors: {ref_s:.1f} s ({ref_cpu:.1f} s "
          f"CPU); rows stepped "
          f"per layer: layers 1-5 {steps[:5].tolist()}, layer 10 {steps[min(9, len(steps) - 1)]}"
          f", layer 20 {steps[min(19, len(steps) - 1)]}, layers 31-{len(steps)} at most "
          f"{int(deep.max())} (mean {deep.mean():.2f}); {int(steps.sum())} row-layers against "
          f"{len(survivors) * len(steps)} without dedup", flush=True)
    start, cpu = time.perf_counter(), time.process_time()
    verdict = check.verify(result.output, bool(result.params.get("dedup")))
    verify_s, verify_cpu = time.perf_counter() - start, time.process_time() - cpu
    others = check.reference(check.others(survivors, verdict.seed)).rows_per_layer
    print(f"the rest of the check (the {verdict.others} other rows' reference, the kernel "
          f"without dedup on the sample, the comparisons): {verify_s:.1f} s ({verify_cpu:.1f} s "
          f"CPU); the other rows "
          f"were stepped through {len(others)} layers, {int(np.sum(others))} row-layers",
          flush=True)
    print(f"peak memory of the process: {_peak_gb():.1f} GB")
    print(f"check: {verdict} in {ref_s + verify_s:.1f} s ({ref_cpu + verify_cpu:.1f} s CPU), "
          f"the run {run_s:.1f} s ({run_cpu:.1f} s CPU)")


if __name__ == "__main__":
    main()
