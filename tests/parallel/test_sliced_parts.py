"""Model parallelism and the hybrid on a network store: per-part slices cut beside the
store, each part's worker mapping only its own, resident or streamed, every result the
serial reference's."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from dense_reference import dense_infer, integer_inputs, integer_network

from sdnn_dask.core.network import Network
from sdnn_dask.core.reference import infer_reference
from sdnn_dask.data import store
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.data.streaming import StreamedNetwork
from sdnn_dask.parallel.model_executor import ModelParallelExecutor
from sdnn_dask.parallel.slabs import forward_parts, make_part_plans
from sdnn_dask.parallel.slabs.slices import (
    StaleSlicesWarning,
    close_parts,
    open_part,
    part_resident_bytes,
    read_slices_index,
    slices_folder,
    slices_volume,
    write_part_slices,
)
from sdnn_dask.parallel.weights import choose_part_weights
from sdnn_dask.partition import NeuronPartition, make_neuron_partition
from sdnn_dask.testing import assert_same_result

N, L = 1024, 12


@pytest.fixture(scope="module")
def net() -> Network:
    return make_network(N, L, seed=3)


@pytest.fixture(scope="module")
def held(net, tmp_path_factory) -> StreamedNetwork:
    folder = store.write_network(tmp_path_factory.mktemp("sliced") / "net", net)
    return StreamedNetwork(folder)


@pytest.fixture(scope="module")
def irregular(tmp_path_factory) -> tuple[Network, StreamedNetwork]:
    """Rows of different counts, values that differ, a per-neuron bias: no layer of it
    takes the compact encodings."""
    rng = np.random.default_rng(11)
    weights, bias, ymax = integer_network(rng, 200, 5, 0.05, "mixed")
    network = Network(weights, bias=bias, ymax=ymax, name="irregular")
    folder = store.write_network(tmp_path_factory.mktemp("irregular") / "net", network)
    return network, StreamedNetwork(folder)


def _per_level_partition(n: int, n_layers: int, k: int, seed: int) -> NeuronPartition:
    """Owners that change from level to level, as a hypergraph partition's do."""
    rng = np.random.default_rng(seed)
    return NeuronPartition("hypergraph", k, rng.integers(0, k, size=(n_layers + 1, n)),
                           params={"seed": seed})


def _assert_same_plan(sliced, plan) -> None:
    assert sliced.part == plan.part and sliced.k == plan.k
    np.testing.assert_array_equal(sliced.inputs, plan.inputs)
    np.testing.assert_array_equal(sliced.last_own, plan.last_own)
    assert len(sliced.layers) == len(plan.layers)
    for layer, (x, y) in enumerate(zip(sliced.layers, plan.layers, strict=True), start=1):
        for name in ("own", "needed", "order", "bias"):
            a, b = getattr(x, name), getattr(y, name)
            assert a.dtype == b.dtype, (layer, name)
            np.testing.assert_array_equal(a, b, err_msg=f"layer {layer}: {name}")
        for name in ("w", "wt"):
            a, b = getattr(x, name), getattr(y, name)
            assert a.shape == b.shape
            for field in ("indptr", "indices", "data"):
                u, v = getattr(a, field), getattr(b, field)
                assert u.dtype == v.dtype, (layer, name, field)
                np.testing.assert_array_equal(u, v, err_msg=f"layer {layer}: {name}.{field}")
        for name in ("put", "take", "fetch"):
            a, b = getattr(x, name), getattr(y, name)
            assert a.keys() == b.keys(), (layer, name)
            for q in a:
                assert a[q].dtype == b[q].dtype
                np.testing.assert_array_equal(a[q], b[q], err_msg=f"layer {layer}: {name}")
        assert sliced.sources(layer) == plan.sources(layer)
        assert sliced.destinations(layer) == plan.destinations(layer)


# ------------------------------------------------------------------ the slices themselves


