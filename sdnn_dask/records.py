"""Timing records: one tidy pandas row per (run, block), and one per (run, block, layer).

Schema of the run records (``records.csv``), one row per block of a run; the run-level
columns repeat on each of its rows so any row stands on its own:

==================  =========================================================================
column              meaning
==================  =========================================================================
study               id of the invocation that made the run (one ``compare`` = one study)
run_id              id of the run
time                when the run's record was made (UTC, ISO 8601)
host                machine that drove the run
strategy            ``reference`` | ``kernel`` (serial) | ``data`` (data parallelism) |
                    ``model`` (model parallelism) | ``hybrid`` (row groups x neuron parts)
partition           row partition of ``data``: ``none`` | ``block`` | ``hash`` | ``random`` |
                    ``chunks``; neuron partition of ``model``/``hybrid``: ``block`` |
                    ``hash`` | ``random`` | ``hypergraph``
network             network name; ``neurons``, ``layers``, ``edges`` (sum of nnz(W_k))
inputs              input rows
workers, blocks     Dask workers used, blocks the work was split into (model/hybrid: one
                    block per part per row group)
parts, row_groups   neuron parts ``k`` and row groups ``R`` (data: ``1`` and ``blocks``)
transport           how model/hybrid parts exchanged pieces: ``direct`` (worker to worker)
                    or ``graph`` (a Dask task per part and layer); empty for other runs
block, worker       this row's block and the worker that ran it
rows, survivors     input rows of the block, and those nonzero after the last layer (for a
                    part: nonzero in the part's columns)
compute_s           seconds in the kernel, measured on the worker (a part: sum of its layers)
bytes_moved         bytes of the pieces moved between workers in the run, counted by the
                    direct transport or read from Dask's transfer logs (graph) (model/hybrid;
                    empty where not measured)
predicted_volume    the neuron partition's volume: activation columns sent between parts,
                    summed over layers and row groups (km1)
partition_s         seconds taken to compute the neuron partition
wall_s              the run's inference seconds seen by the caller
edges_per_s         ``inputs * edges / wall_s``
imbalance           max/mean of ``compute_s`` over the run's blocks (1 = perfect)
survivor_imbalance  max/mean of ``survivors`` over the run's blocks
check               ``PASS``/``FAIL``: every activation within float32 rounding of the
                    bounded float64 reference (:mod:`sdnn_dask.check`) and, with
                    ``check_against=truth``, the categories equal to the truth
check_against       ``truth`` | ``reference``
max_abs_diff        largest difference of any activation from the float64 reference
params              other parameters as ``key=value;...`` (seed, nbuckets)
versions            ``sdnn_dask, dask, distributed, numpy, scipy, numba, python`` versions
==================  =========================================================================

Layer records (``layers.csv``): ``study, run_id, block, layer, mode, rows_in, rows_out,
nnz_out, seconds``, and for model/hybrid runs what the part received in the layer:
``columns_in`` (predicted columns from other parts), ``bytes_in`` (measured: by the
direct transport, or by Dask for the graph one), ``transfers_in``, ``nnz_in`` and
``rows_received``; with the direct transport also where the part's time went besides
``seconds`` (its step): ``wait_s`` (waiting for pieces), ``send_s`` (cutting, serialising
and queueing its pieces), ``serialise_s`` (part of ``send_s``), ``deserialise_s`` and
``transit_s`` (the slowest remote piece's time from queued on its sender to filed here).

Files are appended atomically: the new table is written beside the old one and renamed
over it, so an interrupted write leaves the old file intact.
"""

from __future__ import annotations

import os
import platform
import socket
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from ._files import atomic_path
from .partition import imbalance
from .result import RunResult

RUN_COLUMNS = [
    "study", "run_id", "time", "host", "strategy", "partition", "network", "neurons",
    "layers", "edges", "inputs", "workers", "blocks", "parts", "row_groups", "transport",
    "block",
    "worker", "rows", "survivors", "compute_s", "wall_s", "edges_per_s", "imbalance",
    "survivor_imbalance", "bytes_moved", "predicted_volume", "partition_s", "check",
    "check_against", "max_abs_diff", "params", "versions",
]
LAYER_COLUMNS = ["study", "run_id", "block", "layer", "mode", "rows_in", "rows_out",
                 "nnz_out", "seconds", "columns_in", "bytes_in", "transfers_in", "nnz_in",
                 "rows_received", "wait_s", "send_s", "serialise_s", "deserialise_s", "transit_s"]
