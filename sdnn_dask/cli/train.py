"""The ``train`` command: training under every strategy checked against the serial run (timed
steps and the bytes crossover, or the digits epoch by epoch).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..files import atomic_path, write_text_atomic
from ..formatting import to_text
from ..parallel.allocator import tune_allocator
from ..registry import NEURON_PARTITIONS
from ..study.validation import shown
from .common import (
    Progress,
    UsageError,
    check_writable_folder,
    exit_code_after_checks,
    load_network,
    open_client,
)

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
            raise UsageError(f"--model: unknown partition {shown(method)}; choose from "
                             f"{', '.join(NEURON_PARTITIONS)} or none")
    return partitions


def _check_train_task(args: argparse.Namespace) -> None:
    """Refuse the options of the other task and SGD settings the trainers refuse; fill in
    this task's defaults."""
    from ..training.optim import check_epochs, check_settings

    for option, lr, momentum in (("--lr", args.lr, 0.0), ("--momentum", 0.01, args.momentum)):
        try:  # each alone, so the message names the option that is wrong
            check_settings(lr, momentum, 0.0)
        except ValueError as error:
            raise UsageError(f"{option}: {error}") from error
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
        try:
            check_epochs(args.epochs, low=1)
        except ValueError as error:
            raise UsageError(f"--epochs: {error}") from error
        args.batch = args.batch or [DIGITS_BATCH]
    else:
        args.layers = args.layers or 120
        args.batches = args.batches or [64, 512]
        args.steps = args.steps or 3
    smallest = min(args.batch if args.task == "digits" else args.batches)
    if args.row_groups > smallest:
        raise UsageError(f"--row-groups {args.row_groups}: every hybrid row group needs a row "
                         f"of each batch, and the smallest batch has {smallest}")
    if args.task == "steps":
        _check_steps_memory(args)


def _check_steps_memory(args: argparse.Namespace) -> None:
    """Refuse ``--batches`` and ``--steps`` whose inputs cannot fit in memory, before the
    network is made: the timed steps draw ``max(batches) x (steps + 1)`` dense rows of N
    float32, and a step keeps its batch's activations at every layer for the backward."""
    from dask.utils import format_bytes
    from distributed.system import MEMORY_LIMIT

    batch = max(args.batches)
    need = 4 * args.neurons * batch * ((args.steps + 1) + (args.layers + 1))
    if need > MEMORY_LIMIT:
        raise UsageError(f"--batches {batch} with --steps {args.steps}: the inputs and one "
                         f"step's activations of a {args.neurons}-{args.layers} network "
                         f"alone take {format_bytes(need)}, more than the "
                         f"{format_bytes(MEMORY_LIMIT)} of memory here")


def cmd_train(args: argparse.Namespace) -> int:
    _check_train_task(args)
    partitions = _train_partitions(args.model)
    if args.task == "digits":
        return _train_digits(args, partitions)
    from ..report.training import crossover, crossover_sentences, summarise
    from ..study.training_comparison import compare_training

    progress = Progress(args.quiet)
    if not args.no_write:
        check_writable_folder(args.results, "--results")
    network = load_network(args, progress)
    tune_allocator()  # the serial step runs here: as the workers, no page-faulting tiles
    progress.say(f"training {network.name}: {network.edges:,} weights, batches "
                 f"{args.batches}, {args.steps} steps each")
    with open_client(args, progress) as client:
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
    return exit_code_after_checks(len(failed), "step(s)", "their check against the serial step")


def _train_strategies(args: argparse.Namespace) -> list[str]:
    """Data and model parallelism, and the hybrid unless ``--row-groups 1``."""
    return ["data", "model"] + (["hybrid"] if args.row_groups > 1 else [])


def _write_training(folder: Path, steps, progress: Progress) -> list[Path]:
    """``training.csv``, ``training.png`` (with the report extra) and ``training.md`` in
    ``folder``, each replaced atomically; a ``training.png`` left from an earlier run is
    removed when no figure is made, so the report never shows another run's."""
    from ..report import figures
    from ..report.training import training_markdown
    from ..study.training_comparison import LOSS_RTOL

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
        steps, figure=png.name if fig is not None else None, figure_missing=missing,
        loss_rtol=LOSS_RTOL)))
    return written


def _train_digits(args: argparse.Namespace, partitions: list[str]) -> int:
    import pandas as pd

    from ..report import figures
    from ..report.training import crossover, crossover_sentences, digits_figure, digits_steps
    from ..study.training_comparison import compare_digits
    from ..training.digits import load_digits_1024

    progress = Progress(args.quiet)
    if not args.no_write:
        check_writable_folder(args.results, "--results")
    try:
        data = load_digits_1024(args.seed)
    except ImportError as error:
        raise UsageError(str(error)) from error
    if max(args.batch) > len(data.y_train):
        raise UsageError(f"--batch {max(args.batch)}: more rows than the {len(data.y_train)} "
                         "training digits (an epoch would be one step of them all)")
    progress.say(f"digits: {len(data.y_train)} training rows, {len(data.y_test)} held out; "
                 f"{args.layers} layers, {args.epochs} epochs of batch "
                 f"{', '.join(str(b) for b in args.batch)}")
    runs = []
    with open_client(args, progress) as client:
        for batch in args.batch:
            runs.append(compare_digits(client, layers=args.layers, epochs=args.epochs,
                                       batch=batch, strategies=_train_strategies(args),
                                       partitions=partitions, k=args.parts,
                                       row_groups=args.row_groups, seed=args.seed,
                                       lr=args.lr, momentum=args.momentum, data=data,
                                       progress=progress.say))
    epochs = pd.concat(runs, ignore_index=True)
    shown = epochs.assign(mb_moved=epochs["bytes_moved"] / 1e6)
    for column in ("loss", "serial_loss"):
        shown[column] = shown[column].map(lambda v: f"{v:.4f}")
    for column in ("train_accuracy", "test_accuracy"):
        shown[column] = shown[column].map(lambda v: f"{v:.3f}")
    print()
    print(to_text(shown, ["strategy", "partition", "workers", "batch", "epoch", "loss",
                                 "serial_loss", "train_accuracy", "test_accuracy", "seconds",
                                 "mb_moved", "check"]))
    print(f"\nheld-out accuracy after {args.epochs} epochs:")
    for (strategy, partition, batch), rows in epochs.groupby(["strategy", "partition",
                                                              "batch"], sort=False):
        print(f"  {strategy} {partition}, batch {batch}: {rows['test_accuracy'].iloc[-1]:.3f}"
              f" ({rows['seconds'].sum():.1f} s of "
              f"training, {rows['bytes_moved'].sum() / 1e6:.1f} MB moved)")
    steps = digits_steps(epochs, len(data.y_train))
    cross = crossover(steps)
    print("\nper step, data against model parallelism:")
    print("\n".join(crossover_sentences(cross, steps)))
    if not args.no_write:
        path = args.results / "training-epochs.csv"
        with atomic_path(path) as tmp:
            epochs.to_csv(tmp, index=False)
        written = [path]
        png = args.results / "training-epochs.png"
        try:
            written.append(figures.save_png(digits_figure(epochs), png))
        except ImportError as error:  # the report extra: the CSV alone
            png.unlink(missing_ok=True)
            progress.say(f"no {png.name}: {error}")
        print("\nwrote " + ", ".join(str(p) for p in written))
    failed = epochs[epochs["check"] != "PASS"]
    return exit_code_after_checks(len(failed), "epoch(s)", "their check against the serial run")
