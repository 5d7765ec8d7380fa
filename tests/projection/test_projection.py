"""The cost model: calibration recovers known coefficients, predictions behave, the
survival replay matches the kernel, and a real small calibration reproduces itself."""

from __future__ import annotations

import itertools
import math

import dask
import numpy as np
import pandas as pd
import pytest
from projection_cases import (
    DENSITY,
    SETTINGS,
    TRUE,
    _levels,
    _synthetic,
    synthetic_kernel_records,
    synthetic_model_records,
)

from sdnn_dask.core.kernels import KernelSettings, forward_block
from sdnn_dask.core.network import Network
from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.projection import (
    ALL_TERMS,
    KERNEL_TERMS,
    CostModel,
    Survival,
    project_published,
    projection_table,
)
from sdnn_dask.projection.kernel_work import kernel_schedule as _kernel_schedule


def test_calibration_recovers_known_coefficients():
    runs, layers = _synthetic()
    fitted = CostModel.calibrate(runs, layers, input_density=DENSITY, settings=SETTINGS)
    for name in ALL_TERMS:
        assert getattr(fitted, name) == pytest.approx(getattr(TRUE, name), rel=1e-5), name
    assert fitted.calibrated_on == frozenset(runs["run_id"])
    assert fitted.weights_per_row == 32


def test_part_entries_fitted_as_one_when_every_part_reads_the_same_share():
    # records whose parts all read all the other part's columns (contiguous parts)
    # cannot tell the own entries from the others': one cost per entry for both
    same = TRUE.with_coefficients(part_foreign=TRUE.part_entry)
    kr, kl = synthetic_kernel_records(same)
    mr, ml = synthetic_model_records(same)
    runs = pd.concat([kr, mr], ignore_index=True)
    layers = pd.concat([kl, ml], ignore_index=True)
    full = [rid for rid in runs["run_id"].unique()
            if not rid.startswith(("m", "h")) or int(rid[1:]) % 4 < 2]
    fitted = CostModel.calibrate(runs, layers, input_density=DENSITY, settings=SETTINGS,
                                 run_id=full)
    assert fitted.part_entry == pytest.approx(TRUE.part_entry, rel=1e-5)
    assert fitted.part_foreign == fitted.part_entry


def test_calibration_selection_and_robustness():
    runs, layers = _synthetic()
    # a selection keeps only some runs: model terms cannot be fitted without model runs
    kernel_only = CostModel.calibrate(runs, layers, input_density=DENSITY,
                                      settings=SETTINGS, strategy=["kernel", "data"])
    assert kernel_only.dense_fma == pytest.approx(TRUE.dense_fma, rel=1e-5)
    assert kernel_only.latency == 0 and kernel_only.part_entry == 0
    assert all(rid.startswith(("k", "d")) for rid in kernel_only.calibrated_on)
    # one layer of one run preempted for 50 ms (a burst of load) does not move the fit
    spiked = layers.copy()
    at = spiked.index[(spiked["run_id"] == "k3") & (spiked["layer"] == 2)][0]
    spiked.loc[at, "seconds"] += 0.05
    runs2 = runs.copy()
    runs2.loc[runs2["run_id"] == "k3", ["compute_s", "wall_s"]] += 0.05
    robust = CostModel.calibrate(runs2, spiked, input_density=DENSITY, settings=SETTINGS)
    for name in KERNEL_TERMS:
        assert getattr(robust, name) == pytest.approx(getattr(TRUE, name), rel=0.02,
                                                      abs=1e-12), name
    with pytest.raises(ValueError, match="no such column"):
        CostModel.calibrate(runs, layers, colour="red")
    with pytest.raises(ValueError, match="match the selection"):
        CostModel.calibrate(runs, layers, neurons=7)


# --------------------------------------------------------------------------------------
# Predictions


def _aggregated(n: int = 1024, n_layers: int = 30, rows: int = 10000) -> Survival:
    rng = np.random.default_rng(5)
    live, nnz = _levels(rng, rows, n, n_layers)
    return Survival(n, live, nnz, rows, None, "synthetic")


@pytest.mark.parametrize("strategy,workers,parts,groups", [
    ("kernel", 1, None, 1), ("data", 1, None, 1), ("data", 2, None, 1),
    ("model", 2, 2, 1), ("hybrid", 2, 2, 2), ("data", 896, None, 1)])
