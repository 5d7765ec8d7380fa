"""A study runs deduplication on and off side by side (``dedup: [true, false]``): two runs
per configuration, told apart in the records, the labels, the keys and the report, the
same answers; and the report's live-against-distinct-rows figure."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
import pytest

from sdnn_dask import records, report, study
from sdnn_dask.report import html as html_report
from sdnn_dask.study import RunSpec, Study, StudyError
from sdnn_dask.study.runner import Runner

STUDY = """
    name: dedup
    problems: [{neurons: 1024, layers: 30, inputs: 300}]
    runs:
      - {strategy: reference}
      - {strategy: [kernel, data], dedup: [true, false]}
      - {strategy: model, partition: block, dedup: [true, false]}
"""


# --------------------------------------------------------------------------- specs


def test_a_dedup_list_expands_into_runs_with_their_own_keys_and_labels():
    grid = Study.from_dict({"runs": [{"strategy": ["kernel", "data", "model", "hybrid"],
                                      "dedup": [True, False]}]})
    assert len(grid.specs) == 8
    assert [s.dedup for s in grid.specs] == [True, False] * 4
    assert len({s.key() for s in grid.specs}) == 8  # --resume tells them apart
    assert len({s.label for s in grid.specs}) == 8
    assert RunSpec("data", dedup=False).label == "data block dedup=off"
    assert RunSpec("kernel", dedup=True).label == "kernel dedup=on"
    # unset, it is no part of the key: runs recorded before dedup existed keep theirs
    assert RunSpec("kernel").key() == "f1b6268d7cd7"
    assert RunSpec("kernel", dedup=True).key() != RunSpec("kernel").key()
    assert RunSpec("kernel", dedup=True).key() != RunSpec("kernel", dedup=False).key()
    # the same for classes
    assert RunSpec("kernel", classes=False).key() != RunSpec("kernel").key()
    assert RunSpec("kernel", classes=False).key() != RunSpec("kernel", classes=True).key()


@pytest.mark.parametrize("entry, message", [
    ({"strategy": "kernel", "dedup": "yes"}, r"runs\[0\]: dedup must be true or false, "
                                             "got 'yes'"),
    ({"strategy": "data", "dedup": [True, 1]}, r"runs\[0\]: dedup must be true or false, "
                                               "got 1"),
    ({"strategy": ["reference", "kernel"], "dedup": False},
     r"runs\[0\]: dedup is the compiled kernel's .* the reference recurrence computes"),
    ({"strategy": "model", "dedpu": True}, r"unknown key 'dedpu' \(did you mean 'dedup'\?\)"),
    ({"strategy": "kernel", "classes": "on"}, r"runs\[0\]: classes must be true or false, "
                                              "got 'on'"),
    ({"strategy": ["reference", "model"], "classes": True},
     r"runs\[0\]: classes is the compiled kernel's .* the reference recurrence computes"),
])
def test_bad_dedup_entries_are_refused_before_anything_runs(entry, message):
    with pytest.raises(StudyError, match=message):
        Study.from_dict({"runs": [entry]})


def test_a_spec_refuses_a_dedup_that_is_not_a_bool():
    with pytest.raises(StudyError, match="dedup must be true or false, got 0"):
        RunSpec("hybrid", dedup=0)
    with pytest.raises(StudyError, match="the reference recurrence computes every row"):
        RunSpec("reference", dedup=False)


def test_a_study_file_names_itself_in_a_dedup_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("runs: [{strategy: kernel, dedup: maybe}]\n")
    with pytest.raises(StudyError, match=r"bad\.yaml: runs\[0\]: dedup must be true or"):
        Study.from_yaml(path)


# --------------------------------------------------------------------------- runs


@pytest.fixture(scope="module")
def problem():
    return study.load_problem(neurons=1024, layers=30, inputs=300, seed=0)


def test_each_setting_governs_its_run_and_the_answers_are_the_same(client, problem):
    """Kernel, data, model and hybrid runs: the spec's dedup reaches the tasks (set on the
    client, model and hybrid included), and on and off give the same bits."""
    runner = Runner(problem, client, study="bits", warm_up=False)
    outputs = {}
    for strategy in ("kernel", "data", "model", "hybrid"):
        for dedup in (True, False):
            outcome = runner.run(RunSpec(strategy, dedup=dedup))
            assert outcome.check == "PASS", (strategy, dedup)
            assert outcome.result.params["dedup"] is dedup, (strategy, dedup)
            assert set(outcome.records.runs["dedup"]) == {"on" if dedup else "off"}
            outputs[strategy, dedup] = outcome.result.output
    kernel = outputs["kernel", False]
    for key, output in outputs.items():
        assert (output != kernel).nnz == 0, key
        assert np.array_equal(output.indices, kernel.indices), key


@pytest.fixture(scope="module")
def ran(client, tmp_path_factory):
    """The :data:`STUDY` run once on the session's 2-worker cluster."""
    folder = tmp_path_factory.mktemp("dedup-study")
    path = folder / "dedup.yaml"
    path.write_text(textwrap.dedent(STUDY))
    said: list[str] = []
    found = Study.from_yaml(path).run(client, folder / "results", bar=False,
                                      progress=said.append)
    return path, folder / "results", found, said


