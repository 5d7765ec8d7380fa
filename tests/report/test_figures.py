"""The report's figures as a reader sees them: nothing cut off at the canvas's edges, and
the time per layer on a log axis; drawn from the repository's curated records
(``results/``), real runs of the quick study."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdnn_dask import records, report

pytest.importorskip("matplotlib")

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from sdnn_dask.report import figures
from sdnn_dask.report import html as html_report
from sdnn_dask.report.outputs import projection_of

RESULTS = Path(__file__).resolve().parents[2] / "results"
#: The problem drawn: 120 layers, model and hybrid runs on the direct transport.
PROBLEM = ("radixnet-1024-120-s0", 6000)


@pytest.fixture(scope="module")
def curated() -> tuple:
    """The curated records, the runs of :data:`PROBLEM` only (the projection is fitted on
    all of them, as the report does)."""
    if not (RESULTS / "records.csv").is_file():
        pytest.skip("no curated records in results/")
    runs = records.read_records(RESULTS)
    layers = records.read_records(RESULTS, "layers")
    mine = runs[(runs["network"].astype(str) == PROBLEM[0])
                & (runs["inputs"].astype(int) == PROBLEM[1])]
    return mine, layers, projection_of(runs, layers, lambda _: None)


def cut_off(fig: Figure) -> list[str]:
    """The text of ``fig`` that lies, even in part, outside its canvas once laid out and
    drawn as when saved: the suptitle, the figure's legends and texts, and for every
    visible axes its title, axis labels with the tick labels drawn, legend and texts."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    title = next(iter(fig.findobj(lambda a: isinstance(a, Text) and a.figure is fig
                                  and a.get_text() == fig.get_suptitle() != "")), None)
    parts = [("suptitle", title), *(("figure legend", x) for x in fig.legends),
             *(("figure text", x) for x in fig.texts)]
    for i, ax in enumerate(fig.axes):
        if ax.get_visible():
            parts += [(f"axes {i} x axis", ax.xaxis), (f"axes {i} y axis", ax.yaxis),
                      (f"axes {i} title", ax.title), (f"axes {i} legend", ax.get_legend()),
                      *((f"axes {i} text", x) for x in ax.texts)]
    box, out = fig.bbox, []
    for name, artist in parts:
        if artist is None or not artist.get_visible():
            continue
        # an axis' tight box: its label and the tick labels inside the view only
        extent = (artist.get_tightbbox(renderer) if hasattr(artist, "get_ticklabels")
                  else artist.get_window_extent(renderer))
        if extent is None or (extent.width == 0 and extent.height == 0):
            continue
        if (extent.x0 < box.x0 - 1 or extent.y0 < box.y0 - 1 or extent.x1 > box.x1 + 1
                or extent.y1 > box.y1 + 1):
            out.append(f"{name} {[round(v) for v in extent.extents]} outside "
                       f"{[round(v) for v in box.extents]}")
    return out


def test_the_check_sees_a_cut_label():
    fig = Figure(figsize=(4, 3), dpi=figures.DPI)
    ax = fig.add_axes((0.0, 0.1, 0.9, 0.8))  # no room left of the axes for its labels
    ax.plot([1, 2], [1, 2])
    ax.set_ylabel("cut off")
    ax.legend(["outside"], loc="upper left", bbox_to_anchor=(1.0, 1.0))
    found = cut_off(fig)
    assert any("y axis" in f for f in found) and any("legend" in f for f in found)


def test_every_figure_of_the_report_keeps_its_text_on_the_canvas(curated, monkeypatch):
    runs, layers, projection = curated
    drawn: dict[str, list[str]] = {}

    def check(fig: Figure) -> bytes:  # instead of rendering: every figure the page embeds
        drawn[fig.get_suptitle()] = cut_off(fig)
        return b""

    monkeypatch.setattr(figures, "png_bytes", check)
    html_report.build(runs, layers, projection=projection)
    names = " | ".join(drawn)
    for title in ("Inference rate", "Compute time per block", "What survives",
                  "Where a part's time goes", "Activation bytes moved",
                  "Projected against measured"):
        assert title in names
    assert {title: out for title, out in drawn.items() if out} == {}


def test_the_time_per_layer_is_on_a_log_axis(curated):
    runs, layers, _ = curated
    times = report.layer_times(runs, layers)
    fig = figures.layer_time_figure(times)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 5  # model block, hash, hypergraph; hybrid block, hypergraph
    assert all(ax.get_yscale() == "log" for ax in shown)
    low, high = shown[0].get_ylim()
    assert 0 < low and high / low <= 1e5 * 2 + 1
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == [*report.TIME_PARTS.values(), "total"]
    # every layer's compute is drawn, not flattened to zero by the first layers
    compute = next(line for line in shown[0].get_lines() if line.get_label() == "compute")
    assert (compute.get_ydata() > 0).sum() == 120
