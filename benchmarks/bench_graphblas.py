"""The kernel against SuiteSparse:GraphBLAS on one thread, on the same problems in one process.

Issue 44. Per problem ``N-L x rows`` (generated RadiX-Net, ``make_network(N, L)``, and
``make_inputs(rows, N)`` official-like rows), interleaved over ``--repeat`` rounds so a
drift of this shared machine's speed hits all three alike:

* python-graphblas (SuiteSparse:GraphBLAS) on one thread, FP64 (its fastest path in the
  PyPI build), as ``bench_inference.py`` runs it: the layers' loop is timed, converting
  to and from scipy is not;
* the compiled kernel with neuron classes (``forward_block(net, x, classes=True)``,
  identical output neurons computed once) and
* without (``classes=False``, the kernel before issue 44), both timed to the full
  ``rows x N`` output (``BlockOutput.to_csr``).

Each runs once before the timing (numba's compilation, GraphBLAS's first calls). The
classes are found once per network, by that first classes run, and kept on the network
(``Network.class_layers``): the timed classes runs do not pay for finding them, so the
first run's time, which does, is printed beside them (``first run``).

Every run is checked: the same survivors (rows nonzero after the last layer) for all
three, GraphBLAS's values equal to the kernel's to float tolerance (rtol 1e-5 of the
largest value; float32 against FP64), and the kernel with classes bit for bit the kernel
without. Run::

    pip install -e ".[bench]"
    python benchmarks/bench_graphblas.py                       # 1.5-3 min here, 10 GB
    python benchmarks/bench_graphblas.py --problems 1024-120x6000 --repeat 5

Prints the machine (CPU model, cores, load) and the versions, then per problem each
path's median and min seconds, edges/s of the median (the challenge's ``rows x edges /
s``, dead rows included), the first runs, the checks, and the ratios GraphBLAS / kernel
with and without classes (of the medians, of the mins, and each round's, whose paths ran
back to back), and this process's peak memory (about 10 GB with the default
problems, from N = 65536). Exits 1 if a check fails, 2 on bad arguments or without
python-graphblas (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
import scipy
import scipy.sparse as sp
from graphblas_anchor import graphblas_infer, import_graphblas

from sdnn_dask.core.kernels import forward_block, warm_up_kernels
from sdnn_dask.core.network import Network
from sdnn_dask.core.result import compare_outputs
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.version import __version__

PROBLEM = re.compile(r"^(\d+)-(\d+)x(\d+)$")
CHALLENGE_N = (1024, 4096, 16384, 65536)
PATHS = ("GraphBLAS, 1 thread (FP64)", "kernel, classes on", "kernel, classes off")


@dataclass(frozen=True)
class Problem:
    """A generated problem: RadiX-Net ``n_neurons``-``n_layers``, ``rows`` inputs."""

    n_neurons: int
    n_layers: int
    rows: int

    def __str__(self) -> str:
        return f"{self.n_neurons}-{self.n_layers}x{self.rows}"


def parse_problem(text: str) -> Problem:
    """``N-L x rows`` written ``N-LxROWS`` (``65536-24x1000``); argparse's type."""
    m = PROBLEM.match(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(
            f"problem {text!r}: expected N-LxROWS, such as 1024-120x6000")
    n, layers, rows = (int(g) for g in m.groups())
    if n not in CHALLENGE_N:
        raise argparse.ArgumentTypeError(
            f"problem {text!r}: N must be one of the challenge's {CHALLENGE_N} "
            "(the challenge's bias is defined for those only)")
    if layers < 1 or rows < 1:
        raise argparse.ArgumentTypeError(f"problem {text!r}: L and rows must be >= 1")
    return Problem(n, layers, rows)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{cpu_model()}, {cores} cores usable (nproc), "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def versions() -> str:
    gb = import_graphblas()
    suitesparse = gb.ss.about["library_version"]
    suitesparse = ".".join(str(v) for v in suitesparse) if isinstance(
        suitesparse, tuple | list) else str(suitesparse)
    return (f"sdnn_dask {__version__}, python-graphblas {gb.__version__} (SuiteSparse:GraphBLAS "
            f"{suitesparse}, nthreads {gb.ss.config['nthreads']}), numba {numba.__version__}, "
            f"numpy {np.__version__}, scipy {scipy.__version__}, "
            f"Python {platform.python_version()}")


def peak_gb() -> float:
    """This process's peak resident memory so far, GB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def kernel_run(net: Network, x: sp.csr_matrix, classes: bool
               ) -> Callable[[], tuple[sp.csr_matrix, float]]:
    def run() -> tuple[sp.csr_matrix, float]:
        start = time.perf_counter()
        out = forward_block(net, x, classes=classes).to_csr()
        return out, time.perf_counter() - start
    return run


def survivors(y: sp.csr_matrix) -> np.ndarray:
    """Rows with a nonzero after the last layer."""
    return np.flatnonzero(np.diff(sp.csr_matrix(y).indptr))


def bit_identical(a: sp.csr_matrix, b: sp.csr_matrix) -> bool:
    """The same matrix, entry for entry and bit for bit (float32 bits compared)."""
    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    a.sort_indices()
    b.sort_indices()
    return (a.shape == b.shape and a.dtype == b.dtype == np.float32
            and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.data.view(np.uint32), b.data.view(np.uint32)))


def check(outputs: dict[str, sp.csr_matrix]) -> list[str]:
    """What differs between the three paths' outputs of one round (empty: all agree)."""
    gb, on, off = (outputs[p] for p in PATHS)
    failures = []
    alive = {p: survivors(y) for p, y in outputs.items()}
    for p in PATHS[1:]:
        if not np.array_equal(alive[p], alive[PATHS[0]]):
            only = np.setdiff1d(alive[p], alive[PATHS[0]])[:5].tolist()
            missing = np.setdiff1d(alive[PATHS[0]], alive[p])[:5].tolist()
            failures.append(f"{p}: survivors differ from GraphBLAS's ({len(alive[p])} vs "
                            f"{len(alive[PATHS[0]])}; only here {only}, missing {missing})")
        agreement = compare_outputs(outputs[p], gb, rtol=1e-5, atol=1e-5)
        if not agreement.ok:
            failures.append(f"{p}: values differ from GraphBLAS's ({agreement.detail}, "
                            f"tolerance {agreement.tolerance:.3g})")
    if not bit_identical(on, off):
        failures.append("kernel with classes is not bit for bit the kernel without")
    return failures


def bench(problem: Problem, repeat: int) -> tuple[dict[str, list[float]], bool]:
    """Time and check one problem; returns each path's seconds, and whether all agreed."""
    start = time.perf_counter()
    net = make_network(problem.n_neurons, problem.n_layers)
    x = make_inputs(problem.rows, problem.n_neurons)
    print(f"\n== {problem}: RadiX-Net {problem.n_neurons}-{problem.n_layers} "
          f"({net.edges:,} edges), {problem.rows} official-like rows ({x.nnz:,} nonzeros); "
          f"generated in {time.perf_counter() - start:.1f} s", flush=True)
    runs = {PATHS[0]: lambda: graphblas_infer(net, x),
            PATHS[1]: kernel_run(net, x, classes=True),
            PATHS[2]: kernel_run(net, x, classes=False)}

    # first runs, not in the timing: GraphBLAS's first calls, the plain kernel's
    # transposes and orders, and the classes, found once for the network and kept
    first: dict[str, float] = {}
    outputs: dict[str, sp.csr_matrix] = {}
    for path in (PATHS[0], PATHS[2], PATHS[1]):
        outputs[path], first[path] = runs[path]()
    failures = check(outputs)
    times: dict[str, list[float]] = {p: [] for p in PATHS}
    for _ in range(repeat):
        for path in PATHS:
            outputs[path], seconds = runs[path]()
            times[path].append(seconds)
        failures += check(outputs)

    edges = problem.rows * net.edges
    print(f"{'path':<28} {'median s':>9} {'min s':>9} {'edges/s':>10} {'first run s':>12}"
          "  runs s")
    for path in PATHS:
        med = statistics.median(times[path])
        spread = ", ".join(f"{t:.3f}" for t in times[path])
        print(f"{path:<28} {med:9.3f} {min(times[path]):9.3f} {edges / med:10.3g} "
              f"{first[path]:12.3f}  [{spread}]")
    classes_found = sum(c is not None for c in net.class_layers.values())
    print(f"first classes run: {first[PATHS[1]]:.3f} s, finding the classes of "
          f"{classes_found} of {net.n_layers} layers once (then kept on the network)")
    alive = len(survivors(outputs[PATHS[0]]))
    checks = "FAIL" if failures else "PASS"
    print(f"checks ({repeat + 1} rounds): {checks}: {alive} of {problem.rows} rows survive "
          "in all three; values to rtol 1e-5; classes on bit for bit classes off")
    for failure in dict.fromkeys(failures):
        print(f"  FAIL {failure}")
    gb_med = statistics.median(times[PATHS[0]])
    for path in PATHS[1:]:
        # a round's paths ran back to back, so its ratio is the least exposed to drift
        per_round = [g / k for g, k in zip(times[PATHS[0]], times[path], strict=True)]
        print(f"GraphBLAS / {path}: median {gb_med / statistics.median(times[path]):6.1f}x, "
              f"min {min(times[PATHS[0]]) / min(times[path]):6.1f}x; per round "
              f"{', '.join(f'{r:.1f}' for r in per_round)} "
              f"(median {statistics.median(per_round):.1f}x)")
    if str(problem) == "65536-24x1000":
        print("issue 44's target here: GraphBLAS / kernel, classes on >= 40x (13-14x before)")
    return times, not failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", type=parse_problem,
                        default=[parse_problem("1024-120x6000"),
                                 parse_problem("65536-24x1000")],
                        metavar="N-LxROWS",
                        help="generated problems (1024-120x6000 65536-24x1000)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="interleaved timed rounds; medians and mins (3)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")

    print(f"machine: {machine()}")
    print(f"versions: {versions()}")
    # compile (or load) every kernel path before any problem, the classes' too, on a tiny
    # RadiX-Net, so a problem's first runs hold its own one-off costs only
    start = time.perf_counter()
    warm_up_kernels()
    tiny_net, tiny_x = make_network(1024, 2), make_inputs(64, 1024)
    for classes in (True, False):
        forward_block(tiny_net, tiny_x, classes=classes).to_csr()
    graphblas_infer(tiny_net, tiny_x)
    print(f"warm-up (compiling the kernels): {time.perf_counter() - start:.1f} s")
    ok = True
    for problem in args.problems:
        _, agreed = bench(problem, args.repeat)
        ok &= agreed
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"peak memory of this process {peak_gb():.1f} GB (RSS)")
    if not ok:
        print("a check FAILED (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
