"""Networks streamed from a store: the kernel layer by layer, serial and data-parallel runs,
the choice of resident or streamed weights."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
from dense_reference import dense_infer, integer_inputs, integer_network
from store_v1 import write_v1_store

from sdnn_dask.core.csr import transpose
from sdnn_dask.core.kernels import (
    KernelSettings,
    StoredLayer,
    canonical,
    forward_block,
    start_block,
    stream_blocks,
)
from sdnn_dask.core.kernels.forward import _InOrder
from sdnn_dask.core.network import Network, as_csr32
from sdnn_dask.core.reference import infer_reference
from sdnn_dask.data import store
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.data.store import NetworkStore
from sdnn_dask.data.streaming import StreamedNetwork, resident_bytes
from sdnn_dask.parallel.data_executor import DataParallelExecutor
from sdnn_dask.parallel.serial import run_serial
from sdnn_dask.parallel.weights import choose_weights
from sdnn_dask.testing import assert_same_result

N, L = 1024, 12


@pytest.fixture(scope="module")
def net() -> Network:
    return make_network(N, L, seed=3)


@pytest.fixture(scope="module")
def inputs() -> sp.csr_matrix:
    return make_inputs(900, N, seed=4)


@pytest.fixture(scope="module")
def held(net, tmp_path_factory) -> NetworkStore:
    return store.open_store(store.write_network(tmp_path_factory.mktemp("stream") / "net", net))


def _stacked(outs) -> sp.csr_matrix:
    return as_csr32(sp.vstack([o.to_csr() for o in outs], format="csr"))


# ----------------------------------------------------------------------------- transpose


@pytest.mark.parametrize("shape, density", [((50, 70), 0.1), ((70, 50), 0.3), ((1, 9), 1.0),
                                            ((40, 40), 0.0), ((300, 300), 0.02)])
def test_transpose_is_scipys_exactly(shape, density):
    rng = np.random.default_rng(shape[0])
    w = as_csr32(sp.random(*shape, density=density, format="csr", dtype=np.float32, rng=rng))
    if w.nnz:
        w.data = rng.standard_normal(w.nnz).astype(np.float32)
    got, want = transpose(w), as_csr32(w.T)
    assert got.shape == want.shape == shape[::-1]
    assert got.dtype == np.float32
    for part in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(got, part), getattr(want, part))
    assert got.has_canonical_format


# ------------------------------------------------------------------- the dense step on W


@pytest.mark.parametrize("n, rows", [(1024, 40), (4096, 7), (1024, 300)])
def test_dense_step_w_four_at_a_time_is_one_at_a_time_bit_for_bit(n, rows):
    from sdnn_dask.core.kernels import ROW_TILE, dense_step, dense_step_w, input_order
    from sdnn_dask.core.network import pattern_order
    from sdnn_dask.data.radixnet import radixnet_layer

    rng = np.random.default_rng(n + rows)
    w = as_csr32(radixnet_layer(n, 2, rng.permutation(n)))
    w.data = rng.standard_normal(w.nnz).astype(np.float32)  # four inputs, four weights
    walk = input_order(w)
    assert walk.fours.sum() == n // 4  # RadiX-Net: 16 inputs share each pattern
    # some inputs dead (all-zero rows), the others half zero
    yt = (rng.random((n, rows)) * (rng.random((n, rows)) < 0.5)).astype(np.float32)
    yt[rng.random(n) < 0.2] = 0.0
    bias, ymax = np.full(n, -0.1, np.float32), np.float32(32)
    one, four, gather = (np.empty((n, rows), np.float32) for _ in range(3))
    a = dense_step_w(yt, w.indptr, w.indices, w.data, bias, ymax, one, ROW_TILE,
                     walk.order, np.zeros(n, np.bool_))
    b = dense_step_w(yt, w.indptr, w.indices, w.data, bias, ymax, four, ROW_TILE,
                     walk.order, walk.fours)
    np.testing.assert_array_equal(one, four)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1]
    wt = transpose(w)
    dense_step(yt, wt.indptr, wt.indices, wt.data, bias, ymax, gather, ROW_TILE,
               pattern_order(wt))
    np.testing.assert_allclose(four, gather, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ stream_blocks


@pytest.mark.parametrize("chunk_bytes", [None, 8 * 4 * N])
def test_stream_blocks_equal_the_reference(held, net, inputs, chunk_bytes):
    streamed = StreamedNetwork(held, window=2)
    settings = KernelSettings.resolve(chunk_bytes=chunk_bytes)
    blocks = [inputs[:200], inputs[200:201], inputs[201:]]
    outs = stream_blocks(streamed, blocks, settings)
    assert [o.n_rows for o in outs] == [200, 1, 699]
    expected = infer_reference(net, inputs)
    assert_same_result(_stacked(outs), expected)
    assert len(expected.output.getnnz(axis=1).nonzero()[0]) > 0  # something survives
    # the same rows as forward_block on each block in memory, and the same traces
    for out, block in zip(outs, blocks, strict=True):
        alone = forward_block(net, block, settings=settings)
        np.testing.assert_array_equal(out.rows, alone.rows)
        assert_same_result(out.to_csr(), alone.to_csr())
        np.testing.assert_array_equal(out.trace["rows_out"], alone.trace["rows_out"])


@pytest.mark.parametrize("threshold, mode", [(0.0, "dense"), (2.0, "sparse"), (None, None)])
@pytest.mark.parametrize("bias_kind", ["negative", "mixed", "positive"])
def test_stream_blocks_exact_on_integer_networks(tmp_path, threshold, mode, bias_kind):
    # float32 sums of small integers are exact: the streamed kernel (its dense step walks
    # W, not W^T) must match a dense float64 recurrence that shares no code with the
    # package, value for value, on either path
    rng = np.random.default_rng(11)
    weights, bias, ymax = integer_network(rng, 96, 6, 0.06, bias_kind)
    x = integer_inputs(rng, 150, 96, 0.1)
    written = store.write_network(tmp_path / "int", Network(weights, bias=bias, ymax=ymax))
    settings = KernelSettings.resolve(dense_threshold=threshold, chunk_bytes=16 * 4 * 96)
    outs = stream_blocks(StreamedNetwork(written), [x[:70], x[70:]], settings)
    np.testing.assert_array_equal(_stacked(outs).toarray(), dense_infer(weights, bias, ymax, x))
    if mode is not None:
        used = set(outs[1].trace["mode"]) - {"none"}
        assert used == {mode}


def test_fewer_layers_than_the_store(held, net, inputs):
    streamed = StreamedNetwork(held, n_layers=5)
    assert (streamed.n_layers, len(streamed.layers)) == (5, 5)
    assert streamed.edges == sum(w.nnz for w in net.layers[:5])
    assert "layers 1-5" in streamed.name
    first5 = Network(net.layers[:5], bias=net.bias, ymax=net.ymax)
    out, = stream_blocks(streamed, [inputs])
    assert_same_result(out.to_csr(), infer_reference(first5, inputs))
    with pytest.raises(ValueError, match=r"n_layers must be in 1\.\.12"):
        StreamedNetwork(held, n_layers=13)
    with pytest.raises(ValueError, match="window"):
        StreamedNetwork(held, window=0)


def test_stream_blocks_on_a_network_in_memory(net, inputs):
    out, = stream_blocks(net, [inputs])
    assert_same_result(out.to_csr(), infer_reference(net, inputs))


def test_a_streamed_network_is_not_run_depth_first(held, inputs):
    with pytest.raises(ValueError, match="stream_blocks"):
        start_block(StreamedNetwork(held), inputs)


class _CountingStore(NetworkStore):
    """A real store that also notes which layers were read, in order."""

    def __init__(self, folder, manifest):
        super().__init__(folder, manifest)
        self.read: list[int] = []

    def layer(self, k):
        self.read.append(int(k))
        return super().layer(k)

    def uniform_layer(self, k):
        found = super().uniform_layer(k)
        if found is not None:  # a layer given as stored (decoded by layer() if asked)
            self.read.append(int(k))
        return found


def _counting(held: NetworkStore) -> _CountingStore:
    return _CountingStore(held.folder, held.manifest)


def test_each_layer_is_read_once_in_order(held, inputs):
    counted = _counting(held)
    streamed = StreamedNetwork(counted, window=3)
    stream_blocks(streamed, [inputs[:300], inputs[300:]])
    # each layer mapped twice at most: as stored, then decoded if a step asks
    assert sorted(set(counted.read)) == list(range(1, L + 1))
    assert max(Counter(counted.read).values()) <= 2
    # the kernel is handed (W, W^T, order) of layer 1, 2, ... each once, and cannot go back
    layers = _InOrder(streamed.kernel_layers())
    w3, wt3, walk = layers[2]
    assert (canonical(w3) != held.layer(3)).nnz == 0 and wt3 is None  # no transpose
    assert sorted(walk.order) == list(range(N))
    assert layers[2][0] is w3
    with pytest.raises(RuntimeError, match="read once, in order"):
        layers[1]
    layers.close()


class _KeepingStore(NetworkStore):
    """A real store that keeps the first matrix it returned for each layer."""

    def __init__(self, folder, manifest):
        super().__init__(folder, manifest)
        self.given: dict[int, sp.csr_matrix] = {}

    def layer(self, k):
        matrix = super().layer(k)
        self.given.setdefault(int(k), matrix)
        return matrix


@pytest.mark.parametrize("version", [1, 2])
def test_kernel_layers_copy_maps_and_nothing_else(net, tmp_path, version):
    """A version-1 layer is read-only maps: copied, once. A version-2 RadiX-Net layer is
    given as stored (its uint16 columns' map, one value), and decoded by the store into
    new arrays only when a step asks for canonical CSR: used as they are, not copied
    again."""
    folder = (write_v1_store if version == 1 else store.write_network)(tmp_path / "s", net)
    opened = store.open_store(folder)
    kept = _KeepingStore(opened.folder, opened.manifest)
    for k, (w, _, _) in enumerate(StreamedNetwork(kept, n_layers=3, window=1).kernel_layers(),
                                  start=1):
        if version == 2:  # as stored, until asked
            assert isinstance(w, StoredLayer) and k not in kept.given
            assert w.uniform.indices.dtype == np.uint16 and w.uniform.row_nnz == 32
            assert isinstance(w.uniform.indices.base, np.memmap | type(None)) or \
                not w.uniform.indices.flags.writeable
            w = w.csr
        given = kept.given[k]
        assert (w != net.layers[k - 1]).nnz == 0
        for part in ("data", "indices"):
            mine, its = getattr(w, part), getattr(given, part)
            assert mine.flags.writeable and not isinstance(mine.base, np.memmap)
            assert np.shares_memory(mine, its) == (version == 2), part
        assert w.indptr is given.indptr  # scipy's int32 copy either way


def test_reading_stops_when_every_row_has_died(held):
    counted = _counting(held)
    dead = sp.csr_matrix((50, N), dtype=np.float32)  # empty rows are dead at once
    out, = stream_blocks(StreamedNetwork(counted, window=2), [dead])
    assert len(out.rows) == 0
    assert max(counted.read, default=0) <= 4  # the window prepared ahead, nothing more


def test_the_reference_reads_a_streamed_network(held, net, inputs):
    a = infer_reference(StreamedNetwork(held), inputs[:300])
    b = infer_reference(net, inputs[:300])
    assert (a.output != b.output).nnz == 0


def test_a_streamed_network_pickles_as_its_folder(held):
    streamed = StreamedNetwork(held, n_layers=7, window=3)
    data = pickle.dumps(streamed)
    assert len(data) < 1000  # the folder, not the weights
    back = pickle.loads(data)
    assert (back.n_layers, back.window, back.edges) == (7, 3, streamed.edges)
    assert back.store.folder.resolve() == held.folder.resolve()


def test_run_serial_streams(held, net, inputs):
    streamed = StreamedNetwork(held)
    for method in ("kernel", "reference"):
        got = run_serial(streamed, inputs, method)
        assert_same_result(got, run_serial(net, inputs, "reference"))
        assert got.network["edges"] == net.edges


# ------------------------------------------------------------------- resident or streamed


def test_choose_weights(held, net):
    need = resident_bytes(held)
    assert need > 2 * 8 * net.edges  # weights and transpose, int32 + float32 each
    assert choose_weights(held, "auto", memory_limit=4 * need)[0] == "resident"
    mode, why = choose_weights(held, "auto", memory_limit=need)
    assert mode == "streamed" and "over 0.5" in why
    assert choose_weights(StreamedNetwork(held), "resident", memory_limit=1)[0] == "resident"
    assert choose_weights(net, "auto", memory_limit=1)[0] == "resident"
    with pytest.raises(ValueError, match="need a network store"):
        choose_weights(net, "streamed", memory_limit=None)
    with pytest.raises(ValueError, match="weights must be one of"):
        choose_weights(held, "mapped", memory_limit=None)


def test_data_parallel_streams_a_store(client, held, net, inputs):
    expected = infer_reference(net, inputs)
    streamed = DataParallelExecutor(client, held, weights="streamed", warm_up=False)
    assert streamed.weights == "streamed"
    assert isinstance(streamed.network, StreamedNetwork)
    for n_blocks, join in ((2, None), (5, None), (2, False), (5, False)):
        # joined (the default): the survivors of both workers on together on one
        result = streamed.run(inputs, n_blocks=n_blocks, join=join)
        assert_same_result(result, expected)
        assert result.params["weights"] == "streamed"
        assert result.params["join"] is (join is None)
        assert sorted(result.blocks["block"]) == list(range(n_blocks))
        assert result.blocks["worker"].nunique() == 2  # both workers streamed
        assert (result.blocks["compute_s"] > 0).all()
        traces = result.layers.groupby("block")["rows_in"].first()
        assert traces.sum() == inputs.shape[0] - (inputs.getnnz(axis=1) == 0).sum()
    with pytest.raises(ValueError, match="only static placement with merged blocks"):
        streamed.run(inputs, placement="dynamic")
    with pytest.raises(ValueError, match="only static placement with merged blocks"):
        streamed.run(inputs, merge=False)
    # auto: this small store fits, so it is read and held as any network
    auto = DataParallelExecutor(client, held, warm_up=False)
    assert auto.weights == "resident" and "fits in" in auto.weights_reason
    # read from the store and sent: the client keeps none of the workers' copies
    assert isinstance(auto.network, StreamedNetwork)
    result = auto.run(inputs)
    assert result.params["weights"] == "resident"
    assert_same_result(result, expected)


def test_data_parallel_streams_some_layers(client, held, net, inputs):
    first5 = Network(net.layers[:5], bias=net.bias, ymax=net.ymax)
    executor = DataParallelExecutor(client, StreamedNetwork(held, n_layers=5),
                                    weights="streamed", warm_up=False)
    result = executor.run(inputs)
    assert result.network["layers"] == 5
    assert_same_result(result, infer_reference(first5, inputs))


# ----------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("strategy", ["data", "kernel"])
def test_infer_streams_a_store_from_the_command_line(held, net, tmp_path, capsys, strategy):
    from sdnn_dask.cli import main
    from sdnn_dask.core.reference import categories
    from sdnn_dask.data import io

    out = tmp_path / "categories.tsv"
    code = main(["infer", "--data", str(held.folder), "-L", "12", "-n", "600", "--seed", "5",
                 "--strategy", strategy, "--weights", "streamed", "--workers", "2",
                 "--categories-out", str(out)])
    assert code == 0
    captured = capsys.readouterr()
    assert "streaming 1024-12 weights from the store" in captured.err
    if strategy == "data":
        assert "weights streamed: as asked" in captured.err
    # the store holds weights only: the inputs are generated as for a generated network
    expected = categories(infer_reference(net, make_inputs(600, N, seed=5)).output)
    assert len(expected) > 0
    np.testing.assert_array_equal(io.read_categories(out), expected)


def test_auto_keeps_a_small_store_in_memory(held, capsys):
    from sdnn_dask.cli import main

    assert main(["infer", "--data", str(held.folder), "-L", "4", "-n", "100",
                 "--strategy", "kernel"]) == 0
    err = capsys.readouterr().err
    assert "reading 1024-4 weights from the store" in err and "streaming" not in err


# ------------------------------------------------------------------ every challenge size


@pytest.mark.parametrize("n", [4096, 16384, 65536])
def test_streamed_kernel_at_every_size(tmp_path, n):
    # the streamed dense step (W, not W^T) at the challenge's sizes, on a few rows, forced
    # dense and left to choose, against the scipy reference
    from sdnn_dask.data.radixnet import iter_layers

    written = store.write_store(tmp_path / "net", iter_layers(n, 3, seed=1), n_neurons=n,
                                n_layers=3)
    streamed = StreamedNetwork(written)
    x = make_inputs(24, n, seed=2)
    expected = infer_reference(streamed, x)
    assert expected.output.nnz > 0
    for threshold in (0.0, None):
        out, = stream_blocks(streamed, [x], KernelSettings.resolve(dense_threshold=threshold))
        assert_same_result(out.to_csr(), expected)


def test_data_parallel_takes_a_store_folder(client, held, net, inputs):
    import dask

    executor = DataParallelExecutor(client, str(held.folder), weights="streamed",
                                    warm_up=False)
    with dask.config.set({"sdnn.data-parallel.merge-blocks": False}):
        result = executor.run(inputs, n_blocks=3)  # streamed blocks always run together
    assert (result.params["weights"], result.params["merge_blocks"]) == ("streamed", "merged")
    assert_same_result(result, infer_reference(net, inputs))


@pytest.mark.parametrize("pass_rows", [1, 250, 899, 5000])
def test_rows_stream_in_passes_with_the_same_outputs(held, net, inputs, pass_rows):
    # blocks of 300, 0 and 600 rows, cut into passes that straddle them
    blocks = [inputs[:300], inputs[300:300], inputs[300:]]
    streamed = StreamedNetwork(held)
    once = stream_blocks(streamed, blocks, pass_rows=10 ** 9)
    passes = stream_blocks(streamed, blocks, pass_rows=pass_rows)
    assert [o.n_rows for o in passes] == [300, 0, 600]
    for a, b in zip(passes, once, strict=True):
        assert_same_result(a.to_csr(), b.to_csr())
        np.testing.assert_array_equal(a.rows, b.rows)
        assert a.trace["rows_in"].sum() == b.trace["rows_in"].sum()
    assert_same_result(_stacked(passes), infer_reference(net, inputs).output)


def test_the_default_pass_is_set_in_bytes(held):
    import dask

    from sdnn_dask.core.kernels.passes import default_pass_rows

    with dask.config.set({"sdnn.store.pass-bytes": 8 * N * 5000}):
        assert default_pass_rows(StreamedNetwork(held)) == 5000
    assert default_pass_rows(make_network(N, 2)) is None  # in memory: one pass
