"""The comparison tables as a reader sees them: the spread of the repeats beside each median,
the settings in which rows differ, and the terminal table's legend; on hand-made records
whose numbers are worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sdnn_dask import report
from sdnn_dask.records import RUN_DTYPES, typed
from sdnn_dask.report import html as html_report


def _run(strategy, partition, wall, *, workers=1, blocks=None, parts=1, transport="",
         bytes_moved=None, **settings):
    """One run's records (one row per block), network ``A``, study ``s``."""
    blocks = blocks or workers
    return pd.DataFrame({
        "study": "s", "time": "t1", "host": "h", "strategy": strategy,
        "run_id": f"{strategy}-{partition}-{workers}-{wall}-{sorted(settings.items())}",
        "partition": partition, "network": "A", "neurons": 1024, "layers": 120,
        "edges": 1000, "inputs": 10, "workers": workers, "blocks": blocks, "parts": parts,
        "row_groups": blocks if strategy == "data" else 1, "transport": transport,
        "block": range(blocks), "worker": "w", "rows": 5, "survivors": 1, "compute_s": wall,
        "wall_s": wall, "edges_per_s": 10 * 1000 / wall, "imbalance": 1.0,
        "survivor_imbalance": 1.0, "bytes_moved": bytes_moved, "check": "PASS",
        "check_against": "reference", "max_abs_diff": 0.0, **settings,
    })


def _records(*runs: pd.DataFrame) -> pd.DataFrame:
    return typed(pd.concat(runs, ignore_index=True), RUN_DTYPES)


def _repeated() -> pd.DataFrame:
    """Three repeats of the kernel (1.1, 1.23, 1.41 s), two of data hash, one reference."""
    return _records(
        _run("reference", "none", 4.0),
        *(_run("kernel", "none", w) for w in (1.23, 1.41, 1.1)),
        *(_run("data", "hash", w, workers=2) for w in (0.5, 0.7)),
    )


# --------------------------------------------------------------------------- the spread

def test_the_comparison_keeps_the_fastest_and_slowest_repeat():
    cmp = report.comparison(_repeated()).set_index("strategy")
    assert cmp.loc["kernel", ["seconds", "seconds_min", "seconds_max"]].tolist() == [
        1.23, 1.1, 1.41]
    assert cmp.loc["data", ["seconds", "seconds_min", "seconds_max"]].tolist() == \
        [0.6, 0.5, 0.7]
    assert cmp.loc["reference", ["seconds_min", "seconds_max"]].tolist() == [4.0, 4.0]


def test_spread_text_beside_the_median():
    assert report.spread_text(1.23, 1.1, 1.41, 3) == "1.230 (1.100-1.410)"
    assert report.spread_text(4.0, 4.0, 4.0, 1) == "4.000"  # one repeat: no range
    assert report.spread_text(np.nan, np.nan, np.nan, 0) == ""
    shown = report.with_spread(report.comparison(_repeated())).set_index("strategy")
    assert shown.loc["kernel", "seconds"] == "1.230 (1.100-1.410)"
    assert shown.loc["data", "seconds"] == "0.600 (0.500-0.700)"
    assert shown.loc["reference", "seconds"] == "4.000"


def test_the_markdown_and_the_page_show_the_spread():
    records = _repeated()
    summary = report.summary_markdown(records)
    assert "| kernel | none |" in summary and "| 1.230 (1.100-1.410) |" in summary
    assert "the fastest and slowest repeat in brackets (min-max)" in summary
    page = html_report.html_report(records, pd.DataFrame())
    assert ('<td class="num">1.230<br><span class="spread">1.100–1.410</span></td>'
            in page)
    assert "<th>seconds: median (min–max)</th>" in page
    assert '<td class="num">4.000</td>' in page  # one repeat: the median alone


# --------------------------------------------------------------------------- settings that differ

def _two_kernels() -> pd.DataFrame:
    """The kernel with and without its dense step: alike but for ``dense_threshold``."""
    return _records(_run("reference", "none", 4.0),
                    _run("kernel", "none", 1.0, dense_threshold=0.05, dedup="on"),
                    _run("kernel", "none", 2.0, dense_threshold=2.0, dedup="on"),
                    _run("data", "hash", 0.6, workers=2, dense_threshold=0.05, dedup="on",
                         placement="static"))


