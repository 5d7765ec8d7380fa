"""The report: comparison tables, figures and one HTML page, pure functions of the records.

* :mod:`.tables`: ``records -> runs -> comparison``, the headline;
* :mod:`.layers`: the per-layer and per-block tables;
* :mod:`.summary`: the markdown summary (``-> markdown``), its columns and legend, the
  projection table;
* :mod:`.figures`: the plots (the ``report`` extra's matplotlib), drawn in the visual
  language of :mod:`.style`; :mod:`.plots`: the ``plot_*`` file writers;
* :mod:`.html`: one self-contained page of them;
* :mod:`.outputs`: a results folder written all at once (records as CSV, the page, the
  summary, the plots).

The tables' names are re-exported here, so ``from sdnn_dask import report`` then
``report.comparison(records)`` works in a notebook.
"""

from ..formatting import format_cell, to_markdown, to_text
from .layers import (
    MAX_BARS,
    SERIES,
    TIME_PARTS,
    block_times,
    communication,
    communication_series,
    distinct_rows,
    layer_profile,
    layer_times,
)
from .plots import plot_communication, plot_comparison
from .summary import (
    COLUMN_NOTES,
    PROJECTION_COLUMNS,
    SHOWN,
    SHOWN_WHEN_VARYING,
    projection_table,
    shown_columns,
    summary_markdown,
)
from .tables import (
    CONFIG,
    ONE_REPEAT,
    PARALLEL,
    PARTITION_ORDER,
    PROBLEM,
    SERIAL,
    SETTINGS,
    STRATEGY_ORDER,
    TRANSPORT_ORDER,
    Verdict,
    comparison,
    count,
    describe,
    failures,
    headline,
    latest_runs,
    latest_study,
    problems,
    rank,
    runs,
    sort_configurations,
    spread_text,
    varying,
    verdict,
    with_spread,
)

__all__ = [
    "COLUMN_NOTES",
    "CONFIG",
    "MAX_BARS",
    "ONE_REPEAT",
    "PARALLEL",
    "PARTITION_ORDER",
    "PROBLEM",
    "PROJECTION_COLUMNS",
    "SERIAL",
    "SERIES",
    "SETTINGS",
    "SHOWN",
    "SHOWN_WHEN_VARYING",
    "STRATEGY_ORDER",
    "TIME_PARTS",
    "TRANSPORT_ORDER",
    "Verdict",
    "block_times",
    "communication",
    "communication_series",
    "comparison",
    "count",
    "describe",
    "distinct_rows",
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
    "spread_text",
    "summary_markdown",
    "to_markdown",
    "to_text",
    "varying",
    "verdict",
    "with_spread",
]
