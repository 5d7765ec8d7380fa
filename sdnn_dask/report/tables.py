"""Comparison tables: small pure functions of the records.

``records -> runs -> comparison (normalised per network) -> markdown / plot``. Nothing
here runs inference; everything can be re-made from the records
(:func:`sdnn_dask.records.read_records`). The per-layer tables (:func:`communication`,
:func:`layer_profile`, :func:`layer_times`) and the per-block one (:func:`block_times`)
feed the plots of :mod:`sdnn_dask.report.figures`; :mod:`sdnn_dask.report.html` puts it all in
one page.

Every function looks at one study, the latest one (:func:`latest_study`), and keeps the
networks it holds apart: a configuration is :data:`CONFIG`, network and inputs included,
and every ratio compares configurations of the same network and inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..formatting import to_markdown
from ..records import LAYER_DTYPES, RUN_DTYPES, RUN_LEVEL, typed

#: What identifies a configuration: repeats of one configuration are pooled.
CONFIG = ["network", "inputs", "strategy", "partition", "row_partition", "transport",
          "workers", "blocks", "parts", "row_groups", "seed", "nbuckets", "epsilon",
          "dense_threshold", "chunk_bytes", "placement", "merge_blocks", "weights"]
#: What identifies a problem: the ratios of :func:`comparison` stay within one.
PROBLEM = ["network", "inputs"]
#: The order strategies and partitions are listed and drawn in.
STRATEGY_ORDER = ("reference", "kernel", "data", "model", "hybrid")
PARTITION_ORDER = ("none", "chunks", "block", "hash", "random", "hypergraph")
TRANSPORT_ORDER = ("", "direct", "graph")
SERIAL = ("reference", "kernel")
PARALLEL = ("data", "model", "hybrid")


def rank(values: pd.Series, order: Sequence[str]) -> pd.Series:
    """Position of each value in ``order`` (unknown values last, in their own order)."""
    known = {v: i for i, v in enumerate(order)}
    return values.astype(str).map(lambda v: known.get(v, len(order)))


def sort_configurations(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` sorted as a reader expects: per problem, serial first, then data, model,
    hybrid; within a strategy by workers, partition and transport (stable otherwise)."""
    if table.empty:
        return table
    keys = pd.DataFrame({
        "network": table["network"].astype(str), "inputs": table["inputs"],
        "s": rank(table["strategy"], STRATEGY_ORDER), "t": rank(table["transport"],
                                                                  TRANSPORT_ORDER),
        "w": table["workers"], "r": table["row_groups"] if "row_groups" in table else 1,
        "p": rank(table["partition"], PARTITION_ORDER),
    }, index=table.index)
    order = keys.sort_values(["network", "inputs", "s", "t", "w", "r", "p"],
                             kind="stable").index
    return table.loc[order].reset_index(drop=True)


def _named_problems(records: pd.DataFrame) -> pd.DataFrame:
    """Typed records in which two problems with one network and row count but different
    sources (e.g. generated rows in ``iid`` and ``official-like`` order) get different
    ``network`` labels, ``name [source]``, so every table and plot keeps them apart."""
    records = typed(records, RUN_DTYPES)
    sources = records.groupby(["network", "inputs"])["source"].transform("nunique")
    clash = sources > 1
    if clash.any():
        records = records.copy()
        records.loc[clash, "network"] = (records.loc[clash, "network"].astype(str) + " ["
                                         + records.loc[clash, "source"].astype(str) + "]")
    return records


def runs(records: pd.DataFrame) -> pd.DataFrame:
    """One row per run (the block rows collapsed), in the order runs were recorded."""
    records = _named_problems(records)
    table = records[RUN_LEVEL].drop_duplicates("run_id").reset_index(drop=True)
    per_block = records.groupby("run_id", sort=False)["compute_s"].agg(["sum", "max"])
    table["compute_s"] = table["run_id"].map(per_block["sum"])
    table["max_block_s"] = table["run_id"].map(per_block["max"])
    return table


def latest_study(records: pd.DataFrame) -> str:
    """The study of the records recorded last: the greatest ``time`` (ISO 8601, UTC), ties
    going to the study whose rows come last."""
    if records.empty:
        raise ValueError("no runs in the records")
    study = records["study"].astype(str).reset_index(drop=True)
    time = records["time"].astype(str).reset_index(drop=True)
    last = pd.DataFrame({"study": study, "time": time, "pos": range(len(study))})
    best = last.groupby("study", sort=False).agg(time=("time", "max"), pos=("pos", "max"))
    return str(best.sort_values(["time", "pos"]).index[-1])