def test_varying_counts_only_the_settings_that_apply():
    cmp = report.comparison(_two_kernels())
    # the reference's dedup and threshold are blank, placement applies to data alone
    assert report.varying(cmp) == ["dense_threshold"]
    assert report.varying(cmp.assign(seed=[0, 0, 1, 1])) == ["seed", "dense_threshold"]
    assert "dense_threshold" in report.shown_columns(cmp)
    assert not {"dedup", "placement"} & set(report.shown_columns(cmp))


def test_the_terminal_table_tells_apart_runs_that_differ_in_a_setting():
    from sdnn_dask.cli.common import compare_columns, comparison_text

    cmp = report.comparison(_two_kernels())
    columns = compare_columns(cmp, ["network", "inputs"])
    assert columns[:6] == ["network", "inputs", "strategy", "partition", "dense_threshold",
                           "workers"]  # no model run: no transport, nothing moved
    assert not {"transport", "mb_moved", "predicted_volume"} & set(columns)
    lines = comparison_text(cmp).splitlines()
    kernels = [line.split() for line in lines if line.startswith("kernel")]
    assert [k[:3] for k in kernels] == [["kernel", "none", "0.05"], ["kernel", "none", "2.00"]]
    same = report.comparison(_records(_run("kernel", "none", 1.0, dense_threshold=0.05),
                                      _run("data", "hash", 0.6, workers=2,
                                           dense_threshold=0.05)))
    assert "dense_threshold" not in compare_columns(same)


def test_the_terminal_table_has_a_legend_of_its_columns():
    from sdnn_dask.cli.common import COMPARE_NOTES, compare_columns, comparison_text

    records = _records(_run("reference", "none", 4.0),
                       *(_run("kernel", "none", w) for w in (1.23, 1.41, 1.1)),
                       _run("model", "block", 2.0, workers=2, blocks=2, parts=2,
                            transport="direct", bytes_moved=3e6, predicted_volume=8.0))
    cmp = report.comparison(records)
    text = comparison_text(cmp)
    table, legend = text.split("\n\n")
    assert "1.230 (1.100-1.410)" in table and "4.000 " in table
    head = table.splitlines()[0].split()
    assert head == compare_columns(cmp)
    notes = dict(line.split(None, 1) for line in legend.splitlines())
    assert list(notes) == [c for c in head if c in COMPARE_NOTES]
    for column in ("speedup", "blocks", "mb_moved", "predicted_volume", "seconds"):
        assert column in notes
    assert "scipy serial reference" in notes["speedup"]
    assert "parts x row groups" in notes["blocks"]
    assert "MB" in notes["mb_moved"] and "columns" in notes["predicted_volume"]
    assert all(len(line) <= 100 for line in legend.splitlines())


# --------------------------------------------------------------------------- fastest, or noise

def _race(data_walls, model_walls, kernel_walls=(9.0, 9.5, 10.0), **settings):
    """The kernel, far behind, and data against model parallelism at the seconds given
    (one run each), on 2 workers."""
    return _records(*(_run("kernel", "none", w, **settings) for w in kernel_walls),
                    *(_run("data", "hash", w, workers=2, **settings) for w in data_walls),
                    *(_run("model", "hash", w, workers=2, blocks=2, parts=2,
                           transport="direct", bytes_moved=1e8, **settings)
                      for w in model_walls))


DATA = "data parallelism (hash, 2 workers)"
MODEL = "model parallelism (hash, k=2, direct, 2 workers)"


