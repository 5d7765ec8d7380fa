"""Identical rows computed once under model parallelism and the hybrid (issue 35): the
parts agree on the groups from their labels, and every transport gives the same bits as
without, with every row counted in the traces as without."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from dedup_cases import assert_bitwise, several_groups
from dedup_cases import random_inputs as _inputs
from dedup_cases import random_network as _random_network
from dense_reference import dense_infer

from sdnn_dask.core.kernels import KernelSettings, forward_block
from sdnn_dask.core.network import Network
from sdnn_dask.data import store
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel.model_executor import ModelParallelExecutor
from sdnn_dask.parallel.slabs import PART_TRACE_COLUMNS, Slab, forward_parts, label_rows
from sdnn_dask.parallel.slabs.shared_rows import PartRows, drop_rows, identical_rows
from sdnn_dask.partition import NeuronPartition, make_neuron_partition
from sdnn_dask.records import run_records

COUNTED = ["layer", "rows_in", "rows_out", "nnz_out"]


def _traces(slabs: list[Slab]) -> pd.DataFrame:
    return pd.concat([pd.DataFrame(s.trace, columns=PART_TRACE_COLUMNS).assign(part=p)
                      for p, s in enumerate(slabs)], ignore_index=True)


def _parts_both(net: Network, partition: NeuronPartition, x: sp.csr_matrix) -> pd.DataFrame:
    """Model parallelism in one process with and without: the same bits as each other and
    as the serial kernel, the same counts; the traces with deduplication."""
    on, slabs_on = forward_parts(net, partition, x, dedup=True)
    off, slabs_off = forward_parts(net, partition, x, dedup=False)
    serial = forward_block(net, x, settings=KernelSettings.resolve(dedup=False)).to_csr()
    assert_bitwise(on, off)
    assert_bitwise(on, serial)
    t_on, t_off = _traces(slabs_on), _traces(slabs_off)
    assert t_on[COUNTED].equals(t_off[COUNTED])
    assert (t_off["distinct_out"] == t_off["rows_out"]).all()
    return t_on


# -- the pieces --------------------------------------------------------------------------


def test_labels_name_the_first_equal_row_and_zero_rows_minus_one():
    tile = np.array([[1, 0, 1, 0, 2],
                     [3, 0, 3, 0, 3]], np.float32)
    slab = Slab(np.array([4, 7, 9, 12, 20]), tile=tile)
    assert label_rows(slab).tolist() == [4, -1, 4, -1, 20]
    blocks = Slab.from_rows(sp.csr_matrix(tile.T), np.arange(2))  # row 1 and 3 dropped
    assert label_rows(blocks).tolist() == [0, 0, 4]


def test_rows_equal_in_one_part_but_not_another_stay_apart():
    """Part 0 sees rows 1 and 2 equal, part 1 does not; rows 3 and 5 are equal in both
    (row 5 is absent from part 1: zero there, as row 3)."""
    part0 = (np.array([1, 2, 3, 5]), np.array([1, 1, 3, 3]))
    part1 = (np.array([1, 2]), np.array([1, 2]))
    merges = identical_rows([part0, part1])
    assert [(rep, others.tolist()) for rep, others in merges] == [(3, [5])]
    assert [(rep, others.tolist()) for rep, others in identical_rows([part1, part0])] == [
        (3, [5])]  # in any order of parts
    shared = PartRows(8)
    dropped = shared.agree([part0, part1])
    assert dropped.tolist() == [5] and shared.weights[3] == 2 and shared.weights[5] == 0
    assert shared.distinct == 3 and shared.groups.of(3).tolist() == [3, 5]


def test_dropping_rows_keeps_the_others_bit_for_bit():
    rng = np.random.default_rng(0)
    x = sp.random(40, 9, density=0.4, format="csr", dtype=np.float32, rng=rng)
    for slab in (Slab.from_rows(x, np.arange(9)),
                 Slab(np.arange(40), tile=np.ascontiguousarray(x.toarray().T))):
        kept = drop_rows(slab, np.array([3, 10, 11]))
        mask = ~np.isin(slab.rows, [3, 10, 11])
        assert np.array_equal(kept.rows, slab.rows[mask])
        assert np.array_equal(kept.to_csr().toarray(), slab.to_csr().toarray()[mask])


def test_the_parts_look_on_one_schedule_until_one_row_is_left():
    shared = PartRows(10)
    assert [layer for layer in range(1, 30) if shared.due(layer, 30)] == [
        8, 12, 16, 20, 24, 28]
    assert not shared.due(30, 30)  # never after the last layer
    shared.distinct = 1
    assert not shared.due(12, 30)


# -- in one process ----------------------------------------------------------------------


@pytest.mark.parametrize(("k", "method"), [(2, "block"), (3, "hash"), (4, "random")])
def test_radixnet_survivors_once_in_every_part(k, method):
    net = make_network(1024, 40, seed=1)
    x = make_inputs(1500, 1024, seed=1)
    trace = _parts_both(net, make_neuron_partition(net, k, method), x)
    last = trace[trace["layer"] == 40]
    assert (last["rows_out"] > 10).all() and (last["distinct_out"] == 1).all()


@pytest.mark.parametrize(("high", "bias"), [(0.2, 0.05), (0.15, "per-neuron"),
                                            (0.25, "per-neuron")])
def test_rows_that_meet_at_different_layers(high, bias):
    net = _random_network(2, 48, 24, bias=bias, ymax=1.0, low=0.0, high=high)
    x = _inputs(3, 600, 48, density=0.1)
    trace = _parts_both(net, make_neuron_partition(net, 3, "hash"), x)
    by_layer = trace.groupby("layer")[["rows_out", "distinct_out"]].sum()
    gap = (by_layer["rows_out"] - by_layer["distinct_out"]).to_numpy()
    assert len(np.unique(gap[gap > 0])) >= 2  # merged at more than one look


def test_a_saturated_row_that_is_not_a_fixed_point():
    net = _random_network(4, 48, 30, bias=-0.05, ymax=2.0, low=-0.3, high=0.6)
    x = _inputs(5, 400, 48, density=0.1)
    trace = _parts_both(net, make_neuron_partition(net, 2, "block"), x)
    assert (trace["distinct_out"] < trace["rows_out"]).any()


def test_identical_in_one_part_only():
    """An identity network (activations never change): rows 0 and 1 agree on part 0's
    columns but not on part 1's and are never merged; rows 2 and 3 agree everywhere and
    are; tiled copies of row 4 too."""
    n = 8
    net = Network([sp.identity(n, format="csr", dtype=np.float32)] * 10, bias=0.0,
                  ymax=100.0, name="identity")
    partition = make_neuron_partition(net, 2, "block")  # columns 0-3 and 4-7
    rows = np.array([[1, 2, 3, 4, 5, 6, 7, 8],
                     [1, 2, 3, 4, 5, 6, 7, 9],
                     [2, 2, 2, 2, 3, 3, 3, 3],
                     [2, 2, 2, 2, 3, 3, 3, 3],
                     [0, 0, 0, 0, 1, 0, 1, 0]] + [[0, 0, 0, 0, 1, 0, 1, 0]] * 3, np.float32)
    trace = _parts_both(net, partition, sp.csr_matrix(rows))
    last = trace[trace["layer"] == 10].set_index("part")
    # part 0 holds rows 0..3 (rows 4.. are zero there): 0, 1 and 2 are computed
    assert last.loc[0, "distinct_out"] == 3 and last.loc[0, "rows_out"] == 4
    assert last.loc[1, "distinct_out"] == 4 and last.loc[1, "rows_out"] == 8


@pytest.mark.parametrize(("k", "method"), [(2, "hash"), (3, "random")])
def test_survivors_in_several_groups(k, method):
    """Classes of identical rows shuffled among unique ones, on an integer network: the
    parts' groups expand to their own rows, bit for bit as without and as the dense
    float64 recurrence (the radixnet tests end in one group, where any mapping works)."""
    net, x = several_groups(layers=20)
    trace = _parts_both(net, make_neuron_partition(net, k, method), x)
    on, _ = forward_parts(net, make_neuron_partition(net, k, method), x, dedup=True)
    np.testing.assert_array_equal(on.toarray(), dense_infer(net.layers, net.bias, net.ymax, x))
    last = trace[trace["layer"] == 20]
    assert (last["distinct_out"] > 5).all() and (last["distinct_out"] < last["rows_out"]).all()


# -- on a cluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def survivors() -> tuple[Network, sp.csr_matrix, sp.csr_matrix]:
    net = make_network(1024, 30, seed=4)
    x = make_inputs(1500, 1024, seed=4)
    serial = forward_block(net, x, settings=KernelSettings.resolve(dedup=False)).to_csr()
    return net, x, serial


@pytest.mark.parametrize("transport", ["direct", "graph"])
@pytest.mark.parametrize("row_groups", [1, 2])
def test_every_transport_with_and_without(client, survivors, transport, row_groups):
    net, x, serial = survivors
    executor = ModelParallelExecutor(client, net)
    results = {dedup: executor.run(x, partition="hash", k=2, row_groups=row_groups,
                                   transport=transport, dedup=dedup)
               for dedup in (True, False)}
    for result in results.values():
        assert_bitwise(result.output, serial)
    on, off = (results[d].layers.sort_values(["block", "layer"]).reset_index(drop=True)
               for d in (True, False))
    assert on[["block", *COUNTED]].equals(off[["block", *COUNTED]])
    assert (on["distinct_out"] < on["rows_out"]).any()
    assert (off["distinct_out"] == off["rows_out"]).all()
    for dedup, word in ((True, "on"), (False, "off")):
        assert set(run_records(results[dedup], study="t")["dedup"]) == {word}
    if transport == "direct":  # fewer rows exchanged once they are merged
        assert results[True].bytes_moved < results[False].bytes_moved


def test_several_groups_on_a_cluster(client):
    """Several groups of identical rows in two row groups on a real cluster: the same
    bits as the serial kernel without deduplication, and rows were merged."""
    net, x = several_groups(layers=20)
    serial = forward_block(net, x, settings=KernelSettings.resolve(dedup=False)).to_csr()
    result = ModelParallelExecutor(client, net).run(x, partition="hash", k=2, row_groups=2,
                                                    dedup=True)
    assert_bitwise(result.output, serial)
    assert (result.layers["distinct_out"] < result.layers["rows_out"]).any()


def test_from_a_store_streamed(client, survivors, tmp_path):
    net, x, serial = survivors
    folder = store.write_network(tmp_path / "net", net)
    executor = ModelParallelExecutor(client, folder, weights="streamed")
    result = executor.run(x, partition="block", k=2, dedup=True)
    assert_bitwise(result.output, serial)
    assert (result.layers["distinct_out"] < result.layers["rows_out"]).any()
