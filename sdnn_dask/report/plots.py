"""The ``plot_*`` file writers: one plot of the latest study straight to a PNG file.

:func:`plot_comparison` draws with pyplot (``Agg``); :func:`plot_communication` saves
:func:`sdnn_dask.report.figures.communication_figure`. Both need the ``report`` extra.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..files import atomic_path
from .figures import communication_figure, save_png
from .layers import communication, communication_series
from .tables import comparison


def plot_communication(records: pd.DataFrame, layers: pd.DataFrame,
                       path: str | Path) -> Path | None:
    """MB moved per layer per neuron partition, one panel per model/hybrid configuration of
    the latest study, partitions that moved identical bytes drawn as one series
    (:func:`communication_series`); ``None`` when there is no such run. Needs the
    ``report`` extra."""
    series = communication_series(communication(records, layers))
    if series.empty:
        return None
    return save_png(communication_figure(series), path)


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