def test_overlapping_spreads_are_within_noise_not_fastest():
    cmp = report.comparison(_race((0.21, 0.23, 0.25), (0.22, 0.24, 0.27)))
    found = report.verdict(cmp)
    assert found.kind == "noise" and list(found.rows["strategy"]) == ["data", "model"]
    text = report.headline(cmp)
    assert text.startswith(f"D{DATA[1:]} and {MODEL} are within noise: 0.210-0.250 s "
                           "against 0.220-0.270 s over 3 repeats.")
    assert "fastest" not in text
    # one repeat's overlap is enough: the model's fastest repeat equal to data's slowest
    touching = report.comparison(_race((0.21, 0.23, 0.25), (0.25, 0.27, 0.30)))
    assert report.verdict(touching).kind == "noise"
    # every configuration that reaches the leader's spread is named, the others not
    three = report.comparison(_race((0.21, 0.23, 0.25), (0.22, 0.24, 0.27),
                                    kernel_walls=(0.24, 0.26, 0.28)))
    assert report.headline(three).startswith(
        f"D{DATA[1:]}, {MODEL} and the serial kernel are within noise: 0.210-0.250 s "
        "against 0.220-0.270 s and 0.240-0.280 s over 3 repeats.")


def test_disjoint_spreads_name_the_fastest():
    cmp = report.comparison(_race((0.21, 0.23, 0.25), (0.26, 0.27, 0.30)))
    assert report.verdict(cmp).kind == "fastest"
    text = report.headline(cmp)
    assert text.startswith(f"D{DATA[1:]} is fastest: ")
    assert (f"its repeats 0.210-0.250 s, the runner-up's ({MODEL}) 0.260-0.300 s." in text)
    assert "within noise" not in text


def test_one_repeat_never_names_the_fastest():
    cmp = report.comparison(_race((0.21,), (0.5,), kernel_walls=(9.0,)))
    text = report.headline(cmp)
    assert text.startswith("One repeat: no spread to compare; run with --repeat 3. Least "
                           f"seconds: {DATA}, ")
    assert "fastest" not in text and "No parallel configuration" not in text
    # nor where only the runner-up ran once
    once = report.comparison(_race((0.21, 0.22, 0.23), (0.5,)))
    assert report.verdict(once).kind == "one repeat"
    assert report.verdict(cmp.iloc[:1]).kind == "alone"


def test_the_page_sets_in_bold_only_what_the_repeats_show():
    def bold(records):
        page = html_report.html_report(records, pd.DataFrame())
        return page.count('<tr class="best">'), page

    count, page = bold(_race((0.21, 0.23, 0.25), (0.26, 0.27, 0.30)))
    assert count == 1 and "Bold: the fastest configuration that passed" in page
    count, page = bold(_race((0.21, 0.23, 0.25), (0.22, 0.24, 0.27)))
    assert count == 2 and "Bold: the configurations within noise" in page
    count, page = bold(_race((0.21,), (0.5,), kernel_walls=(9.0,)))
    assert count == 0 and "None in bold: one repeat: no spread to compare" in page


# --------------------------------------------------------------------------- memory per worker

def test_the_memory_table_shows_every_run_with_a_peak_beside_the_bytes_moved():
    # no store: peaks recorded, store reads not; the kernel recorded none
    records = _records(
        _run("kernel", "none", 9.0),
        *(_run("data", "hash", w, workers=2, peak_rss_bytes=p)
          for w, p in ((0.21, 3e9), (0.23, 3.2e9), (0.25, 3.1e9))),
        *(_run("model", "hash", w, workers=2, blocks=2, parts=2, transport="direct",
               bytes_moved=5e8, peak_rss_bytes=1.5e9) for w in (0.26, 0.27, 0.30)))
    table = report.memory.memory_table(records).set_index("strategy")
    assert list(table.index) == ["data", "model"]  # the kernel recorded no peak
    assert table.loc["data", "peak_gb"] == 3.1 and table.loc["model", "peak_gb"] == 1.5
    assert table.loc["data", "gb_moved"] == 0.0 and table.loc["model", "gb_moved"] == 0.5
    columns = report.memory.MEMORY_COLUMNS
    assert columns.index("gb_moved") == columns.index("peak_gb") + 1
    said = report.memory.memory_headline(table.reset_index())
    assert said == ("model hash k = 2 peaks at 1.50 GB a worker, 2.1x less than data "
                    "parallelism (3.10 GB), and moves 0.50 GB between workers, finishing in "
                    "0.260-0.300 s against 0.210-0.250 s (slower).")
    close = records.assign(wall_s=records["wall_s"].where(records["strategy"] != "model",
                                                          0.24))
    said = report.memory.memory_headline(report.memory.memory_table(close))
    assert said.endswith("(within noise).")
