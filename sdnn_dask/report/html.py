"""The report a researcher reads at a glance: one self-contained HTML page (and its markdown
twin) made from the records alone.

:func:`html_report` returns the page: failures first, then per problem (network and
inputs) a headline computed from the data, the comparison table and the plots of
:mod:`sdnn_dask.report.figures` embedded as base64 PNG ``data:`` URIs, then, when given, projected
against measured times. Inline CSS, no script, no external resource. Without matplotlib
the page keeps its tables and says which extra to install.

:func:`write_report` writes ``report.html``, ``summary.md`` and the plots as PNG files into
a folder, each file atomically.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..files import atomic_path, write_text_atomic
from ..formatting import format_cell
from . import figures
from .layers import (
    block_times,
    communication,
    communication_series,
    distinct_rows,
    layer_profile,
    layer_times,
)
from .memory import MEMORY_COLUMNS, MEMORY_NOTES, memory_headline, memory_table
from .summary import (
    COLUMN_NOTES,
    PROJECTION_COLUMNS,
    projection_table,
    sampled_note,
    sampled_text,
    shown_columns,
    summary_markdown,
)
from .tables import (
    ONE_REPEAT,
    SERIAL,
    comparison,
    describe,
    failures,
    headline,
    latest_runs,
    problems,
    verdict,
    with_spread,
)

DEFAULT_TITLE = "sdnn_dask report"

#: Table headers, with units.
HEADERS = {
    "strategy": "strategy", "partition": "partition", "row_partition": "row groups by",
    "transport": "transport", "workers": "workers", "blocks": "blocks", "parts": "parts k",
    "repeats": "repeats", "seconds": "seconds: median (min–max)", "edges_per_s": "edges/s",
    "speedup": "× reference", "vs_kernel": "× kernel", "vs_data": "× data",
    "imbalance": "imbalance", "survivor_imbalance": "survivor imbalance",
    "mb_moved": "MB moved", "mb_predicted": "MB forecast",
    "predicted_volume": "predicted volume (km1)", "objective": "hypergraph objective",
    "gb_predicted": "GB forecast", "gb_worker_in": "GB into a worker",
    "gb_worker_forecast": "GB into a worker, forecast",
    "check": "check", "checked": "rows checked", "network": "network", "rows": "rows",
    "measured_s": "measured (s)",
    "projected_s": "projected (s)", "error_pct": "error", "held_out": "held out",
    "weights": "weights", "row_groups": "row groups", "weight_gb": "weights a worker (GB)",
    "peak_gb": "peak a worker (GB)", "read_gb": "store read a worker (GB)",
    "read_share": "of the store a worker", "gb_moved": "GB moved", "dedup": "dedup",
    "nbuckets": "hash buckets", "epsilon": "hypergraph ε", "dense_threshold":
    "dense threshold", "chunk_bytes": "dense tile (bytes)", "merge_blocks": "blocks merged",
}
_TEXT_COLUMNS = {"strategy", "partition", "row_partition", "transport", "check", "checked",
                 "network",
                 "held_out", "weights", "dedup", "placement", "merge_blocks", "objective"}


@dataclass
class Plot:
    """One figure of the report: its file stem, title and caption, and its PNG (``None``
    without matplotlib)."""

    stem: str
    title: str
    caption: str
    png: bytes | None


@dataclass
class Section:
    """One problem's part of the report."""

    network: str
    inputs: int
    cmp: pd.DataFrame
    headline: str
    plots: list[Plot] = field(default_factory=list)
    #: Memory and store reads per worker (:mod:`.memory`): runs on a store only.
    memory: pd.DataFrame | None = None

    @property
    def anchor(self) -> str:
        return "net-" + re.sub(r"[^A-Za-z0-9_-]+", "-", f"{self.network}-{self.inputs}")


@dataclass
class Report:
    """Everything the page and the markdown show, computed once from the records."""

    title: str
    runs: pd.DataFrame
    failures: pd.DataFrame
    sections: list[Section]
    projection: pd.DataFrame | None
    projection_plot: Plot | None
    plot_note: str | None  # why there are no plots, when there are none


def _rows_of(table: pd.DataFrame, network: str, inputs: int) -> pd.DataFrame:
    if table.empty:
        return table
    mask = (table["network"].astype(str) == network) & (table["inputs"].astype(int) == inputs)
    return table[mask].reset_index(drop=True)


def _render(fig: object) -> bytes | None:
    return None if fig is None else figures.png_bytes(fig)


