"""The ``sdnn-dask`` command line (also ``python -m sdnn_dask``).

Subcommands: ``generate`` (network and inputs in challenge format), ``convert``
(challenge layer files into a network store, :mod:`sdnn_dask.data.store`), ``infer`` (one
strategy), ``compare`` (the main job: serial against data, model and hybrid parallelism,
verified, recorded, reported), ``train`` (training under every strategy against the
serial run: timed steps and the bytes crossover, or the digits epoch by epoch), ``study``
(a YAML grid of runs, resumable), ``partition``
(neuron partitions and their communication), ``report`` (the report from the records),
``notebook`` (execute a notebook) and ``cluster`` (preview a SLURM job script, show a
cluster profile). The commands only parse and check arguments: the work is done by
:mod:`sdnn_dask.study` (problems, run specs, ``compare``, studies), :mod:`sdnn_dask.report.outputs`
and :mod:`sdnn_dask.report.tables`, on the cluster ``--cluster`` says (:mod:`sdnn_dask.cluster`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import dask

from . import config, records, study
from .core.network import Network
from .core.reference import check_categories
from .data import io
from .files import atomic_path, write_text_atomic
from .formatting import to_text
from .parallel.allocator import tune_allocator
from .registry import NEURON_PARTITIONS, ORDERS, ROW_PARTITIONS, STRATEGIES, TRANSPORTS
from .report import outputs
from .report import tables as report
from .study import Problem, ProblemSpec, RunSpec, StudyError

if TYPE_CHECKING:
    pass

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


def _add_network_arguments(group: argparse._ArgumentGroup, *, with_inputs: bool,
                           layers: int | None = 120, layers_help: str = "layers (120)"
                           ) -> None:
    group.add_argument("--neurons", "-N", type=_neurons, default=1024,
                       help="neurons per layer: 1024, 4096, 16384 or 65536 (1024)")
    group.add_argument("--layers", "-L", type=POSITIVE, default=layers, help=layers_help)
    if with_inputs:
        group.add_argument("--inputs", "-n", type=POSITIVE, default=None,
                           help="input rows: generated count (60000), or the first rows of "
                                "--data (default: all)")
    group.add_argument("--seed", type=NON_NEGATIVE, default=0, help="seed of what is generated (0)")
    if with_inputs:
        group.add_argument("--order", choices=ORDERS, default="official-like",
                           help="row order of generated inputs: official-like (survivors "
                                "cluster along the rows as in the official inputs) or iid "
                                "(official-like)")
    group.add_argument("--data", type=Path, default=None,
                       help="challenge folder with neuron{N}/n{N}-l{k}.tsv[.gz]"
                            + (" and the inputs" if with_inputs else "")
                            + "; -L is capped at the layers it holds (default: generate)")
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


def _problem_spec(args: argparse.Namespace) -> ProblemSpec:
    """The problem options as a spec (``partition`` has the network's options only)."""
    def text(option: str) -> str | None:
        value = getattr(args, option, None)
        return None if value is None else str(value)

    return ProblemSpec(neurons=args.neurons, layers=args.layers,
                       inputs=getattr(args, "inputs", None), seed=args.seed,
                       data=text("data"), inputs_file=text("inputs_file"),
                       truth=text("truth"), tile=getattr(args, "tile", 1),
                       order=getattr(args, "order", "official-like"))


def load_network(args: argparse.Namespace, progress: Progress) -> Network:
    """The network the options describe (:func:`sdnn_dask.study.load_network`: ``-L`` is
    capped at the layers a ``--data`` folder holds, with a message)."""
    try:
        network, spec = study.load_network(_problem_spec(args), cache=not args.no_cache,
                                           progress=progress.say,
                                           layer_progress=progress.counter("layers"))
    except StudyError as error:
        raise UsageError(str(error)) from error
    args.layers = spec.layers
    return network


def load_problem(args: argparse.Namespace, progress: Progress) -> Problem:
    """The problem the options describe (:func:`sdnn_dask.study.load_problem`)."""
    try:
        return study.load_problem(_problem_spec(args), cache=not args.no_cache,
                                  progress=progress.say,
                                  layer_progress=progress.counter("layers"))
    except StudyError as error:
        raise UsageError(str(error)) from error


# --------------------------------------------------------------------------- commands


def cmd_generate(args: argparse.Namespace) -> int:
    from .core.kernels import forward_block
    from .data.radixnet import make_inputs, make_network

    progress = Progress(args.quiet)
    out: Path = args.out
    n, layers = args.neurons, args.layers
    suffix = ".tsv.gz" if args.gzip else ".tsv"
    _check_writable_folder(out, "generate OUT")
    with progress.step(f"generating RadiX-Net {n}-{layers}"):
        network = make_network(n, layers, seed=args.seed)
    rows = 60000 if args.inputs is None else args.inputs
    with progress.step(f"generating {rows} inputs"):
        inputs = make_inputs(rows, n, seed=args.seed, order=args.order)
    written = 0
    count = progress.counter("layer files")
    for k, layer in enumerate(network.layers, start=1):
        io.write_triples(out / f"neuron{n}" / f"n{n}-l{k}{suffix}", layer)
        count(k, layers)
        written += 1
    io.write_inputs(out / f"sparse-images-{n}{suffix}", inputs)
    store_folder = None
    if args.store:
        from .data import store

        store_folder = store.write_network(
            out / store_name(n, layers), network, overwrite=True,
            source={"generated": "radixnet", "seed": args.seed},
            progress=progress.counter("store layers"))
    if not args.no_truth:
        with progress.step("computing the truth categories"):
            block = forward_block(network, inputs)
        io.write_categories(out / f"neuron{n}-l{layers}-categories{suffix}", block.rows)
        progress.say(f"{len(block.rows)} of {rows} rows survive all {layers} layers")
    print(f"wrote {written} layers, {rows} inputs"
          + ("" if args.no_truth else " and the categories") + f" under {out}"
          + ("" if store_folder is None else f"; the network store {store_folder}"))
    return 0


def store_name(n_neurons: int, n_layers: int) -> str:
    """Folder name of the network store ``generate --store`` writes beside the layers."""
    return f"neuron{n_neurons}-l{n_layers}.store"


def cmd_convert(args: argparse.Namespace) -> int:
    from .data import store

    progress = Progress(args.quiet)
    data: Path = args.challenge_dir
    out: Path = args.out
    n, n_layers = args.neurons, args.layers
    if not data.is_dir():
        raise UsageError(f"convert CHALLENGE_DIR {data}: no such folder")
    io.layer_paths(data, n, n_layers)  # every file there, before a cluster starts
    try:
        store.check_destination(out, args.overwrite)
    except FileExistsError as error:
        hint = "; pass --overwrite to replace it" if "without overwrite" in str(error) else ""
        raise UsageError(f"convert OUT: {error}{hint}") from None
    _check_writable_folder(out.absolute().parent, "convert OUT's parent folder")
    with _cluster_client(args, progress) as client:
        with progress.step(f"converting {n_layers} layer files of the {n}-neuron network"):
            try:
                folder = store.convert_challenge(
                    data, out, n, n_layers, client=client, overwrite=args.overwrite,
                    progress=progress.counter("layer files"))
            except FileExistsError as error:  # appeared meanwhile
                raise UsageError(f"convert OUT: {error}") from None
    written = store.open_store(folder)
    print(f"wrote {written.n_layers} layers, {written.edges} edges, "
          f"{written.nbytes() / 1e6:.1f} MB: the network store {folder}")
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
    if args.command not in ("infer", "compare", "study", "convert"):
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


def _spec(args: argparse.Namespace, strategy: str, partition: str | None,
          transport: str | None = None) -> RunSpec:
    """A :class:`RunSpec` from the options (a mistake is a :class:`UsageError`)."""
    model = strategy in ("model", "hybrid")
    try:
        return RunSpec(strategy, partition,
                       parts=args.parts if model else None,
                       row_groups=args.row_groups if strategy == "hybrid" else None,
                       blocks=args.blocks if strategy == "data" else None,
                       transport=transport if model else None,
                       seed=args.seed if strategy not in ("reference", "kernel") else 0,
                       epsilon=args.epsilon if partition == "hypergraph" else None)
    except StudyError as error:
        raise UsageError(str(error)) from error


def cmd_infer(args: argparse.Namespace) -> int:
    if args.weights is not None:
        with dask.config.set({"sdnn.data-parallel.weights": args.weights}):
            return _infer(args)
    return _infer(args)


def _infer(args: argparse.Namespace) -> int:
    progress = Progress(args.quiet)
    if args.strategy == "data":
        _check_row_partition(args.partition)
    elif args.strategy in ("model", "hybrid") and args.partition not in NEURON_PARTITIONS:
        raise UsageError(f"--strategy {args.strategy} takes a neuron partition "
                         f"{NEURON_PARTITIONS}, not {args.partition!r}")
    serial = args.strategy in ("reference", "kernel")
    [transport] = _one_transport(args.transport)
    spec = _spec(args, args.strategy, None if serial else args.partition, transport)
    problem = load_problem(args, progress)
    if spec.strategy == "hybrid":
        _check_row_groups(spec.row_groups, problem.inputs.shape[0])
    with contextlib.ExitStack() as stack:
        client = None if serial else stack.enter_context(_cluster_client(args, progress))
        runner = study.Runner(problem, client, study="infer", warm_up=False,
                              progress=progress.say)
        runner.check(spec)
        with progress.step(spec.label):
            result = runner.execute(spec)
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
    available = study.neuron_partitions_available()
    if "hypergraph" not in available:
        progress.say("no hypergraph rows: Mt-KaHyPar is not installed "
                     "(pip install 'sdnn_dask[partition]')")
    return ",".join(available)


def _compare_specs(args: argparse.Namespace, progress: Progress) -> list[RunSpec]:
    partitions = _names(args.partitions, ROW_PARTITIONS, "--partitions")
    default = _default_neuron_partitions(progress)
    model = _names(args.model or default, NEURON_PARTITIONS, "--model")
    hybrid = _names(args.hybrid or default, NEURON_PARTITIONS, "--hybrid")
    try:
        return study.default_specs(
            partitions=partitions, model=model, hybrid=hybrid,
            transports=_transports(args.transport), parts=args.parts,
            row_groups=args.row_groups, blocks=args.blocks, seed=args.seed,
            epsilon=args.epsilon)
    except StudyError as error:
        raise UsageError(str(error)) from error


COMPARE_COLUMNS = ["strategy", "partition", "transport", "workers", "blocks", "parts",
                   "seconds", "edges_per_s", "speedup", "vs_kernel", "imbalance", "mb_moved",
                   "predicted_volume", "check"]


def _positive_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected positive integers like 64,512, got "
                                         f"{text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 64,512, got "
                                         f"{text!r}")
    return values