def latest_runs(records: pd.DataFrame) -> pd.DataFrame:
    """:func:`runs` of the latest study only."""
    table = runs(records)
    if table.empty:
        raise ValueError("no runs in the records")
    return table[table["study"].astype(str) == latest_study(table)].reset_index(drop=True)


def _best_seconds(out: pd.DataFrame, mask: pd.Series, by: Sequence[str] = ()) -> pd.Series:
    """Per row of ``out``: the least ``seconds`` of the rows in ``mask`` with the same
    problem (and the same ``by`` columns); NaN where there is none."""
    keys = [*PROBLEM, *by]
    best = out[mask].groupby(keys, dropna=False)["seconds"].min().rename("_best")
    merged = out[keys].merge(best.reset_index(), on=keys, how="left")
    return pd.Series(merged["_best"].to_numpy(dtype=float), index=out.index)


def comparison(records: pd.DataFrame, baseline: str = "reference") -> pd.DataFrame:
    """Median over repeats of each configuration of the latest study, with speedups.

    Parameters
    ----------
    records
        Run records (``records.csv``); only the most recent study is compared
        (:func:`latest_study`). It may hold several networks (and input sizes): each ratio
        compares configurations of the same network and inputs.
    baseline
        Strategy whose fastest median time is the 1.0 of the ``speedup`` column. Every
        baseline (this one, the kernel's, data parallelism's) is taken from the
        configurations that passed the check only: a failed run's time is no yardstick.

    Returns
    -------
    pandas.DataFrame
        :data:`CONFIG`, then ``repeats, seconds, edges_per_s, speedup, vs_kernel, vs_data,
        imbalance, survivor_imbalance, mb_moved, predicted_volume, check, neurons, layers,
        edges``, sorted by :func:`sort_configurations`. ``seconds`` and ``edges_per_s``
        are medians over the repeats; ``mb_moved`` the median of the bytes moved between
        workers (model and hybrid runs), in MB; ``check`` is ``PASS`` only if every repeat
        passed.

        ``vs_data`` is the data-parallelism ratio: the median seconds of the fastest
        data-parallel configuration of the same network with the **same number of workers**,
        divided by this configuration's seconds (above 1: faster than data parallelism on
        those workers). Where the network has no data-parallel run at that worker count it
        is empty.
    """
    table = latest_runs(records)
    grouped = table.groupby(CONFIG, sort=False, dropna=False)
    out = grouped.agg(
        repeats=("run_id", "count"),
        seconds=("wall_s", "median"),
        edges_per_s=("edges_per_s", "median"),
        imbalance=("imbalance", "median"),
        survivor_imbalance=("survivor_imbalance", "median"),
        work_imbalance=("work_imbalance", "median"),
        max_block_s=("max_block_s", "median"),
        mb_moved=("bytes_moved", lambda b: b.median() / 1e6),
        predicted_volume=("predicted_volume", "first"),
        check=("check", lambda c: "PASS" if (c == "PASS").all() else "FAIL"),
        neurons=("neurons", "first"),
        layers=("layers", "first"),
        edges=("edges", "first"),
    ).reset_index()
    strategy = out["strategy"].astype(str)
    passed = out["check"] == "PASS"  # a run that failed its check is no baseline
    out["speedup"] = _best_seconds(out, passed & (strategy == baseline)) / out["seconds"]
    out["vs_kernel"] = _best_seconds(out, passed & (strategy == "kernel")) / out["seconds"]
    out["vs_data"] = _best_seconds(out, passed & (strategy == "data"), ["workers"]) \
        / out["seconds"]
    columns = [*CONFIG, "repeats", "seconds", "edges_per_s", "speedup", "vs_kernel",
               "vs_data", "imbalance", "survivor_imbalance", "work_imbalance", "max_block_s",
               "mb_moved", "predicted_volume", "check", "neurons", "layers", "edges"]
    return sort_configurations(out[columns])


def problems(table: pd.DataFrame) -> list[tuple[tuple[str, int], pd.DataFrame]]:
    """``table`` split by problem (network, inputs), in the order they first appear."""
    if table.empty:
        return []
    keys = list(dict.fromkeys(zip(table["network"].astype(str), table["inputs"].astype(int),
                                  strict=True)))
    return [(key, table[(table["network"].astype(str) == key[0])
                        & (table["inputs"].astype(int) == key[1])].reset_index(drop=True))
            for key in keys]


