"""The ``sdnn-dask`` command line (also ``python -m sdnn_dask``).

Subcommands: ``generate`` (network and inputs in challenge format), ``infer`` (one
strategy), ``compare`` (the main job: serial against data parallelism, verified, recorded,
reported), ``report`` (re-render the report from the records) and ``cluster`` (preview a
SLURM job script, show a cluster profile). ``infer`` and ``compare`` run data parallelism
where ``--cluster`` says (:mod:`sdnn_dask.cluster`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from . import config, io, records, report
from ._files import write_text_atomic
from .check import BoundedReference, bounded_reference, check_result
from .network import Network
from .partition import NEURON_PARTITIONS, ROW_PARTITIONS
from .reference import check_categories
from .result import RunResult

if TYPE_CHECKING:
    import pandas as pd

#: Where ``compare`` writes and ``report`` reads by default: a folder git ignores, so the
#: quick start leaves a checkout clean (the repository's curated study is in results/).
DEFAULT_RESULTS = Path("sdnn-results")

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


# --------------------------------------------------------------------------- user errors


class UsageError(SystemExit):
    """A mistake in what the user asked: ``main`` prints ``error: <message>``, exits 2.

    A :class:`SystemExit` whose ``code`` is 2 (argparse's own code for a bad command line),
    and whose ``str`` is the message: uncaught, it still ends the program with status 2.
    """

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 2


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _at_least(low: int):
    """An argparse ``type=``: an integer ``>= low`` (argparse exits 2 with ``error:``)."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


POSITIVE = _at_least(1)
NON_NEGATIVE = _at_least(0)


def supported_sizes() -> list[int]:
    """The N the challenge defines (a bias for), hence the ones a network can have here."""
    return sorted(int(k) for k in config.get("bias"))


def _neurons(text: str) -> int:
    value = _integer(text)
    sizes = supported_sizes()
    if value not in sizes:
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(map(str, sizes))} (the challenge's sizes), got {value}")
    return value


def _epsilon(text: str) -> float:
    # the partitioner takes any epsilon >= 0 (0: perfect balance, as far as it can)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _check_arguments(args: argparse.Namespace) -> None:
    """What argparse cannot check one option at a time, before any work starts.

    Raises
    ------
    UsageError
        For parts outside ``1..N``, a missing ``--data`` folder, ``--inputs-file`` or
        ``--truth`` file, or these two without ``--data``.
    """
    parts = getattr(args, "parts", None) if args.command != "partition" else args.k
    neurons = getattr(args, "neurons", None)
    if parts is not None and neurons is not None and parts > neurons:
        raise UsageError(f"-k/--parts {parts}: at most one part per neuron (N = {neurons})")
    data = getattr(args, "data", None)
    if data is not None and not data.is_dir():
        raise UsageError(f"--data {data}: no such folder")
    for option in ("inputs_file", "truth"):
        path = getattr(args, option, None)
        if path is None:
            continue
        name = "--" + option.replace("_", "-")
        if data is None:
            raise UsageError("--inputs-file and --truth go with --data")
        if not path.is_file():
            raise UsageError(f"{name} {path}: no such file")


def _check_row_groups(row_groups: int, rows: int) -> None:
    """Each row group needs a row: more groups than rows is a mistake, not a slow run."""
    if row_groups > rows:
        raise UsageError(f"--row-groups {row_groups}: more row groups than the {rows} input "
                         "rows")


def _check_writable_folder(folder: Path, option: str) -> None:
    """Make ``folder`` if missing and make sure a file can be created in it, before any run.

    Parameters
    ----------
    folder
        ``compare``'s results folder, or ``generate``'s output folder.
    option
        How the message names it (``--results``, ``generate OUT``).

    Raises
    ------
    UsageError
        If it is a file, cannot be made, or is not writable (tried, not guessed from the
        mode bits: root passes ``os.access`` everywhere).
    """
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {folder}: not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise UsageError(f"{option} {folder}: not writable ({error.strerror or error})"
                         ) from error


# --------------------------------------------------------------------------- the problem


@dataclass
class Problem:
    """A network, its inputs, and the truth when known."""

    network: Network
    inputs: sp.csr_matrix
    truth: np.ndarray | None
    source: str


def _add_network_arguments(group: argparse._ArgumentGroup, *, with_inputs: bool) -> None:
    group.add_argument("--neurons", "-N", type=_neurons, default=1024,
                       help="neurons per layer: 1024, 4096, 16384 or 65536 (1024)")
    group.add_argument("--layers", "-L", type=POSITIVE, default=120, help="layers (120)")
    if with_inputs:
        group.add_argument("--inputs", "-n", type=POSITIVE, default=None,
                           help="input rows: generated count (60000), or the first rows of "
                                "--data")
    group.add_argument("--seed", type=NON_NEGATIVE, default=0, help="seed of what is generated (0)")
    group.add_argument("--data", type=Path, default=None,
                       help="challenge folder with neuron{N}/n{N}-l{k}.tsv[.gz]"
                            + (" and the inputs" if with_inputs else ""))
    group.add_argument("--no-cache", action="store_true",
                       help="do not keep a binary cache of the parsed --data files")


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model parallelism and hybrid")
    g.add_argument("-k", "--parts", type=POSITIVE, default=None,
                   help="neuron parts (default: one per worker)")
    g.add_argument("--row-groups", type=POSITIVE, default=2,
                   help="row groups R of the hybrid, each run by its own k parts (2)")
    g.add_argument("--epsilon", type=_epsilon, default=0.03,
                   help="hypergraph partitioning's imbalance bound (0.03)")
    g.add_argument("--transport", default="direct",
                   help="how parts exchange activations: direct (worker to worker, one "
                        "long-running task per part) or graph (a Dask task per part and "
                        "layer, through the scheduler); compare takes a list, e.g. "
                        "direct,graph (direct)")


def _add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("network and inputs (generated unless --data is given)")
    _add_network_arguments(g, with_inputs=True)
    g.add_argument("--inputs-file", type=Path, default=None,
                   help="inputs file (default: DATA/sparse-images-{N}.tsv[.gz])")
    g.add_argument("--truth", type=Path, default=None,
                   help="categories file (default: DATA/neuron{N}-l{L}-categories.tsv[.gz] "
                        "if present)")
    g.add_argument("--tile", type=POSITIVE, default=1,
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
    # the options were checked by the parser and _check_arguments
    if args.data is None:
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
    _check_writable_folder(out, "generate OUT")
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
    """A client on the ``--cluster`` (started here, or ``main``'s slurm-batch runner)."""
    from .cluster import ClusterError, cluster_client, cluster_profile, is_address

    where = getattr(args, "cluster", None)
    try:
        if where is not None and not isinstance(where, str):  # main() started the runner
            tls = ", TLS" if getattr(where.security, "require_encryption", False) else ""
            with progress.step(f"waiting for the {where.n_workers} workers of this "
                               f"allocation (slurm-batch{tls})"):
                return cluster_client(where)
        if is_address(where):
            if args.workers:
                raise ClusterError(f"--workers starts workers (local, slurm): {where} is a "
                                   "running scheduler")
            with progress.step(f"connecting to the scheduler at {where}"):
                return cluster_client(where)
        kind, options = cluster_profile(where)
        if kind == "local":
            workers = args.workers or options.get("n_workers") or os.cpu_count() or 1
            message = f"starting a LocalCluster with {workers} workers (loopback)"
        else:
            workers = args.workers or options.get("n_workers")
            message = (f"starting {workers} Dask workers as SLURM jobs "
                       f"({where or kind}; scheduler here, TLS: "
                       f"{'on' if options.get('security') is not False else 'OFF'})")
        with progress.step(message):
            return cluster_client(where, n_workers=workers)
    except (ClusterError, ImportError) as error:
        raise UsageError(str(error)) from error


@contextlib.contextmanager
def _batch_runner(args: argparse.Namespace) -> Iterator[None]:
    """Under ``--cluster slurm-batch``, make this srun's tasks a Dask cluster first.

    Tasks other than the client become the scheduler or a worker and exit in here, before
    any problem is loaded; the client task goes on with ``args.cluster`` set to the runner,
    and stops the scheduler and workers on the way out, whatever happens.
    """
    if args.command not in ("infer", "compare"):
        yield
        return
    from .cluster import ClusterError, cluster_profile, is_address, start_slurm_runner

    try:
        kind, options = ("address", {}) if is_address(args.cluster) else cluster_profile(
            args.cluster)
        if kind == "address" and args.workers:  # checked here: compare connects late
            raise ClusterError(f"--workers starts workers (local, slurm): {args.cluster} is "
                               "a running scheduler")
        if kind != "slurm-batch":
            runner = None
        elif args.workers:
            raise ClusterError("--workers does not apply to slurm-batch: the workers are the "
                               "srun tasks after the first two")
        else:
            runner = start_slurm_runner(**options)
    except (ClusterError, ImportError) as error:
        raise UsageError(str(error)) from error
    if runner is None:
        yield
        return
    args.cluster = runner
    try:
        yield
    finally:
        runner.close()


def _verify(result: RunResult, reference: BoundedReference, truth: np.ndarray | None
            ) -> tuple[str, str, float]:
    """PASS iff the result is within float32 rounding of the float64 reference on every
    row where that is decidable (:mod:`sdnn_dask.check`) and, with a truth file, its
    categories are the truth."""
    verdict = check_result(result.output, reference)
    if truth is not None:
        passed = check_categories(result.categories, truth).passed and verdict.passed
        return ("PASS" if passed else "FAIL"), "truth", verdict.max_abs_diff
    return ("PASS" if verdict.passed else "FAIL"), "reference", verdict.max_abs_diff


def cmd_infer(args: argparse.Namespace) -> int:
    from .parallel import run_serial

    progress = Progress(args.quiet)
    problem = load_problem(args, progress)
    if args.strategy in ("reference", "kernel"):
        result = run_serial(problem.network, problem.inputs, args.strategy)
    elif args.strategy == "data":
        from .parallel import DataParallelExecutor

        _check_row_partition(args.partition)
        with _cluster_client(args, progress) as client:
            executor = DataParallelExecutor(client, problem.network)
            result = executor.run(problem.inputs, partition=args.partition,
                                  n_blocks=args.blocks)
    else:
        from .parallel import ModelParallelExecutor

        method = args.partition if args.partition in NEURON_PARTITIONS else None
        if method is None:
            raise UsageError(f"--strategy {args.strategy} takes a neuron partition "
                             f"{NEURON_PARTITIONS}, not {args.partition!r}")
        row_groups = args.row_groups if args.strategy == "hybrid" else 1
        _check_row_groups(row_groups, problem.inputs.shape[0])
        [transport] = _one_transport(args.transport)
        with _cluster_client(args, progress) as client:
            executor = ModelParallelExecutor(client, problem.network)
            k = args.parts or executor.n_workers
            part = _neuron_partition(problem.network, method, k, args, progress)
            with progress.step(f"{args.strategy} parallelism: {row_groups} row group(s) x "
                               f"{k} parts ({method})"):
                result = executor.run(problem.inputs, partition=part, row_groups=row_groups,
                                      seed=args.seed, transport=transport)
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


def _check_row_partition(name: str) -> None:
    if name not in ROW_PARTITIONS:
        raise UsageError(f"--strategy data takes a row partition {ROW_PARTITIONS}, "
                         f"not {name!r}")


def _names(value: str, allowed: Sequence[str], option: str, what: str = "partition(s)"
           ) -> list[str]:
    """A comma-separated list of names (``none`` or empty: no names)."""
    names = [v.strip() for v in value.split(",") if v.strip() and v.strip() != "none"]
    unknown = sorted(set(names) - set(allowed))
    if unknown:
        raise UsageError(f"{option}: unknown {what} {unknown}; choose from "
                         f"{', '.join(allowed)} (or none)")
    return names


def _transports(value: str) -> list[str]:
    from .parallel import TRANSPORTS

    names = _names(value, TRANSPORTS, "--transport", "transport(s)")
    if not names:
        raise UsageError(f"--transport: name one of {', '.join(TRANSPORTS)}")
    return list(dict.fromkeys(names))


def _one_transport(value: str) -> list[str]:
    names = _transports(value)
    if len(names) != 1:
        raise UsageError("--transport: infer runs one transport; compare takes several")
    return names


def _default_neuron_partitions(progress: Progress) -> str:
    """Every neuron partition, less hypergraph when Mt-KaHyPar is not installed."""
    if importlib.util.find_spec("mtkahypar") is not None:
        return ",".join(NEURON_PARTITIONS)
    progress.say("no hypergraph rows: Mt-KaHyPar is not installed "
                 "(pip install 'sdnn_dask[partition]')")
    return ",".join(m for m in NEURON_PARTITIONS if m != "hypergraph")


def _neuron_partition(network: Network, method: str, k: int, args: argparse.Namespace,
                      progress: Progress):
    from .partition import make_neuron_partition

    with progress.step(f"partitioning the neurons into {k} parts ({method})"):
        try:
            return make_neuron_partition(network, k, method, seed=args.seed,
                                         epsilon=args.epsilon, cache=True)
        except ImportError as error:
            raise UsageError(str(error)) from error


def cmd_compare(args: argparse.Namespace) -> int:
    from .parallel import DataParallelExecutor, ModelParallelExecutor, run_serial

    progress = Progress(args.quiet)
    partitions = _names(args.partitions, ROW_PARTITIONS, "--partitions")
    default = _default_neuron_partitions(progress)
    model = _names(args.model or default, NEURON_PARTITIONS, "--model")
    hybrid = _names(args.hybrid or default, NEURON_PARTITIONS, "--hybrid")
    transports = _transports(args.transport)
    if not args.no_write:
        _check_writable_folder(args.results, "--results")
    problem = load_problem(args, progress)
    net, inputs = problem.network, problem.inputs
    if hybrid:
        _check_row_groups(args.row_groups, inputs.shape[0])
    progress.say(f"problem: {problem.source}: {inputs.shape[0]} inputs, {net.edges:,} edges")
    study = records.new_study_id()
    results: list[tuple[RunResult, str, str, float]] = []
    total = (2 + len(partitions) + (len(model) + len(hybrid)) * len(transports)) * args.repeat
    done = 0

    def record(result: RunResult, reference: BoundedReference) -> None:
        nonlocal done
        done += 1
        check, against, diff = _verify(result, reference, problem.truth)
        results.append((result, check, against, diff))
        moved = ("" if result.bytes_moved is None
                 else f"  {result.bytes_moved / 1e6:.1f} MB moved")
        how = f"{result.partition} {result.transport}" if result.transport else result.partition
        progress.say(f"[{done}/{total}] {result.strategy:<9} {how:<17} "
                     f"{result.n_workers} workers x {result.n_blocks} blocks: "
                     f"{result.wall_seconds:8.3f} s  {result.edges_per_second:.3g} edges/s  "
                     f"{check}{moved}")

    with progress.step("the float64 reference with float32 rounding bounds (the check)"):
        bounded = bounded_reference(net, inputs)
    if len(bounded.undecided):
        progress.say(f"{len(bounded.undecided)} ill-conditioned row(s): their ReLU's bias "
                     "rule lies within float32 rounding, so they are checked against the "
                     "truth only (if any)")
    reference = run_serial(net, inputs, "reference")
    record(reference, bounded)
    for r in range(args.repeat):
        if r:
            record(run_serial(net, inputs, "reference"), bounded)
        record(run_serial(net, inputs, "kernel"), bounded)
    with _cluster_client(args, progress) as client:
        with progress.step("sending the weights to every worker"):
            executor = DataParallelExecutor(client, net)
        k = args.parts or executor.n_workers
        neuron_parts = {m: _neuron_partition(net, m, k, args, progress)
                        for m in dict.fromkeys(model + hybrid)}
        model_executor = None
        if neuron_parts:
            with progress.step("sending each part's slice of the weights to its worker"):
                model_executor = ModelParallelExecutor(client, net)
        for _ in range(args.repeat):
            for partition in partitions:
                result = executor.run(inputs, partition=partition, n_blocks=args.blocks,
                                      seed=args.seed)
                record(result, bounded)
            for transport in transports:
                for method in model:
                    record(model_executor.run(inputs, partition=neuron_parts[method],
                                              transport=transport), bounded)
                for method in hybrid:
                    record(model_executor.run(inputs, partition=neuron_parts[method],
                                              row_groups=args.row_groups, seed=args.seed,
                                              transport=transport), bounded)
    frames = [records.run_records(res, study=study, check=check, check_against=against,
                                  max_abs_diff=diff) for res, check, against, diff in results]
    table = records.records_frame(frames)
    cmp = report.comparison(table)
    print()
    print(report.to_text(cmp, ["strategy", "partition", "transport", "workers", "blocks",
                               "parts", "seconds", "edges_per_s", "speedup", "vs_kernel",
                               "imbalance", "mb_moved", "predicted_volume", "check"]))
    if not args.no_write:
        layer_table = records.records_frame([records.layer_records(res, study=study)
                                             for res, *_ in results])
        written: list[Path] = []
        code = _all_or_nothing("the results", args.results, lambda: written.extend(
            write_results(args.results, table, layer_table, progress)))
        if code is not None:
            return code
        print("\nwrote " + ", ".join(str(p) for p in written))
    failed = [res for res, check, *_ in results if check != "PASS"]
    if failed:
        print(f"\n{len(failed)} run(s) FAILED the check", file=sys.stderr)
        return 1
    return 0


def write_results(folder: Path, runs: pd.DataFrame, layers: pd.DataFrame,
                  progress: Progress) -> list[Path]:
    """Write a study's files into ``folder`` all together, or leave it as it was.

    Every file (``records.csv`` and ``layers.csv`` whole, old rows and new, ``summary.md``,
    the plots) is first written into a hidden staging folder inside ``folder``. Only once all
    are written are they renamed into place, each rename atomic (same file system). Before the
    renames the old files are hard-linked into the staging folder, so a rename that fails, or
    a Ctrl-C between two renames, puts every file back as it was. What is left is the
    microseconds between two renames: a SIGKILL or power loss there leaves some files new and
    some old (and a ``.staging-*`` folder).

    Parameters
    ----------
    folder
        The results folder (checked writable by :func:`_check_writable_folder`).
    runs, layers
        This study's rows of ``records.csv`` and ``layers.csv``.
    progress
        Says when there is no plot (matplotlib missing).

    Returns
    -------
    list of Path
        The files written, in ``folder``.

    Raises
    ------
    OSError, KeyboardInterrupt
        With ``folder`` left as it was and no staging folder left behind.
    """
    with _staged_writes(folder) as (staging, names):
        for name, frame in ((records.RECORDS_FILE, runs), (records.LAYERS_FILE, layers)):
            if (folder / name).exists():  # appended: the old rows go first
                shutil.copyfile(folder / name, staging / name)
            records.append_records(frame, staging / name)
            names.append(name)
        _write_report(staging, names, runs, records.read_records(staging, "layers"),
                      progress.say)
    return [folder / name for name in names]


def _write_report(staging: Path, names: list[str], runs: pd.DataFrame, layers: pd.DataFrame,
                  say) -> None:
    """``summary.md`` and the plots (none without matplotlib) into ``staging``."""
    write_text_atomic(staging / "summary.md", report.summary_markdown(runs))
    names.append("summary.md")
    try:
        names.append(report.plot_comparison(runs, staging / "comparison.png").name)
        plot = report.plot_communication(runs, layers, staging / "communication.png")
        if plot is not None:
            names.append(plot.name)
    except ImportError as error:
        say(f"no plot: {error}")


@contextlib.contextmanager
def _staged_writes(folder: Path) -> Iterator[tuple[Path, list[str]]]:
    """A hidden staging folder in ``folder`` and the list of names written into it.

    On leaving without error, every named file is moved into ``folder``
    (:func:`_move_into_place`); whatever happens, the staging folder is removed.
    """
    staging = Path(tempfile.mkdtemp(dir=folder, prefix=".staging-"))
    names: list[str] = []
    try:
        yield staging, names
        _move_into_place(staging, folder, names)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _move_into_place(staging: Path, folder: Path, names: list[str]) -> None:
    """Rename ``staging/name`` over ``folder/name`` for every name; all or none."""
    for name in names:  # a folder in a file's place would fail mid-way: refuse up front
        if (folder / name).is_dir():
            raise IsADirectoryError(f"{folder / name} is a folder, not a file")
    backup = staging / ".old"
    backup.mkdir()
    for name in names:
        if (folder / name).exists():
            try:
                os.link(folder / name, backup / name)
            except OSError:  # no hard links on this file system: a copy does as well
                shutil.copy2(folder / name, backup / name)
    moved: list[str] = []
    try:
        for name in names:
            os.replace(staging / name, folder / name)
            moved.append(name)
    except BaseException:
        for name in reversed(moved):  # undo: the old file back, or none if there was none
            if (backup / name).exists():
                os.replace(backup / name, folder / name)
            else:
                (folder / name).unlink(missing_ok=True)
        raise


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


STUDY_MISSING = "running a study notebook needs nbclient: pip install 'sdnn_dask[study]'"


def cmd_study(args: argparse.Namespace) -> int:
    """Execute a study notebook top to bottom, its clusters made where ``--cluster`` says."""
    try:
        import nbclient
        import nbformat
    except ImportError as error:
        raise UsageError(STUDY_MISSING) from error
    progress = Progress(args.quiet)
    path: Path = args.notebook
    if not path.is_file():
        raise UsageError(f"{path}: no such notebook")
    if args.cluster == "slurm-batch":
        raise UsageError("a study runs its clusters from a notebook kernel; use "
                         "--cluster slurm, or run it inside an allocation with "
                         "--cluster <the scheduler's address>")
    if args.cluster:  # an unknown profile fails here, not in the notebook's first cell
        from .cluster import ClusterError, cluster_profile, is_address

        try:
            if not is_address(args.cluster):
                cluster_profile(args.cluster)
        except ClusterError as error:
            raise UsageError(str(error)) from error
    # The kernel is a new process: the notebook's cluster_client() reads these on import.
    if args.cluster:
        os.environ["DASK_SDNN__CLUSTER__DEFAULT"] = args.cluster
    if args.workers:
        os.environ["DASK_SDNN__LOCAL__N_WORKERS"] = str(args.workers)
        os.environ["DASK_SDNN__SLURM__N_WORKERS"] = str(args.workers)
    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as error:  # nbformat raises several kinds for a bad file
        raise UsageError(f"{path}: not a readable notebook ({error})") from error
    out: Path = args.out or Path(f"{path.stem}.executed.ipynb")
    cells = sum(c.cell_type == "code" for c in notebook.cells)
    client = nbclient.NotebookClient(notebook, timeout=args.timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(Path.cwd())}})
    failed = None
    with progress.step(f"running {path} ({cells} code cells, cluster: "
                       f"{args.cluster or 'the default'})"):
        try:
            client.execute()
        except nbclient.exceptions.CellExecutionError as error:
            failed = error
    write_text_atomic(out, nbformat.writes(notebook))
    print(f"wrote {out}")
    if failed is not None:
        print(f"error: a cell of {path} failed:\n{failed}", file=sys.stderr)
        return 1
    return 0