RECORDS_FILE = "records.csv"
LAYERS_FILE = "layers.csv"

_VERSIONED = ("sdnn_dask", "dask", "distributed", "numpy", "scipy", "numba")


def versions() -> str:
    """Versions of the libraries that shape a timing, as one string."""
    parts = []
    for name in _VERSIONED:
        try:
            parts.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name}=?")
    parts.append(f"python={platform.python_version()}")
    return ";".join(parts)


def new_study_id() -> str:
    """A sortable id for a group of runs: UTC time to the second."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _or_nan(value: float | None) -> float:
    return np.nan if value is None else value


def run_records(
    result: RunResult,
    *,
    study: str,
    check: str | None = None,
    check_against: str = "reference",
    max_abs_diff: float | None = None,
) -> pd.DataFrame:
    """The per-block rows of one run, in :data:`RUN_COLUMNS` order."""
    blocks = result.blocks
    frame = blocks[["block", "worker", "rows", "survivors", "compute_s"]].copy()
    run_level = {
        "study": study,
        "run_id": result.run_id,
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "strategy": result.strategy,
        "partition": result.partition,
        "network": result.network["name"],
        "neurons": result.network["neurons"],
        "layers": result.network["layers"],
        "edges": result.network["edges"],
        "inputs": result.n_inputs,
        "workers": result.n_workers,
        "blocks": result.n_blocks,
        "parts": result.parts,
        "row_groups": result.row_groups if result.row_groups is not None else 1,
        "transport": result.transport,
        "wall_s": result.wall_seconds,
        "edges_per_s": result.edges_per_second,
        "imbalance": imbalance(blocks["compute_s"]),
        "survivor_imbalance": imbalance(blocks["survivors"]),
        "bytes_moved": _or_nan(result.bytes_moved),
        "predicted_volume": _or_nan(result.predicted_volume),
        "partition_s": _or_nan(result.partition_seconds),
        "check": check,
        "check_against": check_against,
        "max_abs_diff": np.nan if max_abs_diff is None else max_abs_diff,
        "params": ";".join(f"{k}={v}" for k, v in sorted(result.params.items())),
        "versions": versions(),
    }
    for column, value in run_level.items():
        frame[column] = value
    return frame[RUN_COLUMNS]


def layer_records(result: RunResult, *, study: str) -> pd.DataFrame:
    """The per-(block, layer) rows of one run, in :data:`LAYER_COLUMNS` order."""
    frame = result.layers.copy()
    frame["study"] = study
    frame["run_id"] = result.run_id
    for column in LAYER_COLUMNS:
        if column not in frame:
            frame[column] = np.nan
    return frame[LAYER_COLUMNS]


def append_records(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Append rows to a CSV table atomically (create it if missing).

    The old rows and the new are written to a temporary file in the same folder, which is
    then renamed over the old file: readers see the old table or the new, never a torn one.
    Columns missing on either side are kept (empty where unknown).
    """
    path = Path(path)
    if path.exists() and path.stat().st_size > 0:
        old = pd.read_csv(path)
        frame = pd.concat([old, frame], ignore_index=True)
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    return path


def read_records(folder: str | os.PathLike, which: str = "runs") -> pd.DataFrame:
    """Read ``records.csv`` (``which="runs"``) or ``layers.csv`` (``"layers"``) of a folder."""
    name = {"runs": RECORDS_FILE, "layers": LAYERS_FILE}[which]
    path = Path(folder) / name
    if not path.exists():
        raise FileNotFoundError(f"{path}: no records yet (run 'sdnn-dask compare' first)")
    return pd.read_csv(path)


def records_frame(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-run tables (an empty list gives an empty table)."""
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=RUN_COLUMNS)
    return pd.concat(frames, ignore_index=True)