#: ``train``'s tasks and the options that go with one task only (option, dest).
TRAIN_TASKS = ("steps", "digits")
_STEPS_ONLY = (("--batches", "batches"), ("--steps", "steps"), ("--data", "data"))
_DIGITS_ONLY = (("--epochs", "epochs"), ("--batch", "batch"))
#: ``--task digits``'s defaults.
DIGITS_LAYERS, DIGITS_EPOCHS, DIGITS_BATCH = 4, 5, 32


def _train_partitions(model: str) -> list[str]:
    partitions = [] if model == "none" else [m.strip() for m in model.split(",")]
    for method in partitions:
        if method not in NEURON_PARTITIONS:
            raise UsageError(f"--model: unknown partition {method!r}; choose from "
                             f"{', '.join(NEURON_PARTITIONS)} or none")
    return partitions


def _check_train_task(args: argparse.Namespace) -> None:
    """Refuse the options of the other task and SGD settings the trainers refuse; fill in
    this task's defaults."""
    from .training.optim import check_settings

    try:
        check_settings(args.lr, args.momentum, 0.0)
    except ValueError as error:
        raise UsageError(f"--lr/--momentum: {error}") from error
    other = _DIGITS_ONLY if args.task == "steps" else _STEPS_ONLY
    given = [option for option, dest in other if getattr(args, dest) is not None]
    if given:
        mine = "--epochs, --batch" if args.task == "digits" else "--batches, --steps, --data"
        raise UsageError(f"{', '.join(given)}: not an option of --task {args.task} "
                         f"(it takes {mine})")
    if args.task == "digits":
        if args.neurons != 1024:
            raise UsageError(f"-N {args.neurons}: the digits are 1024 features (--task digits "
                             "trains a 1024-neuron network)")
        args.layers = args.layers or DIGITS_LAYERS
        args.epochs = DIGITS_EPOCHS if args.epochs is None else args.epochs
        args.batch = args.batch or DIGITS_BATCH
    else:
        args.layers = args.layers or 120
        args.batches = args.batches or [64, 512]
        args.steps = args.steps or 3
    smallest = args.batch if args.task == "digits" else min(args.batches)
    if args.row_groups > smallest:
        raise UsageError(f"--row-groups {args.row_groups}: every hybrid row group needs a row "
                         f"of each batch, and the smallest batch has {smallest}")