def test_a_study_runs_both_settings_side_by_side(ran):
    _, _, found, said = ran
    runs = found.runs.drop_duplicates("run_id")
    assert len(runs) == 7 and set(runs["check"]) == {"PASS"}
    per = runs.groupby("strategy")["dedup"].agg(sorted).to_dict()
    assert per == {"reference": [""], "kernel": ["off", "on"], "data": ["off", "on"],
                   "model": ["off", "on"]}
    assert runs["spec"].nunique() == 7
    assert "study dedup: 7 run(s), 0 already recorded, 7 to run" in said
    layers = found.layers.merge(runs[["run_id", "strategy", "dedup"]], on="run_id")
    for strategy in ("kernel", "data"):
        mine = layers[layers["strategy"] == strategy]
        per_layer = mine.groupby(["dedup", "layer"])[["rows_out", "distinct_out"]].sum()
        on, off = per_layer.loc["on"], per_layer.loc["off"]
        assert (on["distinct_out"] < on["rows_out"]).any(), strategy  # rows merged
        assert (on["distinct_out"] <= on["rows_out"]).all(), strategy
        assert (off["distinct_out"] == off["rows_out"]).all(), strategy  # none merged
        assert on["rows_out"].tolist() == off["rows_out"].tolist()  # the same live rows


def test_resuming_treats_the_two_settings_as_two_runs(ran, client):
    path, results, _, _ = ran
    assert len(records.recorded_keys(results)) == 7
    said: list[str] = []
    Study.from_yaml(path).run(client, results, resume=True, bar=False, report=False,
                              progress=said.append)
    assert "study dedup: 7 run(s), 7 already recorded, 0 to run" in said
    # the same grid with one setting only: both already recorded, nothing to run
    grid = Study.from_dict({"name": "dedup", "problems": [
        {"neurons": 1024, "layers": 30, "inputs": 300}],
        "runs": [{"strategy": "kernel", "dedup": False}]})
    said.clear()
    grid.run(client, results, resume=True, bar=False, report=False, progress=said.append)
    assert "study dedup: 1 run(s), 1 already recorded, 0 to run" in said


# --------------------------------------------------------------------------- report


def test_the_report_shows_dedup_and_draws_live_against_distinct_rows(ran):
    _, results, found, _ = ran
    cmp = report.comparison(found.runs)
    assert len(cmp) == 7  # on and off are two configurations, not repeats of one
    assert "dedup" in report.shown_columns(cmp)
    kernel = cmp[cmp["strategy"] == "kernel"]
    assert sorted(kernel["dedup"]) == ["off", "on"]
    assert report.describe(kernel[kernel["dedup"] == "off"].iloc[0]) == \
        "serial kernel, dedup off"
    off = (cmp["strategy"] == "kernel") & (cmp["dedup"] == "off")
    fastest = cmp.assign(**{c: np.where(off, 1e-9, cmp[c]) for c in
                            ("seconds", "seconds_min", "seconds_max")},
                         repeats=np.where(off | (cmp["seconds"] == cmp.loc[~off, "seconds"]
                                                 .min()), 2, cmp["repeats"]))
    assert report.headline(fastest).startswith("The serial kernel (dedup off) is fastest")
    page = (results / "report.html").read_text()
    assert "Live rows against distinct rows, per layer" in page
    assert "<th>dedup</th>" in page
    assert (results / "distinct-rows.png").is_file()
    summary = (results / "summary.md").read_text()
    assert "(distinct-rows.png)" in summary and "`dedup`: on:" in summary

    table = report.distinct_rows(found.runs, found.layers)
    assert list(dict.fromkeys(table["series"])) == [
        "kernel, dedup on", "kernel, dedup off", "data block, 2 w, dedup on",
        "data block, 2 w, dedup off"]  # model runs are not in it
    assert table.groupby("series")["layer"].count().tolist() == [30] * 4


def test_the_distinct_rows_figure_fits_its_legend_and_labels(ran):
    pytest.importorskip("matplotlib")
    from sdnn_dask.report import figures

    _, _, found, _ = ran
    fig = figures.distinct_figure(report.distinct_rows(found.runs, found.layers),
                                  title=" — a title")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert ax.get_xlabel() == "layer" and ax.get_ylabel() == "rows after the layer"
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["live rows (every run)", "distinct rows: kernel, dedup on",
                      "distinct rows: kernel, dedup off (= live)",
                      "distinct rows: data block, 2 w, dedup on",
                      "distinct rows: data block, 2 w, dedup off (= live)"]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # laid out as when saved
    renderer = canvas.get_renderer()
    box = fig.bbox
    # the legend, the axis labels and the title, each within the image (nothing cut off)
    for artist in (ax.get_legend(), ax.xaxis.label, ax.yaxis.label,
                   fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)):
        extent = artist if hasattr(artist, "x0") else artist.get_window_extent(renderer)
        assert (extent.x0 >= box.x0 - 1 and extent.y0 >= box.y0 - 1
                and extent.x1 <= box.x1 + 1 and extent.y1 <= box.y1 + 1), artist
    assert figures.distinct_figure(pd.DataFrame()) is None


def test_records_without_distinct_rows_have_no_such_figure(ran, tmp_path):
    pytest.importorskip("matplotlib")
    _, _, found, _ = ran
    old = found.layers.drop(columns="distinct_out")  # as recorded before it was counted
    assert report.distinct_rows(found.runs, old).empty
    page = html_report.html_report(found.runs, old)
    assert "Live rows against distinct rows" not in page
    assert "What survives each layer" in page  # the rest of the report is there
    written = [p.name for p in html_report.write_report(tmp_path, found.runs, old)]
    assert "distinct-rows.png" not in written and "survivors.png" in written
    # nothing recorded at all for the kernel and data runs' layers: no figure either
    assert report.distinct_rows(found.runs, old.iloc[:0]).empty
