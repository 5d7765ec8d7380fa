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

Each command is a module of this package (:mod:`.compare`, :mod:`.infer`, ...), the
argument parser is :mod:`.parser`, and what the commands share (progress, user errors, the
problem and the cluster from the options, the exit codes) is :mod:`.common`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import dask

from ..data import io
from ..study import StudyError
from ..study.validation import clipped
from .common import (
    DEFAULT_RESULTS,
    Progress,
    UsageError,
    batch_runner,
    check_arguments,
    is_interrupt,
)
from .parser import build_parser

__all__ = ["DEFAULT_RESULTS", "Progress", "UsageError", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sdnn-dask``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # the in-process scheduler logs every worker's arrival and departure at INFO
    logging.getLogger("distributed").setLevel(logging.WARNING)
    if args.command == "cluster" and args.action == "job-script" and args.cluster is None:
        args.cluster = "slurm"
    try:
        check_arguments(args)
        # a kernel switch for this command: resolved on this client, handed to the tasks
        kernel = {f"sdnn.kernel.{name}": getattr(args, name) for name in ("dedup", "classes")
                  if getattr(args, name, None) is not None}
        with batch_runner(args), dask.config.set(kernel):
            return int(args.func(args) or 0)
    except UsageError as error:
        # raised on, as argparse does: SystemExit with code 2 once the message is out
        print(f"error: {clipped(str(error))}", file=sys.stderr)
        raise
    except (FileNotFoundError, io.ChallengeFormatError, StudyError) as error:
        print(f"error: {clipped(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(_INTERRUPTED, file=sys.stderr)
        return 130
    except Exception as error:
        from ..parallel.faults import WorkerLostError  # loaded already if this is one

        if is_interrupt(error):
            print(_INTERRUPTED, file=sys.stderr)
            return 130
        if not isinstance(error, WorkerLostError):
            raise
        # compare writes its records only after every run: none were written
        print(f"error: {clipped(str(error))}", file=sys.stderr)
        return 3


#: What ``main`` says after Ctrl-C (``study`` says where its recorded runs are instead).
_INTERRUPTED = "interrupted; nothing was written for unfinished runs"
