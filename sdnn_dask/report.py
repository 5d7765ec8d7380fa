"""Comparison tables and plots: small pure functions of the records.

``records -> runs -> comparison (normalised to a baseline) -> markdown / plot``. Nothing
here runs inference; everything can be re-made from ``results/records.csv``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ._files import atomic_path
from .records import RUN_DTYPES, RUN_LEVEL, typed

#: What identifies a configuration: repeats of one configuration are pooled.
CONFIG = ["network", "inputs", "strategy", "partition", "row_partition", "transport",
          "workers", "blocks", "parts", "row_groups", "seed", "nbuckets", "epsilon"]


def runs(records: pd.DataFrame) -> pd.DataFrame:
    """One row per run (the block rows collapsed), in the order runs were recorded."""
    records = typed(records, RUN_DTYPES)
    table = records[RUN_LEVEL].drop_duplicates("run_id").reset_index(drop=True)
    per_block = records.groupby("run_id", sort=False)["compute_s"].agg(["sum", "max"])
    table["compute_s"] = table["run_id"].map(per_block["sum"])
    table["max_block_s"] = table["run_id"].map(per_block["max"])
    return table


def comparison(records: pd.DataFrame, baseline: str = "reference") -> pd.DataFrame:
    """Median over repeats of each configuration of the latest study, with speedups.

    Parameters
    ----------
    records
        Run records (``records.csv``); only the most recent study is compared unless the
        records hold just one.
    baseline
        Strategy whose median time is the 1.0 of the ``speedup`` column.

    Returns
    -------
    pandas.DataFrame
        :data:`CONFIG`, then ``repeats, seconds, edges_per_s, speedup, vs_kernel,
        imbalance, survivor_imbalance, mb_moved, predicted_volume, check``; ``mb_moved``
        is the median of the bytes moved between workers (model and hybrid runs), in MB.
    """
    table = runs(records)
    if table.empty:
        raise ValueError("no runs in the records")
    latest = table["study"].astype(str).max()
    table = table[table["study"].astype(str) == latest]
    grouped = table.groupby(CONFIG, sort=False, dropna=False)
    out = grouped.agg(
        repeats=("run_id", "count"),
        seconds=("wall_s", "median"),
        edges_per_s=("edges_per_s", "median"),
        imbalance=("imbalance", "median"),
        survivor_imbalance=("survivor_imbalance", "median"),
        mb_moved=("bytes_moved", lambda b: b.median() / 1e6),
        predicted_volume=("predicted_volume", "first"),
        check=("check", lambda c: "PASS" if (c == "PASS").all() else "FAIL"),
    ).reset_index()

    def seconds_of(strategy: str) -> pd.Series:
        """Per row, the median seconds of ``strategy`` on the same network and inputs."""
        first = (out[out["strategy"] == strategy]
                 .drop_duplicates(["network", "inputs"])
                 .set_index(["network", "inputs"])["seconds"])
        keys = pd.MultiIndex.from_frame(out[["network", "inputs"]])
        return pd.Series(first.reindex(keys).to_numpy(dtype=float), index=out.index)

    # each network against its own serial runs
    out["speedup"] = seconds_of(baseline) / out["seconds"]
    out["vs_kernel"] = seconds_of("kernel") / out["seconds"]
    columns = ["network", "inputs", "strategy", "partition", "row_partition", "transport",
               "workers", "blocks", "parts", "row_groups", "seed", "nbuckets", "epsilon",
               "repeats", "seconds", "edges_per_s", "speedup", "vs_kernel", "imbalance",
               "survivor_imbalance", "mb_moved", "predicted_volume", "check"]
    return out[columns]


def _format(value: object, column: str) -> str:
    if isinstance(value, float | np.floating):
        if math.isnan(value):
            return ""
        if column in ("edges_per_s",):
            return f"{value:.3g}"
        if column in ("seconds",):
            return f"{value:.3f}"
        if column in ("predicted_volume", "parts"):
            return f"{value:,.0f}"
        if column in ("mb_moved",):
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)


def to_markdown(table: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured markdown table (no extra dependency)."""
    columns = list(columns or table.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for i in range(len(table)):  # by column: iterrows would turn ints into floats
        lines.append("| " + " | ".join(_format(table[c].iat[i], c) for c in columns) + " |")
    return "\n".join(lines)


def to_text(table: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A plain aligned table for the terminal."""
    columns = list(columns or table.columns)
    cells = [[_format(table[c].iat[i], c) for c in columns] for i in range(len(table))]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    head = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w)
                      in enumerate(zip(r, widths, strict=True))) for r in cells]
    return "\n".join([head, rule, *body])


def summary_markdown(records: pd.DataFrame, *, title: str = "sdnn_dask comparison") -> str:
    """The markdown report of the latest study: setup, comparison table, how to read it."""
    table = runs(records)
    latest = table[table["study"].astype(str) == table["study"].astype(str).max()]
    first = latest.iloc[0]
    cmp = comparison(records)
    shown = ["strategy", "partition", "transport", "workers", "blocks", "parts", "repeats",
             "seconds",
             "edges_per_s", "speedup", "vs_kernel", "imbalance", "survivor_imbalance",
             "mb_moved", "predicted_volume", "check"]
    checked = "the truth categories" if (latest["check_against"] == "truth").any() \
        else "the float64 reference's categories"
    lines = [
        f"# {title}",
        "",
        f"- study: `{first['study']}`, recorded {first['time']}",
        f"- network: `{first['network']}` ({int(first['neurons'])} neurons, "
        f"{int(first['layers'])} layers, {int(first['edges']):,} edges)",
        f"- inputs: {int(first['inputs']):,} rows",
        f"- check: categories against {checked}; every run's activations within float32 "
        f"rounding of a float64 reference (largest difference "
        f"{latest['max_abs_diff'].max():.2g})",
        "",
        to_markdown(cmp, shown),
        "",
        "`seconds`: median inference wall time over repeats (weights and input blocks already "
        "on the workers). `edges_per_s`: inputs x edges / seconds. `speedup`: against the "
        "serial reference recurrence; `vs_kernel`: against the serial compiled kernel. "
        "`imbalance`: max/mean of per-block compute seconds; `survivor_imbalance`: the same "
        "for rows that survive all layers. Model and hybrid rows: `blocks` are parts x row "
        "groups, `parts` the neuron parts k, `transport` how parts exchanged pieces "
        "(`direct`: worker to worker; `graph`: a Dask task per part and layer), `mb_moved` "
        "the MB of pieces moved between workers (counted by the direct transport, or from "
        "Dask's transfer logs), `predicted_volume` the partition's km1 (activation "
        "columns sent between parts, summed over layers and row groups); "
        "`survivor_imbalance` there compares parts' rows nonzero in their own columns.",
    ]
    return "\n".join(lines) + "\n"


def communication(records: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Bytes moved per layer by the model and hybrid runs of the latest study.

    Parameters
    ----------
    records, layers
        Run records (``records.csv``) and layer records (``layers.csv``).

    Returns
    -------
    pandas.DataFrame
        One row per (strategy, partition, layer): ``mb_moved``, the median over repeats of
        the MB the run's parts received in that layer (counted by the direct transport, or
        from Dask's transfer logs for the graph one), and
        ``columns_in``, the predicted columns received (km1). Empty without such runs.
    """
    table = runs(records)
    latest = table[table["study"].astype(str) == table["study"].astype(str).max()]
    model = latest[latest["strategy"].isin(["model", "hybrid"])]
    columns = ["strategy", "partition", "layer", "mb_moved", "columns_in"]
    if model.empty or "bytes_in" not in layers:
        return pd.DataFrame(columns=columns)
    per_run = (layers[layers["run_id"].isin(model["run_id"])]
               .groupby(["run_id", "layer"], as_index=False)[["bytes_in", "columns_in"]].sum()
               .merge(model[["run_id", "strategy", "partition"]], on="run_id"))
    out = (per_run.groupby(["strategy", "partition", "layer"], sort=False)
           .agg(mb_moved=("bytes_in", "median"), columns_in=("columns_in", "median"))
           .reset_index())
    out["mb_moved"] /= 1e6
    return out[columns]


def plot_communication(records: pd.DataFrame, layers: pd.DataFrame,
                       path: str | Path) -> Path | None:
    """Line plot of MB moved per layer, one line per model/hybrid configuration of the
    latest study (``None`` when it has no such run; needs the ``report`` extra)."""
    table = communication(records, layers)
    if table.empty:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for (strategy, partition), rows in table.groupby(["strategy", "partition"], sort=False):
        ax.plot(rows["layer"], rows["mb_moved"], label=f"{strategy} {partition}",
                linestyle="-" if strategy == "model" else "--")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_xlabel("layer")
    ax.set_ylabel("MB moved between workers")
    ax.set_title("Communication per layer (pieces' bytes, median over repeats)")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _save(plt, fig, path: str | Path) -> Path:
    """Write ``fig`` as a PNG atomically and free it."""
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "plots need matplotlib: pip install 'sdnn_dask[report]'"
        ) from error
    return plt


def plot_comparison(records: pd.DataFrame, path: str | Path) -> Path:
    """Bar chart of edges/s per configuration of the latest study (needs the ``report`` extra).

    Raises
    ------
    ImportError
        When matplotlib is missing, naming the extra to install.
    """
    plt = _pyplot()
    cmp = comparison(records)
    labels = [
        f"{r.strategy}\n{r.partition}" + (
            f"\n{r.workers}w x {r.blocks}b" if r.strategy == "data"
            else f"\nk={r.parts}" + (f" x {r.blocks // r.parts}" if r.strategy == "hybrid"
                                     else "") if r.strategy in ("model", "hybrid") else "")
        for r in cmp.itertuples()
    ]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(cmp)), 4))
    colors = ["#888888" if s in ("reference", "kernel") else "#3b75af" for s in cmp["strategy"]]
    ax.bar(range(len(cmp)), cmp["edges_per_s"], color=colors)
    ax.set_xticks(range(len(cmp)), labels, fontsize=8)
    ax.set_ylabel("edges / s")
    ax.set_title("Inference rate by strategy (median over repeats)")
    for i, v in enumerate(cmp["speedup"]):
        ax.annotate(f"{v:.1f}x", (i, cmp["edges_per_s"].iloc[i]), ha="center", va="bottom",
                    fontsize=8)
    return _save(plt, fig, path)
