"""What a strategy costs each worker in memory and store reads, from the run records.

Model parallelism's reason to exist at the large networks: a data-parallel worker holds
(or reads) the whole network, a model-parallel part only its slice, and pays instead in
activations exchanged every layer. :func:`memory_table` puts the two side by side per
configuration, for every run whose records have the workers' peak memory
(``peak_rss_bytes``): the largest worker's peak beside ``bytes_moved``, then, for runs on
a network store, the weights each worker held (``weight_bytes``) and read
(``store_bytes_read``), the bytes the most receiving worker took in, and the forecast of
both made before the run; :func:`memory_headline` says in a sentence when model
parallelism wins and when it loses.
"""

from __future__ import annotations

import pandas as pd

from .tables import CONFIG, ONE_REPEAT, latest_runs, range_text, sort_configurations, verdict

#: The table's columns after the configuration's, in order.
MEMORY_COLUMNS = ["strategy", "partition", "row_partition", "transport", "weights",
                  "workers", "parts", "row_groups", "seconds", "peak_gb", "gb_moved",
                  "weight_gb", "read_gb", "read_share", "gb_predicted", "gb_worker_in",
                  "gb_worker_forecast"]

#: What the table's columns mean.
MEMORY_NOTES = {
    "peak_gb": "the largest worker's peak resident memory (GB) during the run (reset "
               "just before it; the serial kernel: its process's), median over repeats",
    "gb_moved": "GB of activations moved between workers (model and hybrid; data "
                "parallelism exchanges none between layers: 0)",
    "weight_gb": "GB of weights the most loaded worker held (data parallelism: its copy, "
                 "or the layers streaming prepares at once; a part: its slice)",
    "read_gb": "GB the most reading worker read from the store in the run (a part: its "
               "slice, cut beside the store); resident weights were read before the run",
    "read_share": "read_gb against what a data-parallel worker streaming the weights read "
                  "in the same problem (the whole store)",
    "gb_predicted": "the same, forecast before the run from a sample of the inputs "
                    "(sdnn_dask.parallel.exchange_forecast)",
    "gb_worker_in": "GB the most receiving worker took in (its parts' pieces)",
    "gb_worker_forecast": "the same worker's, forecast",
}