def cmd_train(args: argparse.Namespace) -> int:
    _check_train_task(args)
    partitions = _train_partitions(args.model)
    if args.task == "digits":
        return _train_digits(args, partitions)
    from .training.compare import compare_training, crossover, crossover_sentences, summarise

    progress = Progress(args.quiet)
    if not args.no_write:
        _check_writable_folder(args.results, "--results")
    network = load_network(args, progress)
    tune_allocator()  # the serial step runs here: as the workers, no page-faulting tiles
    progress.say(f"training {network.name}: {network.edges:,} weights, batches "
                 f"{args.batches}, {args.steps} steps each")
    with _cluster_client(args, progress) as client:
        steps = compare_training(client, network, batches=args.batches, steps=args.steps,
                                 strategies=_train_strategies(args), partitions=partitions,
                                 k=args.parts, row_groups=args.row_groups, seed=args.seed,
                                 lr=args.lr, momentum=args.momentum, progress=progress.say)
    print()
    print(to_text(summarise(steps)))
    cross = crossover(steps)
    print()
    print("\n".join(crossover_sentences(cross, steps)))
    if not args.no_write:
        written = _write_training(args.results, steps, progress)
        print("\nwrote " + ", ".join(str(p) for p in written))
    failed = steps[steps["check"] != "PASS"]
    if len(failed):
        print(f"{len(failed)} step(s) FAILED their check against the serial step",
              file=sys.stderr)
        return 1
    return 0