def test_more_rows_or_layers_take_longer(strategy, workers, parts, groups):
    profile = _aggregated()
    seconds = [TRUE.predict(strategy, workers=workers, neurons=1024, layers=layers, rows=rows,
                            parts=parts, row_groups=groups, survival=profile).seconds
               for layers, rows in [(30, 2000), (30, 8000), (30, 40000), (60, 40000)]]
    assert all(a < b for a, b in itertools.pairwise(seconds)), seconds


def test_prediction_terms_add_up_and_scale():
    profile = _aggregated()
    p = TRUE.predict("model", workers=2, neurons=1024, layers=30, rows=10000, parts=2,
                     survival=profile)
    assert p.seconds == pytest.approx(p.compute_s + p.latency_s + p.communication_s
                                      + p.overhead_s)
    balanced = TRUE.with_coefficients(imbalance=0.0).predict(
        "model", workers=2, neurons=1024, layers=30, rows=10000, parts=2, survival=profile)
    assert p.compute_s == pytest.approx(balanced.compute_s * (1 + TRUE.imbalance))
    assert p.latency_s == pytest.approx(30 * TRUE.latency)
    assert p.communication_s == pytest.approx(TRUE.byte * p.bytes_moved)
    assert p.bytes_moved > 0
    assert p.edges_per_s == pytest.approx(10000 * 32 * 1024 * 30 / p.seconds)
    # twice as fast cores halve the compute, not the exchange
    fast = TRUE.predict("model", workers=2, neurons=1024, layers=30, rows=10000, parts=2,
                        survival=profile, speed=2.0)
    assert fast.compute_s == pytest.approx(p.compute_s / 2)
    assert fast.latency_s == p.latency_s and fast.communication_s == p.communication_s
    # two workers: the busiest gets half the blocks, each slowed by `busy`
    one = TRUE.predict("data", workers=1, neurons=1024, layers=30, rows=10000, blocks=2,
                       survival=profile)
    two = TRUE.predict("data", workers=2, neurons=1024, layers=30, rows=10000, blocks=2,
                       survival=profile)
    assert two.compute_s == pytest.approx(one.compute_s / 2 * TRUE.busy, rel=0.05)
    # a hypergraph-like partition that reads half the other part's columns moves less
    half = TRUE.predict("model", workers=2, neurons=1024, layers=30, rows=10000, parts=2,
                        survival=profile, cross_fraction=0.5)
    assert half.bytes_moved < p.bytes_moved
    assert half.compute_s < p.compute_s  # fewer of the others' columns scattered in
    # per layer: a constant share given layer by layer, or the last one repeated, is the
    # same; a share that differs by layer is priced with each layer's own
    same = TRUE.predict("model", workers=2, neurons=1024, layers=30, rows=10000, parts=2,
                        survival=profile, cross_fraction=[0.5, 0.5])
    assert same.seconds == pytest.approx(half.seconds)
    light_first = TRUE.predict("model", workers=2, neurons=1024, layers=30, rows=10000,
                               parts=2, survival=profile, cross_fraction=[0.1] * 5 + [0.9])
    heavy_first = TRUE.predict("model", workers=2, neurons=1024, layers=30, rows=10000,
                               parts=2, survival=profile, cross_fraction=[0.9] * 5 + [0.1])
    assert light_first.bytes_moved != heavy_first.bytes_moved
    with pytest.raises(ValueError, match="cross_fraction"):
        TRUE.predict("model", workers=2, neurons=1024, layers=3, rows=10, parts=2,
                     survival=profile, cross_fraction=[0.5, 1.5])
    with pytest.raises(ValueError, match="strategy"):
        TRUE.predict("magic", workers=1, neurons=1024, layers=3, rows=10, survival=profile)
    with pytest.raises(ValueError, match="N = 1024, not 4096"):
        TRUE.predict("data", workers=1, neurons=4096, layers=3, rows=10, survival=profile)
    with pytest.raises(ValueError, match="no survival profile"):
        TRUE.predict("data", workers=1, neurons=1024, layers=3, rows=10)


