"""The markdown summary: the report of the latest study as text, with its legend.

Failures first, then per problem its setup, headline, comparison table (the columns of
:data:`SHOWN` that say something, :func:`shown_columns`) and plots, then, when given,
projected against measured seconds (:func:`projection_table`), and how to read the columns
(:data:`COLUMN_NOTES`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from ..formatting import to_markdown
from .memory import MEMORY_COLUMNS, MEMORY_NOTES, memory_headline, memory_table
from .tables import (
    PARTITION_ORDER,
    SERIAL,
    SETTINGS,
    STRATEGY_ORDER,
    checked_text,
    comparison,
    describe,
    failures,
    headline,
    latest_runs,
    problems,
    rank,
    varying,
    with_spread,
)

#: The comparison columns the reports show, in order.
SHOWN = ["strategy", "partition", "row_partition", "transport", "placement",
         "merge_blocks", "weights", "workers", "blocks", "parts", "seed", "nbuckets",
         "epsilon", "objective", "dense_threshold", "chunk_bytes", "dedup", "repeats",
         "seconds", "edges_per_s", "speedup", "vs_kernel", "vs_data", "imbalance",
         "survivor_imbalance", "mb_moved", "mb_predicted", "predicted_volume", "check",
         "checked"]

#: What each column of the comparison means (the reports' legend).
COLUMN_NOTES = {
    "seconds": "median inference wall time over the repeats (weights and input blocks "
               "already on the workers), the fastest and slowest repeat in brackets "
               "(min-max) where there were several",
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
    "mb_predicted": "MB forecast before the run from a sample of its inputs (model and "
                    "hybrid in a study; sdnn_dask.parallel.exchange_forecast)",
    "objective": "what the hypergraph partition minimised: traffic (bytes a sample of the "
                 "inputs sends) or km1 (activation columns) (shown when runs differ)",
    "predicted_volume": "the neuron partition's km1: activation columns sent between parts, "
                        "summed over layers and row groups",
    "transport": "how parts exchanged pieces: direct (worker to worker) or graph (a Dask "
                 "task per part and layer)",
    "row_partition": "how the hybrid split its rows into row groups (shown when runs "
                     "differ)",
    "seed": "seed of the random partitions (shown when runs differ)",
    "nbuckets": "buckets of the hash partition (shown when runs differ)",
    "epsilon": "imbalance bound of the hypergraph partition (shown when runs differ)",
    "blocks": "row blocks (data), or parts x row groups (model, hybrid)",
    "parts": "neuron parts k",
    "dense_threshold": "the kernel's dense-step threshold for this run (shown when runs "
                       "differ in it; above 1: never dense)",
    "chunk_bytes": "the kernel's dense tile size for this run (shown when runs differ)",
    "dedup": "on: identical live rows computed once (sdnn.kernel.dedup), off: every row "
             "computed; shown when runs differ",
    "placement": "data parallelism: static (block b pinned to worker b mod P) or dynamic "
                 "(blocks handed to workers as they free up); shown when runs differ",
    "merge_blocks": "data parallelism: merged (a worker's blocks share tiles after their "
                    "early layers) or alone (every block alone: its seconds are what it "
                    "takes on a worker of its own); shown when runs differ",
    "weights": "data parallelism: resident (every worker held the weights) or streamed "
               "(read from a network store layer by layer); shown when runs differ",
    "work_imbalance": "max/mean of the live row-layers (rows entering a layer, summed over "
                      "the layers: the work actually done) over the blocks",
    "checked": "a sampled check (the problem's check_rows): every survivor of each run's "
               "result and this many of its other rows, drawn afresh for each run (the "
               "seeds are in the records); empty where every row was checked",
}
#: Columns shown only when configurations differ in them (else they are the defaults).
SHOWN_WHEN_VARYING = SETTINGS


def shown_columns(cmp: pd.DataFrame, columns: Sequence[str] = SHOWN) -> list[str]:
    """``columns`` without those that are empty in every row of ``cmp`` (e.g. ``transport``
    without model runs), and without the settings of :data:`SHOWN_WHEN_VARYING` in which
    its rows do not differ (:func:`sdnn_dask.report.tables.varying`)."""
    keep = []
    differ = set(varying(cmp, [c for c in columns if c in SHOWN_WHEN_VARYING]))
    for column in columns:
        values = cmp[column]
        if values.dtype == "string" or values.dtype == object:
            empty = (values.astype(str) == "").all()
        else:
            empty = values.isna().all()
        if column in SHOWN_WHEN_VARYING and column not in differ:
            continue
        if not empty or column in ("strategy", "partition", "check"):
            keep.append(column)
    return keep


def sampled_note(table: pd.DataFrame) -> str:
    """What the reports say under the setup when some runs were checked on a sample."""
    if table["check_survivors"].isna().all():
        return ""
    return ("; runs of a problem with check_rows on every survivor of their result and a "
            "sample of their other rows only (column `checked`)")


def sampled_text(row: pd.Series) -> str:
    """``, sampled: 2416 survivors + 64 others, seed 123`` for a run checked on a sample
    (``check_rows``), else ``""``."""
    text = checked_text(row["check_survivors"], row["check_survivors"], row["check_others"])
    return f", sampled: {text}, seed {int(row['check_seed'])}" if text else ""


def _failure_lines(failed: pd.DataFrame) -> list[str]:
    lines = [f"**{len(failed)} run(s) FAILED the check:**", ""]
    for _, row in failed.iterrows():
        what = describe(row) if row["strategy"] in SERIAL else \
            f"{row['strategy']} ({describe(row)})"
        lines.append(f"- **FAIL** `{row['network']}`, {int(row['inputs']):,} inputs: {what}, "
                     f"run `{row['run_id']}` (largest difference {row['max_abs_diff']:.2g}, "
                     f"against {row['check_against'] or 'reference'}{sampled_text(row)})")
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
           else f" (largest difference {diff:.2g})") + sampled_note(table),
        "",
    ]
    if plot_note:
        lines += [f"No plots: {plot_note}.", ""]
    per_worker = memory_table(records)
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
            to_markdown(with_spread(rows), shown_columns(rows)),
            "",
        ]
        memory = per_worker[(per_worker["network"].astype(str) == network)
                            & (per_worker["inputs"].astype(int) == inputs)]
        if len(memory):
            lines += ["### Memory and store reads per worker", "", memory_headline(memory), "",
                      to_markdown(memory, MEMORY_COLUMNS), "",
                      " ".join(f"`{c}`: {n}." for c, n in MEMORY_NOTES.items()), ""]
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