def _all_or_nothing(what: str, folder: Path, write: Callable[[], object]) -> int | None:
    """Run a staged write of ``folder``; on Ctrl-C or a failed write, say the folder was
    left as it was and return the exit code (130 or 2); ``None`` when it succeeded."""
    try:
        write()
    except KeyboardInterrupt:
        print(f"interrupted while writing {what}; {folder}/ left as it was", file=sys.stderr)
        return 130
    except OSError as error:
        print(f"error: writing {what} failed ({error}); {folder}/ left as it was",
              file=sys.stderr)
        return 2
    return None


def cmd_report(args: argparse.Namespace) -> int:
    table = records.read_records(args.results)
    summary = report.summary_markdown(table)
    if args.write:  # all together, or none, as compare writes them
        layers = records.read_records(args.results, "layers")
        def write() -> None:
            with _staged_writes(args.results) as (staging, names):
                _write_report(staging, names, table, layers,
                              lambda message: print(message, file=sys.stderr))

        code = _all_or_nothing("the report", args.results, write)
        if code is not None:
            return code
    print(summary)
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    import yaml

    from .cluster import ClusterError, cluster_profile, slurm_job_script

    try:
        if args.action == "job-script":
            print(slurm_job_script(profile=args.cluster), end="")
        else:
            kind, options = cluster_profile(args.cluster)
            shown = {"kind": kind, **{k.replace("_", "-"): v for k, v in options.items()}}
            print(yaml.safe_dump(shown, sort_keys=False), end="")
    except (ClusterError, ImportError) as error:
        raise UsageError(str(error)) from error
    return 0