def test_project_published_states_its_assumptions():
    profile = _aggregated(n=65536, n_layers=20, rows=600)
    result = project_published(TRUE, profile, bandwidth_gbit_s=100)
    p = result["prediction"]
    assert (p.neurons, p.layers, p.rows, p.workers) == (65536, 1920, 60000, 896)
    assert result["published_s"] == 51
    assert result["ratio"] == pytest.approx(p.seconds / 51)
    assert p.edges_per_s == pytest.approx(60000 * 4_026_531_840 / p.seconds)
    text = " ".join(result["assumptions"])
    assert "100 Gb/s" in text and "per-core speed" in text and "repeated to 1920" in text
    assert p.compute_s == pytest.approx(result["max_block_s"])
    assert result["mean_block_s"] <= result["max_block_s"]
    assert result["survivors"]["mean"] == pytest.approx(profile.live[-1] * 100 / 896)
    slower = project_published(TRUE, profile, speed=0.5)["prediction"]
    assert slower.compute_s == pytest.approx(2 * p.compute_s)
    with pytest.raises(ValueError, match="not 65536"):
        project_published(TRUE, _aggregated())


# --------------------------------------------------------------------------------------
# The survival profile and the kernel's schedule


@pytest.fixture(scope="module")
def small_network():
    return make_network(1024, 16, seed=0)


@pytest.fixture(scope="module")
def small_inputs():
    return make_inputs(1500, 1024, seed=0)


@pytest.mark.parametrize("threshold,chunk", [(0.05, 1 << 20), (0.05, 1 << 16), (2.0, 1 << 20),
                                             (0.0, 1 << 20), (0.3, 1 << 18)])
def test_replayed_schedule_matches_the_kernel(small_network, small_inputs, threshold, chunk):
    profile = Survival.measure(small_network, small_inputs)
    # the schedule replayed is every live row's (identical rows not merged)
    trace = forward_block(small_network, small_inputs,
                          settings=KernelSettings(threshold, chunk, dedup=False)).trace
    counts, levels = profile.row_counts()
    work, block, modes = _kernel_schedule(counts, levels, 1024, KernelSettings(threshold,
                                                                                 chunk), 32)
    assert modes == trace["mode"].tolist()
    assert profile.live[1:].tolist() == trace["rows_out"].tolist()
    assert profile.nnz[1:].tolist() == trace["nnz_out"].tolist()
    assert profile.live[:-1].tolist()[1:] == trace["rows_in"].tolist()[1:]
    dense = trace["mode"] == "dense"
    assert (work[dense.to_numpy(), 3] == 0).all()  # no sparse edges in a dense layer
    assert (work[(trace["mode"] == "sparse").to_numpy(), 0] == 0).all()
    assert block[len(KERNEL_TERMS) + 1] == 1500


def test_survival_resized_extended_split(small_network, small_inputs):
    profile = Survival.measure(small_network, small_inputs)
    assert profile.per_row and profile.rows == 1500 and profile.layers == 16
    assert profile.live[0] == (np.diff(small_inputs.indptr) > 0).sum()
    assert profile.nnz[0] == small_inputs.nnz
    prefix = profile.resized(500)
    assert prefix.nnz.tolist() == Survival.measure(small_network, small_inputs[:500]).nnz.tolist()
    tripled = profile.resized(4500)
    assert tripled.live.tolist() == (3 * profile.live).tolist()
    longer = profile.extended(40)
    assert longer.layers == 40 and (longer.nnz[16:] == profile.nnz[16]).all()
    assert profile.extended(8).nnz.tolist() == profile.nnz[:9].tolist()
    blocks = profile.split(3)
    assert sum(b.rows for b in blocks) == 1500
    assert np.sum([b.nnz for b in blocks], axis=0).tolist() == profile.nnz.tolist()
    table = profile.table()
    assert table["nnz_in"].tolist()[1:] == table["nnz_out"].tolist()[:-1]
    aggregated = Survival(1024, profile.live, profile.nnz, 1500)
    assert aggregated.resized(3000).nnz[3] == 2 * profile.nnz[3]
    assert sum(b.rows for b in aggregated.split(4)) == 1500
    with pytest.raises(ValueError):
        aggregated.row_counts()


