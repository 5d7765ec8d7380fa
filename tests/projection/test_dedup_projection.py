"""The cost model with identical rows (``dedup``) and identical neurons (``classes``)
computed once: the work it prices, its calibration on such records, the joined data
parallelism, the report's held-out backtest and the published run placed from records."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from projection_cases import DENSITY, SETTINGS, TRUE, _levels, _run_row, _synthetic

from sdnn_dask.core.kernels import KernelSettings, forward_block
from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.projection import (
    ALL_TERMS,
    BLOCK_TERMS,
    CLASS_SHARE,
    KERNEL_TERMS,
    CostModel,
    Survival,
    backtest_line,
    join_layer,
)
from sdnn_dask.projection.kernel_work import kernel_estimate
from sdnn_dask.projection.part_work import part_work

DEDUP = KernelSettings(0.05, 1 << 20, dedup=True, classes=True)
#: The known coefficients, with a class step's scatter of its own cost.
KNOWN = TRUE.with_coefficients(class_edge=8.0e-9)


def _merging(rng, live: np.ndarray) -> np.ndarray:
    """Distinct rows per level: every row distinct for the first half of the levels,
    then a few copies of each, down to a handful of vectors."""
    distinct = live.astype(float).copy()
    half = len(live) // 2
    distinct[half:] = np.maximum(1, live[half:] // rng.integers(2, 60, len(live) - half))
    return np.minimum(distinct, live)


def synthetic_dedup_records(model: CostModel, seed: int = 7, runs: int = 30):
    """Serial runs with identical rows and classes computed once, made from ``model``'s
    equations: the first layer scatters into classes, every later one steps dense."""
    rng = np.random.default_rng(seed)
    kvec = np.array([getattr(model, t) for t in KERNEL_TERMS])
    full = np.concatenate([kvec, [getattr(model, t) for t in BLOCK_TERMS]])
    run_rows, layer_rows = [], []
    for i in range(runs):
        n = int(rng.choice([256, 1024]))
        n_layers, rows = int(rng.integers(4, 12)), int(rng.integers(300, 6000))
        live, nnz = _levels(rng, rows, n, n_layers)
        distinct = _merging(rng, live)
        modes = ["sparse"] + ["dense"] * (n_layers - 1)
        work, block, _, _ = kernel_estimate(live, nnz, n, DEDUP, 32.0, modes,
                                            distinct=distinct, class_share=CLASS_SHARE)
        seconds = work @ kvec
        compute = float(seconds.sum() + block @ full)
        rid = f"dd{i}"
        run_rows.append(_run_row(rid, "kernel", n, n_layers, rows, compute_s=compute,
                                 wall_s=compute, chunk_bytes=1 << 20, dense_threshold=0.05,
                                 dedup="on", classes="on"))
        layer_rows += [{"run_id": rid, "block": 0, "layer": k + 1, "mode": modes[k],
                        "rows_in": live[k], "rows_out": live[k + 1],
                        "nnz_out": nnz[k + 1], "seconds": seconds[k],
                        "distinct_out": distinct[k + 1]} for k in range(n_layers)]
    return pd.DataFrame(run_rows), pd.DataFrame(layer_rows)


# --------------------------------------------------------------------------- the work


def test_fewer_distinct_rows_less_work():
    rng = np.random.default_rng(3)
    live, nnz = _levels(rng, 5000, 1024, 20)
    modes = ["dense"] * 20
    every, *_ = kernel_estimate(live, nnz, 1024, SETTINGS, 32.0, modes)
    same, *_ = kernel_estimate(live, nnz, 1024, SETTINGS, 32.0, modes, distinct=live)
    assert np.array_equal(every, same)  # all distinct: the plain kernel's work
    fewer = _merging(rng, live)
    assert (fewer < live).any()
    merged, *_ = kernel_estimate(live, nnz, 1024, SETTINGS, 32.0, modes, distinct=fewer)
    kvec = np.array([getattr(TRUE, t) for t in KERNEL_TERMS])
    assert (merged[:, 0] <= every[:, 0]).all() and merged[:, 0].sum() < every[:, 0].sum()
    assert (merged @ kvec).sum() < (every @ kvec).sum()
    # monotone: more distinct rows, more work
    halfway = np.ceil((fewer + live) / 2)
    between, *_ = kernel_estimate(live, nnz, 1024, SETTINGS, 32.0, modes, distinct=halfway)
    assert (merged @ kvec).sum() < (between @ kvec).sum() < (every @ kvec).sum()


def test_classes_cut_a_dense_steps_work_sixteenfold():
    rng = np.random.default_rng(4)
    live, nnz = _levels(rng, 3000, 1024, 10)
    modes = ["sparse"] + ["dense"] * 9
    plain, *_ = kernel_estimate(live, nnz, 1024, SETTINGS, 32.0, modes)
    classes, *_ = kernel_estimate(live, nnz, 1024, SETTINGS, 32.0, modes,
                                  class_share=CLASS_SHARE)
    dense = np.arange(1, 10)
    assert np.allclose(classes[dense, 0], plain[dense, 0] / 16)  # multiply-adds
    assert np.allclose(classes[dense, 1], plain[dense, 1] / 16)  # tile set-ups
    assert classes[0, 10] == pytest.approx(plain[0, 3] / 16)  # the scatter's edges
    assert classes[0, 3] == 0 and plain[0, 10] == 0  # its own term
    # the scatter leaves a tile over the classes: no sparse rows made dense after it
    assert classes[1, 6] == 0 and plain[1, 6] > 0
    # without modes, classes step dense after the first layer, whatever the density
    _, _, names, _ = kernel_estimate(live, nnz, 1024, SETTINGS, 32.0,
                                     class_share=CLASS_SHARE)
    assert names == modes
    # a model-parallel part's dense step: its classes computed once, the rest copied
    kw, pw, _ = part_work(1000, 5e5, 5e5, 1024, 512, 16.0, SETTINGS, "dense")
    kc, pc, _ = part_work(1000, 5e5, 5e5, 1024, 512, 16.0, SETTINGS, "dense",
                          class_share=CLASS_SHARE)
    assert kc[0] == pytest.approx(kw[0] / 16) and np.array_equal(pc, pw)


def test_predictions_know_dedup_and_classes():
    rng = np.random.default_rng(5)
    live, nnz = _levels(rng, 10000, 1024, 30)
    plain = Survival(1024, live, nnz, 10000, None, "synthetic")
    merged = Survival(1024, live, nnz, 10000, None, "synthetic",
                      distinct=_merging(rng, live))
    args = dict(neurons=1024, layers=30, rows=10000)
    for strategy, shape in (("kernel", {"workers": 1}), ("data", {"workers": 2}),
                            ("model", {"workers": 2, "parts": 2}),
                            ("hybrid", {"workers": 2, "parts": 2, "row_groups": 2})):
        off = TRUE.predict(strategy, survival=merged, settings=SETTINGS, **args, **shape)
        on = TRUE.predict(strategy, survival=merged, settings=DEDUP, **args, **shape)
        # dedup on, but nothing merged: classes alone
        classes = TRUE.predict(strategy, survival=plain, settings=DEDUP, **args, **shape)
        assert on.compute_s < classes.compute_s < off.compute_s, strategy
        if strategy in ("model", "hybrid"):  # only distinct rows are exchanged
            assert on.bytes_moved < classes.bytes_moved


def test_distinct_rows_resized_extended_split():
    live = np.array([1000, 600, 500, 500, 500])
    distinct = np.array([1000, 600, 400, 20, 2])
    s = Survival(1024, live, live * 100, 1000, None, "s", distinct=distinct)
    assert s.computed.tolist() == distinct.tolist()
    assert s.computed_nnz[3] == pytest.approx(20 * 100)
    double = s.resized(2000)
    # rows never merged scale with the rows; merged levels keep their few vectors
    assert double.distinct.tolist() == [2000, 1200, 400, 20, 2]
    assert s.resized(100).distinct.tolist() == [100, 60, 50, 20, 2]  # capped by live
    assert s.extended(7).distinct.tolist() == [1000, 600, 400, 20, 2, 2, 2, 2]
    shares = s.split(4)
    assert all(b.distinct[-1] == 2 and b.distinct[0] == 250 for b in shares)
    assert Survival(1024, live, live * 100, 1000).distinct is None  # not known: all


def test_measured_distinct_rows_are_the_kernels():
    net, x = make_network(1024, 30, seed=0), make_inputs(1200, 1024, seed=0)
    profile = Survival.measure(net, x)
    trace = forward_block(net, x, settings=KernelSettings.resolve(dedup=True)).trace
    assert profile.distinct[1:].tolist() == np.minimum(
        trace["distinct_out"], profile.live[1:]).tolist()
    assert (profile.distinct <= profile.live).all()
    assert profile.distinct[-1] < profile.live[-1]  # the plateau's rows are copies
    assert Survival.measure(net, x, dedup=False).distinct is None
    # a per-row profile keeps its distinct rows through a resize (the plateau's count)
    assert profile.resized(2400).distinct[-1] == profile.distinct[-1]


# -------------------------------------------------------------------------- calibration


def test_calibration_on_dedup_records_recovers_known_coefficients():
    plain_runs, plain_layers = _synthetic()
    dedup_runs, dedup_layers = synthetic_dedup_records(KNOWN)
    runs = pd.concat([plain_runs, dedup_runs], ignore_index=True)
    layers = pd.concat([plain_layers, dedup_layers], ignore_index=True)
    fitted = CostModel.calibrate(runs, layers, input_density=DENSITY, settings=SETTINGS)
    for name in ALL_TERMS:
        assert getattr(fitted, name) == pytest.approx(getattr(KNOWN, name), rel=1e-5), name
    # on the dedup records alone: the dense terms (their sparse first layers' edges and
    # scans both grow as rows x N at one input density: not told apart)
    alone = CostModel.calibrate(dedup_runs, dedup_layers, input_density=DENSITY,
                                settings=SETTINGS)
    for name in ("dense_fma", "dense_tile", "dense_call"):
        assert getattr(alone, name) == pytest.approx(getattr(KNOWN, name), rel=1e-5), name
    # the same records read as if every live row, or every neuron, were computed do not
    # fit: the distinct rows and the classes are what the equations priced
    assert alone.residuals["kernel"] < 1e-4
    blind = CostModel.calibrate(dedup_runs.assign(dedup="off"), dedup_layers,
                                input_density=DENSITY, settings=SETTINGS)
    assert blind.residuals["kernel"] > 1e-2
    neurons = CostModel.calibrate(dedup_runs.assign(classes="off"), dedup_layers,
                                  input_density=DENSITY, settings=SETTINGS)
    assert neurons.dense_fma == pytest.approx(KNOWN.dense_fma / 16, rel=0.05)


def test_a_joined_run_steps_the_deep_layers_once():
    live = np.array([6000, 3000, 1200, 700, 680, 675, 675, 675, 675, 675, 675])
    assert join_layer(live) == 5  # two layers in a row keep >= 90% of their rows
    assert join_layer(np.array([1600, 800, 90, 80, 70])) == 2  # a 16th of the rows left
    rng = np.random.default_rng(6)
    nnz = live * 300
    profile = Survival(1024, live, nnz, 6000, None, "s",
                       distinct=np.minimum(live, [6000, 3000, 1200, 700, 600, 50, 4, 1, 1,
                                                  1, 1]))
    args = dict(workers=2, neurons=1024, layers=10, rows=6000, survival=profile,
                settings=DEDUP)
    apart = TRUE.predict("data", **args)
    joined = TRUE.predict("data", join=True, **args)
    at = join_layer(live)
    early = TRUE.block_seconds(profile, 2, settings=DEDUP, layers=at) * TRUE.busy
    deep = TRUE._deep_seconds(profile, DEDUP, at)
    assert joined.compute_s == pytest.approx(early.max() + deep)
    assert joined.compute_s != apart.compute_s
    assert rng is not None


# ------------------------------------------------------------------ the report, records


def test_backtest_line_counts_the_held_out():
    table = pd.DataFrame({"held_out": [False, True, True, True],
                          "error_pct": [90.0, 10.0, -25.0, 5.0]})
    line = backtest_line(table)
    assert line.startswith("2 of 3 held-out configurations within 20% (67%")
    assert "worst -25.0%" in line
    assert backtest_line(table.assign(held_out=False)).startswith("no held-out")


@pytest.fixture(scope="module")
def dedup_study(client, tmp_path_factory):
    """One small problem, every strategy, identical rows and classes computed once (the
    defaults), as ``compare`` runs it."""
    from sdnn_dask.study import Study

    grid = Study.from_dict({"name": "p45", "repeats": 2, "problems": [
        {"neurons": 1024, "layers": 24, "inputs": 800}],
        "runs": [{"strategy": "kernel"}, {"strategy": "data", "workers": 2,
                                          "partition": ["block", "hash"]},
                 {"strategy": "model", "partition": ["block", "hash"]},
                 {"strategy": "hybrid", "partition": "block"}]})
    folder = tmp_path_factory.mktemp("p45")
    found = grid.run(client, folder, bar=False, report=False)
    return SimpleNamespace(runs=found.runs, layers=found.layers, folder=folder)


def test_report_projection_of_one_dedup_problem_holds_out_each_configuration(dedup_study):
    from sdnn_dask.projection import report_projection

    runs, layers = dedup_study.runs, dedup_study.layers
    assert set(runs["dedup"]) == {"on"} and set(runs["classes"]) == {"on"}
    table = report_projection(runs, layers)
    assert table.attrs["rule"].startswith("one problem: each configuration")
    held = table[table["held_out"]]
    assert set(held["strategy"]) == {"data", "model", "hybrid"}
    assert set(table.loc[~table["held_out"], "strategy"]) == {"kernel"}
    assert len(held) == 5 and set(table["runs"]) == {2}
    assert (table["projected_s"] > 0).all()
    assert table.attrs["backtest"].startswith(f"{int((held['error_pct'].abs() <= 20).sum())}"
                                              " of 5 held-out configurations within 20%")
    serial = runs[runs["strategy"] == "kernel"]
    with pytest.raises(ValueError, match="nothing to hold out"):
        report_projection(serial, layers)


def test_compare_says_the_projection(dedup_study):
    """``compare`` (and ``report``) write the report through :func:`projection_of`, which
    says the projection's backtest in one line."""
    from sdnn_dask.report.outputs import projection_of

    said: list[str] = []
    table = projection_of(dedup_study.runs, dedup_study.layers, said.append)
    assert table is not None
    assert len(said) == 1 and said[0].startswith("projection: one problem")
    assert "held-out configurations within 20%" in said[0]