def _train_strategies(args: argparse.Namespace) -> list[str]:
    """Data and model parallelism, and the hybrid unless ``--row-groups 1``."""
    return ["data", "model"] + (["hybrid"] if args.row_groups > 1 else [])


def _write_training(folder: Path, steps, progress: Progress) -> list[Path]:
    """``training.csv``, ``training.png`` (with the report extra) and ``training.md`` in
    ``folder``, each replaced atomically; a ``training.png`` left from an earlier run is
    removed when no figure is made, so the report never shows another run's."""
    from .report import figures
    from .training.compare import training_markdown

    csv = folder / "training.csv"
    with atomic_path(csv) as tmp:
        steps.to_csv(tmp, index=False)
    written = [csv]
    png = folder / "training.png"
    try:
        fig = figures.training_figure(steps)
    except ImportError as error:
        fig, missing = None, f"(No figure: {error}.)"
        progress.say(f"no training.png: {error}")
    else:
        missing = ""
    if fig is not None:
        written.append(figures.save_png(fig, png))
    else:
        png.unlink(missing_ok=True)
    md = folder / "training.md"
    written.append(write_text_atomic(md, training_markdown(
        steps, figure=png.name if fig is not None else None, figure_missing=missing)))
    return written


def _train_digits(args: argparse.Namespace, partitions: list[str]) -> int:
    from .training.compare import compare_digits
    from .training.digits import load_digits_1024

    progress = Progress(args.quiet)
    if not args.no_write:
        _check_writable_folder(args.results, "--results")
    try:
        data = load_digits_1024(args.seed)
    except ImportError as error:
        raise UsageError(str(error)) from error
    progress.say(f"digits: {len(data.y_train)} training rows, {len(data.y_test)} held out; "
                 f"{args.layers} layers, {args.epochs} epochs of batch {args.batch}")
    with _cluster_client(args, progress) as client:
        epochs = compare_digits(client, layers=args.layers, epochs=args.epochs,
                                batch=args.batch, strategies=_train_strategies(args),
                                partitions=partitions, k=args.parts,
                                row_groups=args.row_groups,
                                seed=args.seed, lr=args.lr, momentum=args.momentum,
                                data=data, progress=progress.say)
    shown = epochs.assign(mb_moved=epochs["bytes_moved"] / 1e6)
    for column in ("loss", "serial_loss"):
        shown[column] = shown[column].map(lambda v: f"{v:.4f}")
    for column in ("train_accuracy", "test_accuracy"):
        shown[column] = shown[column].map(lambda v: f"{v:.3f}")
    print()
    print(to_text(shown, ["strategy", "partition", "workers", "epoch", "loss",
                                 "serial_loss", "train_accuracy", "test_accuracy", "seconds",
                                 "mb_moved", "check"]))
    print(f"\nheld-out accuracy after {args.epochs} epochs:")
    for (strategy, partition), rows in epochs.groupby(["strategy", "partition"], sort=False):
        print(f"  {strategy} {partition}: {rows['test_accuracy'].iloc[-1]:.3f} "
              f"({rows['seconds'].sum():.1f} s of "
              f"training, {rows['bytes_moved'].sum() / 1e6:.1f} MB moved)")
    if not args.no_write:
        path = args.results / "training-epochs.csv"
        with atomic_path(path) as tmp:
            epochs.to_csv(tmp, index=False)
        print(f"\nwrote {path}")
    failed = epochs[epochs["check"] != "PASS"]
    if len(failed):
        print(f"{len(failed)} epoch(s) FAILED their check against the serial run",
              file=sys.stderr)
        return 1
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    progress = Progress(args.quiet)
    specs = _compare_specs(args, progress)
    if not args.no_write:
        _check_writable_folder(args.results, "--results")
    problem = load_problem(args, progress)
    net, inputs = problem.network, problem.inputs
    if any(s.strategy == "hybrid" for s in specs):
        _check_row_groups(args.row_groups, inputs.shape[0])
    progress.say(f"problem: {problem.source}: {inputs.shape[0]} inputs, {net.edges:,} edges")

    def on_run(outcome: study.RunOutcome, done: int, total: int) -> None:
        result = outcome.result
        moved = ("" if result.bytes_moved is None
                 else f"  {result.bytes_moved / 1e6:.1f} MB moved")
        how = f"{result.partition} {result.transport}" if result.transport else result.partition
        progress.say(f"[{done}/{total}] {result.strategy:<9} {how:<17} "
                     f"{result.n_workers} workers x {result.n_blocks} blocks: "
                     f"{result.wall_seconds:8.3f} s  {result.edges_per_second:.3g} edges/s  "
                     f"{outcome.check}{moved}")

    with contextlib.ExitStack() as stack:
        client = stack.enter_context(_cluster_client(args, progress)) if any(
            s.strategy not in ("reference", "kernel") for s in specs) else None
        try:
            found = study.compare(problem, client, specs=specs, repeat=args.repeat,
                                  warm_up=not args.no_warm_up, progress=progress.say,
                                  on_run=on_run)
        except StudyError as error:
            raise UsageError(str(error)) from error
    print()
    print(to_text(found.comparison(), COMPARE_COLUMNS))
    if not args.no_write:
        written: list[Path] = []
        code = _all_or_nothing("the results", args.results, lambda: written.extend(
            outputs.write_results(args.results, found.runs, found.layers, progress.say)))
        if code is not None:
            return code
        print("\nwrote " + ", ".join(str(p) for p in written))
    failed = found.failed
    if len(failed):
        print(f"\n{len(failed)} run(s) FAILED the check", file=sys.stderr)
        return 1
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    from .partition import make_neuron_partition

    progress = Progress(args.quiet)
    network = load_network(args, progress)
    cache = False if args.no_partition_cache else True
    cached = False
    if args.method == "hypergraph" and cache:
        from .partition.hypergraph import is_cached

        cached = is_cached(network, args.k, epsilon=args.epsilon, seed=args.seed)
    what = f"the neurons of {network.name} into {args.k} parts ({args.method})"
    try:
        if cached:
            progress.say(f"reading the cached partition of {what}")
            part = make_neuron_partition(network, args.k, args.method, seed=args.seed,
                                         epsilon=args.epsilon, cache=cache)
        else:
            with progress.step(f"partitioning {what}"):
                part = make_neuron_partition(
                    network, args.k, args.method, seed=args.seed, nbuckets=args.nbuckets,
                    epsilon=args.epsilon, cache=cache,
                    progress=progress.counter("layers partitioned")
                    if args.method == "hypergraph" else None)
    except ImportError as error:
        raise UsageError(str(error)) from error
    volume = part.volume(network)
    table = volume.assign(imbalance=part.imbalance(network))
    if args.per_layer:
        print(to_text(table))
        print()
    how = (f"read from the cache (computed in {part.seconds:.2f} s when made)" if cached
           else f"computed in {part.seconds:.2f} s")
    print(f"{args.method} partition of {network.name}, k={args.k}: "
          f"km1 {int(volume['km1'].sum()):,} activation columns over {network.n_layers} "
          f"layers (per layer: mean {volume['km1'].mean():.1f}, max {volume['km1'].max()}), "
          f"work imbalance max {table['imbalance'].max():.4f}, {how}")
    if args.out:
        part.save(args.out)
        print(f"wrote {args.out}")
    return 0


