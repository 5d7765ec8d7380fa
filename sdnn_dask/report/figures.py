"""The report's plots: matplotlib figures of the tables in :mod:`sdnn_dask.report.tables`
and :mod:`sdnn_dask.report.layers`.

Each ``*_figure`` function takes one problem's table (one network and input size) and
returns a :class:`matplotlib.figure.Figure` (made without pyplot: no global state, no
display), or ``None`` when there is nothing to draw. :func:`png_bytes` and
:func:`save_png` render one. Everything here needs the ``report`` extra (matplotlib);
:func:`require_matplotlib` says so in its error.

Series are drawn in the reader's order (serial first, then data, model, hybrid) and told
apart the same way in every plot: colour by partition, marker by partition, line style by
strategy, hollow markers and dotted lines for the ``graph`` transport
(:mod:`sdnn_dask.report.style`). The ``plot_*`` file writers are in
:mod:`sdnn_dask.report.plots`.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..files import atomic_path
from .layers import SERIES, TIME_PARTS
from .style import (
    COLOURS,
    LINES,
    MARKERS,
    SERIAL_COLOURS,
    SHARED_COLOUR,
    SHARED_MARKER,
    STRATEGY_MARKERS,
    TIME_COLOURS,
    TIME_SHORT,
    config_title,
    dodge,
    series_style,
    short_title,
)
from .tables import (
    PARALLEL,
    PARTITION_ORDER,
    SERIAL,
    STRATEGY_ORDER,
    TRANSPORT_ORDER,
    count,
    rank,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: What to install for plots.
EXTRA_HINT = "plots need matplotlib: pip install 'sdnn_dask[report]'"


DPI = 110


def require_matplotlib() -> None:
    """Raise :class:`ImportError` naming the ``report`` extra when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError as error:
        raise ImportError(EXTRA_HINT) from error