def test_the_published_run_placed_from_records(dedup_study):
    from sdnn_dask.projection import format_placement, place_published

    table = place_published(dedup_study.runs, dedup_study.layers)
    assert table["strategy"].tolist() == ["kernel", "data", "model", "hybrid"]
    assert table["workers"].tolist() == [1, 896, 896, 896]
    shape = table.set_index("strategy")
    assert shape.loc["hybrid", "row_groups"] == 32 and shape.loc["hybrid", "parts"] == 28
    assert shape.loc["model", "parts"] == 896
    assert (table["seconds"] > 0).all() and (table["published_s"] == 51).all()
    assert np.allclose(table["ratio"], table["seconds"] / 51)
    assert shape.loc["model", "bytes_moved"] > 0 and shape.loc["data", "bytes_moved"] == 0
    assert "carried over to N = 65536" in table.attrs["survival"]
    text = format_placement(table)
    assert text.startswith("Projected onto a cluster: 65536-1920 x 60000 on 32 nodes")
    assert "hybrid  32 x 28 parts" in text
    with pytest.raises(ValueError, match="layer records"):
        place_published(dedup_study.runs, dedup_study.layers.iloc[:0])


def test_report_published_prints_the_placement(dedup_study, capsys):
    from sdnn_dask.cli import main

    assert main(["report", str(dedup_study.folder), "--published", "--print-only"]) == 0
    out = capsys.readouterr().out
    assert "Projected onto a cluster: 65536-1920 x 60000 on 32 nodes" in out
    assert "  data    896 workers" in out and "calibration:" in out
