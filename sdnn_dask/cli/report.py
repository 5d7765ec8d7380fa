"""The ``report`` command: the report (report.html, summary.md, plots) built from a results
folder's records, and the summary printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from .. import records
from ..report import outputs, summary_markdown
from ..report.published import beside_published, format_published
from .common import all_or_nothing


def cmd_report(args: argparse.Namespace) -> int:
    folder = args.results_folder or args.results
    table = records.read_records(folder)
    summary = summary_markdown(table)
    if not args.print_only:  # all together, or none, as compare writes them
        layers = records.read_records(folder, "layers")
        written: list[Path] = []
        code = all_or_nothing("the report", folder, lambda: written.extend(
            outputs.write_report_files(folder, table, layers,
                                       lambda message: print(message, file=sys.stderr))))
        if code is not None:
            return code
        print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    print(summary)
    if args.published:
        try:  # what model-parallel parts waited; records without layers have none
            layers = records.read_records(folder, "layers")
        except FileNotFoundError:
            layers = None
        print()
        print(format_published(beside_published(table, layers), table))
        print()
        print(_placement(folder, table))
    return 0


def _placement(folder: Path, table: pd.DataFrame) -> str:
    """The recorded strategies projected onto the published run's 32 nodes
    (:func:`~sdnn_dask.projection.place_published`), or why not."""
    from ..projection import format_placement, place_published

    try:
        layers = records.read_records(folder, "layers")
        return format_placement(place_published(table, layers))
    except (OSError, ValueError) as error:
        return f"no projection onto the published run's cluster: {error}"
