"""Model parallelism and the hybrid on a real LocalCluster equal the serial reference, and
the bytes Dask reports moving are exactly the pieces that had to cross workers."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.core.network import Network
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import DataParallelExecutor, ModelParallelExecutor, run_serial
from sdnn_dask.parallel.slabs import (
    Slab,
    forward_parts,
    make_part_plans,
    part_layer_step,
    piece_for,
)
from sdnn_dask.partition import NEURON_PARTITIONS, make_neuron_partition
from sdnn_dask.testing import assert_categories, assert_same_result

WORKERS = 2  # the session's LocalCluster
TRANSPORTS = ["direct", "graph"]
#: Every neuron partition, and the hypergraph weighted by the inputs' traffic.
METHODS = [*NEURON_PARTITIONS, "traffic"]


class _Reference:
    """Both serial references: the compiled kernel (same summation order as every part, so
    values agree to the default tolerance) and scipy's recurrence (categories, and values
    to 1e-4 relative: float32 sums in another order drift apart over the layers; on this
    network the serial kernel itself is 1.8e-5 relative from scipy)."""

    def __init__(self, net, inputs):
        self.kernel = run_serial(net, inputs, "kernel")
        self.scipy = run_serial(net, inputs, "reference")
        assert_same_result(self.kernel, self.scipy, rtol=1e-4)

    @property
    def output(self):
        return self.kernel.output


def assert_matches(result, reference: _Reference, rows: int | None = None) -> None:
    """``result`` equals both serial references (on the first ``rows`` rows)."""
    kernel, scipy_ref = reference.kernel.output, reference.scipy.output
    if rows is not None:
        kernel, scipy_ref = kernel[:rows], scipy_ref[:rows]
    assert_same_result(result, kernel)
    assert_same_result(result, scipy_ref, rtol=1e-4)


@pytest.fixture(scope="module")
def generated():
    net = make_network(1024, 16, seed=5)
    inputs = make_inputs(600, 1024, seed=5)
    return net, inputs, _Reference(net, inputs)


@pytest.fixture(scope="module")
def executor(client, generated):
    return ModelParallelExecutor(client, generated[0])


@pytest.fixture(scope="module")
def partitions(generated, tmp_path_factory):
    """Every method at k = 1..4 (hypergraph partitions cached in a temp folder); "traffic"
    is the hypergraph weighted by the inputs' traffic."""
    cache = tmp_path_factory.mktemp("partitions")
    net, inputs, _ = generated
    made = {(m, k): make_neuron_partition(net, k, m, seed=3, cache=cache)
            for m in NEURON_PARTITIONS for k in (1, 2, 3, 4)}
    made.update({("traffic", k): make_neuron_partition(net, k, "hypergraph", seed=3,
                                                       cache=cache, inputs=inputs)
                 for k in (1, 2, 3, 4)})
    return made


@pytest.mark.parametrize(
    ("method", "k", "transport"),
    [(m, k, t) for m in METHODS for k in (1, 2, 3, 4) for t in TRANSPORTS
     # the traffic partition is one more partition to the graph transport: one k will do
     if not (m == "traffic" and t == "graph" and k != 2)])
def test_equals_reference(executor, generated, partitions, method, k, transport):
    _, inputs, reference = generated
    result = executor.run(inputs, partition=partitions[method, k], transport=transport)
    assert result.strategy == "model"
    assert result.partition == ("hypergraph" if method == "traffic" else method)
    assert result.transport == transport and result.params["transport"] == transport
    assert result.parts == k and result.row_groups == 1 and result.n_workers == WORKERS
    assert len(result.blocks) == k
    # k > workers: parts share workers round-robin
    assert result.blocks["worker"].nunique() == min(k, WORKERS)
    assert_matches(result, reference)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("threshold", [0.0, 2.0])  # every layer dense / every layer sparse
def test_in_process_parts_equal_reference(generated, partitions, method, threshold):
    net, inputs, reference = generated
    output, slabs = forward_parts(net, partitions[method, 3], inputs,
                                  dense_threshold=threshold)
    assert_matches(output, reference)
    modes = {t[1] for slab in slabs for t in slab.trace} - {"none"}
    assert modes == {"dense" if threshold == 0.0 else "sparse"}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("row_groups", "k", "row_partition"),
                         [(2, 2, "block"), (3, 2, "hash"), (2, 3, "random"), (3, 1, "block"),
                          (1, 2, "block")])
def test_hybrid_equals_reference(executor, generated, partitions, row_groups, k,
                                 row_partition, transport):
    _, inputs, reference = generated
    result = executor.run(inputs, partition=partitions["hash", k], row_groups=row_groups,
                          row_partition=row_partition, seed=2, transport=transport)
    assert result.strategy == ("model" if row_groups == 1 else "hybrid")
    assert len(result.blocks) == row_groups * k
    assert result.blocks.groupby("group")["rows"].first().sum() == inputs.shape[0]
    assert_matches(result, reference)


