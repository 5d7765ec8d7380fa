"""The ``sdnn-dask`` command line (also ``python -m sdnn_dask``).

Subcommands: ``generate`` (network and inputs in challenge format), ``infer`` (one
strategy), ``compare`` (the main job: serial against data parallelism, verified, recorded,
reported) and ``report`` (re-render the report from the records).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import io, records, report
from ._files import write_text_atomic
from .network import Network
from .partition import NEURON_PARTITIONS, ROW_PARTITIONS
from .reference import check_categories
from .result import RunResult, compare_outputs

# --------------------------------------------------------------------------- progress


class Progress:
    """Step messages on stderr; a live counter for long loops when stderr is a terminal."""

    def __init__(self, quiet: bool = False, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()

    def say(self, message: str) -> None:
        if not self.quiet:
            print(message, file=self.stream, flush=True)

    def counter(self, label: str):
        """A ``callback(done, total)`` that reports progress of a loop."""
        state = {"last": 0.0}

        def report_progress(done: int, total: int) -> None:
            if self.quiet:
                return
            now = time.monotonic()
            if done == total or now - state["last"] > (0.2 if self.live else 5.0):
                state["last"] = now
                end = "\n" if done == total or not self.live else ""
                prefix = "\r" if self.live else ""
                print(f"{prefix}{label}: {done}/{total}", end=end, file=self.stream, flush=True)

        return report_progress

    @contextlib.contextmanager
    def step(self, message: str) -> Iterator[None]:
        self.say(f"{message} ...")
        start = time.perf_counter()
        yield
        self.say(f"{message}: done in {time.perf_counter() - start:.1f} s")


# --------------------------------------------------------------------------- the problem


@dataclass
class Problem:
    """A network, its inputs, and the truth when known."""

    network: Network
    inputs: sp.csr_matrix
    truth: np.ndarray | None
    source: str


def _add_network_arguments(group: argparse._ArgumentGroup, *, with_inputs: bool) -> None:
    group.add_argument("--neurons", "-N", type=int, default=1024, help="neurons per layer (1024)")
    group.add_argument("--layers", "-L", type=int, default=120, help="layers (120)")
    if with_inputs:
        group.add_argument("--inputs", "-n", type=int, default=None,
                           help="input rows: generated count (60000), or the first rows of "
                                "--data")
    group.add_argument("--seed", type=int, default=0, help="seed of what is generated (0)")
    group.add_argument("--data", type=Path, default=None,
                       help="challenge folder with neuron{N}/n{N}-l{k}.tsv[.gz]"
                            + (" and the inputs" if with_inputs else ""))
    group.add_argument("--no-cache", action="store_true",
                       help="do not keep a binary cache of the parsed --data files")


def _add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("network and inputs (generated unless --data is given)")
    _add_network_arguments(g, with_inputs=True)
    g.add_argument("--inputs-file", type=Path, default=None,
                   help="inputs file (default: DATA/sparse-images-{N}.tsv[.gz])")
    g.add_argument("--truth", type=Path, default=None,
                   help="categories file (default: DATA/neuron{N}-l{L}-categories.tsv[.gz] "
                        "if present)")
    g.add_argument("--tile", type=int, default=1,
                   help="repeat the inputs this many times (e.g. official 1200 rows x 50)")


def load_network(args: argparse.Namespace, progress: Progress) -> Network:
    """Generate, or read from ``--data``, the network alone."""
    from .radixnet import make_network

    n, layers = args.neurons, args.layers
    if args.data is None:
        with progress.step(f"generating RadiX-Net {n}-{layers} (seed {args.seed})"):
            return make_network(n, layers, seed=args.seed)
    with progress.step(f"reading {n}-{layers} weights from {args.data}"):
        return io.read_network(args.data, n, layers, cache=not args.no_cache,
                               progress=progress.counter("layers"))


def load_problem(args: argparse.Namespace, progress: Progress) -> Problem:
    """Generate, or read from ``--data``, the network, inputs and truth."""
    from .radixnet import make_inputs

    n, layers = args.neurons, args.layers
    if args.tile < 1:
        raise SystemExit("error: --tile must be >= 1")
    if args.data is None:
        if args.inputs_file or args.truth:
            raise SystemExit("error: --inputs-file and --truth go with --data")
        rows = 60000 if args.inputs is None else args.inputs
        network = load_network(args, progress)
        with progress.step(f"generating {rows} synthetic inputs"):
            inputs = make_inputs(rows, n, seed=args.seed)
        truth, source = None, f"generated RadiX-Net {n}-{layers}, seed {args.seed}"
    else:
        network = load_network(args, progress)
        path = args.inputs_file or io.inputs_path(args.data, n)
        with progress.step(f"reading inputs {path}"):
            inputs = io.read_inputs(path, n)
        if args.inputs is not None:
            inputs = inputs[: args.inputs]
        truth_path = args.truth or io.categories_path(args.data, n, layers)
        truth = None
        if truth_path.is_file():
            truth = io.read_categories(truth_path)
            truth = truth[truth < inputs.shape[0]]
            progress.say(f"truth: {truth_path} ({len(truth)} categories among "
                         f"{inputs.shape[0]} rows)")
        elif args.truth:
            raise SystemExit(f"error: {args.truth}: no such file")
        source = f"challenge files in {args.data}"
    if args.tile > 1:
        rows = inputs.shape[0]
        inputs = sp.vstack([inputs] * args.tile, format="csr")
        if truth is not None:
            truth = np.concatenate([truth + k * rows for k in range(args.tile)])
        source += f", inputs tiled x{args.tile}"
    return Problem(network, inputs, truth, source)


# --------------------------------------------------------------------------- commands


def cmd_generate(args: argparse.Namespace) -> int:
    from .kernels import forward_block
    from .radixnet import make_inputs, make_network

    progress = Progress(args.quiet)
    out: Path = args.out
    n, layers = args.neurons, args.layers
    suffix = ".tsv.gz" if args.gzip else ".tsv"
    with progress.step(f"generating RadiX-Net {n}-{layers}"):
        network = make_network(n, layers, seed=args.seed)
    rows = 60000 if args.inputs is None else args.inputs
    with progress.step(f"generating {rows} inputs"):
        inputs = make_inputs(rows, n, seed=args.seed)
    written = 0
    count = progress.counter("layer files")
    for k, layer in enumerate(network.layers, start=1):
        io.write_triples(out / f"neuron{n}" / f"n{n}-l{k}{suffix}", layer)
        count(k, layers)
        written += 1
    io.write_inputs(out / f"sparse-images-{n}{suffix}", inputs)
    if not args.no_truth:
        with progress.step("computing the truth categories"):
            block = forward_block(network, inputs)
        io.write_categories(out / f"neuron{n}-l{layers}-categories{suffix}", block.rows)
        progress.say(f"{len(block.rows)} of {rows} rows survive all {layers} layers")
    print(f"wrote {written} layers, {rows} inputs"
          + ("" if args.no_truth else " and the categories") + f" under {out}")
    return 0


def _cluster_client(args: argparse.Namespace, progress: Progress):
    from .cluster import local_client

    workers = args.workers or os.cpu_count() or 1
    with progress.step(f"starting a LocalCluster with {workers} workers (loopback)"):
        return local_client(workers)


def _verify(result: RunResult, reference: RunResult, truth: np.ndarray | None
            ) -> tuple[str, str, float]:
    agreement = compare_outputs(result.output, reference.output)
    if truth is not None:
        passed = check_categories(result.categories, truth).passed and agreement.ok
        return ("PASS" if passed else "FAIL"), "truth", agreement.max_abs_diff
    return ("PASS" if agreement.ok else "FAIL"), "reference", agreement.max_abs_diff


def cmd_infer(args: argparse.Namespace) -> int:
    from .parallel import run_serial

    progress = Progress(args.quiet)
    problem = load_problem(args, progress)
    if args.strategy in ("reference", "kernel"):
        result = run_serial(problem.network, problem.inputs, args.strategy)
    else:
        from .parallel import DataParallelExecutor

        with _cluster_client(args, progress) as client:
            executor = DataParallelExecutor(client, problem.network)
            result = executor.run(problem.inputs, partition=args.partition,
                                  n_blocks=args.blocks)
    print(f"{result.strategy}/{result.partition}: {result.n_inputs} inputs through "
          f"{result.network['name']} in {result.wall_seconds:.3f} s = "
          f"{result.edges_per_second:.4g} edges/s, {len(result.categories)} categories")
    if args.categories_out:
        io.write_categories(args.categories_out, result.categories)
    if problem.truth is None:
        return 0
    check = check_categories(result.categories, problem.truth)
    print(check)
    return 0 if check.passed else 1


def cmd_compare(args: argparse.Namespace) -> int:
    from .parallel import DataParallelExecutor, run_serial

    progress = Progress(args.quiet)
    problem = load_problem(args, progress)
    partitions = [p.strip() for p in args.partitions.split(",") if p.strip()]
    unknown = sorted(set(partitions) - set(ROW_PARTITIONS))
    if unknown:
        raise SystemExit(f"error: unknown partition(s) {unknown}; choose from {ROW_PARTITIONS}")
    net, inputs = problem.network, problem.inputs
    progress.say(f"problem: {problem.source}: {inputs.shape[0]} inputs, {net.edges:,} edges")
    study = records.new_study_id()
    results: list[tuple[RunResult, str, str, float]] = []
    total = (2 + len(partitions)) * args.repeat
    done = 0

    def record(result: RunResult, reference: RunResult) -> None:
        nonlocal done
        done += 1
        check, against, diff = _verify(result, reference, problem.truth)
        results.append((result, check, against, diff))
        progress.say(f"[{done}/{total}] {result.strategy:<9} {result.partition:<6} "
                     f"{result.n_workers} workers x {result.n_blocks} blocks: "
                     f"{result.wall_seconds:8.3f} s  {result.edges_per_second:.3g} edges/s  "
                     f"{check}")

    reference = run_serial(net, inputs, "reference")
    record(reference, reference)
    for r in range(args.repeat):
        if r:
            record(run_serial(net, inputs, "reference"), reference)
        record(run_serial(net, inputs, "kernel"), reference)
    with _cluster_client(args, progress) as client:
        with progress.step("sending the weights to every worker"):
            executor = DataParallelExecutor(client, net)
        for _ in range(args.repeat):
            for partition in partitions:
                result = executor.run(inputs, partition=partition, n_blocks=args.blocks,
                                      seed=args.seed)
                record(result, reference)
    frames = [records.run_records(res, study=study, check=check, check_against=against,
                                  max_abs_diff=diff) for res, check, against, diff in results]
    table = records.records_frame(frames)
    cmp = report.comparison(table)
    print()
    print(report.to_text(cmp, ["strategy", "partition", "workers", "blocks", "seconds",
                               "edges_per_s", "speedup", "vs_kernel", "imbalance", "check"]))
    if not args.no_write:
        folder: Path = args.results
        records.append_records(table, folder / records.RECORDS_FILE)
        layer_frames = [records.layer_records(res, study=study) for res, *_ in results]
        records.append_records(records.records_frame(layer_frames), folder / records.LAYERS_FILE)
        write_text_atomic(folder / "summary.md", report.summary_markdown(table))
        written = [folder / records.RECORDS_FILE, folder / records.LAYERS_FILE,
                   folder / "summary.md"]
        try:
            written.append(report.plot_comparison(table, folder / "comparison.png"))
        except ImportError as error:
            progress.say(f"no plot: {error}")
        print("\nwrote " + ", ".join(str(p) for p in written))
    failed = [res for res, check, *_ in results if check != "PASS"]
    if failed:
        print(f"\n{len(failed)} run(s) FAILED the check", file=sys.stderr)
        return 1
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    from .partition import make_neuron_partition

    progress = Progress(args.quiet)
    network = load_network(args, progress)
    cache = False if args.no_partition_cache else True
    with progress.step(f"partitioning the neurons of {network.name} into {args.k} parts "
                       f"({args.method})"):
        part = make_neuron_partition(network, args.k, args.method, seed=args.seed,
                                     nbuckets=args.nbuckets, epsilon=args.epsilon,
                                     cache=cache)
    volume = part.volume(network)
    table = volume.assign(imbalance=part.imbalance(network))
    if args.per_layer:
        print(report.to_text(table))
        print()
    print(f"{args.method} partition of {network.name}, k={args.k}: "
          f"km1 {int(volume['km1'].sum()):,} activation columns over {network.n_layers} "
          f"layers (per layer: mean {volume['km1'].mean():.1f}, max {volume['km1'].max()}), "
          f"work imbalance max {table['imbalance'].max():.4f}, "
          f"computed in {part.seconds:.2f} s")
    if args.out:
        part.save(args.out)
        print(f"wrote {args.out}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    table = records.read_records(args.results)
    summary = report.summary_markdown(table)
    if args.write:
        write_text_atomic(args.results / "summary.md", summary)
        try:
            report.plot_comparison(table, args.results / "comparison.png")
        except ImportError as error:
            print(f"no plot: {error}", file=sys.stderr)
    print(summary)
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sdnn-dask",
        description="Run and compare parallel strategies for sparse DNN inference "
                    "(HPEC Sparse DNN Graph Challenge) on Dask.",
    )
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {records.versions()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("generate", help="write a RadiX-Net network and inputs in challenge format")
    p.add_argument("out", type=Path, help="output folder")
    p.add_argument("--neurons", "-N", type=int, default=1024)
    p.add_argument("--layers", "-L", type=int, default=120)
    p.add_argument("--inputs", "-n", type=int, default=None, help="input rows (60000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gzip", action="store_true", help="write .tsv.gz files")
    p.add_argument("--no-truth", action="store_true",
                   help="do not compute and write the categories file")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("infer", help="run one strategy; print the rate, PASS/FAIL with truth")
    _add_problem_arguments(p)
    p.add_argument("--strategy", choices=("reference", "kernel", "data"), default="data")
    p.add_argument("--partition", choices=ROW_PARTITIONS, default="block")
    p.add_argument("--workers", type=int, default=None, help="LocalCluster workers (cores)")
    p.add_argument("--blocks", type=int, default=None, help="row blocks (one per worker)")
    p.add_argument("--categories-out", type=Path, default=None,
                   help="write the categories found to this file")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_infer)

    p = sub.add_parser("compare", help="the main job: serial vs data parallelism, verified, "
                                       "recorded and reported")
    _add_problem_arguments(p)
    p.add_argument("--partitions", default=",".join(ROW_PARTITIONS),
                   help="row partitions to run, comma-separated (block,hash,random)")
    p.add_argument("--workers", type=int, default=None, help="LocalCluster workers (cores)")
    p.add_argument("--blocks", type=int, default=None, help="row blocks (one per worker)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each configuration")
    p.add_argument("--results", type=Path, default=Path("results"),
                   help="folder for records.csv, layers.csv, summary.md (results/)")
    p.add_argument("--no-write", action="store_true", help="print only; write no records")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("partition", help="partition every layer's neurons into k parts; "
                                         "print km1 (communication) and balance")
    _add_network_arguments(p.add_argument_group("network (generated unless --data is given)"),
                           with_inputs=False)
    p.add_argument("-k", "--parts", dest="k", type=int, default=4, help="parts (4)")
    p.add_argument("--method", choices=NEURON_PARTITIONS, default="hypergraph")
    p.add_argument("--epsilon", type=float, default=0.03,
                   help="hypergraph imbalance bound (0.03)")
    p.add_argument("--nbuckets", type=int, default=1, help="buckets of the hash (P = 128 x)")
    p.add_argument("--out", type=Path, default=None, help="write the partition (.npz)")
    p.add_argument("--per-layer", action="store_true", help="print every layer's figures")
    p.add_argument("--no-partition-cache", action="store_true",
                   help="recompute a hypergraph partition even if one is cached")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("report", help="render the latest study's report from the records")
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--write", action="store_true",
                   help="also rewrite summary.md and comparison.png")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sdnn-dask``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # the in-process scheduler logs every worker's arrival and departure at INFO
    logging.getLogger("distributed").setLevel(logging.WARNING)
    if getattr(args, "repeat", 1) < 1:
        parser.error("--repeat must be >= 1")
    try:
        return int(args.func(args) or 0)
    except (FileNotFoundError, io.ChallengeFormatError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; nothing was written for unfinished runs", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