def count(value: object) -> str:
    """An integer count as text, ``?`` when it is missing (records of an older version)."""
    return "?" if value is None or pd.isna(value) else str(int(value))


def describe(row: Mapping) -> str:
    """A configuration in words, e.g. ``hash, 2 workers`` or ``block, k=2, direct, 2 workers``
    (the strategy itself is left to the caller, except for the serial ones)."""
    strategy = str(row["strategy"])
    if strategy in SERIAL:
        return f"serial {strategy}"
    workers = count(row["workers"])
    words = [str(row["partition"])]
    if strategy == "data":
        if count(row["blocks"]) != workers:
            words.append(f"{count(row['blocks'])} blocks")
    else:
        parts = count(row["parts"])
        if strategy == "hybrid":
            rows = str(row.get("row_partition", "") or "")
            words.append(f"{count(row['row_groups'])} row groups"
                         f"{f' ({rows})' if rows else ''} x {parts} parts")
        else:
            words.append(f"k={parts}")
        if str(row["transport"]):
            words.append(str(row["transport"]))
    words.append(f"{workers} worker{'s' if workers != '1' else ''}")
    return ", ".join(words)


_FAMILY = {"data": "data parallelism", "model": "model parallelism", "hybrid": "the hybrid",
           "reference": "the serial reference", "kernel": "the serial kernel"}


def _ratio(value: float) -> str:
    return f"{value:.2f}x"


def headline(cmp: pd.DataFrame) -> str:
    """The story of one problem's :func:`comparison` rows, in a few sentences.

    Which passing configuration is fastest (its rate, and how it compares with the serial
    kernel and with data parallelism on the same workers), then the best configuration of
    each other parallel strategy, with the MB it moved; configurations that failed the
    check are counted first and never called fastest.
    """
    if cmp.empty:
        return "No runs."
    sentences = []
    failed = cmp[cmp["check"] != "PASS"]
    if len(failed):
        names = "; ".join(f"{r['strategy']} ({describe(r)})" if r["strategy"] not in SERIAL
                          else describe(r) for _, r in failed.iterrows())
        sentences.append(f"{len(failed)} of {len(cmp)} configurations FAILED the check: "
                         f"{names}.")
    ok = cmp[cmp["check"] == "PASS"]
    if ok.empty:
        return " ".join(sentences)
    has_kernel = (cmp["strategy"] == "kernel").any()

    def versus(row: pd.Series) -> list[str]:
        bits = []
        if row["strategy"] != "kernel" and has_kernel and pd.notna(row["vs_kernel"]):
            bits.append(f"{_ratio(row['vs_kernel'])} the serial kernel")
        if row["strategy"] in ("model", "hybrid") and pd.notna(row["vs_data"]):
            bits.append(f"{_ratio(row['vs_data'])} data parallelism on "
                        f"{count(row['workers'])} workers")
        return bits

    def moved(row: pd.Series) -> str:
        if row["strategy"] not in ("model", "hybrid") or pd.isna(row["mb_moved"]):
            return ""
        return f", moving {row['mb_moved']:.1f} MB over {count(row['layers'])} layers"

    fastest = ok.loc[ok["seconds"].idxmin()]
    who = _FAMILY.get(str(fastest["strategy"]), str(fastest["strategy"]))
    label = "" if fastest["strategy"] in SERIAL else f" ({describe(fastest)})"
    bits = versus(fastest)
    sentences.append(f"{who[0].upper()}{who[1:]}{label} is fastest: "
                     f"{fastest['edges_per_s']:.3g} edges/s"
                     + (f", {' and '.join(bits)}" if bits else "") + moved(fastest) + ".")
    for strategy in PARALLEL:
        family = ok[ok["strategy"] == strategy]
        if family.empty or strategy == fastest["strategy"]:
            continue
        best = family.loc[family["seconds"].idxmin()]
        bits = versus(best)
        reach = (f" reaches {' and '.join(bits)}" if bits
                 else f" runs at {best['edges_per_s']:.3g} edges/s")
        sentences.append(f"{_FAMILY[strategy][0].upper()}{_FAMILY[strategy][1:]} at best "
                         f"({describe(best)}){reach}{moved(best)}.")
    if fastest["strategy"] in SERIAL and (ok["strategy"].isin(PARALLEL)).any():
        sentences.append("No parallel configuration beats the serial "
                         f"{fastest['strategy']} here.")
    return " ".join(sentences)


def failures(records: pd.DataFrame) -> pd.DataFrame:
    """The runs of the latest study whose check is not ``PASS`` (one row per run)."""
    table = latest_runs(records)
    return sort_configurations(table[table["check"] != "PASS"])