def _figure(width: float, height: float) -> Figure:
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def png_bytes(fig: Figure) -> bytes:
    """``fig`` rendered as PNG."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(png_bytes(fig))
    return path


def _configs(table: pd.DataFrame) -> list[tuple[dict, pd.DataFrame]]:
    """``table`` split by :data:`SERIES` (and blocks and placement where it has them; in
    table order, which is the reader's order)."""
    out = []
    keys = [*SERIES, *(c for c in ("blocks", "placement") if c in table)]
    for _, rows in table.groupby(keys, sort=False, dropna=False):
        out.append((rows.iloc[0].to_dict(), rows))
    return out


def _grid(n: int, ncols: int = 3) -> tuple[int, int]:
    cols = min(n, ncols)
    return math.ceil(n / cols), cols


def _time_unit(seconds: float) -> tuple[float, str]:
    """Scale and unit for times up to ``seconds``."""
    if not np.isfinite(seconds) or seconds >= 1:
        return 1.0, "s"
    return 1e3, "ms"


def _integer_ticks(ax: Axes, values: Sequence[int]) -> None:
    values = sorted({int(v) for v in values})
    if len(values) <= 12:
        ax.set_xticks(values, [str(v) for v in values])
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def rate_figure(cmp: pd.DataFrame, *, title: str = "") -> Figure | None:
    """Edges/s against workers, one line per strategy and partition (and transport).

    Parameters
    ----------
    cmp
        One problem's :func:`sdnn_dask.report.tables.comparison` rows. At a worker count where a
        series has several configurations (e.g. block counts), the fastest is drawn.
        Serial runs are horizontal lines; configurations that failed the check are
        crossed out in red. Points are dodged sideways (:func:`.style.dodge`) so that
        configurations at one worker count stay visible. The y axis is logarithmic when
        the rates span more than 10x.
    title
        Appended to the plot's title (e.g. the network).
    """
    if cmp.empty:
        return None
    fig = _figure(8.5, 4.6)
    ax = fig.subplots()
    workers = cmp["workers"].astype(int)
    for _, row in cmp[cmp["strategy"].isin(SERIAL)].iterrows():
        style = series_style(str(row["strategy"]), "none")
        ax.axhline(row["edges_per_s"], color=style["color"], linestyle=":", linewidth=1.2)
        ax.plot([int(row["workers"])], [row["edges_per_s"]],
                label=f"serial {row['strategy']}", **style)
    parallel = cmp[cmp["strategy"].isin(PARALLEL)].copy()
    # data parallelism's row groups are its blocks: a series runs over them
    parallel["_groups"] = parallel["row_groups"].where(parallel["strategy"] == "hybrid", 1)
    parallel = parallel.assign(_s=rank(parallel["strategy"], STRATEGY_ORDER),
                               _t=rank(parallel["transport"], TRANSPORT_ORDER),
                               _p=rank(parallel["partition"], PARTITION_ORDER))
    parallel = parallel.sort_values(["_s", "_t", "_groups", "_p"], kind="stable")
    keys = ["strategy", "partition", "row_partition", "transport", "_groups"]
    for _, rows in parallel.groupby(keys, sort=False, dropna=False):
        first = rows.iloc[0]
        best = (rows.sort_values("edges_per_s", ascending=False)
                .drop_duplicates("workers").sort_values("workers"))
        strategy, partition = str(first["strategy"]), str(first["partition"])
        transport = str(first["transport"])
        label = f"{strategy} {partition}"
        if strategy == "hybrid":
            label += f" ({count(first['row_groups'])} row groups)"
        if transport:
            label += f", {transport}"
        ax.plot(best["workers"].astype(int) + dodge(strategy, partition, transport),
                best["edges_per_s"], label=label, **series_style(strategy, partition, transport))
    failed = cmp[cmp["check"] != "PASS"]
    if len(failed):
        x = [int(r["workers"]) + (0 if r["strategy"] in SERIAL else dodge(
            str(r["strategy"]), str(r["partition"]), str(r["transport"])))
            for _, r in failed.iterrows()]
        ax.plot(x, failed["edges_per_s"], linestyle="none",
                marker="x", color="#d00000", markersize=14, markeredgewidth=2.5,
                label="FAILED the check")
    rates = cmp["edges_per_s"].astype(float)
    rates = rates[rates > 0]
    if len(rates) and rates.max() / rates.min() > 10:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, rates.max() * 1.12 if len(rates) else 1)
    _integer_ticks(ax, workers)
    low, high = workers.min(), workers.max()
    ax.set_xlim(low - 0.4, high + 0.4)
    ax.set_xlabel("Dask workers")
    ax.set_ylabel("inference rate (edges / s)")
    fig.suptitle("Inference rate against workers (median over repeats)" + title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


def block_time_figure(blocks: pd.DataFrame, *, title: str = "") -> Figure | None:
    """Compute time of every block, one panel per configuration, the partitions' bars side
    by side (``blocks``: one problem's :func:`sdnn_dask.report.layers.block_times`)."""
    if blocks.empty:
        return None
    configs = _configs(blocks)
    nrows, ncols = _grid(len(configs))
    fig = _figure(min(4.6 * ncols, 14), 3.4 * nrows + 0.4)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    scale, unit = _time_unit(float(blocks["compute_s"].max()))
    for ax, (config, rows) in zip(axes, configs, strict=False):
        partitions = list(dict.fromkeys(rows["partition"].astype(str)))
        width = 0.8 / len(partitions)
        for i, partition in enumerate(partitions):
            mine = rows[rows["partition"].astype(str) == partition].sort_values("block")
            x = mine["block"].astype(int).to_numpy() + (i - (len(partitions) - 1) / 2) * width
            imbalance = float(mine["imbalance"].iloc[0])
            ax.bar(x, mine["compute_s"] * scale, width=width * 0.95,
                   color=COLOURS.get(partition, "#17becf"),
                   label=f"{partition} (imbalance {imbalance:.2f})")
        _integer_ticks(ax, rows["block"].astype(int))
        ax.set_ylim(0, float(rows["compute_s"].max()) * scale * 1.3)  # room for the legend
        strategy = str(config["strategy"])
        ax.set_xlabel({"data": "row block", "model": "neuron part"}.get(
            strategy, "block (row group x parts + part)"))
        ax.set_ylabel(f"compute time ({unit})")
        ax.set_title(config_title(config), fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", ncols=min(2, len(partitions)),
                  framealpha=0.9)
    for ax in axes[len(configs):]:
        ax.set_visible(False)
    fig.suptitle("Compute time per block (median over repeats; imbalance = max/mean)" + title)
    return fig


def survivors_figure(profile: pd.DataFrame, *, title: str = "") -> Figure | None:
    """Surviving rows and nonzeros after each layer (``profile``: one problem's
    :func:`sdnn_dask.report.layers.layer_profile`)."""
    if profile.empty:
        return None
    fig = _figure(11, 3.8)
    left, right = fig.subplots(1, 2)
    source = str(profile["source"].iloc[0])
    many = len(profile) > 40
    for ax, column, what in ((left, "rows_out", "rows with a nonzero"),
                             (right, "nnz_out", "nonzeros")):
        values = profile[column].astype(float)
        ax.plot(profile["layer"].astype(int), values,
                marker=None if many else "o", markersize=4, color="#1f77b4")
        last = float(values.iloc[-1])
        note = f"after layer {int(profile['layer'].iloc[-1])}: {last:,.0f}"
        if column == "rows_out":
            note += f" of {int(profile['inputs'].iloc[0]):,} rows"
            note += f" ({100 * last / int(profile['inputs'].iloc[0]):.1f}%)"
        ax.text(0.97, 0.95, note, transform=ax.transAxes, ha="right", va="top", fontsize=9)
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_ylabel(what)
        ax.set_title(f"{what[0].upper()}{what[1:]} after each layer", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        if not many:
            _integer_ticks(ax, profile["layer"])
    fig.suptitle(f"What survives each layer (from the {source} run)" + title)
    return fig


def layer_time_figure(times: pd.DataFrame, *, title: str = "") -> Figure | None:
    """Where a part's time goes in each layer: compute, waiting, sending, deserialising and
    their total, a line each on a log axis, one panel per direct-transport model/hybrid
    configuration (``times``: one problem's :func:`sdnn_dask.report.layers.layer_times`)."""
    if times.empty:
        return None
    panels = []
    for config, rows in _configs(times):
        for partition in dict.fromkeys(rows["partition"].astype(str)):
            panels.append((config, partition,
                           rows[rows["partition"].astype(str) == partition]
                           .sort_values("layer")))
    nrows, ncols = _grid(len(panels), 4 if len(panels) > 6 else 3)
    fig = _figure(min(4.2 * ncols, 15), 3.1 * nrows + 0.6)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, sharey=True)).ravel()
    total = times[list(TIME_PARTS)].fillna(0).sum(axis=1).max()
    scale, unit = _time_unit(float(total))
    positive = []
    for n, (ax, (config, partition, rows)) in enumerate(zip(axes, panels, strict=False)):
        layer = rows["layer"].astype(int).to_numpy()
        # one line per component on a log axis, not stacked bars on a linear one: the
        # first layers take most of the time and flattened the other hundred to zero
        total = np.zeros(len(rows))
        for column, name in TIME_PARTS.items():
            values = rows[column].fillna(0).to_numpy(float) * scale
            total += values
            ax.plot(layer, np.where(values > 0, values, np.nan), color=TIME_COLOURS[column],
                    label=name, linewidth=1.3, marker="o" if len(layer) <= 30 else None,
                    markersize=3)
            positive.append(values[values > 0])
        ax.plot(layer, np.where(total > 0, total, np.nan), color="#222222", linewidth=0.9,
                linestyle=":", label="total")
        ax.set_yscale("log")
        totals = {c: float(rows[c].fillna(0).sum()) for c in TIME_PARTS}
        sum_scale, sum_unit = _time_unit(max(totals.values()))
        sums = [f"{TIME_SHORT[c]} {v * sum_scale:.3g}" for c, v in totals.items()]
        ax.set_title(short_title(config, partition), fontsize=9.5)
        ax.text(0.97, 0.95, f"sum over layers ({sum_unit})\n" + "  ".join(sums[:2]) + "\n"
                + "  ".join(sums[2:]), transform=ax.transAxes, ha="right", va="top",
                fontsize=8, linespacing=1.3,
                bbox={"facecolor": "white", "alpha": 0.9, "edgecolor": "#cccccc"})
        ax.set_xlabel("layer")
        if n % ncols == 0:
            ax.set_ylabel(f"time per part ({unit})")
        ax.grid(True, axis="y", alpha=0.3)
        if len(layer) <= 30:
            _integer_ticks(ax, layer)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    values = np.concatenate(positive) if positive else np.array([])
    if len(values):  # shared: down to the smallest part, at most five decades below the top
        top = float(values.max()) * 4  # the total, and room for the sums' box
        axes[0].set_ylim(max(float(values.min()) / 1.5, top * 1e-5), top * 2)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(handles),
               fontsize=9, frameon=False)
    where = sorted({f"{count(c['workers'])} workers" for c, _, _ in panels})
    fig.suptitle("Where a part's time goes, per layer (mean over parts, median over "
                 f"repeats; direct transport, {', '.join(where)})" + title)
    return fig


