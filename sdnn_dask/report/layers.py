"""Per-layer and per-block tables: bytes moved, survivors and time per layer, time per block.

Each looks at the latest study (:func:`sdnn_dask.report.tables.latest_study`) and keeps one
row per configuration and layer (or block), sorted as the comparison is; they feed the plots
of :mod:`sdnn_dask.report.figures`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..records import LAYER_DTYPES, typed
from .tables import (
    PARALLEL,
    PARTITION_ORDER,
    SERIAL,
    STRATEGY_ORDER,
    TRANSPORT_ORDER,
    count,
    latest_runs,
    latest_study,
    named_problems,
    problems,
    rank,
)

#: What identifies a model/hybrid configuration's per-layer series (with ``partition``).
SERIES = ["network", "inputs", "strategy", "row_partition", "transport", "workers", "parts",
          "row_groups", "dedup"]
#: What identifies a serial kernel or data-parallel configuration in :func:`distinct_rows`.
DISTINCT_KEYS = ["network", "inputs", "strategy", "partition", "workers", "blocks",
                 "placement", "merge_blocks", "dedup"]


def _layer_frame(layers: pd.DataFrame) -> pd.DataFrame:
    return typed(layers, LAYER_DTYPES)


def communication(records: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Bytes moved per layer by the model and hybrid runs of the latest study.

    Parameters
    ----------
    records, layers
        Run records (``records.csv``) and layer records (``layers.csv``).

    Returns
    -------
    pandas.DataFrame
        One row per configuration (:data:`SERIES` and ``partition``) and layer:
        ``mb_moved``, the median over repeats of the MB the run's parts received in that
        layer (counted by the direct transport, or from Dask's transfer logs for the graph
        one), and ``columns_in``, the predicted columns received (km1). Empty without such
        runs.
    """
    table = latest_runs(records)
    model = table[table["strategy"].isin(["model", "hybrid"])]
    keys = [*SERIES, "partition"]
    columns = ["strategy", "partition", "layer", "mb_moved", "columns_in",
               *[k for k in keys if k not in ("strategy", "partition")]]
    layers = _layer_frame(layers)
    mine = layers[layers["run_id"].isin(model["run_id"])]
    if model.empty or mine["bytes_in"].isna().all():
        return pd.DataFrame(columns=columns)
    per_run = (mine.groupby(["run_id", "layer"], as_index=False)[["bytes_in", "columns_in"]]
               .sum(min_count=1)
               .merge(model[["run_id", *keys]], on="run_id"))
    out = (per_run.groupby([*keys, "layer"], sort=False, dropna=False)
           .agg(mb_moved=("bytes_in", "median"), columns_in=("columns_in", "median"))
           .reset_index())
    out["mb_moved"] /= 1e6
    out = out[columns]
    return _sort_series(out)


def _sort_series(out: pd.DataFrame, last: str = "layer") -> pd.DataFrame:
    """``out`` sorted by configuration (as :func:`sort_configurations`), then ``last``."""
    keys = pd.DataFrame({
        "n": out["network"].astype(str), "i": out["inputs"],
        "s": rank(out["strategy"], STRATEGY_ORDER), "t": rank(out["transport"],
                                                                TRANSPORT_ORDER),
        "w": out["workers"], "r": out["row_groups"],
        "p": rank(out["partition"], PARTITION_ORDER), "l": out[last],
    }, index=out.index)
    order = keys.sort_values(list(keys.columns), kind="stable").index
    return out.loc[order].reset_index(drop=True)


