"""The ``compare`` command, the main job: serial against data, model and hybrid parallelism,
verified, recorded and reported.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from .. import study
from ..registry import NEURON_PARTITIONS, ROW_PARTITIONS
from ..report import outputs
from ..study import RunSpec, StudyError
from .common import (
    Progress,
    UsageError,
    all_or_nothing,
    check_row_groups,
    check_writable_folder,
    comparison_text,
    exit_code_after_checks,
    load_problem,
    open_client,
    parse_names,
    parse_transports,
)


def _default_neuron_partitions(progress: Progress) -> str:
    """Every neuron partition, less hypergraph when Mt-KaHyPar is not installed."""
    available = study.neuron_partitions_available()
    if "hypergraph" not in available:
        progress.say("no hypergraph rows: Mt-KaHyPar is not installed "
                     "(pip install 'sdnn_dask[partition]')")
    return ",".join(available)


def _compare_specs(args: argparse.Namespace, progress: Progress) -> list[RunSpec]:
    partitions = parse_names(args.partitions, ROW_PARTITIONS, "--partitions")
    default = _default_neuron_partitions(progress)
    model = parse_names(args.model or default, NEURON_PARTITIONS, "--model")
    hybrid = parse_names(args.hybrid or default, NEURON_PARTITIONS, "--hybrid")
    try:
        return study.default_specs(
            partitions=partitions, model=model, hybrid=hybrid,
            transports=parse_transports(args.transport), parts=args.parts,
            row_groups=args.row_groups, blocks=args.blocks, seed=args.seed,
            epsilon=args.epsilon)
    except StudyError as error:
        raise UsageError(str(error)) from error


def cmd_compare(args: argparse.Namespace) -> int:
    progress = Progress(args.quiet)
    specs = _compare_specs(args, progress)
    if not args.no_write:
        check_writable_folder(args.results, "--results")
    problem = load_problem(args, progress)
    net, inputs = problem.network, problem.inputs
    if any(s.strategy == "hybrid" for s in specs):
        check_row_groups(args.row_groups, inputs.shape[0])
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
        client = stack.enter_context(open_client(args, progress)) if any(
            s.strategy not in ("reference", "kernel") for s in specs) else None
        try:
            found = study.compare(problem, client, specs=specs, repeat=args.repeat,
                                  warm_up=not args.no_warm_up, progress=progress.say,
                                  on_run=on_run, bar=not args.quiet)
        except StudyError as error:
            raise UsageError(str(error)) from error
    print()
    table = found.comparison()
    print(comparison_text(table))
    if not args.no_write:
        written: list[Path] = []
        code = all_or_nothing("the results", args.results, lambda: written.extend(
            outputs.write_results(args.results, found.runs, found.layers, progress.say)))
        if code is not None:
            return code
        print("\nwrote " + ", ".join(str(p) for p in written))
    return exit_code_after_checks(len(found.failed), "run(s)", blank_line=True)
