"""The ``infer`` command: one strategy run once, its rate, and PASS/FAIL against the truth."""

from __future__ import annotations

import argparse
import contextlib

import dask

from .. import study
from ..core.reference import check_categories
from ..data import io
from ..registry import NEURON_PARTITIONS, ROW_PARTITIONS
from ..study import RunSpec, StudyError
from ..study.validation import shown
from .common import (
    Progress,
    UsageError,
    check_row_groups,
    load_problem,
    open_client,
    parse_transports,
)


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
                         f"{NEURON_PARTITIONS}, not {shown(args.partition)}")
    serial = args.strategy in ("reference", "kernel")
    [transport] = _one_transport(args.transport)
    spec = _spec(args, args.strategy, None if serial else args.partition, transport)
    problem = load_problem(args, progress)
    if spec.strategy == "hybrid":
        check_row_groups(spec.row_groups, problem.inputs.shape[0])
    with contextlib.ExitStack() as stack:
        client = None if serial else stack.enter_context(open_client(args, progress))
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
                         f"not {shown(name)}")


def _one_transport(value: str) -> list[str]:
    names = parse_transports(value)
    if len(names) != 1:
        raise UsageError("--transport: infer runs one transport; compare takes several")
    return names