def build(runs: pd.DataFrame, layers: pd.DataFrame, *,
          projection: pd.DataFrame | None = None, title: str = DEFAULT_TITLE) -> Report:
    """Compute the report's tables, headlines and plots from the records.

    Parameters
    ----------
    runs, layers
        Run and layer records (:func:`sdnn_dask.records.read_records`); the latest study
        is reported (:func:`sdnn_dask.report.tables.latest_study`).
    projection
        Optional projected against measured seconds (columns
        :data:`sdnn_dask.report.summary.PROJECTION_COLUMNS`).
    title
        The page's title.
    """
    table = latest_runs(runs)
    cmp = comparison(runs)
    try:
        figures.require_matplotlib()
        note = None
    except ImportError as error:
        note = str(error)
    blocks = block_times(runs)
    profile = layer_profile(runs, layers)
    times = layer_times(runs, layers)
    series = communication_series(communication(runs, layers))
    distinct = distinct_rows(runs, layers)
    sections = []
    per_worker = memory_table(runs)
    for (network, inputs), rows in problems(cmp):
        section = Section(network, inputs, rows, headline(rows))
        memory = _rows_of(per_worker, network, inputs)
        if len(memory):
            section.memory = memory
        where = f" — {network}, {inputs:,} inputs"
        layers_n = int(rows["layers"].iloc[0])
        mine = {name: _rows_of(frame, network, inputs) for name, frame in
                (("blocks", blocks), ("profile", profile), ("times", times),
                 ("series", series), ("distinct", distinct))}
        specs = [
            ("rate", "Inference rate against workers",
             "Edges per second (median over repeats) against the number of Dask workers, one "
             "line per strategy and partition; serial runs are dotted horizontal lines. At a "
             "worker count with several configurations of one series the fastest is drawn.",
             figures.rate_figure, rows),
            ("blocks", "Compute time per block",
             "Seconds each block spent in the kernel (data: a row block; model: a neuron "
             "part; hybrid: a part of a row group), the partitions of one configuration side "
             "by side: contiguous blocks against hashed or random ones shows what hashing "
             "does to the imbalance (in the legend: max/mean). A worker's data blocks run "
             "merged after their early layers: their shared tiles' seconds are split among "
             "them by rows.",
             figures.block_time_figure, mine["blocks"]),
            ("imbalance", "Balance against row blocks",
             "Data parallelism at several block counts: the work imbalance (max/mean of each "
             "block's live rows summed over the layers), the compute imbalance (max/mean of "
             "block seconds) and the time, per row partition (contiguous block, bucket hash, "
             "random) and placement (static: block b pinned to worker b mod P; dynamic: "
             "taken from a queue as workers free up). Dotted: the slowest block, an "
             "estimate from the measured block seconds of what P = blocks static workers "
             "would take.",
             figures.imbalance_figure, rows),
            ("survivors", "What survives each layer",
             f"Rows with any nonzero activation, and nonzeros, after each of the {layers_n} "
             "layers: how fast the work shrinks.",
             figures.survivors_figure, mine["profile"]),
            ("distinct-rows", "Live rows against distinct rows, per layer",
             "Per layer, every live row (solid) against the rows actually computed once "
             "identical rows are merged (dashed: dedup on; dotted: off), log scale. Serial "
             "kernel and data-parallel runs only, summed over a run's row blocks (a model "
             "or hybrid part counts a row in every part it is nonzero in); median over "
             "repeats. Without deduplication the two are equal. Data parallelism merges "
             "only rows computed together (a block, or a worker's merged blocks), so it "
             "may compute more distinct rows than the serial kernel.",
             figures.distinct_figure, mine["distinct"]),
            ("layer-time", "Where a part's time goes, per layer",
             "Per layer, a part's compute (its step), waiting for the pieces it reads, "
             "sending its own (cut, serialise, queue) and deserialising what it received, "
             "and their total (dotted), on a log scale: mean over the run's parts, median "
             "over repeats; model and hybrid runs on the direct transport.",
             figures.layer_time_figure, mine["times"]),
            ("communication", "Bytes moved per layer",
             "MB of activation pieces moved between workers in each layer, per neuron "
             "partition (median over repeats; symmetric-log axis). Partitions that moved "
             "exactly the same bytes in every layer are drawn as one line named after all "
             "of them.",
             figures.communication_figure, mine["series"]),
        ]
        for stem, plot_title, caption, draw, data in specs:
            if data.empty:
                continue
            png = None if note else _render(draw(data, title=where))
            if png is not None or note:
                section.plots.append(Plot(stem, plot_title, caption, png))
        sections.append(section)
    proj_table, proj_plot = None, None
    if projection is not None:
        proj_table = projection_table(projection)
        proj_table.attrs["rule"] = projection.attrs.get("rule", "")
        png = None if note or proj_table.empty else \
            _render(figures.projection_figure(proj_table))
        proj_plot = Plot("projection", "Projected against measured",
                         "Projected against measured inference seconds, log-log; points on "
                         "the dashed line are exact. Large hollow markers are held out: "
                         "not used to fit the projection.", png)
    return Report(title, table, failures(runs), sections, proj_table, proj_plot, note)