def communication_series(comm: pd.DataFrame, *, rtol: float = 1e-9) -> pd.DataFrame:
    """:func:`communication` with partitions that moved the same bytes in every layer
    collapsed into one series.

    Within one configuration (:data:`SERIES`), partitions whose ``mb_moved`` agree layer by
    layer to ``rtol`` (and that cover the same layers) become one series, labelled by their
    partitions joined by `` = `` (e.g. ``block = hash = random``); the others keep their
    own. Columns: :data:`SERIES`, ``series`` (the label), ``partitions`` (how many it
    stands for), ``layer``, ``mb_moved``.
    """
    columns = [*SERIES, "series", "partitions", "layer", "mb_moved"]
    if comm.empty:
        return pd.DataFrame(columns=columns)
    out = []
    for _, config in comm.groupby(SERIES, sort=False, dropna=False):
        groups: list[tuple[list[str], pd.DataFrame]] = []
        for partition, rows in config.groupby("partition", sort=False):
            rows = rows.sort_values("layer")
            for names, first in groups:
                same = (len(first) == len(rows)
                        and (first["layer"].to_numpy() == rows["layer"].to_numpy()).all()
                        and np.allclose(first["mb_moved"].to_numpy(float),
                                        rows["mb_moved"].to_numpy(float), rtol=rtol, atol=0,
                                        equal_nan=True))
                if same:
                    names.append(str(partition))
                    break
            else:
                groups.append(([str(partition)], rows))
        for names, rows in groups:
            rows = rows.copy()
            rows["series"] = " = ".join(names)
            rows["partitions"] = len(names)
            out.append(rows)
    return pd.concat(out, ignore_index=True)[columns]


def layer_profile(records: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Surviving rows and nonzeros after each layer, per problem of the latest study.

    Taken from the serial kernel's run (else the reference's, else a data-parallel run's,
    summed over its row blocks: a row lives in one block). Model and hybrid runs are not
    used (a row is counted in every part it is nonzero in).

    Returns
    -------
    pandas.DataFrame
        ``network, inputs, source, layer, rows_out, nnz_out`` (``source``: the strategy
        and partition the figures come from); the first run of that configuration.
    """
    table = latest_runs(records)
    layers = _layer_frame(layers)
    columns = ["network", "inputs", "source", "layer", "rows_out", "nnz_out"]
    out = []
    for _, rows in problems(table):
        ranked = rows.assign(_r=rank(rows["strategy"], ("kernel", "reference", "data")))
        ranked = ranked[ranked["_r"] < 3].sort_values("_r", kind="stable")
        for _, run in ranked.iterrows():
            mine = layers[layers["run_id"] == run["run_id"]]
            if mine.empty or mine["rows_out"].isna().all():
                continue
            per = mine.groupby("layer", as_index=False)[["rows_out", "nnz_out"]].sum()
            per.insert(0, "source", str(run["strategy"]) if run["strategy"] in SERIAL
                       else f"{run['strategy']} {run['partition']}")
            per.insert(0, "inputs", int(run["inputs"]))
            per.insert(0, "network", str(run["network"]))
            out.append(per)
            break
    if not out:
        return pd.DataFrame(columns=columns)
    return pd.concat(out, ignore_index=True)[columns]


def distinct_rows(records: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Live rows against the distinct rows computed, after each layer, per serial kernel
    and data-parallel configuration of the latest study.

    A run's ``rows_out`` (every live row) and ``distinct_out`` (the rows computed once
    identical rows are merged: ``rows_out`` where nothing was) are summed over its row
    blocks (a row lives in one block), then the median over repeats is taken. Model and
    hybrid runs are left out (a part counts a row in every part it is nonzero in), and so
    are runs recorded without ``distinct_out`` (before it was counted).

    Returns
    -------
    pandas.DataFrame
        :data:`DISTINCT_KEYS`, ``series`` (the configuration in words, e.g. ``data hash,
        2 w, dedup off``), ``layer, rows_out, distinct_out``; sorted serial first, then
        by partition, workers and blocks, ``on`` before ``off``. Empty without such runs.
    """
    columns = [*DISTINCT_KEYS, "series", "layer", "rows_out", "distinct_out"]
    table = latest_runs(records)
    runs = table[table["strategy"].astype(str).isin(["kernel", "data"])]
    layers = _layer_frame(layers)
    mine = layers[layers["run_id"].isin(runs["run_id"])]
    counted = mine.groupby("run_id")["distinct_out"].agg(lambda d: bool(d.notna().all()))
    mine = mine[mine["run_id"].map(counted).astype(bool)] if len(mine) else mine
    if mine.empty:
        return pd.DataFrame(columns=columns)
    per_run = (mine.groupby(["run_id", "layer"], as_index=False)[["rows_out", "distinct_out"]]
               .sum().merge(runs[["run_id", *DISTINCT_KEYS]], on="run_id"))
    out = (per_run.groupby([*DISTINCT_KEYS, "layer"], sort=False, dropna=False)
           [["rows_out", "distinct_out"]].median().reset_index())
    keys = pd.DataFrame({
        "n": out["network"].astype(str), "i": out["inputs"],
        "s": rank(out["strategy"], STRATEGY_ORDER), "p": rank(out["partition"],
                                                              PARTITION_ORDER),
        "w": out["workers"], "b": out["blocks"], "pl": out["placement"].astype(str),
        "m": out["merge_blocks"].astype(str), "d": rank(out["dedup"], ("on", "off", "")),
        "l": out["layer"]}, index=out.index)
    out = out.loc[keys.sort_values(list(keys.columns), kind="stable").index]
    out["series"] = [_distinct_label(row) for _, row in out.iterrows()]
    return out.reset_index(drop=True)[columns]