def memory_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per configuration of the latest study whose runs recorded their workers' peak
    memory: the largest worker's peak (median over repeats) beside the bytes moved and the
    seconds (median, with ``seconds_min``, ``seconds_max`` and ``repeats`` for
    :func:`memory_headline`), and, for runs on a store, the per-worker weight bytes and
    store bytes read. Empty when no run of it recorded a peak."""
    table = latest_runs(records)
    if table.empty or "peak_rss_bytes" not in records:
        return pd.DataFrame(columns=["network", "inputs", *MEMORY_COLUMNS])
    rows = records[records["run_id"].isin(table["run_id"]) & records["peak_rss_bytes"].notna()]
    if rows.empty:
        return pd.DataFrame(columns=["network", "inputs", *MEMORY_COLUMNS])
    # a worker's figures repeat on each of its blocks: one per (run, worker), then its max
    for column in ("bytes_in", "predicted_bytes_in"):  # records made before they existed
        if column not in rows:
            rows = rows.assign(**{column: float("nan")})
    per_worker = rows.groupby(["run_id", "worker"]).agg(
        weight=("weight_bytes", "max"), peak=("peak_rss_bytes", "max"),
        read=("store_bytes_read", "max"), into=("bytes_in", lambda v: v.sum(min_count=1)),
        forecast=("predicted_bytes_in", lambda v: v.sum(min_count=1))).reset_index()
    # the most receiving worker, and the forecast for that same worker
    top = per_worker.sort_values("into", ascending=False).drop_duplicates("run_id")
    per_run = per_worker.groupby("run_id")[["weight", "peak", "read"]].max().join(
        top.set_index("run_id")[["into", "forecast"]])
    runs = table.set_index("run_id").join(per_run, how="inner").reset_index()
    grouped = runs.groupby(CONFIG, sort=False, dropna=False)
    out = grouped.agg(seconds=("wall_s", "median"), seconds_min=("wall_s", "min"),
                      seconds_max=("wall_s", "max"), repeats=("run_id", "count"),
                      weight_gb=("weight", lambda v: v.median() / 1e9),
                      peak_gb=("peak", lambda v: v.median() / 1e9),
                      read_gb=("read", lambda v: v.median() / 1e9),
                      gb_moved=("bytes_moved", lambda v: v.median() / 1e9),
                      gb_predicted=("predicted_bytes", lambda v: v.median() / 1e9),
                      gb_worker_in=("into", lambda v: v.median() / 1e9),
                      gb_worker_forecast=("forecast", lambda v: v.median() / 1e9),
                      ).reset_index()
    streamed = out[(out["strategy"].astype(str) == "data")
                   & (out["weights"].astype(str) == "streamed")]
    whole = streamed.groupby(["network", "inputs"])["read_gb"].max().rename("_whole")
    out = out.merge(whole.reset_index(), on=["network", "inputs"], how="left")
    out["read_share"] = out["read_gb"] / out["_whole"]
    data = out["strategy"].astype(str) == "data"
    for column in ("gb_predicted", "gb_worker_in", "gb_worker_forecast"):
        out[column] = out[column].where(~data)
    # data parallelism exchanges no activations: nothing moved, where nothing was recorded
    out["gb_moved"] = out["gb_moved"].mask(data & out["gb_moved"].isna(), 0.0)
    return sort_configurations(out[["network", "inputs", *MEMORY_COLUMNS, "seconds_min",
                                    "seconds_max", "repeats"]])


def memory_headline(table: pd.DataFrame) -> str:
    """One problem's :func:`memory_table` in a sentence: the model-parallel configuration
    that holds least per worker against data parallelism's, and what it pays in exchange
    and seconds."""
    strategy = table["strategy"].astype(str)
    data = table[strategy == "data"]
    model = table[strategy.isin(["model", "hybrid"])]
    if data.empty or model.empty:
        return ""
    d = data.loc[data["seconds"].idxmin()]
    m = model.loc[model["peak_gb"].idxmin()]
    label = f"{m['strategy']} {m['partition']} k = {int(m['parts'])}"
    if int(m["row_groups"]) > 1:
        label += f" x {int(m['row_groups'])} row groups"
    ratio = d["peak_gb"] / max(m["peak_gb"], 1e-12)
    than = (f"{ratio:.1f}x less than" if ratio >= 1.1 else
            f"{1 / ratio:.1f}x more than" if ratio <= 1 / 1.1 else "about as much as")

    def held(row: pd.Series, sep: str = "") -> str:  # blank off a store
        return f"{row['weights']}{sep}" if str(row["weights"]) not in ("", "<NA>") else ""

    mine = f" ({held(m)})" if held(m) else ""
    said = [f"{label}{mine} peaks at {m['peak_gb']:.2f} GB a worker, {than} "
            f"data parallelism ({held(d, ', ')}{d['peak_gb']:.2f} GB)"]
    if pd.notna(m["read_share"]):
        said.append(f"reads {m['read_share']:.2f} of the store a worker")
    said.append(f"and moves {m['gb_moved']:.2f} GB between workers, finishing in "
                f"{range_text(m)} against {range_text(d)} ({_pace(m, d)})")
    return ", ".join(said) + "."


def _pace(m: pd.Series, d: pd.Series) -> str:
    """Whether ``m`` finished faster or slower than ``d`` as far as their repeats show:
    only where their spreads do not overlap (one repeat shows nothing)."""
    pair = pd.DataFrame([m, d]).reset_index(drop=True)  # row 0: m
    if "repeats" not in pair:  # a table made before the spread was kept
        return ONE_REPEAT
    found = verdict(pair)
    if found.kind == "fastest":
        return "faster" if found.rows.index[0] == 0 else "slower"
    return "within noise" if found.kind == "noise" else ONE_REPEAT