#: The comparison columns the reports show, in order.
SHOWN = ["strategy", "partition", "row_partition", "transport", "placement",
         "merge_blocks", "weights", "workers",
         "blocks", "parts", "dense_threshold", "chunk_bytes", "repeats", "seconds",
         "edges_per_s", "speedup", "vs_kernel", "vs_data", "imbalance", "survivor_imbalance",
         "mb_moved", "predicted_volume", "check"]

#: What each column of the comparison means (the reports' legend).
COLUMN_NOTES = {
    "seconds": "median inference wall time over the repeats (weights and input blocks "
               "already on the workers)",
    "edges_per_s": "inputs x edges / seconds",
    "speedup": "the serial reference recurrence's seconds / these seconds",
    "vs_kernel": "the serial compiled kernel's seconds / these seconds",
    "vs_data": "the seconds of the fastest data-parallel configuration with the same number "
               "of workers (same network and inputs) / these seconds; empty where there is "
               "no data-parallel run on that many workers",
    "imbalance": "max/mean of per-block compute seconds (a block: a row block of data "
                 "parallelism, a part of a row group for model parallelism and the hybrid)",
    "survivor_imbalance": "the same for rows that survive all layers (parts: rows nonzero "
                          "in their own columns)",
    "mb_moved": "MB of activation pieces moved between workers (model and hybrid; counted "
                "by the direct transport, or from Dask's transfer logs for the graph one)",
    "predicted_volume": "the neuron partition's km1: activation columns sent between parts, "
                        "summed over layers and row groups",
    "transport": "how parts exchanged pieces: direct (worker to worker) or graph (a Dask "
                 "task per part and layer)",
    "row_partition": "how the hybrid split its rows into row groups",
    "blocks": "row blocks (data), or parts x row groups (model, hybrid)",
    "parts": "neuron parts k",
    "dense_threshold": "the kernel's dense-step threshold for this run (shown when runs "
                       "differ in it; above 1: never dense)",
    "chunk_bytes": "the kernel's dense tile size for this run (shown when runs differ)",
    "placement": "data parallelism: static (block b pinned to worker b mod P) or dynamic "
                 "(blocks handed to workers as they free up); shown when runs differ",
    "merge_blocks": "data parallelism: merged (a worker's blocks share tiles after their "
                    "early layers) or alone (every block alone: its seconds are what it "
                    "takes on a worker of its own); shown when runs differ",
    "weights": "data parallelism: resident (every worker held the weights) or streamed "
               "(read from a network store layer by layer); shown when runs differ",
    "work_imbalance": "max/mean of the live row-layers (rows entering a layer, summed over "
                      "the layers: the work actually done) over the blocks",
}
#: Columns shown only when configurations differ in them (else they are the defaults).
SHOWN_WHEN_VARYING = ("dense_threshold", "chunk_bytes", "placement", "merge_blocks",
                      "weights")


def shown_columns(cmp: pd.DataFrame, columns: Sequence[str] = SHOWN) -> list[str]:
    """``columns`` without those that are empty in every row of ``cmp`` (e.g. ``transport``
    without model runs)."""
    keep = []
    for column in columns:
        values = cmp[column]
        if values.dtype == "string" or values.dtype == object:
            empty = (values.astype(str) == "").all()
        else:
            empty = values.isna().all()
        if column in SHOWN_WHEN_VARYING and values.nunique(dropna=True) <= 1:
            continue
        if not empty or column in ("strategy", "partition", "check"):
            keep.append(column)
    return keep


def _failure_lines(failed: pd.DataFrame) -> list[str]:
    lines = [f"**{len(failed)} run(s) FAILED the check:**", ""]
    for _, row in failed.iterrows():
        what = describe(row) if row["strategy"] in SERIAL else \
            f"{row['strategy']} ({describe(row)})"
        lines.append(f"- **FAIL** `{row['network']}`, {int(row['inputs']):,} inputs: {what}, "
                     f"run `{row['run_id']}` (largest difference {row['max_abs_diff']:.2g}, "
                     f"against {row['check_against'] or 'reference'})")
    return [*lines, ""]