# --------------------------------------------------------------------------- parser


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster", default=None, metavar="WHERE",
        help="where data parallelism runs: local (default: a loopback-only LocalCluster), "
             "slurm (workers as SLURM jobs, TLS), slurm-batch (inside srun, see "
             "studies/slurm-compare.sbatch), a profile of sdnn.clusters, or a running "
             "scheduler's address (tls://host:port)")
    parser.add_argument("--workers", type=POSITIVE, default=None,
                        help="workers to start: LocalCluster processes (default: cores) or "
                             "SLURM workers (default: sdnn.slurm.n-workers)")


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
    p.add_argument("--neurons", "-N", type=_neurons, default=1024,
                   help="neurons per layer: 1024, 4096, 16384 or 65536 (1024)")
    p.add_argument("--layers", "-L", type=POSITIVE, default=120)
    p.add_argument("--inputs", "-n", type=POSITIVE, default=None, help="input rows (60000)")
    p.add_argument("--seed", type=NON_NEGATIVE, default=0)
    p.add_argument("--gzip", action="store_true", help="write .tsv.gz files")
    p.add_argument("--no-truth", action="store_true",
                   help="do not compute and write the categories file")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("infer", help="run one strategy; print the rate, PASS/FAIL with truth")
    _add_problem_arguments(p)
    p.add_argument("--strategy", choices=("reference", "kernel", "data", "model", "hybrid"),
                   default="data")
    p.add_argument("--partition", choices=tuple(dict.fromkeys(ROW_PARTITIONS
                                                              + NEURON_PARTITIONS)),
                   default="block", help="row partition (data) or neuron partition (model, "
                   "hybrid); block")
    _add_cluster_arguments(p)
    p.add_argument("--blocks", type=POSITIVE, default=None, help="row blocks (one per worker)")
    _add_model_arguments(p)
    p.add_argument("--categories-out", type=Path, default=None,
                   help="write the categories found to this file")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_infer)

    p = sub.add_parser("compare", help="the main job: serial vs data, model and hybrid "
                                       "parallelism, verified, recorded and reported")
    _add_problem_arguments(p)
    p.add_argument("--partitions", default=",".join(ROW_PARTITIONS),
                   help="row partitions of the data-parallel runs, comma-separated "
                   f"({','.join(ROW_PARTITIONS)}; none: no data-parallel runs)")
    p.add_argument("--model", default=None,
                   help="neuron partitions of the model-parallel runs "
                   f"({','.join(NEURON_PARTITIONS)}; hypergraph needs the partition extra "
                   "and is left out of the default without it; none: no model-parallel runs)")
    p.add_argument("--hybrid", default=None,
                   help="neuron partitions of the hybrid runs (--row-groups x --parts; "
                   "default as --model; none: no hybrid runs)")
    _add_cluster_arguments(p)
    p.add_argument("--blocks", type=POSITIVE, default=None, help="row blocks (one per worker)")
    _add_model_arguments(p)
    p.add_argument("--repeat", type=POSITIVE, default=1, help="runs of each configuration")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                   help="folder for records.csv, layers.csv, summary.md and the plots "
                        f"({DEFAULT_RESULTS}/, which git ignores; the repository's curated "
                        "results/ was made with --results results)")
    p.add_argument("--no-write", action="store_true", help="print only; write no records")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("partition", help="partition every layer's neurons into k parts; "
                                         "print km1 (communication) and balance")
    _add_network_arguments(p.add_argument_group("network (generated unless --data is given)"),
                           with_inputs=False)
    p.add_argument("-k", "--parts", dest="k", type=POSITIVE, default=4, help="parts (4)")
    p.add_argument("--method", choices=NEURON_PARTITIONS, default="hypergraph")
    p.add_argument("--epsilon", type=_epsilon, default=0.03,
                   help="hypergraph imbalance bound (0.03)")
    p.add_argument("--nbuckets", type=POSITIVE, default=1, help="buckets of the hash (P = 128 x)")
    p.add_argument("--out", type=Path, default=None, help="write the partition (.npz)")
    p.add_argument("--per-layer", action="store_true", help="print every layer's figures")
    p.add_argument("--no-partition-cache", action="store_true",
                   help="recompute a hypergraph partition even if one is cached")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("cluster", help="cluster helpers: preview a SLURM job script, show a "
                                       "cluster profile")
    p.add_argument("action", choices=("job-script", "show"),
                   help="job-script: print the script each SLURM worker job runs (submits "
                        "nothing); show: print a profile's options")
    p.add_argument("--cluster", default=None, metavar="PROFILE",
                   help="slurm (default for job-script), local, slurm-batch or a profile of "
                        "sdnn.clusters")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("study", help="execute a study notebook (e.g. studies/quick_study.ipynb) "
                                     "with its clusters where --cluster says")
    p.add_argument("notebook", type=Path, help="the .ipynb to run")
    _add_cluster_arguments(p)
    p.add_argument("--out", type=Path, default=None,
                   help="the executed notebook (default: NAME.executed.ipynb here)")
    p.add_argument("--timeout", type=POSITIVE, default=1800, help="seconds per cell (1800)")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_study)

    p = sub.add_parser("report", help="render the latest study's report from the records")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
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
    if args.command == "cluster" and args.action == "job-script" and args.cluster is None:
        args.cluster = "slurm"
    try:
        _check_arguments(args)
        with _batch_runner(args):
            return int(args.func(args) or 0)
    except UsageError as error:
        # raised on, as argparse does: SystemExit with code 2 once the message is out
        print(f"error: {error}", file=sys.stderr)
        raise
    except (FileNotFoundError, io.ChallengeFormatError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; nothing was written for unfinished runs", file=sys.stderr)
        return 130
    except RuntimeError as error:
        from .parallel.faults import WorkerLostError  # loaded already if this is one

        if not isinstance(error, WorkerLostError):
            raise
        # compare writes its records only after every run: none were written
        print(f"error: {error}", file=sys.stderr)
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
