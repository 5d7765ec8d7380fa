"""The traffic a sample of the inputs predicts, and the hypergraph partition weighted by it:
the sample steps as the kernel does, counts identical rows exactly, and the partition
spends Mt-KaHyPar on the layers that carry traffic only."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.core.kernels.dedup import look_due
from sdnn_dask.core.network import Network
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import run_serial
from sdnn_dask.partition import make_neuron_partition
from sdnn_dask.partition.hypergraph import (
    TrafficSettings,
    hypergraph_partition,
    is_cached,
    network_digest,
    partition_columns,
)
from sdnn_dask.partition.level_mix import (
    FIXED_CANDIDATES,
    LevelMix,
    cut_traffic,
    describe,
    fixed_rows,
)
from sdnn_dask.partition.traffic import (
    SampledForward,
    SampledLevel,
    TrafficProfile,
    inputs_digest,
)

needs_mtkahypar = pytest.mark.skipif(importlib.util.find_spec("mtkahypar") is None,
                                     reason="needs the partition extra (Mt-KaHyPar)")


@pytest.fixture(scope="module")
def small():
    return make_network(1024, 30, seed=2), make_inputs(1500, 1024, seed=2)


def _truncated(net: Network, layers: int) -> Network:
    return Network(list(net.layers[:layers]), bias=net.bias, ymax=net.ymax)


def test_every_row_sampled_steps_as_the_kernel(small):
    net, x = small
    levels = {layer - 1: level for layer, _, level in
              SampledForward(net, x, sample=x.shape[0], dedup=False)}
    trace = run_serial(net, x, "reference").layers.groupby("layer")[
        ["rows_out", "nnz_out"]].sum()
    for level in range(1, net.n_layers):
        assert levels[level].live == trace.loc[level, "rows_out"]
        assert levels[level].distinct == levels[level].live  # nothing merged
        assert levels[level].nnz == trace.loc[level, "nnz_out"]
    # and the values themselves, at a few levels, are the kernel's live rows
    for level in (1, 7, 20):
        out = run_serial(_truncated(net, level), x, "reference").output
        live = out[np.diff(out.indptr) > 0]
        got = levels[level].values
        assert got.shape == live.shape
        np.testing.assert_allclose(got.toarray(), live.toarray(), rtol=1e-5, atol=1e-5)


def _distinct_rows(matrix: sp.csr_matrix) -> int:
    matrix = matrix[np.diff(matrix.indptr) > 0]
    matrix.sort_indices()
    return len({(matrix[i].indices.tobytes(), matrix[i].data.tobytes())
                for i in range(matrix.shape[0])})


def test_identical_rows_are_merged_where_the_parts_look(small):
    net, x = small
    levels = {layer - 1: level for layer, _, level in
              SampledForward(net, x, sample=x.shape[0], dedup=True)}
    looked = [m for m in range(1, net.n_layers) if look_due(m, net.n_layers)]
    assert looked[:2] == [8, 12]
    for m in looked[:3]:
        out = run_serial(_truncated(net, m), x, "reference").output
        assert levels[m].distinct == _distinct_rows(out)  # merged, and only those
        assert levels[m].live == np.count_nonzero(np.diff(out.indptr))
    assert any(levels[m].distinct < levels[m].live for m in looked[:3])
    assert levels[7].distinct == levels[7].live  # no look before layer 8
    assert levels[net.n_layers - 1].distinct == 1  # one saturated survivor at the end


def test_a_sample_stands_for_every_row(small):
    net, x = small
    full = {layer: lv for layer, _, lv in SampledForward(net, x, sample=x.shape[0])}
    part = {layer: lv for layer, _, lv in SampledForward(net, x, sample=500, seed=4)}
    assert part[1].live == full[1].live == x.shape[0]  # every input row is live
    assert part[1].distinct == x.shape[0]  # 500 rows, 3 each
    assert part[net.n_layers].distinct == 1  # the survivors' class counts once
    for layer in (2, 3, 4):  # the sample's estimate, within its sampling error
        assert part[layer].nnz == pytest.approx(full[layer].nnz, rel=0.15)
    assert SampledForward(net, x, sample=500, seed=4).sample == 500
    with pytest.raises(ValueError, match="columns"):
        SampledForward(net, x[:, :100])
    with pytest.raises(ValueError, match="positive"):
        SampledForward(net, x, sample=0)


def test_column_weights_count_the_nonzeros_each_column_carries():
    values = sp.csr_matrix(np.array([[1, 0, 2], [0, 0, 3]], dtype=np.float32))
    lv = SampledLevel(3, values, np.array([10.0, 1.0]), live=11.0)
    assert lv.column_weights().tolist() == [10.0, 0.0, 11.0]
    assert lv.distinct == 11.0 and lv.nnz == 21.0


def test_heavy_layers_are_the_ones_carrying_traffic(small):
    net, x = small
    profile = TrafficProfile.measure(net, x, sample=x.shape[0])
    frame = profile.frame()
    assert len(frame) == net.n_layers and frame["layer"].tolist()[0] == 1
    top = frame["nnz"].max()
    assert profile.heavy == frame.loc[frame["nnz"] >= 1e-3 * top, "layer"].tolist()
    assert set(profile.weights) == set(profile.heavy)
    assert np.isclose(profile.weights[1].sum(), frame["nnz"].iloc[0])
    every = TrafficProfile.measure(net, x, sample=x.shape[0], min_share=0.0)
    assert every.heavy == list(range(1, net.n_layers + 1))
    only_top = TrafficProfile.measure(net, x, sample=x.shape[0], min_share=1.0)
    assert only_top.heavy == frame.loc[frame["nnz"] == top, "layer"].tolist()
    with pytest.raises(ValueError, match="min_share"):
        TrafficProfile.measure(net, x, min_share=2.0)


@needs_mtkahypar
def test_net_weights_decide_the_cut():
    # columns 0-3, each in three nets; A={0,1} and C={2,3} heavy, four light nets
    nets = {"A": [0, 1], "B": [1, 2], "C": [2, 3], "D": [0, 3], "E": [1, 2], "F": [0, 3]}
    rows = [r for r, pins in enumerate(nets.values()) for _ in pins]
    cols = [c for pins in nets.values() for c in pins]
    w = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(6, 4))
    side = lambda parts: {tuple(np.flatnonzero(parts == parts[0]))}  # noqa: E731
    uniform = partition_columns(w, 2, epsilon=0.0)
    assert side(uniform) == {(0, 3)}  # cuts A and C: 2 nets, not 4
    weights = np.array([100, 1, 100, 1, 1, 1])
    weighted = partition_columns(w, 2, epsilon=0.0, net_weights=weights)
    assert side(weighted) == {(0, 1)}  # keeps the heavy nets whole
    nothing = partition_columns(w, 2, net_weights=np.zeros(6, np.int64))
    assert np.bincount(nothing).tolist() == [2, 2]  # no traffic: a balanced split
    with pytest.raises(ValueError, match="net_weights"):
        partition_columns(w, 2, net_weights=np.ones(5))


@needs_mtkahypar
def test_traffic_partition_carries_the_light_layers(small, tmp_path):
    net, x = small
    calls = []
    settings = TrafficSettings(sample=600, min_share=0.02)
    part = hypergraph_partition(net, 2, inputs=x, cache=tmp_path, traffic=settings,
                                progress=lambda *call: calls.append(call))
    assert part.params["objective"] == "traffic"
    heavy = TrafficProfile.measure(net, x, sample=600, min_share=0.02).heavy
    assert heavy and heavy[-1] < net.n_layers  # the deep layers carry one row
    assert part.params["partitioned"] == f"1-{heavy[-1]}"
    for layer in range(heavy[-1] + 1, net.n_layers + 1):
        np.testing.assert_array_equal(part.parts[layer], part.parts[heavy[-1]])
    assert part.imbalance(net).max() <= 1.04
    stages = [c[0] for c in calls]
    assert stages.count("sample") == net.n_layers
    assert [c[1:] for c in calls if c[0] == "mtkahypar"] == [
        (i, len(heavy)) for i in range(1, len(heavy) + 1)]
    # reproducible, and cached under what it depends on
    assert is_cached(net, 2, cache=tmp_path, inputs=x, traffic=settings)
    assert not is_cached(net, 2, cache=tmp_path, inputs=x[:1000], traffic=settings)
    assert not is_cached(net, 2, cache=tmp_path, inputs=x)  # other settings
    assert not is_cached(net, 2, cache=tmp_path)  # the unweighted one
    again = hypergraph_partition(net, 2, inputs=x, traffic=settings)
    np.testing.assert_array_equal(again.parts, part.parts)


@needs_mtkahypar
def test_traffic_partition_moves_less_than_hash(small):
    from sdnn_dask.parallel.exchange_forecast import forecast_exchange

    net, x = small
    traffic = make_neuron_partition(net, 2, "hypergraph", inputs=x)
    hashed = make_neuron_partition(net, 2, "hash")
    moved = {name: forecast_exchange(net, p, x, sample=x.shape[0])["predicted_bytes_in"].sum()
             for name, p in (("traffic", traffic), ("hash", hashed))}
    assert moved["traffic"] < 0.5 * moved["hash"]


def test_digests_follow_what_they_depend_on(small):
    net, x = small
    assert network_digest(net) == network_digest(make_network(1024, 30, seed=2))
    assert network_digest(net) != network_digest(make_network(1024, 30, seed=3))
    other_bias = Network(list(net.layers), bias=-0.2, ymax=net.ymax)
    assert network_digest(net) != network_digest(other_bias)
    assert inputs_digest(x) == inputs_digest(x.copy())
    y = x.copy()
    y.data[0] = 2.0
    assert inputs_digest(x) != inputs_digest(y)


def test_the_cheapest_mix_of_candidates_level_by_level():
    mix = LevelMix(("a", "b"))
    w = sp.identity(2, format="csr")
    # costs are given directly: a stays cheap until layer 3, where only b is free
    for cost in ([[0, 5], [5, 5]], [[1, 5], [5, 0]], [[9, 4], [9, 0]], [[0, 9], [9, 0]]):
        mix.costs.append(np.array(cost, float))
    path, cost = mix.choose()
    assert path == [0, 0, 0, 1, 1] and cost == 1 + 4 + 0
    assert mix.cost_of([0] * 5) == 10 and mix.cost_of(path) == cost
    assert describe(mix.names, path) == "a 0-2, b 3-4"
    # a carried layer keeps every candidate's own parts, at no cost
    mix.add_layer(w, [np.zeros(2)] * 2, [np.zeros(2)] * 2, 2, None)
    assert mix.costs[-1].tolist() == [[0, np.inf], [np.inf, 0]]
    # a candidate too unbalanced for a layer is never chosen for its columns
    mix.add_layer(w, [np.array([0, 1])] * 2, [np.array([0, 1]), np.array([0, 0])], 2,
                  np.ones(2), allowed=[True, False])
    assert np.isinf(mix.costs[-1][:, 1]).all()


def test_cut_traffic_counts_the_crossing_nets():
    w = sp.csr_matrix(np.array([[1, 1, 0], [0, 1, 1], [1, 0, 0]], dtype=np.float32))
    columns, owners = np.array([0, 0, 1]), np.array([0, 1, 1])
    # row 0: owner 0, columns 0,1 (part 0): 1 part; row 1: owner 1, parts 0,1: 2 parts;
    # row 2: owner 1, column 0 (part 0): 2 parts
    assert cut_traffic(w, owners, columns, 2, np.array([5.0, 3.0, 2.0])) == 3 + 2
    rows = fixed_rows(1024, 4)
    assert set(rows) == set(FIXED_CANDIDATES)
    assert all(np.bincount(r).tolist() == [256] * 4 for r in rows.values())
    assert (rows["residue-8"] == (np.arange(1024) % 8) // 2).all()  # two residues a part
    assert set(fixed_rows(1024, 16)) == {"hash", "block", "residue-32"}


@needs_mtkahypar
def test_the_mix_never_costs_more_than_layer_by_layer(small):
    net, x = small
    part = hypergraph_partition(net, 2, inputs=x, traffic=TrafficSettings(sample=600))
    params = part.params
    assert params["cut_traffic"] <= params["cut_traffic_layer_by_layer"]
    assert params["levels"].startswith(("hypergraph 0", "hash 0", "block 0"))
    # the chosen levels are what the partition holds, and its cost is what it cuts
    profile = TrafficProfile.measure(net, x, sample=600)
    cut = sum(cut_traffic(w, part.parts[layer - 1], part.parts[layer], 2,
                          profile.weights[layer])
              for layer, w in enumerate(net.layers, start=1) if layer in profile.weights)
    assert cut == pytest.approx(params["cut_traffic"], rel=1e-6, abs=1)
