"""Model parallelism and the hybrid in row passes (issue 45): a group's rows go through the
early layers in passes, their survivors joined for the deep layers, on both transports,
from memory and from a store's slices; every run gives the serial kernel's bits."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from dedup_cases import assert_bitwise

from sdnn_dask.core.kernels import KernelSettings, forward_block
from sdnn_dask.data import store
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel.model_executor import ModelParallelExecutor
from sdnn_dask.parallel.slabs import PartRows, Slab
from sdnn_dask.parallel.slabs.row_passes import (
    assemble_output,
    join_passes,
    merge_shared,
    merge_traces,
    pass_ranges,
    stop_rows_for,
)
from sdnn_dask.records import run_records


@pytest.fixture(scope="module")
def problem():
    net = make_network(1024, 40, seed=3)
    x = make_inputs(2600, net.n_neurons, seed=5)
    serial = forward_block(net, x, settings=KernelSettings.resolve(dedup=False)).to_csr()
    assert serial.nnz and 0 < len(np.unique(serial.nonzero()[0])) < x.shape[0]
    return net, x, serial


# -- the pieces --------------------------------------------------------------------------


def test_pass_ranges_cover_the_rows_in_equal_consecutive_ranges():
    assert pass_ranges(10, 4) == [(0, 3), (3, 7), (7, 10)]
    assert pass_ranges(8, 8) == [(0, 8)]
    assert pass_ranges(0, 5) == [(0, 0)]
    with pytest.raises(ValueError, match="pass_rows must be positive"):
        pass_ranges(5, 0)
    assert stop_rows_for(1000, 3, 960) == 60 and stop_rows_for(100, 4, 960) == 25


def test_joined_passes_keep_every_row_and_group_and_sum_the_traces():
    tile = np.array([[1, 0, 2], [3, 4, 0]], np.float32)
    first = Slab(np.array([0, 2, 3]), tile=tile, trace=[(5, "dense", 3, 3, 4, 0.5, 2, 1, 4, 3, 3)])
    csr = sp.csr_matrix(np.array([[0, 7], [8, 0]], np.float32))
    second = Slab.from_rows(csr, np.arange(2))
    second.rows = second.rows + 10
    second.trace = [(5, "sparse", 2, 2, 2, 0.25, 2, 1, 2, 2, 2)]
    a, b = PartRows(12), PartRows(12)
    a.agree([(np.array([0, 2, 3]), np.array([0, 2, 0]))])  # rows 0 and 3 equal
    b.agree([(np.array([10, 11]), np.array([10, 11]))])
    joined = join_passes({"slab": first, "shared": a, "layer": 5},
                         {"slab": second, "shared": b, "layer": 5})
    slab = joined["slab"]
    assert slab.rows.tolist() == [0, 2, 3, 10, 11] and joined["layer"] == 5
    dense = slab.to_csr().toarray()
    assert np.array_equal(dense, np.array([[1, 3], [0, 4], [2, 0], [0, 7], [8, 0]], np.float32))
    shared = joined["shared"]
    assert shared.weights[0] == 2 and shared.weights[3] == 0 and shared.weights[10] == 1
    assert shared.groups.of(0).tolist() == [0, 3] and shared.distinct is None
    assert slab.trace == [(5, "dense", 5, 5, 6, 0.75, 4, 2, 6, 5, 5)]
    with pytest.raises(ValueError, match="different layers"):
        join_passes({"slab": first, "shared": a, "layer": 5},
                    {"slab": second, "shared": b, "layer": 6})
    with pytest.raises(ValueError, match="ascending"):
        join_passes({"slab": second, "shared": None, "layer": 5},
                    {"slab": first, "shared": None, "layer": 5})
    assert merge_shared([None, None]) is None and merge_traces([[], []]) == []


def test_assembled_output_copies_a_row_to_every_row_it_stands_for():
    shared = PartRows(6)
    shared.agree([(np.array([1, 4, 5]), np.array([1, 1, 5]))])  # row 4 is row 1
    slabs = [Slab(np.array([1, 5]), tile=np.array([[2, 0]], np.float32)),
             Slab(np.array([1, 5]), tile=np.array([[0, 3]], np.float32))]
    rows = np.array([9, 8, 7, 6, 5, 4])  # the group's rows of the inputs, any order
    out = assemble_output([(rows, slabs, shared.groups)], [np.array([0]), np.array([2])],
                          (10, 3))
    expect = np.zeros((10, 3), np.float32)
    expect[8, 0] = expect[5, 0] = 2
    expect[4, 2] = 3
    assert np.array_equal(out.toarray(), expect) and out.has_sorted_indices


# -- whole runs ----------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["direct", "graph"])
@pytest.mark.parametrize("row_groups", [1, 2])
def test_passes_give_the_serial_bits(client, problem, transport, row_groups):
    net, x, serial = problem
    ex = ModelParallelExecutor(client, net)
    result = ex.run(x, partition="hash", k=2, row_groups=row_groups, transport=transport,
                    pass_rows=600)
    assert result.params["passes"] == (5 if row_groups == 1 else 3)
    assert_bitwise(result.output, serial)
    # every input row is counted once in layer 1, whichever pass it went in
    first = result.layers[result.layers["layer"] == 1]
    assert first.groupby("group")["rows_in"].max().sum() <= x.shape[0]
    records = run_records(result, study="passes")
    assert records["survivors"].sum() >= len(np.unique(serial.nonzero()[0]))
    # the passes joined before the end: the deep layers ran once
    assert 8 <= result.params["joined_at"] < net.n_layers
    if transport == "direct":
        layers = result.layers.groupby(["group", "part", "layer"]).size()
        assert (layers == 1).all()
        assert len(result.messages) > 0


def test_passes_without_dedup_run_alone_to_the_end(client, problem):
    net, x, serial = problem
    ex = ModelParallelExecutor(client, net)
    result = ex.run(x, partition="block", k=2, pass_rows=1000, dedup=False)
    assert result.params["passes"] == 3
    assert_bitwise(result.output, serial)


def test_passes_from_a_stores_slices(client, problem, tmp_path):
    net, x, serial = problem
    folder = store.write_network(tmp_path / "net", net)
    ex = ModelParallelExecutor(client, folder, weights="streamed")
    for transport in ("direct", "graph"):
        result = ex.run(x, partition="hash", k=2, transport=transport, pass_rows=900)
        assert result.params["passes"] == 3
        assert_bitwise(result.output, serial)


def test_pass_rows_must_be_a_positive_integer(client, problem):
    net, x, _ = problem
    with pytest.raises(ValueError, match="pass_rows must be a positive integer"):
        ModelParallelExecutor(client, net, warm_up=False).run(x, pass_rows=0)
