"""What a strategy costs each worker in memory and store reads, from the run records.

Model parallelism's reason to exist at the large networks: a data-parallel worker holds
(or reads) the whole network, a model-parallel part only its slice, and pays instead in
activations exchanged every layer. :func:`memory_table` puts the three side by side per
configuration of a study run on a network store (the records' ``weight_bytes``,
``store_bytes_read`` and ``peak_rss_bytes``, per worker, beside ``bytes_moved``, the bytes
the most receiving worker took in, and the forecast of both made before the run), and
:func:`memory_headline` says in a sentence when model parallelism wins and when it loses.
"""

from __future__ import annotations

import pandas as pd

from .tables import CONFIG, latest_runs, sort_configurations

#: The table's columns after the configuration's, in order.
MEMORY_COLUMNS = ["strategy", "partition", "row_partition", "transport", "weights",
                  "workers", "parts", "row_groups", "seconds", "weight_gb", "peak_gb",
                  "read_gb", "read_share", "gb_moved", "gb_predicted", "gb_worker_in",
                  "gb_worker_forecast"]

#: What the table's columns mean.
MEMORY_NOTES = {
    "weight_gb": "GB of weights the most loaded worker held (data parallelism: its copy, "
                 "or the layers streaming prepares at once; a part: its slice)",
    "peak_gb": "the largest worker's peak resident memory (GB) during the run (reset "
               "just before it; the serial kernel: its process's)",
    "read_gb": "GB the most reading worker read from the store in the run (a part: its "
               "slice, cut beside the store); resident weights were read before the run",
    "read_share": "read_gb against what a data-parallel worker streaming the weights read "
                  "in the same problem (the whole store)",
    "gb_moved": "GB of activations moved between workers (model and hybrid)",
    "gb_predicted": "the same, forecast before the run from a sample of the inputs "
                    "(sdnn_dask.parallel.exchange_forecast)",
    "gb_worker_in": "GB the most receiving worker took in (its parts' pieces)",
    "gb_worker_forecast": "the same worker's, forecast",
}


def memory_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per configuration of the latest study that ran on a store: per-worker weight bytes,
    peak memory and store bytes read (the largest worker's, median over repeats), beside
    the bytes moved and the seconds. Empty when no run of it recorded them."""
    table = latest_runs(records)
    if table.empty or "store_bytes_read" not in records:
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
    out = grouped.agg(seconds=("wall_s", "median"),
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
    for column in ("gb_moved", "gb_predicted", "gb_worker_in", "gb_worker_forecast"):
        out[column] = out[column].where(out["strategy"].astype(str) != "data")
    return sort_configurations(out[["network", "inputs", *MEMORY_COLUMNS]])


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
    said = [f"{label} ({m['weights']}) peaks at {m['peak_gb']:.2f} GB a worker, {than} "
            f"data parallelism ({d['weights']}, {d['peak_gb']:.2f} GB)"]
    if pd.notna(m["read_share"]):
        said.append(f"reads {m['read_share']:.2f} of the store a worker")
    said.append(f"and moves {m['gb_moved']:.2f} GB between workers, finishing in "
                f"{m['seconds']:.1f} s against {d['seconds']:.1f} s "
                f"({'faster' if m['seconds'] < d['seconds'] else 'slower'})")
    return ", ".join(said) + "."