def test_extended_schedule_copies_the_plateau(small_network, small_inputs):
    profile = Survival.measure(small_network, small_inputs).extended(200)
    counts, levels = profile.row_counts()
    fast = _kernel_schedule(counts, levels, 1024, SETTINGS, 32)
    every = np.ascontiguousarray(profile.counts[profile.level_map])
    slow = _kernel_schedule(every, np.arange(201), 1024, SETTINGS, 32)
    assert np.allclose(fast[0], slow[0]) and np.allclose(fast[1], slow[1])
    assert fast[2] == slow[2]


# --------------------------------------------------------------------------------------
# A real small calibration


@pytest.fixture(scope="module")
def real_records(client):
    from sdnn_dask.parallel import DataParallelExecutor, ModelParallelExecutor, run_serial
    from sdnn_dask.records import layer_records, records_frame, run_records

    net = make_network(1024, 12, seed=0)
    first = sorted(client.nthreads())[:1]
    one, two = DataParallelExecutor(client, net, workers=first), DataParallelExecutor(client,
                                                                                      net)
    model = ModelParallelExecutor(client, net)
    inputs = make_inputs(3000, 1024, seed=0)
    runs, layers = [], []
    # the cost model models the kernel with one value per neuron (classes off)
    with dask.config.set({"sdnn.kernel.classes": False}):
        for _ in range(2):
            for rows in (600, 1500, 3000):
                x = inputs[:rows]
                for result in (run_serial(net, x, "kernel"),
                               one.run(x, n_blocks=1), two.run(x, n_blocks=2),
                               model.run(x, partition="block", k=2),
                               model.run(x, partition="block", k=2, row_groups=2)):
                    runs.append(run_records(result, study="test"))
                    layers.append(layer_records(result, study="test"))
    profile = Survival.measure(net, inputs)
    return records_frame(runs), records_frame(layers), {(1024, 12, 3000): profile}


def test_real_calibration_reproduces_its_own_runs(real_records):
    runs, layers, profiles = real_records
    model = CostModel.calibrate(runs, layers, profiles=profiles)
    # every coefficient is physical: nothing negative, the main ones positive
    assert all(v >= 0 for v in model.coefficients().values())
    # (latency and busy are fitted from millisecond runs here: noise can zero them)
    assert model.dense_fma > 0
    table = projection_table(model, runs, layers, profiles=profiles)
    assert len(table) == runs["run_id"].nunique() and not table["held_out"].any()
    assert set(table.columns) >= {"network", "strategy", "partition", "workers", "rows",
                                  "measured_s", "projected_s", "error_pct", "held_out"}
    # loose: tiny runs (milliseconds) on a shared 2-core machine
    error = table.groupby(["strategy", "workers", "rows"])["error_pct"].median().abs()
    assert error.median() < 30, table  # one disturbed run must not fail the suite
    # the aggregated profile read off the records gives the same levels as measured
    rid = runs.loc[(runs["strategy"] == "kernel") & (runs["inputs"] == 3000), "run_id"].iloc[0]
    read = Survival.from_records(runs, layers, rid)
    assert read.nnz[1:].tolist() == profiles[1024, 12, 3000].nnz[1:].tolist()
    assert read.nnz[0] == pytest.approx(profiles[1024, 12, 3000].nnz[0], rel=0.1)
    rid = runs.loc[(runs["strategy"] == "model") & (runs["inputs"] == 3000), "run_id"].iloc[0]
    read = Survival.from_records(runs, layers, rid)
    assert read.nnz[1:].tolist() == profiles[1024, 12, 3000].nnz[1:].tolist()
    # Bytes on loopback cost 0.1-0.5 ns each: a run's 21 MB is a few ms against per-layer
    # noise of the same order, and moved bytes grow with the step, so NNLS may put the byte
    # term at 0 (in 2 of 4 calibrations measured here). Its recovery is tested on synthetic
    # records above; here, where it is fitted, it is a loopback's bandwidth.
    assert math.isinf(model.bandwidth) or model.bandwidth > 2e8
    # the published projection from the calibration's own profile, carried over to 65536
    published = project_published(model)
    assert published["prediction"].seconds > 0
    assert "carried over to N = 65536" in " ".join(published["assumptions"])
    with pytest.raises(ValueError, match="no survival profile"):
        project_published(TRUE)