def _stems(rep: Report) -> dict[tuple[str, int], str]:
    """File-name suffix per problem: none with one problem, ``-<network>-<inputs>`` else."""
    if len(rep.sections) <= 1:
        return {(s.network, s.inputs): "" for s in rep.sections}
    return {(s.network, s.inputs): "-" + s.anchor.removeprefix("net-") for s in rep.sections}


# --------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:"DejaVu Sans",Verdana,system-ui,sans-serif;margin:0 auto;max-width:1340px;
padding:1.2rem 2rem 3rem;color:#1b1b1b;line-height:1.45;background:#fff}
h1{font-size:1.65rem;margin:.2rem 0 .3rem}
h2{font-size:1.3rem;border-bottom:2px solid #d8d8d8;padding-bottom:.2rem;margin:2.4rem 0 .6rem}
h3{font-size:1.05rem;margin:1.4rem 0 .3rem}
.meta{color:#555;font-size:.88rem;margin:.2rem 0}
nav{font-size:.9rem;margin:.6rem 0}
nav a{margin-right:1.2rem;color:#1f5fa0}
.headline{font-size:1.05rem;background:#f1f6fc;border-left:5px solid #1f77b4;
padding:.6rem 1rem;margin:.6rem 0 1rem}
.failures{background:#fdeaea;border:2px solid #c62828;color:#7f0000;padding:.6rem 1.1rem;
border-radius:4px;margin:1rem 0}
.failures h2{border:none;color:#b71c1c;margin:.2rem 0 .4rem;font-size:1.25rem}
.allpass{background:#e8f5e9;border:1px solid #66bb6a;color:#1b5e20;padding:.45rem 1rem;
border-radius:4px;margin:.8rem 0;font-weight:600}
.note{background:#fff8e1;border:1px solid #f0c36d;padding:.5rem 1rem;border-radius:4px}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:.82rem;font-variant-numeric:tabular-nums;
margin:.3rem 0 .6rem}
th,td{padding:.26rem .45rem;border-bottom:1px solid #e4e4e4;white-space:nowrap}
table.comparison th,table.comparison td{padding:.26rem .32rem}
th{background:#f2f2f2;text-align:left;vertical-align:bottom;font-weight:600;
white-space:normal;min-width:3.2em;max-width:7.5em;line-height:1.2}
td.num{text-align:right}
.spread{color:#666;font-size:.78em;font-weight:400}
tbody tr:nth-child(even) td{background:#fafafa}
tr.best td{font-weight:700}
td.check{text-align:center;font-weight:700}
tbody tr td.pass{background:#e3f4e3;color:#1b5e20}
tbody tr td.fail{background:#c62828;color:#fff}
figure{margin:1.3rem 0 1.8rem}
figure img{max-width:100%;height:auto;border:1px solid #e6e6e6}
figcaption{color:#444;font-size:.88rem;max-width:72rem;margin-top:.25rem}
dl.notes{font-size:.85rem;color:#333;display:grid;grid-template-columns:max-content 1fr;
gap:.2rem 1rem}
dl.notes dt{font-weight:600}
dl.notes dd{margin:0}
"""


def _cell(value: object, column: str) -> tuple[str, str]:
    """Text and CSS class of one table cell."""
    if column == "check":
        text = str(value)
        return text, f"check {'pass' if text == 'PASS' else 'fail'}"
    if column == "held_out":
        return ("held out" if bool(value) else ""), ""
    if column == "error_pct":
        number = float(value)
        return ("" if np.isnan(number) else f"{number:+.1f}%"), "num"
    if column in ("weight_gb", "peak_gb", "read_gb", "gb_moved", "read_share"):
        number = float(value) if pd.notna(value) else np.nan
        return ("" if np.isnan(number) else f"{number:.3g}"), "num"
    if column in ("measured_s", "projected_s"):
        number = float(value)
        return ("" if np.isnan(number) else f"{number:.3g}"), "num"
    if column in ("speedup", "vs_kernel", "vs_data"):
        number = float(value) if pd.notna(value) else np.nan
        return ("" if np.isnan(number) else f"{number:.2f}×"), "num"
    if value is pd.NA or value is None:
        return "", "" if column in _TEXT_COLUMNS else "num"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}", "num"
    text = format_cell(value, column)
    return text, "" if column in _TEXT_COLUMNS else "num"


#: Where a header's long words may break (soft hyphens): a table as wide as its widest
#: cells, not its headers, so the comparison fits a 1400 px page however many settings
#: differ (Chromium on Linux does not hyphenate by itself).
_BREAKS = {"imbalance": "imbal-ance", "threshold": "thresh-old", "predicted": "pre-dicted",
           "reference": "refer-ence", "transport": "trans-port", "partition": "parti-tion",
           "strategy": "strat-egy", "workers": "work-ers", "survivor": "sur-vivor",
           "placement": "place-ment", "repeats": "re-peats", "buckets": "buck-ets",
           "hypergraph": "hyper-graph", "measured": "meas-ured", "projected": "pro-jected"}


def _header(column: str) -> str:
    """A column's header as HTML, its long words with soft hyphens (:data:`_BREAKS`)."""
    words = html.escape(HEADERS.get(column, column)).split(" ")
    return " ".join(_BREAKS.get(w, w).replace("-", "&shy;") if w in _BREAKS else w
                    for w in words)


def _html_table(table: pd.DataFrame, columns: list[str], *, best: Collection[int] = (),
                css: str = "") -> str:
    head = "".join(f"<th>{_header(c)}</th>" for c in columns)
    body = []
    for i in range(len(table)):
        cells = []
        for column in columns:
            text, cls = _cell(table[column].iat[i], column)
            shown = html.escape(text)
            if column == "seconds" and " (" in text:  # the range under the median: narrow
                median, spread = text.split(" (", 1)
                shown = (f'{html.escape(median)}<br><span class="spread">'
                         f"{html.escape(spread.rstrip(')').replace('-', '–'))}</span>")
            cells.append(f'<td class="{cls}">{shown}</td>' if cls else f"<td>{shown}</td>")
        attr = ' class="best"' if i in best else ""
        body.append(f"<tr{attr}>{''.join(cells)}</tr>")
    return (f'<div class="scroll"><table class="{css}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _img(plot: Plot, note: str | None) -> str:
    if plot.png is None:
        return (f'<figure><p class="note">{html.escape(plot.title)}: '
                f"{html.escape(note or 'nothing to draw')}.</p></figure>")
    data = base64.b64encode(plot.png).decode("ascii")
    return (f'<figure><img alt="{html.escape(plot.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption><b>{html.escape(plot.title)}.</b> {html.escape(plot.caption)}"
            "</figcaption></figure>")


def _failure_html(failed: pd.DataFrame) -> str:
    items = []
    for _, row in failed.iterrows():
        what = describe(row) if row["strategy"] in SERIAL else \
            f"{row['strategy']} ({describe(row)})"
        diff = row["max_abs_diff"]
        diff = f"{diff:.2g}" if pd.notna(diff) else "unknown"
        items.append(f"<li><b>FAIL</b> <code>{html.escape(str(row['network']))}</code>, "
                     f"{int(row['inputs']):,} inputs: {html.escape(what)}; run "
                     f"<code>{html.escape(str(row['run_id']))}</code>, largest difference "
                     f"{html.escape(diff)} (against "
                     f"{html.escape(str(row['check_against']) or 'reference')}"
                     f"{html.escape(sampled_text(row))})</li>")
    return (f'<section class="failures" id="failures"><h2>{len(failed)} run(s) FAILED the '
            f"check</h2><ul>{''.join(items)}</ul></section>")


def _html_columns(cmp: pd.DataFrame) -> list[str]:
    """The comparison's columns on the page: :data:`sdnn_dask.report.summary.SHOWN` less the
    empty ones, less ``repeats`` when every configuration has the same count (said under
    the table instead), and less ``survivor_imbalance`` (in the markdown)."""
    columns = [c for c in shown_columns(cmp) if c != "survivor_imbalance"]
    if cmp["repeats"].nunique() == 1:
        columns.remove("repeats")
    return columns


def _repeats(cmp: pd.DataFrame) -> str:
    counts = cmp["repeats"].astype(int)
    spread = " Under each median: the fastest and slowest repeat's seconds."
    if counts.nunique() > 1:
        return "Medians over each configuration's repeats." + spread
    n = int(counts.iloc[0])
    return "One run per configuration." if n == 1 else f"Medians of {n} repeats each." \
        + spread


def _bold(cmp: pd.DataFrame) -> tuple[list[int], str]:
    """The rows of a problem's table to set in bold, and what the bold means: the fastest
    configuration where its repeats' spread is clear of the runner-up's, the ones within
    noise of the least median where they overlap, none on one repeat
    (:func:`sdnn_dask.report.tables.verdict`)."""
    ok = cmp[cmp["check"] == "PASS"]
    if ok.empty:
        return [], ""
    found = verdict(ok)
    rows = [cmp.index.get_loc(i) for i in found.rows.index]
    if found.kind == "fastest":
        return rows[:1], ("Bold: the fastest configuration that passed (its slowest repeat "
                          "faster than the runner-up's fastest).")
    if found.kind == "noise":
        return rows, ("Bold: the configurations within noise of the least median (their "
                      "repeats' spreads overlap it): none is shown to be fastest.")
    if found.kind == "alone":
        return rows, "Bold: the only configuration that passed."
    return [], f"None in bold: {ONE_REPEAT}."


def _largest(table: pd.DataFrame) -> str:
    diff = table["max_abs_diff"].max()
    return "" if pd.isna(diff) else f" (largest difference {diff:.2g})"


def render_html(rep: Report) -> str:
    """The page for a :class:`Report` (see :func:`html_report`)."""
    table = rep.runs
    esc = html.escape
    hosts = ", ".join(sorted(set(table["host"].astype(str)) - {""})) or "unknown host"
    checked = "truth categories" if (table["check_against"] == "truth").any() \
        else "the float64 reference"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(rep.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(rep.title)}</h1>",
        f'<p class="meta">study <code>{esc(str(table["study"].iloc[0]))}</code>, '
        f"{len(table)} runs recorded {esc(str(table['time'].min()))} to "
        f"{esc(str(table['time'].max()))} on {esc(hosts)}; checked against {esc(checked)}"
        f"{_largest(table)}{esc(sampled_note(table).replace('`', ''))}.</p>",
    ]
    if len(rep.failures):
        parts.append(_failure_html(rep.failures))
    else:
        parts.append(f'<p class="allpass">All {len(table)} runs PASS the check.</p>')
    links = [f'<a href="#{s.anchor}">{esc(s.network)}, {s.inputs:,} inputs</a>'
             for s in rep.sections]
    if rep.projection is not None:
        links.append('<a href="#projection">projected against measured</a>')
    links.append('<a href="#columns">what the columns mean</a>')
    parts.append(f"<nav>{''.join(links)}</nav>")
    if rep.plot_note:
        parts.append(f'<p class="note">No plots: {esc(rep.plot_note)}.</p>')
    for section in rep.sections:
        top = section.cmp.iloc[0]
        best, bold = _bold(section.cmp)
        parts += [
            f'<section id="{section.anchor}">',
            f"<h2>{esc(section.network)}, {section.inputs:,} inputs</h2>",
            f'<p class="meta">{int(top["neurons"]):,} neurons, {int(top["layers"])} layers, '
            f"{int(top['edges']):,} edges.</p>",
            f'<p class="headline">{esc(section.headline)}</p>',
            _html_table(with_spread(section.cmp), _html_columns(section.cmp), best=best,
                        css="comparison"),
            f'<p class="meta">{_repeats(section.cmp)} {bold} Ratios above 1 are faster than '
            "the baseline; × data compares with the fastest data-parallel configuration on "
            "the same number of workers.</p>",
        ]
        if section.memory is not None:
            parts += ["<h3>Memory and store reads per worker</h3>",
                      f'<p class="headline">{esc(memory_headline(section.memory))}</p>',
                      _html_table(section.memory, MEMORY_COLUMNS, css="memory"),
                      '<p class="meta">' + esc(" ".join(
                          f"{HEADERS.get(c, c)}: {n}." for c, n in MEMORY_NOTES.items()))
                      + "</p>"]
        parts += [_img(plot, rep.plot_note) for plot in section.plots]
        parts.append("</section>")
    if rep.projection is not None:
        parts += ['<section id="projection"><h2>Projected against measured</h2>']
        proj = rep.projection
        if len(proj):
            error = proj["error_pct"].astype(float).abs()
            held = proj["held_out"].astype(bool)
            bits = [f"median |error| {error[~held].median():.1f}% over {int((~held).sum())} "
                    "fitted points" if (~held).any() else "",
                    f"{error[held].median():.1f}% over {int(held.sum())} held-out points"
                    if held.any() else ""]
            if held.any():
                within = int((error[held] <= 20).sum())
                signed = proj["error_pct"].astype(float)[held]
                worst = float(signed.loc[signed.abs().idxmax()])
                bits.append(f"{within} of {int(held.sum())} held-out within 20% (worst "
                            f"{worst:+.1f}%)")
            parts.append(f'<p class="headline">{esc("; ".join(b for b in bits if b))}.</p>')
            rule = proj.attrs.get("rule")
            if rule:
                parts.append(f"<p>The cost model (sdnn_dask.projection) is {esc(rule)}.</p>")
            if rep.projection_plot is not None:
                parts.append(_img(rep.projection_plot, rep.plot_note))
            parts.append(_html_table(proj, PROJECTION_COLUMNS, css="projection"))
        else:
            parts.append("<p>The projection is empty.</p>")
        parts.append("</section>")
    notes = "".join(f"<dt>{esc(HEADERS.get(c, c))}</dt><dd>{esc(n)}</dd>"
                    for c, n in COLUMN_NOTES.items())
    parts += ['<section id="columns"><h2>What the columns mean</h2>',
              f'<dl class="notes">{notes}</dl></section>', "</body></html>"]
    return "\n".join(parts) + "\n"


def html_report(runs: pd.DataFrame, layers: pd.DataFrame, *,
                projection: pd.DataFrame | None = None, title: str = DEFAULT_TITLE) -> str:
    """The self-contained HTML report of the latest study in the records.

    Parameters
    ----------
    runs, layers
        Run and layer records, as :func:`sdnn_dask.records.read_records` returns them.
    projection
        Optional: one row per projected configuration, columns ``network, strategy,
        partition, workers, rows, measured_s, projected_s, error_pct, held_out``; adds a
        measured-against-projected plot and a table with the error %.
    title
        The page's title.

    Returns
    -------
    str
        One HTML document: inline CSS, plots as ``data:image/png;base64`` URIs, no script
        and no reference to anything outside it.
    """
    return render_html(build(runs, layers, projection=projection, title=title))


def write_report(folder: Path, runs: pd.DataFrame, layers: pd.DataFrame, *,
                 projection: pd.DataFrame | None = None,
                 title: str = DEFAULT_TITLE) -> list[Path]:
    """Write ``report.html``, ``summary.md`` and the plots' PNG files into ``folder``.

    Every file is written through a temporary file renamed into place. The PNGs are
    ``rate.png``, ``blocks.png``, ``survivors.png``, ``distinct-rows.png``,
    ``layer-time.png``,
    ``communication.png`` (those with something to draw) and ``projection.png``; with
    several problems in the study each takes the suffix ``-<network>-<inputs>``. Without
    matplotlib only ``report.html`` and ``summary.md`` are written (the page says why).

    Parameters
    ----------
    folder
        Where to write (made if missing).
    runs, layers, projection, title
        As for :func:`html_report`.

    Returns
    -------
    list of Path
        The files written: the PNGs, then ``summary.md``, then ``report.html``.
    """
    folder = Path(folder)
    rep = build(runs, layers, projection=projection, title=title)
    suffix = _stems(rep)
    written: list[Path] = []
    images: dict[tuple[str, int], list[tuple[str, str]]] = {}

    def png(plot: Plot, name: str) -> str | None:
        if plot.png is None:
            return None
        path = folder / name
        with atomic_path(path) as tmp:
            tmp.write_bytes(plot.png)
        written.append(path)
        return name

    for section in rep.sections:
        key = (section.network, section.inputs)
        for plot in section.plots:
            name = png(plot, f"{plot.stem}{suffix[key]}.png")
            if name:
                images.setdefault(key, []).append((plot.title, name))
    projection_image = None
    if rep.projection_plot is not None:
        projection_image = png(rep.projection_plot, "projection.png")
    text = summary_markdown(runs, title=title, images=images, projection=rep.projection,
                            projection_image=projection_image, plot_note=rep.plot_note)
    written.append(write_text_atomic(folder / "summary.md", text))
    written.append(write_text_atomic(folder / "report.html", render_html(rep)))
    return written
