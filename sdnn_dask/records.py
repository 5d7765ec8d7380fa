"""Timing records: one tidy pandas row per (run, block), and one per (run, block, layer).

Schema of the run records (``records.csv``), one row per block of a run; the run-level
columns repeat on each of its rows so any row stands on its own:

==================  =========================================================================
column              meaning
==================  =========================================================================
study               the study the run belongs to: its name (``sdnn-dask study``), or the
                    id of the invocation (one ``compare`` = one study)
run_id              id of the run
spec                the run's configuration key (:meth:`sdnn_dask.study.RunSpec.key`, with
                    the problem's): repeats of one configuration share it
repeat              which repeat of the configuration (0, 1, ...)
time                when the run's record was made (UTC, ISO 8601)
host                machine that drove the run
source              where the problem came from: ``generated`` or the ``--data`` folder
strategy            ``reference`` | ``kernel`` (serial) | ``data`` (data parallelism) |
                    ``model`` (model parallelism) | ``hybrid`` (row groups x neuron parts)
partition           row partition of ``data``: ``none`` | ``block`` | ``hash`` | ``random`` |
                    ``chunks``; neuron partition of ``model``/``hybrid``: ``block`` |
                    ``hash`` | ``random`` | ``hypergraph``
row_partition       how the hybrid split its rows into groups (empty for other runs)
network             network name; ``neurons``, ``layers``, ``edges`` (sum of nnz(W_k))
inputs              input rows
workers, blocks     Dask workers used, blocks the work was split into (model/hybrid: one
                    block per part per row group)
parts, row_groups   neuron parts ``k`` and row groups ``R`` (data: ``1`` and ``blocks``)
transport           how model/hybrid parts exchanged pieces: ``direct`` (worker to worker)
                    or ``graph`` (a Dask task per part and layer); empty for other runs
seed                seed of the random partitions (and of a generated problem's data)
nbuckets, epsilon   buckets of a hash partition; imbalance bound of a hypergraph one
                    (empty where they do not apply)
objective           what a hypergraph partition minimised: ``traffic`` (the bytes a sample
                    of the inputs sends) or ``km1`` (activation columns); else empty
dense_threshold,    the kernel settings the run's tasks used (``sdnn.kernel.*``, read on
chunk_bytes,        the client); ``chunk_min_rows`` is empty in records made before the
chunk_min_rows      minimum existed (their chunks were ``chunk_bytes`` alone)
dedup               ``on``/``off``: identical live rows computed once (``sdnn.kernel.dedup``;
                    every strategy but the scipy reference); empty where it does not apply
classes             ``on``/``off``: identical output neurons computed once
                    (``sdnn.kernel.classes``; every strategy but the scipy reference);
                    empty where it does not apply
join                ``on``/``off``: data parallelism with weights streamed from a store took
                    every worker's survivors on together on one worker after the early
                    layers (``sdnn.data-parallel.join``); empty for other runs
passes              model/hybrid: the row passes each row group's rows went through the
                    early layers in (1: all at once); empty for other runs
joined_at           model/hybrid in several passes: the layer after which the passes'
                    survivors went on together (empty where they did not join)
block, worker       this row's block and the worker that ran it
rows, survivors     input rows of the block, and those nonzero after the last layer (for a
                    part: nonzero in the part's columns)
row_layers          the work the block actually did: its live rows summed over the layers
compute_s           seconds in the kernel, measured on the worker (a part: sum of its layers)
weight_bytes        a run on a network store: bytes of weights the block's worker held (data
                    parallelism: its copy, or the most layers streaming prepares at once; a
                    part: its slice's layers, all of them when resident), else empty
store_bytes_read    a run on a store: bytes the worker read in the run (data parallelism: the
                    store's files; a part: its slice of them, cut beside the store), else
                    empty; per worker, so repeated on a worker's blocks
peak_rss_bytes      the peak resident memory of the process that ran the block during the
                    run (every strategy: a worker's, reset just before the run and read
                    just after it; the serial strategies' own process); per worker, so
                    repeated on a worker's blocks; empty where not measured (model/hybrid
                    runs in memory, and records made before every strategy recorded it)
peak_since          ``run``: ``peak_rss_bytes`` is the run's peak (its high-water mark was
                    reset just before it); ``start``: the reset was not possible there, so
                    it is the process's peak since it started (at least the run's);
                    empty where ``peak_rss_bytes`` is, or in records made before this
                    column (whose peaks of store runs were since the process started)
bytes_in            model/hybrid: bytes of the pieces the block (a part) received, over the
                    layers (a piece for several parts of a worker counts for the first)
predicted_bytes_in  the same, forecast before the run (where a study asked for it)
bytes_moved         bytes of the pieces moved between workers in the run, counted by the
                    direct transport or read from Dask's transfer logs (graph) (model/hybrid;
                    empty where not measured)
predicted_volume    the neuron partition's volume: activation columns sent between parts,
                    summed over layers and row groups (km1)
predicted_bytes     the bytes forecast, before the run, from a sample of its inputs
                    (model/hybrid in a study; empty where not forecast)
partition_s         seconds taken to compute the neuron partition
wall_s              the run's inference seconds seen by the caller
edges_per_s         ``inputs * edges / wall_s``
imbalance           max/mean of ``compute_s`` over the run's blocks (1 = perfect)
survivor_imbalance  max/mean of ``survivors`` over the run's blocks
work_imbalance      max/mean of ``row_layers`` over the run's blocks
merge_blocks        data parallelism: ``merged`` (a worker's blocks alone through their early
                    layers, then their survivors in shared tiles; block seconds then split
                    a shared tile's time by rows) or ``alone`` (every block alone, one task
                    each); else empty
placement           data parallelism: ``static`` (block b pinned to worker b mod P) or
                    ``dynamic`` (blocks handed to workers as they free up); else empty
weights             a store's weights: ``resident`` (every worker holds the weights; a part
                    its slice) or ``streamed`` (read from the store layer by layer, all the
                    worker's rows through a layer before the next; a part its slice),
                    ``resident+streamed`` when parts differ; else empty
check               ``PASS``/``FAIL``: every activation within float32 rounding of the
                    bounded float64 reference (:mod:`sdnn_dask.core.check`) and, with
                    ``check_against=truth``, the categories equal to the truth; for a
                    problem with ``check_rows``, on a sample of rows only (and, where
                    identical rows were computed once, the kernel without it agreeing)
check_against       ``truth`` | ``reference`` | ``sample`` (the float64 reference of the
                    run's survivors and a sample of its other rows: ``check_rows``)
check_survivors,    a sampled check (``check_rows``): the run's survivors, all checked,
check_others,       the other rows drawn at random and checked, and the seed of that
check_seed          draw (fresh for each run); empty for a check of every row (and in
                    records made before sampled checks said so)
max_abs_diff        largest difference of any activation from the float64 reference
versions            ``sdnn_dask, dask, distributed, numpy, scipy, numba, python`` versions
==================  =========================================================================

Layer records (``layers.csv``): ``study, run_id, block, layer, mode, rows_in, rows_out,
nnz_out, seconds, distinct_out`` (the live rows computed, identical rows once:
``rows_out`` where nothing was merged; empty where not counted), and for model/hybrid runs
what the part received in the layer: ``columns_in`` (predicted columns from other parts),
``bytes_in`` (measured: by the direct transport, or by Dask for the graph one),
``predicted_bytes_in`` (forecast before the run, where a study asked for it),
``transfers_in``, ``nnz_in`` and ``rows_received``; with the direct transport also where
the part's time went besides ``seconds`` (its step): ``wait_s`` (waiting for pieces),
``send_s`` (cutting, serialising and queueing its pieces), ``serialise_s`` (part of
``send_s``), ``deserialise_s`` and ``transit_s`` (the slowest remote piece's time from
queued on its sender to filed here).

:data:`RUN_DTYPES` and :data:`LAYER_DTYPES` give every column's type: records written by
:func:`run_records`, read back from CSV or parquet, have exactly these columns and types.

Two ways to keep them: ``compare`` appends to ``records.csv`` and ``layers.csv`` (the new
table is written beside the old one and renamed over it, so an interrupted write leaves the
old file intact); a study (:mod:`sdnn_dask.study`) writes each run as it finishes into a
parquet dataset, ``runs/<key>.parquet`` and ``layers/<key>.parquet``, one file per run,
never rewriting an earlier one (:func:`write_run`), and exports the CSV files at the end.
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

from .core.kernels import KernelSettings
from .core.result import RunResult
from .files import atomic_path
from .partition import imbalance

_TEXT, _INT, _FLOAT = "string", "Int64", "float64"

#: Every column of the run records and its pandas dtype (the one definition of the schema).
RUN_DTYPES: dict[str, str] = {
    "study": _TEXT, "run_id": _TEXT, "spec": _TEXT, "repeat": _INT, "time": _TEXT,
    "host": _TEXT, "source": _TEXT, "strategy": _TEXT, "partition": _TEXT,
    "row_partition": _TEXT, "network": _TEXT, "neurons": _INT, "layers": _INT,
    "edges": _INT, "inputs": _INT, "workers": _INT, "blocks": _INT, "parts": _INT,
    "row_groups": _INT, "transport": _TEXT, "seed": _INT, "nbuckets": _INT,
    "epsilon": _FLOAT, "objective": _TEXT, "dense_threshold": _FLOAT, "chunk_bytes": _INT,
    "chunk_min_rows": _INT,
    "dedup": _TEXT, "classes": _TEXT, "join": _TEXT, "passes": _INT, "joined_at": _INT,
    "block": _INT,
    "worker": _TEXT, "rows": _INT, "survivors": _INT, "row_layers": _INT, "compute_s": _FLOAT,
    "weight_bytes": _FLOAT, "store_bytes_read": _FLOAT, "peak_rss_bytes": _FLOAT,
    "peak_since": _TEXT, "bytes_in": _FLOAT, "predicted_bytes_in": _FLOAT, "wall_s": _FLOAT,
    "edges_per_s": _FLOAT, "imbalance": _FLOAT,
    "survivor_imbalance": _FLOAT, "work_imbalance": _FLOAT, "placement": _TEXT,
    "merge_blocks": _TEXT, "weights": _TEXT,
    "bytes_moved": _FLOAT, "predicted_volume": _FLOAT, "predicted_bytes": _FLOAT,
    "partition_s": _FLOAT, "check": _TEXT, "check_against": _TEXT,
    "check_survivors": _INT, "check_others": _INT, "check_seed": _INT,
    "max_abs_diff": _FLOAT, "versions": _TEXT,
}
#: Every column of the layer records and its pandas dtype.
LAYER_DTYPES: dict[str, str] = {
    "study": _TEXT, "run_id": _TEXT, "block": _INT, "layer": _INT, "mode": _TEXT,
    "rows_in": _INT, "rows_out": _INT, "nnz_out": _INT, "seconds": _FLOAT,
    "distinct_out": _INT, "columns_in": _FLOAT, "bytes_in": _FLOAT, "transfers_in": _FLOAT,
    "nnz_in": _FLOAT, "predicted_bytes_in": _FLOAT,
    "rows_received": _FLOAT, "wait_s": _FLOAT, "send_s": _FLOAT, "serialise_s": _FLOAT,
    "deserialise_s": _FLOAT, "transit_s": _FLOAT,
}
RUN_COLUMNS = list(RUN_DTYPES)
LAYER_COLUMNS = list(LAYER_DTYPES)
#: Run-level columns: the same on every block row of a run.
BLOCK_LEVEL = ("block", "worker", "rows", "survivors", "row_layers", "compute_s",
               "weight_bytes", "store_bytes_read", "peak_rss_bytes", "peak_since", "bytes_in",
               "predicted_bytes_in")
RUN_LEVEL = [c for c in RUN_COLUMNS if c not in BLOCK_LEVEL]
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
    spec: str = "",
    repeat: int = 0,
    source: str = "",
    kernel: KernelSettings | None = None,
    sample: tuple[int, int, int] | None = None,
) -> pd.DataFrame:
    """The per-block rows of one run: :data:`RUN_COLUMNS`, typed as :data:`RUN_DTYPES`.

    Parameters
    ----------
    result
        The run.
    study
        The study it belongs to.
    check, check_against, max_abs_diff
        Its verdict (:func:`sdnn_dask.study.verify`).
    spec, repeat
        Its configuration's key and which repeat it is.
    source
        Where the problem came from.
    kernel
        The kernel settings its tasks used (default: this process's).
    sample
        Of a sampled check (``check_rows``): the survivors it checked, the other rows it
        drew and the seed of the draw (``check_survivors, check_others, check_seed``).
    """
    blocks = result.blocks
    frame = blocks[["block", "worker", "rows", "survivors", "compute_s"]].copy()
    for column in ("weight_bytes", "store_bytes_read", "peak_rss_bytes", "peak_since"):
        frame[column] = blocks[column] if column in blocks else np.nan
    for column in ("bytes_in", "predicted_bytes_in"):  # a part's, over the layers
        frame[column] = (frame["block"].map(result.layers.groupby("block")[column].sum())
                         if column in result.layers else np.nan)
    # the work a block actually did: its live rows, summed over the layers
    if "rows_in" in result.layers and result.layers["rows_in"].notna().any():
        done = result.layers.groupby("block")["rows_in"].sum()
        frame["row_layers"] = frame["block"].map(done).fillna(0).astype("int64")
    else:
        frame["row_layers"] = None
    params = result.params
    kernel = kernel or KernelSettings.resolve()
    seed = params.get("seed", params.get("row_seed"))
    run_level = {
        "study": study,
        "run_id": result.run_id,
        "spec": spec,
        "repeat": repeat,
        "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "host": socket.gethostname(),
        "source": source,
        "strategy": result.strategy,
        "partition": result.partition,
        "row_partition": params.get("row_partition", ""),
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
        "seed": seed,
        "nbuckets": params.get("nbuckets"),
        "epsilon": params.get("epsilon"),
        "objective": params.get("objective", ""),
        # the reference recurrence has no kernel settings
        "dense_threshold": None if result.strategy == "reference" else kernel.dense_threshold,
        "chunk_bytes": None if result.strategy == "reference" else kernel.chunk_bytes,
        "chunk_min_rows": None if result.strategy == "reference" else kernel.min_chunk_rows,
        "dedup": {True: "on", False: "off"}.get(params.get("dedup"), ""),
        "classes": {True: "on", False: "off"}.get(params.get("classes"), ""),
        "join": {True: "on", False: "off"}.get(params.get("join"), ""),
        "passes": params.get("passes"),
        "joined_at": params.get("joined_at"),
        "wall_s": result.wall_seconds,
        "edges_per_s": result.edges_per_second,
        "imbalance": imbalance(blocks["compute_s"]),
        "survivor_imbalance": imbalance(blocks["survivors"]),
        "work_imbalance": imbalance(frame["row_layers"]) if frame["row_layers"].notna().all()
        else None,
        "placement": params.get("placement", ""),
        "merge_blocks": params.get("merge_blocks", ""),
        "weights": params.get("weights", ""),
        "bytes_moved": _or_nan(result.bytes_moved),
        "predicted_volume": _or_nan(result.predicted_volume),
        "predicted_bytes": _or_nan(result.predicted_bytes),
        "partition_s": _or_nan(result.partition_seconds),
        "check": check,
        "check_against": check_against,
        "check_survivors": None if sample is None else sample[0],
        "check_others": None if sample is None else sample[1],
        "check_seed": None if sample is None else sample[2],
        "max_abs_diff": np.nan if max_abs_diff is None else max_abs_diff,
        "versions": versions(),
    }
    for column, value in run_level.items():
        frame[column] = value
    return typed(frame, RUN_DTYPES)


def typed(frame: pd.DataFrame, dtypes: dict[str, str]) -> pd.DataFrame:
    """``frame`` with exactly the columns of ``dtypes``, in order, each of its type.

    A column ``frame`` lacks (records from an older version) is added, empty. Text is
    never missing (``""``: does not apply); a missing number is ``<NA>`` (integers) or
    NaN (floats).
    """
    out = {}
    for column, dtype in dtypes.items():
        values = frame[column] if column in frame else pd.Series(pd.NA, index=frame.index)
        if dtype == _TEXT:
            values = values.astype(object).where(values.notna(), "")
            out[column] = pd.array(values.astype(str), dtype="string")
        elif dtype == _INT:
            numbers = pd.to_numeric(values.astype(object).where(values.notna(), None)
                                    .replace("", None), errors="raise")
            out[column] = pd.array(numbers, dtype="Float64").astype("Int64")
        else:
            out[column] = pd.to_numeric(values.astype(object).where(values.notna(), None)
                                        .replace("", None)).astype("float64")
    return pd.DataFrame(out, index=frame.index)


def layer_records(result: RunResult, *, study: str) -> pd.DataFrame:
    """The per-(block, layer) rows of one run, in :data:`LAYER_COLUMNS` order."""
    frame = result.layers.copy()
    frame["study"] = study
    frame["run_id"] = result.run_id
    return typed(frame, LAYER_DTYPES)


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


#: The parquet dataset of a study: one file per run in each.
RUNS_DIR, LAYERS_DIR = "runs", "layers"


def _need_parquet() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError as error:  # pragma: no cover - pyarrow is a dependency
        raise ImportError("a study's records need pyarrow: pip install pyarrow") from error


def write_run(folder: str | os.PathLike, key: str, runs: pd.DataFrame,
              layers: pd.DataFrame) -> Path:
    """Write one run's records into ``folder``'s parquet dataset, atomically.

    ``layers/<key>.parquet`` is written first, then ``runs/<key>.parquet``: each through a
    temporary file renamed into place, so a run is recorded (its ``runs`` file exists) only
    once both are whole. Earlier runs' files are never touched.

    Returns
    -------
    Path
        The run's ``runs`` file.
    """
    _need_parquet()
    folder = Path(folder)
    paths = []
    for sub, frame, dtypes in ((LAYERS_DIR, layers, LAYER_DTYPES), (RUNS_DIR, runs, RUN_DTYPES)):
        path = folder / sub / f"{key}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            typed(frame, dtypes).to_parquet(tmp, index=False)
        paths.append(path)
    return paths[-1]


def recorded_keys(folder: str | os.PathLike) -> set[str]:
    """Keys of the runs already recorded in ``folder``'s dataset (for resuming)."""
    runs = Path(folder) / RUNS_DIR
    return {p.stem for p in runs.glob("*.parquet")} if runs.is_dir() else set()


def read_records(folder: str | os.PathLike, which: str = "runs") -> pd.DataFrame:
    """Read the run (``which="runs"``) or layer (``"layers"``) records of a results folder.

    A study's parquet dataset (``runs/``, ``layers/``) if the folder has one, else
    ``records.csv`` / ``layers.csv``; either way typed as :data:`RUN_DTYPES` /
    :data:`LAYER_DTYPES`, in the order the runs were recorded.
    """
    dtypes = {"runs": RUN_DTYPES, "layers": LAYER_DTYPES}[which]
    folder = Path(folder)
    dataset = folder / {"runs": RUNS_DIR, "layers": LAYERS_DIR}[which]
    files = sorted(dataset.glob("*.parquet")) if dataset.is_dir() else []
    if files:
        _need_parquet()
        frames = [pd.read_parquet(f) for f in files]
        frame = pd.concat(frames, ignore_index=True)
        if which == "runs":  # files are named by key: put the runs back in time order
            frame = frame.sort_values("time", kind="stable", ignore_index=True)
        return typed(frame, dtypes)
    path = folder / {"runs": RECORDS_FILE, "layers": LAYERS_FILE}[which]
    if not path.exists():
        raise FileNotFoundError(f"{path}: no records yet (run 'sdnn-dask compare' or "
                                "'sdnn-dask study' first)")
    return typed(pd.read_csv(path, dtype=str, keep_default_na=False), dtypes)


def export_csv(folder: str | os.PathLike) -> list[Path]:
    """Write a study dataset's records as ``records.csv`` and ``layers.csv`` (atomically)."""
    folder = Path(folder)
    written = []
    for which, name in (("runs", RECORDS_FILE), ("layers", LAYERS_FILE)):
        with atomic_path(folder / name) as tmp:
            read_records(folder, which).to_csv(tmp, index=False)
        written.append(folder / name)
    return written


def records_frame(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-run tables (an empty list gives an empty table)."""
    frames = [f for f in frames if not f.empty]
    if not frames:
        return typed(pd.DataFrame(columns=RUN_COLUMNS), RUN_DTYPES)
    return pd.concat(frames, ignore_index=True)