NOTEBOOK_MISSING = "running a notebook needs nbclient: pip install 'sdnn_dask[study]'"


def cmd_study(args: argparse.Namespace) -> int:
    """Run a study file's grid on one cluster, each run recorded as it finishes."""
    progress = Progress(args.quiet)
    try:
        grid = study.Study.from_yaml(args.study)
    except StudyError as error:
        raise UsageError(str(error)) from error
    results = args.results or DEFAULT_RESULTS / grid.name
    _check_writable_folder(results, "--results")
    done = records.recorded_keys(results)
    if done and not args.resume:
        raise UsageError(f"--results {results} already holds {len(done)} recorded run(s) of "
                         "a study: add --resume to go on with it, or choose another folder")
    from .cluster import is_address

    starts_workers = isinstance(args.cluster, str | None) and not is_address(args.cluster) \
        and args.cluster != "slurm-batch"
    if args.workers is None and grid.workers is not None and starts_workers:
        args.workers = grid.workers  # the study's cluster size, where workers are started
    serial = all(s.strategy in ("reference", "kernel") for s in grid.specs)
    progress.say(f"study {grid.name} ({args.study}): {len(grid.problems)} problem(s) x "
                 f"{len(grid.specs)} configuration(s) x {grid.repeats} repeat(s) = "
                 f"{grid.total} runs, recorded in {results}/")
    with contextlib.ExitStack() as stack:
        client = None if serial else stack.enter_context(_cluster_client(args, progress))
        try:
            found = grid.run(client, results, resume=args.resume, progress=progress.say,
                             bar=not args.quiet)
        except StudyError as error:
            raise UsageError(str(error)) from error
    print(to_text(found.comparison(), ["network", "inputs", *COMPARE_COLUMNS]))
    print(f"\nrecords and report in {results}/ (report.html, summary.md, records.csv)")
    if len(found.failed):
        print(f"\n{len(found.failed)} run(s) FAILED the check", file=sys.stderr)
        return 1
    return 0