def test_network_prefix_is_the_same_network():
    """The check script times L-layer prefixes of one generated network."""
    long, short = make_network(1024, 12, seed=0), make_network(1024, 7, seed=0)
    assert all((a != b).nnz == 0 for a, b in zip(long.layers[:7], short.layers, strict=True))
    net = Network(long.layers[:7], bias=long.bias, ymax=long.ymax)
    assert net.edges == short.edges


# --------------------------------------------------------------------------- the report


def _problems(rows):
    return pd.DataFrame(rows, columns=["neurons", "layers", "inputs"])


def test_held_out_split_rules():
    from sdnn_dask.projection import held_out_split

    selection, rule = held_out_split(_problems([(4096, 24, 10), (1024, 24, 10),
                                                (1024, 120, 10)]))
    assert selection == {"neurons": 1024} and rule.endswith("held out: N = 4096")
    crossed = _problems([(1024, 24, 10), (1024, 120, 50), (1024, 24, 50), (1024, 120, 10)])
    selection, rule = held_out_split(crossed.assign(run_id=["a", "b", "c", "d"]))
    assert selection == {"run_id": ["a", "c", "d"]}  # 120 layers x 50 rows held out
    assert "held out: the largest (120 layers, 50 rows)" in rule
    assert held_out_split(_problems([(1024, 24, 10)]))[0] == {}


def test_report_projection_calibrates_on_the_smallest_n_and_holds_out_the_rest(client,
                                                                               tmp_path):
    from sdnn_dask.projection import report_projection
    from sdnn_dask.study import Study

    grid = Study.from_dict({"name": "p", "problems": [
        {"neurons": 1024, "layers": 6, "inputs": 400}, {"neurons": 1024, "layers": 12,
                                                        "inputs": 800},
        {"neurons": 4096, "layers": 6, "inputs": 300}],
        "runs": [{"strategy": "kernel", "dedup": [False, True]},
                 {"strategy": "data", "workers": [1, 2], "dedup": False},
                 {"strategy": "model", "dedup": False},
                 {"strategy": "model", "transport": "graph", "dedup": False}]})
    found = grid.run(client, tmp_path / "r", bar=False, report=False)
    table = report_projection(found.runs, found.layers)  # dedup on and off, apart
    assert set(table.loc[table["held_out"], "network"]) == {"radixnet-4096-6-s0"}
    assert set(table.loc[~table["held_out"], "network"]) == {"radixnet-1024-6-s0",
                                                             "radixnet-1024-12-s0"}
    assert table.attrs["rule"] == "calibrated on N = 1024, held out: N = 4096"
    assert len(table) == 3 * 5 and set(table["runs"]) == {1}  # graph runs left out
    kernel = table[table["strategy"] == "kernel"]
    assert set(kernel["partition"]) == {"none, dedup on", "none, dedup off"}
    assert "held-out configurations within 20%" in table.attrs["backtest"]
    assert np.allclose(table["error_pct"],
                       100 * (table["projected_s"] / table["measured_s"] - 1))
    assert (table["projected_s"] > 0).all()
    one = found.runs[(found.runs["layers"] == 6) & (found.runs["neurons"] == 1024)]
    alone = report_projection(one, found.layers)  # one problem: each held out in turn
    assert alone.attrs["rule"].startswith("one problem")
    assert set(alone.loc[alone["held_out"], "strategy"]) == {"data", "model"}
    merged = found.runs[found.runs["dedup"] == "on"]  # the serial kernel's dedup runs
    assert (report_projection(merged, found.layers)["partition"] == "none").all()
    with pytest.raises(ValueError, match="serial kernel runs"):
        report_projection(one[one["strategy"] != "kernel"], found.layers)


def test_a_workers_blocks_are_priced_merged():
    """More blocks than workers: a worker's blocks run merged, so 64 blocks on 2 workers
    cost what 2 blocks of the same rows do; run alone, each small block pays for its own
    late layers on a few rows."""
    profile = _aggregated()
    args = dict(workers=2, neurons=1024, layers=30, rows=10000, survival=profile)
    two = TRUE.predict("data", blocks=2, **args)
    merged = TRUE.predict("data", blocks=64, **args)
    alone = TRUE.predict("data", blocks=64, merge=False, **args)
    assert merged.compute_s == pytest.approx(two.compute_s, rel=0.02)
    assert alone.compute_s > 1.2 * merged.compute_s