def test_one_part_per_group_is_data_parallelism(client, executor, generated, partitions):
    net, inputs, _ = generated
    hybrid = executor.run(inputs, partition=partitions["block", 1], row_groups=2)
    data = DataParallelExecutor(client, net).run(inputs, partition="block", n_blocks=2)
    assert hybrid.bytes_moved == 0  # nothing crosses workers when C = 1
    np.testing.assert_array_equal(hybrid.categories, data.categories)
    assert_same_result(hybrid, data)
    assert hybrid.blocks["survivors"].sum() == data.blocks["survivors"].sum()


def _expected_bytes(net, partition, inputs, workers: int) -> dict[int, int]:
    """Per layer, the bytes of what had to cross workers, recounted in process
    (independently of Dask): each source sends each other worker one piece with the
    columns its parts there read."""
    plans = make_part_plans(net, partition)
    slabs = [Slab.from_rows(inputs, plan.inputs) for plan in plans]
    expected = {}
    for layer in range(1, net.n_layers + 1):
        moved = 0
        for q, plan in enumerate(plans):
            by_worker: dict[int, list[int]] = {}
            for p in plan.destinations(layer):
                by_worker.setdefault(p % workers, []).append(p)
            moved += sum(piece_for(plan.layers[layer - 1], parts, slabs[q]).nbytes
                         for w, parts in by_worker.items() if w != q % workers)
        slabs = [part_layer_step(plan, layer, slabs[p],
                                 {q: slabs[q] for q in plan.sources(layer)})
                 for p, plan in enumerate(plans)]
        expected[layer] = moved
    return expected


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("method", "k"), [("block", 2), ("hypergraph", 2), ("random", 4),
                                           ("traffic", 3)])
def test_measured_bytes_are_the_pieces_that_crossed_workers(executor, generated, partitions,
                                                            method, k, transport):
    net, inputs, _ = generated
    part = partitions[method, k]
    # every row's pieces, as recounted here: without deduplication (test_model_dedup
    # checks that it moves fewer)
    result = executor.run(inputs, partition=part, transport=transport, dedup=False)
    comm = result.communication.set_index("layer")
    expected = _expected_bytes(net, part, inputs, WORKERS)
    assert comm["bytes_moved"].to_dict() == expected
    assert result.bytes_moved == sum(expected.values()) > 0
    # the receiving parts read exactly the predicted columns (km1 per layer)
    assert (comm["columns_in"] == comm["km1"]).all()
    if k > WORKERS and method != "traffic":  # parts sharing a worker: shared columns once
        # (not for the traffic partition: its parts on one worker read nearly disjoint
        # columns, so sharing saves little and the pieces' column labels cost more)
        assert result.bytes_moved < _unshared_bytes(net, part, inputs, WORKERS)
    assert result.predicted_volume == part.volume(net)["km1"].sum()
    per_part = result.layers.groupby("layer")["bytes_in"].sum()
    assert per_part.to_dict() == expected
    # one message per (source part, other worker hosting readers) and layer
    messages = result.messages
    assert (messages["sender"] != messages["receiver"]).all()
    assert messages.groupby("layer")["payload_bytes"].sum().to_dict() == {
        layer: b for layer, b in expected.items() if b}
    if transport == "direct":  # the comm wrote the frames and a little framing
        assert (messages["wire_bytes"] >= messages["payload_bytes"]).all()
        assert (messages["wire_bytes"] < messages["payload_bytes"] + 4096).all()
        assert (comm["wire_bytes"] >= comm["bytes_moved"]).all()


def _unshared_bytes(net, partition, inputs, workers: int) -> int:
    """Bytes crossing workers if every part were sent its own pieces (no sharing)."""
    plans = make_part_plans(net, partition)
    slabs = [Slab.from_rows(inputs, plan.inputs) for plan in plans]
    total = 0
    for layer in range(1, net.n_layers + 1):
        pieces = [{q: piece_for(plans[q].layers[layer - 1], [p], slabs[q])
                   for q in plan.sources(layer)} for p, plan in enumerate(plans)]
        total += sum(s.nbytes for p, per_part in enumerate(pieces)
                     for q, s in per_part.items() if q % workers != p % workers)
        slabs = [part_layer_step(plan, layer, slabs[p], pieces[p])
                 for p, plan in enumerate(plans)]
    return total


def test_hypergraph_moves_less_than_blocks(executor, generated, partitions):
    _, inputs, _ = generated
    block = executor.run(inputs, partition=partitions["block", 2])
    hyper = executor.run(inputs, partition=partitions["hypergraph", 2])
    assert hyper.predicted_volume < block.predicted_volume
    assert hyper.bytes_moved < block.bytes_moved


