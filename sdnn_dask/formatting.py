"""Plain-text tables: markdown and terminal, in the package's number formats per column.

Below the report and the training comparison, which both print tables with it; no extra
dependency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd


def format_cell(value: object, column: str) -> str:
    """One table cell as text, in the number format of its ``column`` (blank for NaN)."""
    if isinstance(value, float | np.floating):
        if math.isnan(value):
            return ""
        if column in ("edges_per_s",):
            return f"{value:.3g}"
        if column in ("seconds",):
            return f"{value:.3f}"
        if column in ("predicted_volume", "parts"):
            return f"{value:,.0f}"
        if column in ("mb_moved", "mb_predicted"):
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)


def to_markdown(table: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured markdown table (no extra dependency)."""
    columns = list(columns or table.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for i in range(len(table)):  # by column: iterrows would turn ints into floats
        lines.append("| " + " | ".join(format_cell(table[c].iat[i], c) for c in columns) + " |")
    return "\n".join(lines)


def to_text(table: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A plain aligned table for the terminal."""
    columns = list(columns or table.columns)
    cells = [[format_cell(table[c].iat[i], c) for c in columns] for i in range(len(table))]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    head = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w)
                      in enumerate(zip(r, widths, strict=True))) for r in cells]
    return "\n".join([head, rule, *body])
