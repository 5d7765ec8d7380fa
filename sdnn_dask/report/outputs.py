"""A results folder: its files written all together or not at all.

``compare`` appends its runs to ``records.csv`` and ``layers.csv`` and rewrites the report
(``summary.md``, ``report.html``, the plots); a study writes its runs one by one
(:func:`sdnn_dask.records.write_run`) and the report at the end. Either way the report files
are staged in a hidden folder and renamed into place together (:func:`staged_writes`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd

from .. import records


def write_results(folder: Path, runs: pd.DataFrame, layers: pd.DataFrame,
                  say: Callable[[str], None]) -> list[Path]:
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
        The results folder (made, and checked writable, by the caller).
    runs, layers
        This study's rows of ``records.csv`` and ``layers.csv``.
    say
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
    with staged_writes(folder) as (staging, names):
        for name, frame in ((records.RECORDS_FILE, runs), (records.LAYERS_FILE, layers)):
            if (folder / name).exists():  # appended: the old rows go first
                shutil.copyfile(folder / name, staging / name)
            records.append_records(frame, staging / name)
            names.append(name)
        write_report(staging, names, runs, records.read_records(staging, "layers"), say)
    remove_stale_plots(folder, names)
    return [folder / name for name in names]


def write_report(staging: Path, names: list[str], runs: pd.DataFrame, layers: pd.DataFrame,
                 say: Callable[[str], None]) -> None:
    """``report.html``, ``summary.md`` and the plots (:func:`sdnn_dask.report.html.
    write_report`; no plot without matplotlib) into ``staging``, their names into
    ``names``."""
    from .html import write_report as write_html

    written = write_html(staging, runs, layers, projection=projection_of(runs, layers, say))
    names.extend(path.name for path in written)
    if not any(name.endswith(".png") for name in names):
        say("no plot: plots need matplotlib: pip install 'sdnn_dask[report]'")


def projection_of(runs: pd.DataFrame, layers: pd.DataFrame,
                  say: Callable[[str], None]) -> pd.DataFrame | None:
    """Measured against projected for the report, or ``None`` when the records cannot
    calibrate the cost model (:mod:`sdnn_dask.projection`)."""
    from ..projection import report_projection

    try:
        table = report_projection(runs, layers)
    except ValueError as error:  # too few kinds of runs to calibrate on
        say(f"no projection: {error}")
        return None
    say(f"projection: {table.attrs['rule']}; {table.attrs['backtest']}")
    return table


@contextlib.contextmanager
def staged_writes(folder: Path) -> Iterator[tuple[Path, list[str]]]:
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




def write_report_files(folder: Path, runs: pd.DataFrame, layers: pd.DataFrame,
                       say: Callable[[str], None]) -> list[Path]:
    """(Re)write the report of ``folder``'s records, all files together or none."""
    with staged_writes(folder) as (staging, names):
        write_report(staging, names, runs, layers, say)
    remove_stale_plots(folder, names)
    return [folder / name for name in names]


#: The report's plot files: ``<stem>.png`` or ``<stem>-<network>-<inputs>.png``
#: (``comparison.png``: written by earlier versions).
PLOT_STEMS = ("rate", "blocks", "imbalance", "survivors", "distinct-rows", "layer-time",
              "communication", "projection", "comparison")


def remove_stale_plots(folder: Path, written: list[str]) -> list[Path]:
    """Delete the report plots in ``folder`` that the report just written did not make
    (from an earlier report of other problems), so the folder shows one report. Only
    files named as the report names its plots are touched.

    Returns
    -------
    list of Path
        The files removed.
    """
    keep = set(written)
    removed = []
    for path in Path(folder).glob("*.png"):
        stem = path.stem
        ours = any(stem == s or stem.startswith(f"{s}-") for s in PLOT_STEMS)
        if ours and path.name not in keep:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