def cmd_notebook(args: argparse.Namespace) -> int:
    """Execute a notebook top to bottom, its clusters made where ``--cluster`` says."""
    try:
        import nbclient
        import nbformat
    except ImportError as error:
        raise UsageError(NOTEBOOK_MISSING) from error
    progress = Progress(args.quiet)
    path: Path = args.notebook
    if not path.is_file():
        raise UsageError(f"{path}: no such notebook")
    if args.cluster == "slurm-batch":
        raise UsageError("a notebook runs its clusters from its kernel; use "
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
    folder = args.results_folder or args.results
    table = records.read_records(folder)
    summary = report.summary_markdown(table)
    if not args.print_only:  # all together, or none, as compare writes them
        layers = records.read_records(folder, "layers")
        written: list[Path] = []
        code = _all_or_nothing("the report", folder, lambda: written.extend(
            outputs.write_report_files(folder, table, layers,
                                       lambda message: print(message, file=sys.stderr))))
        if code is not None:
            return code
        print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
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
    p.add_argument("--layers", "-L", type=POSITIVE, default=120, help="layers (120)")
    p.add_argument("--inputs", "-n", type=POSITIVE, default=None, help="input rows (60000)")
    p.add_argument("--seed", type=NON_NEGATIVE, default=0,
                   help="seed of the network's permutations and of the inputs (0)")
    p.add_argument("--order", choices=ORDERS, default="official-like",
                   help="row order of the inputs: official-like (survivors cluster along "
                        "the rows as in the official inputs) or iid (official-like)")
    p.add_argument("--gzip", action="store_true", help="write .tsv.gz files")
    p.add_argument("--no-truth", action="store_true",
                   help="do not compute and write the categories file")
    p.add_argument("--store", action="store_true",
                   help="also write the network as a binary network store, "
                        "OUT/neuron{N}-l{L}.store (see convert; default: not written)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("convert", help="convert challenge layer files into a binary, "
                                       "memory-mappable network store, a Dask task per file")
    p.add_argument("challenge_dir", type=Path, metavar="CHALLENGE_DIR",
                   help="challenge folder with neuron{N}/n{N}-l{k}.tsv[.gz] (or the "
                        "neuron{N} folder)")
    p.add_argument("out", type=Path, metavar="OUT",
                   help="the store's folder (new, or empty; or a store, with --overwrite)")
    p.add_argument("--neurons", "-N", type=_neurons, default=1024,
                   help="neurons per layer: 1024, 4096, 16384 or 65536 (1024)")
    p.add_argument("--layers", "-L", type=POSITIVE, default=120,
                   help="layers 1..L to convert, every file present (120)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a network store at OUT, once the new one is whole (default: "
                        "an existing OUT is an error)")
    _add_cluster_arguments(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("infer", help="run one strategy; print the rate, PASS/FAIL with truth")
    _add_problem_arguments(p)
    p.add_argument("--strategy", choices=STRATEGIES, default="data",
                   help="reference or kernel (serial, here), data, model or hybrid "
                        "parallelism (data)")
    p.add_argument("--partition", choices=tuple(dict.fromkeys(ROW_PARTITIONS
                                                              + NEURON_PARTITIONS)),
                   default="block", help="row partition (data) or neuron partition (model, "
                   "hybrid); block")
    _add_cluster_arguments(p)
    p.add_argument("--blocks", type=POSITIVE, default=None,
                   help="row blocks of data parallelism (default: one per worker)")
    _add_model_arguments(p)
    p.add_argument("--weights", choices=("auto", "resident", "streamed"), default=None,
                   help="a network store's weights (--data STORE): read into memory, or "
                        "streamed layer by layer (the serial strategies and data "
                        "parallelism); auto streams a store whose weights and transpose "
                        "exceed half the memory (default: sdnn.data-parallel.weights, auto)")
    p.add_argument("--categories-out", type=Path, default=None,
                   help="write the categories found to this file (default: none written)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
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
    p.add_argument("--blocks", type=POSITIVE, default=None,
                   help="row blocks of data parallelism (default: one per worker)")
    _add_model_arguments(p)
    p.add_argument("--repeat", type=POSITIVE, default=1,
                   help="runs of each configuration; the table shows medians (1)")
    p.add_argument("--no-warm-up", action="store_true",
                   help="no untimed warm-up run before each executor's first timed run")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                   help="folder for records.csv, layers.csv, summary.md and the plots "
                        f"({DEFAULT_RESULTS}/, which git ignores; the repository's curated "
                        "results/ was made with --results results)")
    p.add_argument("--no-write", action="store_true", help="print only; write no records")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("train", help="training: serial, data and model parallel, checked "
                                     "against the serial run (--task steps: time and bytes "
                                     "per step; digits: accuracy per epoch)")
    p.add_argument("--task", choices=TRAIN_TASKS, default="steps",
                   help="steps: timed steps on the network's pattern with random labels, "
                        "training.csv and the training.md report; digits: whole epochs on "
                        "scikit-learn's digits (the train extra), training-epochs.csv (steps)")
    g = p.add_argument_group("network (generated unless --data is given)")
    _add_network_arguments(g, with_inputs=False, layers=None,
                           layers_help=f"layers (120; --task digits: {DIGITS_LAYERS})")
    p.add_argument("--batches", type=_positive_list, default=None,
                   help="--task steps: batch sizes, comma-separated (default 64,512)")
    p.add_argument("--steps", type=POSITIVE, default=None,
                   help="--task steps: timed steps per batch size, after an untimed one (3)")
    p.add_argument("--epochs", type=POSITIVE, default=None,
                   help=f"--task digits: passes over the training digits ({DIGITS_EPOCHS})")
    p.add_argument("--batch", type=POSITIVE, default=None,
                   help=f"--task digits: rows per step ({DIGITS_BATCH})")
    p.add_argument("--model", default="block",
                   help="neuron partitions of the model-parallel runs, comma-separated "
                        f"({','.join(NEURON_PARTITIONS)}; none: no model-parallel runs) "
                        "(block)")
    p.add_argument("-k", "--parts", type=POSITIVE, default=None,
                   help="neuron parts (default: one per worker)")
    p.add_argument("--row-groups", type=POSITIVE, default=2,
                   help="row groups of the hybrid runs, each run by its own copy of the k "
                        "parts of every --model partition; 1: no hybrid runs (2)")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (0.01)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (0.9)")
    _add_cluster_arguments(p)
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                   help="folder for training.csv (one row per step), training.md and "
                        "training.png (--task steps) or training-epochs.csv (one row per "
                        f"epoch, --task digits) ({DEFAULT_RESULTS}/)")
    p.add_argument("--no-write", action="store_true", help="print only; write no records")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("partition", help="partition every layer's neurons into k parts; "
                                         "print km1 (communication) and balance")
    _add_network_arguments(p.add_argument_group("network (generated unless --data is given)"),
                           with_inputs=False)
    p.add_argument("-k", "--parts", dest="k", type=POSITIVE, default=4, help="parts (4)")
    p.add_argument("--method", choices=NEURON_PARTITIONS, default="hypergraph",
                   help="how to split each layer's neurons (hypergraph: Mt-KaHyPar, the "
                        "partition extra)")
    p.add_argument("--epsilon", type=_epsilon, default=0.03,
                   help="hypergraph imbalance bound (0.03)")
    p.add_argument("--nbuckets", type=POSITIVE, default=1, help="buckets of the hash (P = 128 x)")
    p.add_argument("--out", type=Path, default=None,
                   help="write the partition (.npz; default: not written)")
    p.add_argument("--per-layer", action="store_true", help="print every layer's figures")
    p.add_argument("--no-partition-cache", action="store_true",
                   help="recompute a hypergraph partition even if one is cached")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
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

    p = sub.add_parser("study", help="run a study file's grid (e.g. studies/quick.yaml) on one "
                                     "cluster, each run recorded as it finishes; resumable")
    p.add_argument("study", type=Path, help="the study file (YAML; see sdnn_dask.study.Study)")
    p.add_argument("--resume", action="store_true",
                   help="go on with the study recorded in --results, skipping the runs "
                        "already there (without it, a folder holding runs is an error)")
    p.add_argument("--results", type=Path, default=None,
                   help=f"the study's folder (default: {DEFAULT_RESULTS}/NAME, NAME the "
                        "study's name; git ignores it)")
    _add_cluster_arguments(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or messages")
    p.set_defaults(func=cmd_study)

    p = sub.add_parser("notebook", help="execute a notebook (e.g. studies/quick_study.ipynb) "
                                        "with its clusters where --cluster says")
    p.add_argument("notebook", type=Path, help="the .ipynb to run")
    _add_cluster_arguments(p)
    p.add_argument("--out", type=Path, default=None,
                   help="the executed notebook (default: NAME.executed.ipynb here)")
    p.add_argument("--timeout", type=POSITIVE, default=1800, help="seconds per cell (1800)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_notebook)

    p = sub.add_parser("report", help="build the report (report.html, summary.md, plots) from "
                                      "a results folder's records, and print the summary")
    p.add_argument("results_folder", type=Path, nargs="?", default=None, metavar="RESULTS",
                   help=f"the results folder (default: {DEFAULT_RESULTS})")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help=argparse.SUPPRESS)
    p.add_argument("--print-only", action="store_true",
                   help="print the summary; write nothing")
    p.add_argument("--write", action="store_true", help=argparse.SUPPRESS)  # the default now
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
    except (FileNotFoundError, io.ChallengeFormatError, StudyError) as error:
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