def communication_figure(series: pd.DataFrame, *, title: str = "") -> Figure | None:
    """MB moved between workers per layer, one panel per model/hybrid configuration, one
    line per neuron partition; partitions that moved identical bytes in every layer are
    one line labelled ``block = hash = ...`` (``series``:
    :func:`sdnn_dask.report.layers.communication_series`). Each line has its own marker and its
    markers are staggered, so lines that nearly coincide stay distinguishable."""
    if series.empty:
        return None
    configs = _configs(series)
    nrows, ncols = _grid(len(configs), 2)
    fig = _figure(min(6.2 * ncols, 14), 3.8 * nrows + 0.4)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, sharey=True)).ravel()
    for n, (ax, (config, rows)) in enumerate(zip(axes, configs, strict=False)):
        labels = list(dict.fromkeys(rows["series"].astype(str)))
        n_layers = rows["layer"].nunique()
        every = max(1, n_layers // 12)
        for i, label in enumerate(labels):
            mine = rows[rows["series"].astype(str) == label].sort_values("layer")
            shared = int(mine["partitions"].iloc[0]) > 1
            partition = label.split(" = ")[0]
            colour = SHARED_COLOUR if shared else COLOURS.get(partition, "#17becf")
            marker = SHARED_MARKER if shared else MARKERS.get(partition, "x")
            ax.plot(mine["layer"].astype(int), mine["mb_moved"].astype(float),
                    label=label + (" (identical bytes)" if shared else ""),
                    color=colour, marker=marker, markersize=6,
                    markevery=(min(i * max(1, every // len(labels)), n_layers - 1), every),
                    linestyle=LINES.get(str(config["strategy"]), "-"),
                    linewidth=2.2 if shared else 1.5)
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_xlabel("layer")
        if n % ncols == 0:
            ax.set_ylabel("MB moved between workers")
        ax.set_title(config_title(config), fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper right", framealpha=0.9)
        if n_layers <= 30:
            _integer_ticks(ax, rows["layer"])
    for ax in axes[len(configs):]:
        ax.set_visible(False)
    fig.suptitle("Activation bytes moved per layer, by neuron partition (median over "
                 "repeats)" + title)
    return fig


def distinct_figure(table: pd.DataFrame, *, title: str = "") -> Figure | None:
    """Live rows against distinct rows after each layer, log y axis (``table``: one
    problem's :func:`sdnn_dask.report.layers.distinct_rows`).

    Live rows are solid; runs whose live rows are the same in every layer (as they are,
    dedup or not) share one line. Each configuration's distinct rows (those computed) are
    dashed (dedup on) or dotted (off), coloured by configuration; ``(= live)`` in the
    legend where nothing was merged. ``None`` when ``table`` is empty.
    """
    if table.empty:
        return None
    from matplotlib import colormaps

    fig = _figure(10, 4.8)
    ax = fig.subplots()
    configs = [(label, rows.sort_values("layer")) for label, rows in
               table.groupby("series", sort=False)]

    def positive(values: pd.Series) -> np.ndarray:
        out = values.to_numpy(dtype=float)
        return np.where(out > 0, out, np.nan)  # no row left: nothing on a log axis

    live: list[tuple[list[str], pd.DataFrame]] = []
    for label, rows in configs:
        for names, first in live:
            if (len(first) == len(rows)
                    and (first["layer"].to_numpy() == rows["layer"].to_numpy()).all()
                    and (first["rows_out"].to_numpy(float)
                         == rows["rows_out"].to_numpy(float)).all()):
                names.append(str(label))
                break
        else:
            live.append(([str(label)], rows))
    for i, (names, rows) in enumerate(live):
        which = " (every run)" if len(live) == 1 else f" ({'; '.join(names)})"
        ax.plot(rows["layer"].astype(int), positive(rows["rows_out"]),
                color=["#000000", "#7f7f7f"][i % 2], linewidth=2.6, alpha=0.8,
                label="live rows" + which)
    palette = colormaps["tab10"]
    every = max(1, table["layer"].nunique() // 10)
    for i, (label, rows) in enumerate(configs):
        merged = (rows["distinct_out"].to_numpy(float) < rows["rows_out"].to_numpy(float))
        off = str(rows["dedup"].iloc[0]) == "off"
        ax.plot(rows["layer"].astype(int), positive(rows["distinct_out"]),
                color=palette(i % 10), linestyle=":" if off else "--", linewidth=1.6,
                marker=MARKERS.get(str(rows["partition"].iloc[0]), "o"), markersize=5,
                markevery=(i % every, every),
                label=f"distinct rows: {label}" + ("" if merged.any() else " (= live)"))
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("rows after the layer")
    ax.grid(True, which="both", alpha=0.3)
    if table["layer"].nunique() <= 30:
        _integer_ticks(ax, table["layer"])
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.suptitle("Live and distinct rows per layer (kernel and data runs)" + title)
    return fig


def projection_figure(projection: pd.DataFrame, *, title: str = "") -> Figure | None:
    """Projected against measured seconds, log-log, with the y = x line; held-out points
    (not used to fit the projection) drawn as large hollow markers (``projection``:
    :func:`sdnn_dask.report.summary.projection_table`)."""
    if projection.empty:
        return None
    fig = _figure(9.5, 6.0)  # room beside the square axes for the legend
    ax = fig.subplots()
    measured = projection["measured_s"].astype(float)
    projected = projection["projected_s"].astype(float)
    values = pd.concat([measured, projected])
    values = values[values > 0]
    low, high = values.min() / 1.5, values.max() * 1.5
    ax.plot([low, high], [low, high], color="#888888", linestyle="--", linewidth=1,
            label="projected = measured")
    order = projection.assign(_s=rank(projection["strategy"], STRATEGY_ORDER),
                              _p=rank(projection["partition"], PARTITION_ORDER))
    for _, rows in order.sort_values(["_s", "_p"], kind="stable").groupby(
            ["strategy", "partition"], sort=False):
        strategy, partition = str(rows["strategy"].iloc[0]), str(rows["partition"].iloc[0])
        colour = COLOURS.get(partition, "#17becf") if strategy not in SERIAL \
            else SERIAL_COLOURS.get(strategy, "#444444")
        marker = STRATEGY_MARKERS.get(strategy, "x")
        fitted = rows[~rows["held_out"].astype(bool)]
        held = rows[rows["held_out"].astype(bool)]
        if len(fitted):
            ax.plot(fitted["measured_s"], fitted["projected_s"], linestyle="none",
                    marker=marker, color=colour, markersize=7, label=f"{strategy} {partition}")
        if len(held):
            ax.plot(held["measured_s"], held["projected_s"], linestyle="none", marker=marker,
                    markersize=13, markerfacecolor="none", markeredgewidth=2, color=colour,
                    label=f"{strategy} {partition}, held out")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    # a square box rather than set_aspect("equal"): the constrained layout then keeps the
    # axis labels and the legend on the canvas (with "equal" it cut both)
    ax.set_box_aspect(1)
    ax.set_xlabel("measured (s)")
    ax.set_ylabel("projected (s)")
    fig.suptitle("Projected against measured inference time" + title)
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=8, frameon=False)
    return fig


__all__ = [
    "EXTRA_HINT",
    "block_time_figure",
    "communication_figure",
    "distinct_figure",
    "layer_time_figure",
    "png_bytes",
    "projection_figure",
    "rate_figure",
    "require_matplotlib",
    "save_png",
    "survivors_figure",
    "training_figure",
]


def imbalance_figure(cmp: pd.DataFrame, *, title: str = "") -> Figure | None:
    """Data parallelism's imbalance and time against the number of row blocks, one line per
    row partition and placement (``cmp``: one problem's :func:`sdnn_dask.report.tables.
    comparison` rows); ``None`` without data runs at two or more block counts on one
    worker count."""
    data = cmp[cmp["strategy"].astype(str) == "data"]
    # only worker counts run at several block counts (not 1 block on 1 worker, 2 on 2)
    counts = data.groupby("workers")["blocks"].transform("nunique")
    data = data[counts >= 2]
    if data.empty:
        return None
    fig = _figure(14, 4.4)
    axes = fig.subplots(1, 3)
    panels = [("work_imbalance", "work imbalance (max/mean of live row-layers)"),
              ("imbalance", "compute imbalance (max/mean of block seconds)"),
              ("seconds", "seconds (median)")]
    data = data.assign(merge_blocks=data["merge_blocks"].astype(str) if "merge_blocks" in data
                       else "")
    keys = ["partition", "placement", "merge_blocks", "workers"]
    groups = list(data.groupby(keys, sort=False, dropna=False))
    for ax, (column, label) in zip(axes, panels, strict=True):
        for (partition, placement, merge, workers), rows in groups:
            rows = rows.sort_values("blocks")
            style = {"color": COLOURS.get(str(partition), "#17becf"),
                     "linestyle": "--" if str(placement) == "dynamic" else
                     "-." if merge == "alone" else "-",
                     "marker": "o" if str(placement) == "dynamic" else
                     "x" if merge == "alone" else "s"}
            name = (f"{partition}, {placement or 'static'}"
                    f"{', alone' if merge == 'alone' else ''}, {count(workers)} w")
            ax.plot(rows["blocks"].astype(int), rows[column].astype(float), label=name,
                    **style)
        if column == "seconds" and "max_block_s" in data:
            # P = blocks static workers: each block alone on its own worker, so its seconds
            # alone (runs with merge false) when the study has them; merged blocks' seconds
            # are shares of shared tiles' time, an underestimate
            static = data[data["placement"].astype(str) != "dynamic"]
            alone = static[static["merge_blocks"] != "merged"]  # alone, or from before
            source, note = (alone, "") if not alone.empty else (static, ", merged shares")
            for partition, rows in source.groupby("partition", sort=False):
                rows = rows.sort_values("blocks")
                ax.plot(rows["blocks"].astype(int), rows["max_block_s"].astype(float),
                        color=COLOURS.get(str(partition), "#17becf"), linestyle=":",
                        marker="^",
                        label=f"{partition}: slowest block (P = blocks, static{note})")
        ax.set_xscale("log", base=2)
        if column == "seconds":  # the slowest block is a small fraction of the run
            ax.set_yscale("log")
        ax.set_xlabel("row blocks")
        ax.set_ylabel(label)
        ax.grid(True, which="major", alpha=0.3)
        if column != "seconds":
            ax.axhline(1.0, color="#888888", linewidth=0.8)
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.suptitle("Data parallelism: balance against row blocks, with and without hashing"
                 + title)
    return fig


def training_figure(steps: pd.DataFrame, *, title: str = "") -> Figure | None:
    """Bytes and seconds per training step against the batch, log-log: one line per
    strategy and partition (``steps``:
    :func:`sdnn_dask.study.training_comparison.compare_training`'s rows; medians over the
    steps). Bytes: data parallelism's (flat: every weight gradient)
    and each model-parallel partition's (proportional to the batch: activations and errors),
    drawn as lines over the whole batch axis through the measured points, with the batch
    where they cross marked; serial moves nothing and is in the seconds panel only.
    ``None`` without steps."""
    from .training import crossover

    if steps.empty:
        return None
    keys = ["strategy", "partition", "workers", "batch"]
    medians = (steps.groupby(keys, sort=False)
               .agg(seconds=("seconds", "median"), bytes_moved=("bytes_moved", "median"))
               .reset_index())
    cross = crossover(steps)
    measured = medians["batch"].astype(float)
    ends = pd.concat([measured, cross["bytes_crossover_batch"].dropna()])
    ends = ends[ends > 0]
    low, high = ends.min() / 1.5, ends.max() * 1.5
    span = np.geomspace(low, high, 50)
    fig = _figure(12, 4.6)
    ax_bytes, ax_seconds = fig.subplots(1, 2)
    order = medians.assign(_s=rank(medians["strategy"].replace({"serial": "kernel"}),
                                    STRATEGY_ORDER),
                           _p=rank(medians["partition"], PARTITION_ORDER))
    for (strategy, partition, workers), rows in order.sort_values(
            ["_s", "_p", "workers"], kind="stable").groupby(
            ["strategy", "partition", "workers"], sort=False):
        rows = rows.sort_values("batch")
        serial = strategy == "serial"
        style = series_style("kernel" if serial else str(strategy), str(partition))
        label = "serial" if serial else f"{strategy} {partition}, {count(workers)} w"
        ax_seconds.plot(rows["batch"], rows["seconds"], label=label, **style)
        if serial:
            continue
        if strategy == "data":
            line = np.full_like(span, rows["bytes_moved"].median() / 1e6)
        else:
            per_row = np.dot(rows["batch"], rows["bytes_moved"]) / np.dot(rows["batch"],
                                                                          rows["batch"])
            line = span * per_row / 1e6
        ax_bytes.plot(span, line, color=style["color"], linestyle=style["linestyle"],
                      linewidth=1.2, alpha=0.8)
        ax_bytes.plot(rows["batch"], rows["bytes_moved"] / 1e6, label=label,
                      **{**style, "linestyle": "none"})
    for row in cross.itertuples(index=False):
        batch = row.bytes_crossover_batch
        if not np.isfinite(batch):
            continue
        colour = COLOURS.get(str(row.partition), "#17becf")
        ax_bytes.axvline(batch, color=colour, linestyle=":", linewidth=1)
        ax_bytes.plot([batch], [row.data_bytes_per_step / 1e6], marker="X", color=colour,
                      markersize=11, linestyle="none",
                      label=f"equal bytes ({row.partition}): batch {batch:.0f}")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ticks = sorted({int(b) for b in measured})
    for ax, ylabel in ((ax_bytes, "MB moved between workers per step"),
                       (ax_seconds, "seconds per step (median)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(low, high)
        ax.set_xticks(ticks, [str(b) for b in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("batch (rows per step)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, framealpha=0.9)
    ax_bytes.set_title("bytes: data flat (gradients), model proportional (activations)",
                       fontsize=10)
    ax_seconds.set_title("seconds", fontsize=10)
    fig.suptitle("Training steps against the batch" + title)
    return fig