def _distinct_label(row: pd.Series) -> str:
    """``kernel, dedup on`` or ``data hash, 2 w, 8 blocks, dynamic, dedup off``."""
    words = ["kernel"]
    if str(row["strategy"]) == "data":
        words = [f"data {row['partition']}", f"{count(row['workers'])} w"]
        if count(row["blocks"]) != count(row["workers"]):
            words.append(f"{count(row['blocks'])} blocks")
        if str(row["placement"]) == "dynamic":
            words.append("dynamic")
        if str(row["merge_blocks"]) == "alone":
            words.append("alone")
    if str(row["dedup"]):
        words.append(f"dedup {row['dedup']}")
    return ", ".join(words)


#: The per-layer time components of a direct-transport part (layer records' columns).
TIME_PARTS = {"seconds": "compute", "wait_s": "waiting for pieces",
              "send_s": "sending (cut, serialise, queue)", "deserialise_s": "deserialising"}


def layer_times(records: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Where a model/hybrid part's time went in each layer (direct transport only).

    Per configuration (:data:`SERIES` and ``partition``) and layer: the mean over the run's
    parts of each :data:`TIME_PARTS` column, in seconds, then the median over repeats.
    ``send_s`` includes serialising. Empty without direct-transport model/hybrid runs.
    """
    table = latest_runs(records)
    model = table[table["strategy"].isin(["model", "hybrid"])
                  & (table["transport"].astype(str) == "direct")]
    keys = [*SERIES, "partition"]
    columns = [*keys, "layer", *TIME_PARTS]
    layers = _layer_frame(layers)
    mine = layers[layers["run_id"].isin(model["run_id"])]
    if mine.empty or mine["wait_s"].isna().all():
        return pd.DataFrame(columns=columns)
    per_run = (mine.groupby(["run_id", "layer"], as_index=False)[list(TIME_PARTS)].mean()
               .merge(model[["run_id", *keys]], on="run_id"))
    out = (per_run.groupby([*keys, "layer"], sort=False, dropna=False)[list(TIME_PARTS)]
           .median().reset_index())
    return _sort_series(out)[columns]


#: Runs with more blocks than this have no bars in the per-block plot.
MAX_BARS = 16


def block_times(records: pd.DataFrame) -> pd.DataFrame:
    """Compute seconds of every block (data: row block; model/hybrid: part of a row group)
    of the parallel runs of the latest study, median over repeats.

    Returns
    -------
    pandas.DataFrame
        :data:`SERIES`, ``partition, block, compute_s, imbalance`` (the configuration's
        median imbalance); runs of one block are left out (nothing to balance).
    """
    records = named_problems(records)
    study = latest_study(records)
    # many blocks: the imbalance-against-blocks plot shows them instead
    mine = records[(records["study"].astype(str) == study)
                   & records["strategy"].isin(list(PARALLEL)) & (records["blocks"] > 1)
                   & (records["blocks"] <= MAX_BARS)]
    keys = [*SERIES, "blocks", "placement", "partition"]
    columns = [*keys, "block", "compute_s", "imbalance"]
    if mine.empty:
        return pd.DataFrame(columns=columns)
    out = (mine.groupby([*keys, "block"], sort=False, dropna=False)
           .agg(compute_s=("compute_s", "median"), imbalance=("imbalance", "median"))
           .reset_index())
    return _sort_series(out, last="block")[columns]