def test_records_hold_communication(executor, generated, partitions):
    from sdnn_dask.records import layer_records, run_records

    _, inputs, _ = generated
    result = executor.run(inputs, partition=partitions["hash", 2])
    runs = run_records(result, study="t")
    assert (runs["strategy"] == "model").all() and (runs["parts"] == 2).all()
    assert (runs["bytes_moved"] == result.bytes_moved).all()
    assert (runs["predicted_volume"] == result.predicted_volume).all()
    layers = layer_records(result, study="t")
    assert layers["bytes_in"].sum() == result.bytes_moved
    assert len(layers) == 2 * 16


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_edge_cases(executor, generated, partitions, transport):
    _, inputs, reference = generated
    empty = executor.run(inputs[:0], partition=partitions["block", 2], transport=transport)
    assert empty.output.shape == (0, 1024) and empty.output.nnz == 0
    zeros = sp.csr_matrix((5, 1024), dtype=np.float32)
    assert executor.run(zeros, partition=partitions["block", 2],
                        transport=transport).output.nnz == 0
    with pytest.raises(ValueError, match="rows x 1024"):
        executor.run(inputs[:, :100])
    with pytest.raises(ValueError, match="k=3 but the partition given has k=2"):
        executor.run(inputs, partition=partitions["block", 2], k=3)
    with pytest.raises(ValueError, match="row_groups"):
        executor.run(inputs, partition=partitions["block", 2], row_groups=0)
    other = make_neuron_partition(make_network(1024, 3), 2)
    with pytest.raises(ValueError, match="partition is for 3 layers"):
        executor.run(inputs, partition=other)
    with pytest.raises(ValueError, match="transport must be one of direct, graph"):
        executor.run(inputs, transport="carrier-pigeon")
    # more row groups than rows: empty groups run and come back
    result = executor.run(inputs[:3], partition=partitions["hash", 2], row_groups=5,
                          transport=transport)
    assert_matches(result, reference, rows=3)


def test_parts_owning_nothing(client):
    """k > N: some parts own no neuron at some level and still take part."""
    rng = np.random.default_rng(0)
    layers = [sp.random(6, 6, density=0.5, format="csr", dtype=np.float32, rng=rng) +
              sp.identity(6, format="csr", dtype=np.float32) for _ in range(4)]
    net = Network(layers, bias=-0.05, ymax=4.0, name="tiny")
    x = sp.random(40, 6, density=0.6, format="csr", dtype=np.float32, rng=rng)
    reference = _Reference(net, x)
    executor = ModelParallelExecutor(client, net, warm_up=False)
    for method in ("block", "random"):
        for transport in TRANSPORTS:
            result = executor.run(x, partition=method, k=8, seed=1, transport=transport)
            assert (result.blocks["survivors"] == 0).any()
            assert_matches(result, reference)


@pytest.mark.slow
def test_official_network_model_parallel(client, official_network, official_inputs,
                                         official_truth, tmp_path):
    """The official 1024-120 network, rows 1..1200, k = 4 on 2 workers: the truth."""
    executor = ModelParallelExecutor(client, official_network)
    for method in ("block", "hash"):
        for transport in TRANSPORTS:
            result = executor.run(official_inputs, partition=method, k=4,
                                  transport=transport)
            assert_categories(result.categories, official_truth)
            assert result.bytes_moved > 0


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("k", [3, 4])
def test_pieces_of_equal_width_are_told_apart_by_value(client, k, transport):
    """Dense layers split in equal blocks: every part reads every other part's whole
    slab, so each piece it receives has the same width (and rows). A piece filed under
    the wrong sender would pass every shape check: only the values can tell, so they
    are compared with the serial reference's."""
    n, rng = 48, np.random.default_rng(11)
    layers = [sp.csr_matrix(rng.uniform(-0.05, 0.12, (n, n)).astype(np.float32))
              for _ in range(6)]
    net = Network(layers, bias=-0.02, ymax=32.0, name="dense-48")
    x = sp.random(64, n, density=0.4, format="csr", dtype=np.float32, rng=rng)
    partition = make_neuron_partition(net, k, "block")
    for plan in make_part_plans(net, partition):  # the premise: equal widths everywhere
        for layer in plan.layers[1:]:
            widths = {len(columns) for part, columns in layer.put.items()}
            assert len(widths) == 1 and len(layer.put) == k, widths
    reference = _Reference(net, x)
    out = reference.kernel.output
    # values that differ from piece to piece, neither dead nor clamped: a swap shows
    assert out.nnz > 0.5 * n * x.shape[0] and 0 < out.data.max() < net.ymax
    result = ModelParallelExecutor(client, net, warm_up=False).run(
        x, partition=partition, transport=transport)
    assert_matches(result, reference)
