"""The report: comparison tables, figures and one HTML page, pure functions of the records.

* :mod:`.tables`: ``records -> runs -> comparison -> markdown``, the per-layer and per-block
  tables, the headline;
* :mod:`.figures`: the plots (the ``report`` extra's matplotlib);
* :mod:`.html`: one self-contained page of them;
* :mod:`.outputs`: a results folder written all at once (records as CSV, the page, the
  summary, the plots).

The tables' names are re-exported here, so ``from sdnn_dask import report`` then
``report.comparison(records)`` works in a notebook.
"""

from ..formatting import format_cell, to_markdown, to_text
from .figures import plot_communication, plot_comparison
from .tables import (
    COLUMN_NOTES,
    CONFIG,
    MAX_BARS,
    PARALLEL,
    PARTITION_ORDER,
    PROBLEM,
    PROJECTION_COLUMNS,
    SERIAL,
    SERIES,
    SHOWN,
    SHOWN_WHEN_VARYING,
    STRATEGY_ORDER,
    TIME_PARTS,
    TRANSPORT_ORDER,
    block_times,
    communication,
    communication_series,
    comparison,
    count,
    describe,
    failures,
    headline,
    latest_runs,
    latest_study,
    layer_profile,
    layer_times,
    problems,
    projection_table,
    rank,
    runs,
    shown_columns,
    sort_configurations,
    summary_markdown,
)

__all__ = [
    "COLUMN_NOTES",
    "CONFIG",
    "MAX_BARS",
    "PARALLEL",
    "PARTITION_ORDER",
    "PROBLEM",
    "PROJECTION_COLUMNS",
    "SERIAL",
    "SERIES",
    "SHOWN",
    "SHOWN_WHEN_VARYING",
    "STRATEGY_ORDER",
    "TIME_PARTS",
    "TRANSPORT_ORDER",
    "block_times",
    "communication",
    "communication_series",
    "comparison",
    "count",
    "describe",
    "failures",
    "format_cell",
    "headline",
    "latest_runs",
    "latest_study",
    "layer_profile",
    "layer_times",
    "plot_communication",
    "plot_comparison",
    "problems",
    "projection_table",
    "rank",
    "runs",
    "shown_columns",
    "sort_configurations",
    "summary_markdown",
    "to_markdown",
    "to_text",
]