def summary_markdown(records: pd.DataFrame, *, title: str = "sdnn_dask comparison",
                     images: Mapping[tuple[str, int], Sequence[tuple[str, str]]] | None = None,
                     projection: pd.DataFrame | None = None,
                     projection_image: str | None = None, plot_note: str | None = None) -> str:
    """The markdown report of the latest study: failures first, then per network its setup,
    headline (:func:`headline`), comparison table and plots, and how to read the columns.

    Parameters
    ----------
    records
        Run records.
    title
        The first heading.
    images
        Per problem ``(network, inputs)``: ``(caption, file name)`` of the plots to link.
    projection
        Projected against measured seconds (see :func:`projection_table`).
    projection_image
        File name of the projection's plot, to link.
    plot_note
        Why there are no plots (said under the setup), when there are none.
    """
    table = latest_runs(records)
    cmp = comparison(records)
    first = table.iloc[0]
    checked = "the truth categories" if (table["check_against"] == "truth").any() \
        else "the float64 reference's categories"
    lines = [f"# {title}", ""]
    failed = failures(records)
    if len(failed):
        lines += _failure_lines(failed)
    lines += [
        f"- study: `{first['study']}`, recorded {table['time'].min()} to {table['time'].max()}"
        f" on {', '.join(sorted(set(table['host'].astype(str)) - {''})) or 'an unknown host'}",
        f"- check: categories against {checked}; every run's activations within float32 "
        f"rounding of a float64 reference"
        + ("" if pd.isna(diff := table["max_abs_diff"].max())
           else f" (largest difference {diff:.2g})"),
        "",
    ]
    if plot_note:
        lines += [f"No plots: {plot_note}.", ""]
    for (network, inputs), rows in problems(cmp):
        top = rows.iloc[0]
        lines += [
            f"## `{network}`, {inputs:,} inputs",
            "",
            f"{int(top['neurons'])} neurons, {int(top['layers'])} layers, "
            f"{int(top['edges']):,} edges.",
            "",
            headline(rows),
            "",
            to_markdown(rows, shown_columns(rows)),
            "",
        ]
        for caption, name in (images or {}).get((network, inputs), ()):
            lines += [f"![{caption}]({name})", ""]
    if projection is not None:
        proj = projection_table(projection)
        lines += ["## Projected against measured", ""]
        if projection.attrs.get("rule"):
            lines += [f"The cost model (`sdnn_dask.projection`) is {projection.attrs['rule']}.",
                      ""]
        held = proj["held_out"]
        if held.any():
            error = proj.loc[held, "error_pct"].astype(float)
            lines += [f"{int((error.abs() <= 20).sum())} of {int(held.sum())} held-out "
                      f"configurations within 20% (median |error| {error.abs().median():.1f}%,"
                      f" worst {float(error.loc[error.abs().idxmax()]):+.1f}%).", ""]
        if projection_image:
            lines += [f"![projected against measured]({projection_image})", ""]
        lines += [to_markdown(proj.assign(error_pct=[f"{e:+.1f}%" for e in
                                                     proj["error_pct"].astype(float)])), ""]
    lines.append(" ".join(f"`{c}`: {note}." for c, note in COLUMN_NOTES.items()))
    return "\n".join(lines) + "\n"


#: Columns of a projection frame (:func:`projection_table`).
PROJECTION_COLUMNS = ["network", "strategy", "partition", "workers", "rows", "measured_s",
                      "projected_s", "error_pct", "held_out"]


def projection_table(projection: pd.DataFrame) -> pd.DataFrame:
    """A projection (columns :data:`PROJECTION_COLUMNS`), checked and sorted for display.

    ``error_pct`` is kept as given (it is the projection's to define); rows are sorted by
    network, strategy, workers and rows, held-out rows last within a network.

    Raises
    ------
    ValueError
        When a column is missing.
    """
    missing = [c for c in PROJECTION_COLUMNS if c not in projection]
    if missing:
        raise ValueError(f"projection lacks columns {missing}; it needs {PROJECTION_COLUMNS}")
    out = projection[PROJECTION_COLUMNS].copy()
    out["held_out"] = out["held_out"].astype(bool)
    keys = pd.DataFrame({"n": out["network"].astype(str), "h": out["held_out"],
                         "s": rank(out["strategy"], STRATEGY_ORDER),
                         "p": rank(out["partition"], PARTITION_ORDER),
                         "w": out["workers"], "r": out["rows"]}, index=out.index)
    order = keys.sort_values(["n", "h", "s", "p", "w", "r"], kind="stable").index
    return out.loc[order].reset_index(drop=True)


#: What identifies a model/hybrid configuration's per-layer series (with ``partition``).
SERIES = ["network", "inputs", "strategy", "row_partition", "transport", "workers", "parts",
          "row_groups"]


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
    records = _named_problems(records)
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
