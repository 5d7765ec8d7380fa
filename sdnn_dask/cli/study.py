"""The ``study`` command: a study file's grid of runs on one cluster, each recorded as it
finishes, resumable.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from .. import records, study
from ..study import StudyError
from .common import (
    DEFAULT_RESULTS,
    Progress,
    UsageError,
    check_workers,
    check_writable_folder,
    comparison_text,
    exit_code_after_checks,
    is_interrupt,
    open_client,
)


def cmd_study(args: argparse.Namespace) -> int:
    """Run a study file's grid on one cluster, each run recorded as it finishes."""
    progress = Progress(args.quiet)
    try:
        grid = study.Study.from_yaml(args.study)
        grid.check_files()
    except StudyError as error:
        raise UsageError(str(error)) from error
    results = args.results or DEFAULT_RESULTS / grid.name
    check_writable_folder(results, "--results")
    try:
        study.check_results_folder(results)
    except StudyError as error:
        raise UsageError(f"--results: {error}") from error
    done = records.recorded_keys(results)
    if done and not args.resume:
        raise UsageError(f"--results {results} already holds {len(done)} recorded run(s) of "
                         "a study: add --resume to go on with it, or choose another folder")
    from ..cluster import is_address

    starts_workers = isinstance(args.cluster, str | None) and not is_address(args.cluster) \
        and args.cluster != "slurm-batch"
    if args.workers is None and grid.workers is not None and starts_workers:
        args.workers = grid.workers  # the study's cluster size, where workers are started
        check_workers(args.workers, args.cluster, f"{args.study}: workers")
    serial = all(s.strategy in ("reference", "kernel") for s in grid.specs)
    progress.say(f"study {grid.name} ({args.study}): {len(grid.problems)} problem(s) x "
                 f"{len(grid.specs)} configuration(s) x {grid.repeats} repeat(s) = "
                 f"{grid.total} runs, recorded in {results}/")
    try:
        with contextlib.ExitStack() as stack:
            client = None if serial else stack.enter_context(open_client(args, progress))
            try:
                found = grid.run(client, results, resume=args.resume, progress=progress.say,
                                 bar=not args.quiet)
            except StudyError as error:
                raise UsageError(str(error)) from error
    except (KeyboardInterrupt, Exception) as error:
        if not is_interrupt(error):
            raise
        # said once the cluster is closed (quietly), so it is the last line on the terminal
        recorded = len(records.recorded_keys(results))
        print(f"interrupted; {recorded} of the {grid.total} runs are recorded in "
              f"{results}/: go on with --resume", file=sys.stderr)
        return 130
    table = found.comparison()
    print(comparison_text(table, ["network", "inputs"]))
    print(f"\nrecords and report in {results}/ (report.html, summary.md, records.csv)")
    return exit_code_after_checks(len(found.failed), "run(s)", blank_line=True)