@pytest.mark.parametrize("method", ["block", "hash", "random", "per-level"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("streamed", [False, True])
def test_a_part_of_the_slices_is_the_plan_built_in_memory(net, held, method, k, streamed):
    partition = (_per_level_partition(N, L, k, seed=k) if method == "per-level"
                 else make_neuron_partition(net, k, method))
    folder = write_part_slices(held, partition)
    plans = make_part_plans(net, partition)
    for p in range(k):
        _assert_same_plan(open_part(folder, p, held.bias, held.ymax, streamed=streamed),
                          plans[p])
    # the volume recorded when cutting is the partition's own
    expected = partition.volume(net)
    np.testing.assert_array_equal(slices_volume(folder).to_numpy(), expected.to_numpy())


def test_irregular_layers_and_a_per_neuron_bias(irregular):
    network, streamed_net = irregular
    partition = _per_level_partition(200, 5, 3, seed=0)
    folder = write_part_slices(streamed_net, partition)
    plans = make_part_plans(network, partition)
    for p in range(3):
        _assert_same_plan(open_part(folder, p, streamed_net.bias, streamed_net.ymax,
                                    streamed=True), plans[p])
    x = integer_inputs(np.random.default_rng(2), 150, 200, 0.1)
    out, _ = forward_parts(network, partition, x)
    np.testing.assert_allclose(out.toarray(), dense_infer(network.layers, network.bias,
                                                          network.ymax, x), atol=0)


def test_slices_sit_beside_the_store_keyed_by_the_partition(net, held):
    block2 = make_neuron_partition(net, 2, "block")
    hash2 = make_neuron_partition(net, 2, "hash")
    a, b = slices_folder(held.store.folder, block2), slices_folder(held.store.folder, hash2)
    assert a.parent == b.parent == held.store.folder.parent / "net.slices"
    assert a != b and a.name.startswith("block-k2-") and b.name.startswith("hash-k2-")
    first = write_part_slices(held, block2)
    stamp = (first / "slices.json").stat().st_mtime_ns
    assert write_part_slices(held, block2) == first  # found, not cut again
    assert (first / "slices.json").stat().st_mtime_ns == stamp
    index = read_slices_index(first)
    assert index["store"]["n_layers"] == L and index["partition"]["k"] == 2
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]  # no leftovers


def test_slices_of_another_store_are_cut_again_with_a_warning(net, tmp_path):
    folder = store.write_network(tmp_path / "net", net)
    partition = make_neuron_partition(net, 2, "block")
    cut = write_part_slices(StreamedNetwork(folder), partition)
    # the store is rewritten with other weights: its slices no longer belong to it
    other = make_network(N, L, seed=4)
    store.write_network(folder, other, overwrite=True)
    with pytest.warns(StaleSlicesWarning, match="cut from other files of layer") as caught:
        again = write_part_slices(StreamedNetwork(folder), partition)
    assert again == cut and str(cut) in str(caught[0].message)
    close_parts()
    _assert_same_plan(open_part(again, 1, other.bias, other.ymax, streamed=False),
                      make_part_plans(other, partition)[1])


def test_a_part_maps_only_its_own_files(net, held, tmp_path):
    partition = make_neuron_partition(net, 3, "hash")
    cut = write_part_slices(held, partition)
    alone = tmp_path / "alone"
    shutil.copytree(cut, alone)
    for path in alone.glob("part[02].*"):  # only part 1's files and the shared ones left
        path.unlink()
    close_parts()
    sliced = open_part(alone, 1, held.bias, held.ymax, streamed=False)
    _assert_same_plan(sliced, make_part_plans(net, partition)[1])
    names = sorted(path.name for path in sliced.files)
    assert names == ["part1.columns.bin", "part1.index.npy", "part1.indptr.bin",
                     "part1.sums.npy", "part1.take.bin", "part1.values.bin", "parts.npy",
                     "parts.sums.npy", "routes.npy"]
    assert all(path.parent == alone.resolve() for path in sliced.files)
    # a part reads about its share of the layer's nonzeros: RadiX-Net's uint16 columns,
    # no values (every weight equal) and no row pointers (every row the same count)
    nnz = sum(w.nnz for w in net.layers) / 3
    assert 2 * nnz <= sliced.bytes_read <= 2 * nnz * 1.6


def test_a_streamed_part_holds_a_window_of_layers(net, held):
    partition = make_neuron_partition(net, 2, "block")
    folder = write_part_slices(held, partition)
    close_parts()
    resident = open_part(folder, 0, held.bias, held.ymax, streamed=False)
    streamed = open_part(folder, 0, held.bias, held.ymax, streamed=True, window=2)
    for layer in range(L):
        streamed.layers[layer]
    assert 0 < streamed.nbytes <= resident.nbytes * 4 / L  # the last layers, no more
    assert resident.nbytes <= part_resident_bytes(folder, 0)


def test_choose_part_weights_says_why():
    gb = 10 ** 9
    modes = choose_part_weights([2 * gb, 5 * gb], [1, 2], "auto", 16 * gb)
    assert [m for m, _ in modes] == ["resident", "streamed"]
    assert "fits in 0.5 of its worker's 16.0 GB" in modes[0][1]
    assert "shared by 2 parts" in modes[1][1] and "layer by layer" in modes[1][1]
    assert choose_part_weights([9 * gb], [1], "resident", gb)[0][0] == "resident"
    with pytest.raises(ValueError, match="weights must be one of"):
        choose_part_weights([1], [1], "mapped", gb)


# ------------------------------------------------------------------ on a real cluster


@pytest.fixture(scope="module")
def inputs() -> sp.csr_matrix:
    return make_inputs(700, N, seed=4)


@pytest.fixture(scope="module")
def in_memory(client, net, inputs):
    """Model-parallel outputs of the network in memory, by (method, k, row groups)."""
    executor = ModelParallelExecutor(client, net)
    return {(method, k, r): executor.run(inputs, partition=method, k=k, row_groups=r).output
            for method in ("block", "hash") for k, r in ((1, 1), (2, 1), (3, 1), (4, 1),
                                                         (2, 2))}


@pytest.mark.parametrize("weights", ["resident", "streamed"])
@pytest.mark.parametrize("transport", ["direct", "graph"])
def test_every_part_count_and_hybrid_on_a_store(client, net, held, inputs, in_memory,
                                                weights, transport):
    reference = infer_reference(net, inputs)
    executor = ModelParallelExecutor(client, held.store.folder, weights=weights)
    assert executor.streamed
    for (method, k, r), expected in in_memory.items():
        result = executor.run(inputs, partition=method, k=k, row_groups=r,
                              transport=transport)
        assert result.strategy == ("model" if r == 1 else "hybrid")
        assert abs(result.output - expected).max() == 0  # bit for bit the in-memory run
        assert_same_result(result, reference)
        assert [m for m, _ in executor.part_weights] == [weights] * k
        blocks = result.blocks
        assert set(blocks["weights"]) == {weights}
        assert (blocks["weight_bytes"] > 0).all() and (blocks["peak_rss_bytes"] > 0).all()
        if weights == "streamed":  # every run reads its slices again
            assert (blocks["store_bytes_read"] > 0).all()
        else:  # read once, when the part was opened
            assert (blocks["store_bytes_read"] == 0).all()
        assert result.communication["km1"].sum() == \
            make_neuron_partition(net, k, method).volume(net)["km1"].sum()


def test_a_part_per_worker_reads_about_its_share_of_the_slices(client, net, held, inputs):
    executor = ModelParallelExecutor(client, held, weights="streamed")
    result = executor.run(inputs, partition="block", k=2)
    total = sum(w.nnz for w in net.layers) * 2  # uint16 columns, one value a layer
    read = result.blocks["store_bytes_read"]
    assert len(read) == 2 and (read <= 0.6 * total).all() and (read >= 0.5 * total).all()


def test_auto_weights_and_a_given_partition(client, net, held, inputs):
    executor = ModelParallelExecutor(client, held)  # auto: a small slice is resident
    partition = _per_level_partition(N, L, 2, seed=9)
    result = executor.run(inputs, partition=partition)
    assert [m for m, _ in executor.part_weights] == ["resident", "resident"]
    assert "fits in" in executor.part_weights[0][1]
    assert_same_result(result, infer_reference(net, inputs))


def test_a_hypergraph_partition_of_a_streamed_store(client, net, held, inputs):
    pytest.importorskip("mtkahypar")
    first = make_network(N, 3, seed=3)  # the store's first 3 layers, in memory
    streamed = StreamedNetwork(held.store, 3)
    executor = ModelParallelExecutor(client, streamed)
    partition = executor.partition("hypergraph", 2, cache=None)
    expected = make_neuron_partition(first, 2, "hypergraph")
    np.testing.assert_array_equal(partition.parts, expected.parts)  # read layer by layer
    result = executor.run(inputs, partition=partition)
    assert_same_result(result, infer_reference(first, inputs))


def test_the_cli_runs_model_parallelism_and_the_hybrid_on_a_streamed_store(held, net,
                                                                             capsys):
    from sdnn_dask.cli import main
    from sdnn_dask.core.reference import categories

    expected = categories(infer_reference(net, make_inputs(500, N, seed=5)).output)
    for strategy, extra in (("model", []), ("hybrid", ["--row-groups", "2"])):
        code = main(["infer", "--data", str(held.store.folder), "-L", "12", "-n", "500",
                     "--seed", "5", "--strategy", strategy, "--partition", "hash",
                     "--weights", "streamed", "--workers", "2", *extra])
        assert code == 0
        captured = capsys.readouterr()
        assert "streaming 1024-12 weights from the store" in captured.err
        assert "part 0 of hash-k2-" in captured.err and "streamed: as asked" in captured.err
        assert f"{len(expected)} categories" in captured.out


@pytest.mark.parametrize("weights", ["resident", "streamed"])
def test_data_parallelism_on_a_store_records_what_each_worker_read(client, net, held,
                                                                   inputs, weights):
    from sdnn_dask.parallel.data_executor import DataParallelExecutor

    executor = DataParallelExecutor(client, held.store.folder, weights=weights)
    result = executor.run(inputs, partition="block")
    assert_same_result(result, infer_reference(net, inputs))
    per_worker = result.blocks.groupby("worker").first()
    assert len(per_worker) == 2 and set(per_worker["weights"]) == {weights}
    assert (per_worker["peak_rss_bytes"] > 0).all() and (per_worker["weight_bytes"] > 0).all()
    if weights == "streamed":  # the survivors joined on one worker, which reads every
        read = per_worker["store_bytes_read"]  # layer (the early ones in its own early
        # passes, then from the first the joined survivors need); the other the early ones
        assert read.max() >= held.store.nbytes() and 0 < read.min() < held.store.nbytes()
        apart = executor.run(inputs, partition="block", join=False)
        assert_same_result(apart, infer_reference(net, inputs))
        read = apart.blocks.groupby("worker")["store_bytes_read"].max()
        assert (read == held.store.nbytes()).all()  # apart: each worker every layer, once
    else:
        assert (per_worker["store_bytes_read"] == 0).all()


def test_the_report_shows_memory_and_store_reads_per_worker(client, net, held, inputs):
    import pandas as pd

    from sdnn_dask.parallel.data_executor import DataParallelExecutor
    from sdnn_dask.records import run_records
    from sdnn_dask.report.html import html_report
    from sdnn_dask.report.memory import memory_headline, memory_table
    from sdnn_dask.report.summary import summary_markdown

    # apart: each worker reads every layer once (joined, one reads some twice)
    data = DataParallelExecutor(client, held, weights="streamed").run(inputs, join=False)
    model = ModelParallelExecutor(client, held, weights="streamed").run(inputs, k=2,
                                                                       forecast=True)
    records = pd.concat([run_records(r, study="memory", check="PASS", spec=r.strategy)
                         for r in (data, model)], ignore_index=True)
    table = memory_table(records)
    assert list(table["strategy"]) == ["data", "model"]
    by = table.set_index("strategy")
    whole = held.store.nbytes() / 1e9
    assert by.loc["data", "read_gb"] == pytest.approx(whole)  # every layer, every worker
    assert by.loc["data", "read_share"] == pytest.approx(1.0)
    # a part reads its slice: about half the store's nonzeros, at two bytes each
    assert 0.4 < by.loc["model", "read_share"] < 0.7
    assert by.loc["model", "gb_moved"] > 0 and by.loc["data", "gb_moved"] == 0  # no exchange
    # each worker's intake and the whole, beside their forecast (every row sampled here)
    assert 0 < by.loc["model", "gb_worker_in"] < by.loc["model", "gb_moved"]
    assert by.loc["model", "gb_predicted"] == pytest.approx(by.loc["model", "gb_moved"],
                                                            rel=0.02)
    assert by.loc["model", "gb_worker_forecast"] == pytest.approx(
        by.loc["model", "gb_worker_in"], rel=0.05)
    assert pd.isna(by.loc["data", "gb_worker_in"])
    said = memory_headline(table)
    assert said.startswith("model block k = 2 (streamed) peaks at") and "moves" in said
    page = html_report(records, pd.DataFrame())
    assert "Memory and store reads per worker" in page and "store read a worker" in page
    assert "### Memory and store reads per worker" in summary_markdown(records)


def test_readers_at_different_layers_share_a_streamed_part(net, held):
    # the hybrid's row groups run one part in one process, each at its own layer: readers
    # far apart, taking turns, must not evict each other's layers (each would reload all)
    import queue
    import threading

    partition = make_neuron_partition(net, 2, "block")
    folder = write_part_slices(held, partition)
    close_parts()
    part = open_part(folder, 0, held.bias, held.ymax, streamed=True, window=2)

    def reader(orders: queue.Queue, done: queue.Queue) -> None:
        while (layer := orders.get()) is not None:
            part.layers[layer]
            done.put(layer)

    lanes = [(queue.Queue(), queue.Queue()) for _ in range(2)]
    threads = [threading.Thread(target=reader, args=lane) for lane in lanes]
    for thread in threads:
        thread.start()
    gap = 5  # more than the window apart
    for layer in range(L - gap):
        for lane, at in zip(lanes, (layer + gap, layer), strict=True):
            lane[0].put(at)
            lane[1].get(timeout=20)
    for lane in lanes:
        lane[0].put(None)
    for thread in threads:
        thread.join(20)
    one_pass = sum(part.layers._files.layer_bytes(k) for k in range(1, L + 1))
    assert part.bytes_read <= one_pass * 1.5  # the leader's first layers, once more


def test_a_partition_measures_a_stores_network_as_its_layers_in_memory(net, held):
    """Volume, work and balance stream a store's layers; a traffic-weighted hypergraph is
    keyed by the store's manifest, so the same partition comes back for it."""
    part = make_neuron_partition(net, 3, "random", seed=2)
    np.testing.assert_array_equal(part.work(held), part.work(net))
    np.testing.assert_array_equal(part.imbalance(held), part.imbalance(net))
    assert part.volume(held).equals(part.volume(net))
    from sdnn_dask.partition.hypergraph import network_digest

    assert network_digest(held) == network_digest(StreamedNetwork(held.store.folder))
    assert network_digest(held) != network_digest(StreamedNetwork(held.store.folder,
                                                                  n_layers=L - 1))
