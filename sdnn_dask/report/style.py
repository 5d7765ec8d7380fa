"""The plots' visual language: how a series looks (colour, marker, line) and is titled.

Series are told apart the same way in every plot: colour by partition, marker by strategy
(or by partition), line style by strategy, hollow markers and dotted lines for the
``graph`` transport. Nothing here needs matplotlib.
"""

from __future__ import annotations

import pandas as pd

from .tables import PARTITION_ORDER, SERIAL, count

COLOURS = {"none": "#444444", "chunks": "#8c564b", "block": "#1f77b4", "hash": "#ff7f0e",
           "random": "#2ca02c", "hypergraph": "#d62728"}
MARKERS = {"none": "*", "chunks": "v", "block": "o", "hash": "s", "random": "^",
           "hypergraph": "D"}
STRATEGY_MARKERS = {"reference": "*", "kernel": "*", "data": "o", "model": "s",
                    "hybrid": "^"}
LINES = {"reference": ":", "kernel": ":", "data": "-", "model": "--", "hybrid": "-."}
SERIAL_COLOURS = {"reference": "#7f7f7f", "kernel": "#000000"}
#: Colours of the per-layer time components (:data:`sdnn_dask.report.layers.TIME_PARTS`).
TIME_COLOURS = {"seconds": "#4c72b0", "wait_s": "#dd8452", "send_s": "#55a868",
                "deserialise_s": "#8172b3"}
TIME_SHORT = {"seconds": "compute", "wait_s": "wait", "send_s": "send",
              "deserialise_s": "deser."}
#: A series standing for several partitions (identical bytes).
SHARED_COLOUR, SHARED_MARKER = "#6a3d9a", "P"


def series_style(strategy: str, partition: str, transport: str = "") -> dict:
    """Line style of a series: colour by partition, marker by strategy, line by strategy;
    hollow markers and a dotted line on the ``graph`` transport."""
    if strategy in SERIAL:
        return {"color": SERIAL_COLOURS.get(strategy, "#444444"), "marker": "*",
                "linestyle": ":", "markersize": 12}
    graph = transport == "graph"
    colour = COLOURS.get(partition, "#17becf")
    return {"color": colour, "marker": STRATEGY_MARKERS.get(strategy, "x"),
            "linestyle": ":" if graph else LINES.get(strategy, "-"), "markersize": 8,
            "markerfacecolor": "white" if graph else colour, "markeredgewidth": 1.4,
            "linewidth": 1.6}


def config_title(row: pd.Series | dict) -> str:
    """A model/hybrid/data configuration (:data:`SERIES`) as a short panel title (``dedup
    off`` in it when identical rows were not merged)."""
    strategy = str(row["strategy"])
    workers = count(row["workers"])
    w = f"{workers} worker{'s' if workers != '1' else ''}{_dedup_off(row)}"
    if strategy == "data":
        extra = ""
        if "blocks" in row and count(row["blocks"]) != workers:
            extra += f", {count(row['blocks'])} blocks"
        if str(row.get("placement", "")) == "dynamic":
            extra += ", dynamic"
        return f"data parallelism, {w}{extra}"
    transport = str(row["transport"])
    transport = f", {transport}" if transport else ""
    if strategy == "hybrid":
        rows = str(row["row_partition"])
        return (f"hybrid {count(row['row_groups'])} row groups{f' ({rows})' if rows else ''}"
                f" x {count(row['parts'])} parts{transport}, {w}")
    return f"model parallelism k={count(row['parts'])}{transport}, {w}"


def short_title(config: dict, partition: str) -> str:
    """``model block, k=2`` or ``hybrid hash, 2 x 2`` (transport and workers are left to
    the figure's title; ``dedup off`` said as in :func:`config_title`)."""
    strategy = str(config["strategy"])
    if strategy == "hybrid":
        return (f"hybrid {partition}, {count(config['row_groups'])} row groups x "
                f"{count(config['parts'])} parts{_dedup_off(config)}")
    return f"{strategy} {partition}, k={count(config['parts'])}{_dedup_off(config)}"


def _dedup_off(row: pd.Series | dict) -> str:
    """``, dedup off`` for a configuration that computed every row (on, the default, and
    records from before the setting go unsaid)."""
    return ", dedup off" if str(row.get("dedup", "")) == "off" else ""


def dodge(strategy: str, partition: str, transport: str) -> float:
    """Sideways offset (in workers) of a series' points, so that configurations at the same
    worker count do not hide each other: data left, model centre, hybrid right, partitions
    spread within, the graph transport a little further."""
    group = {"data": -0.2, "model": 0.0, "hybrid": 0.2}.get(strategy, 0.0)
    rank = PARTITION_ORDER.index(partition) if partition in PARTITION_ORDER else 0
    return group + (rank - 3.5) * 0.03 + (0.015 if transport == "graph" else 0.0)
