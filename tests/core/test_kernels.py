"""The compiled kernel against the plain reference, on every path it can take."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp
from dense_reference import BIAS_KINDS, dense_infer, integer_inputs, integer_network
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnn_dask.core.kernels import forward_block
from sdnn_dask.core.network import Network
from sdnn_dask.core.reference import infer_reference
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.testing import assert_same_result

# the plain steps forced one way or the other; the default (classes where a layer has
# them: tests/core/test_classes.py); and classes off, the density choosing
PATHS = {"sparse": dict(dense_threshold=2.0, classes=False),
         "dense": dict(dense_threshold=0.0, classes=False),
         "auto": {}, "plain": dict(classes=False)}
#: The modes each path may show in a trace.
MODES = {"sparse": {"sparse"}, "dense": {"dense"}}


def random_network(rng, n, layers, density, negative):
    ws = []
    for _ in range(layers):
        w = sp.random(n, n, density=density, format="csr", dtype=np.float32, rng=rng)
        w.data = (w.data * 8).round() / 8 + 0.125  # exact eighths, no accidental zeros
        if negative:
            w.data[rng.random(w.nnz) < 0.3] *= -1
        ws.append(w)
    bias = -rng.random(n).astype(np.float32) * 0.5
    return Network(ws, bias=bias, ymax=float(rng.choice([1.0, 4.0, 32.0])))


@pytest.mark.parametrize("path", PATHS)
def test_official_subset(official_network, official_inputs, official_truth, path):
    out = forward_block(official_network, official_inputs, **PATHS[path])
    assert out.rows.tolist() == official_truth.tolist()
    assert_same_result(out.to_csr(), infer_reference(official_network, official_inputs))
    assert set(out.trace["mode"]) <= MODES.get(path, {"sparse", "dense", "mixed"}) | {"none"}


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.sampled_from([8, 33, 64]),
    rows=st.integers(0, 70),
    layers=st.integers(1, 6),
    density=st.floats(0.02, 0.5),
    negative=st.booleans(),
    path=st.sampled_from(sorted(PATHS)),
    chunk=st.sampled_from([None, 1, 7]),
)
def test_matches_reference(seed, n, rows, layers, density, negative, path, chunk):
    rng = np.random.default_rng(seed)
    net = random_network(rng, n, layers, density, negative)
    y = sp.random(rows, n, density=0.3, format="csr", dtype=np.float32, rng=rng)
    y.data = np.ceil(y.data * 4)
    kwargs = dict(PATHS[path])
    if chunk is not None:
        kwargs["chunk_bytes"] = chunk * 4 * n  # at most `chunk` rows per chunk
    out = forward_block(net, y, **kwargs)
    assert out.n_rows == rows
    assert np.all(np.diff(out.rows) > 0)
    assert_same_result(out.to_csr(), infer_reference(net, y))


def test_rows_are_compacted():
    net = make_network(1024, 24, seed=0)
    y = make_inputs(500, 1024, seed=3)
    out = forward_block(net, y)
    rows_in = out.trace["rows_in"].to_numpy()
    rows_out = out.trace["rows_out"].to_numpy()
    assert (rows_in[1:] == rows_out[:-1]).all()  # each layer sees only the survivors
    assert rows_out[-1] == len(out.rows) < 500


def test_empty_and_all_dead():
    net = Network([sp.identity(16, format="csr")] * 3, bias=-5.0)
    none = forward_block(net, sp.csr_matrix((0, 16)))
    assert none.to_csr().shape == (0, 16) and none.rows.size == 0
    assert none.values.shape == (0, 16)
    empty = forward_block(net, sp.csr_matrix((5, 16)))  # rows with nothing in them
    assert empty.rows.size == 0 and empty.to_csr().shape == (5, 16)
    dead = forward_block(net, sp.csr_matrix(np.ones((4, 16))))
    assert dead.rows.size == 0 and dead.to_csr().nnz == 0
    assert list(dead.trace["rows_out"]) == [0, 0, 0]


def test_width_mismatch():
    with pytest.raises(ValueError, match=r"^inputs have 64 columns, the network has 1024 "
                                         r"neurons$"):
        forward_block(make_network(1024, 1), sp.csr_matrix((2, 64)))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.sampled_from([8, 33, 64, 257, 1024]),
    rows=st.integers(0, 600),
    layers=st.integers(1, 8),
    density=st.floats(0.005, 0.5),
    input_density=st.floats(0.01, 0.6),
    bias_kind=st.sampled_from(BIAS_KINDS),
    path=st.sampled_from(sorted(PATHS)),
    chunk=st.sampled_from([None, 1, 7, 300]),
)
def test_matches_an_independent_dense_recurrence(seed, n, rows, layers, density,
                                                 input_density, bias_kind, path, chunk):
    """Exact agreement with float64 NumPy on integer networks: every bias sign, per-neuron
    biases, sums that cancel to exactly 0.0, both kernel paths, several chunks and tiles."""
    rng = np.random.default_rng(seed)
    density = min(density, 40 / n)  # about 40 inputs per neuron at most: sums stay exact
    weights, bias, ymax = integer_network(rng, n, layers, density, bias_kind)
    y = integer_inputs(rng, rows, n, input_density)
    kwargs = dict(PATHS[path])
    if chunk is not None:
        kwargs["chunk_bytes"] = chunk * 4 * n  # at most `chunk` rows per chunk
    net = Network(weights, bias=bias, ymax=ymax)
    levels = [y.toarray().astype(np.float64)]
    for w in weights:
        levels.append(dense_infer([w], bias, ymax, levels[-1]))
    expected = levels[-1]
    start = time.perf_counter()
    block = forward_block(net, y, **kwargs)
    elapsed = time.perf_counter() - start
    out = block.to_csr()
    # the trace, layer by layer, from the independent recurrence
    trace = block.trace
    live = [int(np.count_nonzero(a.any(axis=1))) for a in levels]
    assert trace["layer"].tolist() == list(range(1, layers + 1))
    assert trace["rows_out"].tolist() == live[1:]
    assert trace["nnz_out"].tolist() == [int(np.count_nonzero(a)) for a in levels[1:]]
    # rows_in: the rows still alive when the layer starts (a dead row is never stepped)
    assert trace["rows_in"].tolist() == live[:-1]
    assert (trace["seconds"] >= 0).all() and trace["seconds"].sum() <= elapsed
    # the mode of each layer: "none" where no row was left to step, else the path taken
    stepped = trace["rows_in"] > 0
    assert (trace.loc[~stepped, "mode"] == "none").all()
    assert set(trace.loc[stepped, "mode"]) <= MODES.get(path, {"sparse", "dense", "mixed"})
    np.testing.assert_array_equal(out.toarray(), expected)
    assert (out.data != 0).all()  # no stored zeros: a value cut to 0 is dropped
    # the surviving rows are the categories: a row whose values all became 0 is dead
    np.testing.assert_array_equal(block.rows, np.flatnonzero(expected.any(axis=1)))
    reference = infer_reference(net, y)
    np.testing.assert_array_equal(reference.output.toarray(), expected)
    assert (reference.output.data != 0).all()
    np.testing.assert_array_equal(reference.categories, block.rows)


@pytest.mark.parametrize("path", PATHS)
def test_a_sum_that_cancels_gets_no_bias(path):
    """Z = 1 - 1 = 0 stays 0 under a positive bias; Z = 1 gets it; a negative Z clips."""
    w = sp.csr_matrix(np.array([[1, 1, 0], [-1, 0, 0], [0, 0, -1]], dtype=np.float32))
    net = Network([w, sp.identity(3, format="csr", dtype=np.float32)],
                  bias=np.array([0.25, 0.5, 0.75], dtype=np.float32), ymax=32)
    y = sp.csr_matrix(np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=np.float32))
    out = forward_block(net, y, **PATHS[path]).to_csr().toarray()
    # layer 1: row 0 -> Z = [0, 1, 0] -> [0, 1.5, 0]; row 1 -> [1, 1, 0] -> [1.25, 1.5, 0];
    # row 2 -> [0, 1, -1] -> [0, 1.5, 0] (the -1 + 0.75 < 0 clips to 0). Layer 2 adds again.
    np.testing.assert_array_equal(out, [[0, 2.0, 0], [1.5, 2.0, 0], [0, 2.0, 0]])


@pytest.mark.parametrize("path", PATHS)
def test_output_rows_wider_than_the_first_buffer(path):
    """An output row of 4096 nonzeros from one input nonzero: the sparse step's output
    buffer (1024 entries at first) must grow past the row, not just double."""
    n = 4096
    first = sp.csr_matrix((np.ones(n, np.float32), (np.zeros(n, int), np.arange(n))),
                          shape=(n, n))
    net = Network([first, sp.identity(n, format="csr", dtype=np.float32)], bias=0.5, ymax=32)
    y = sp.csr_matrix(([2.0, 1.0], ([0, 2], [0, 0])), shape=(3, n), dtype=np.float32)
    block = forward_block(net, y, **PATHS[path])
    assert block.rows.tolist() == [0, 2]
    np.testing.assert_array_equal(block.to_csr().toarray()[[0, 2]],
                                  np.stack([np.full(n, 3.0), np.full(n, 2.0)]))
    assert "trace" not in repr(block)  # the per-layer table stays out of the repr


@pytest.mark.parametrize("shape", [(1, 5), (7, 3), (40, 64)])
def test_tile_helpers_against_numpy(shape):
    """The scatter into a transposed tile (sparse chunks joining dense ones) and the
    column compaction, on their own: every row and column, the last ones included."""
    from sdnn_dask.core.csr import compact_columns, csr_to_dense_t

    rng = np.random.default_rng(shape[0])
    y = sp.random(*shape, density=0.4, format="lil", dtype=np.float32, rng=rng)
    y[shape[0] - 1, shape[1] - 1] = 3.0  # the last row and column hold something
    y = sp.csr_matrix(y)
    out = np.full((shape[1], shape[0]), 9.0, np.float32)  # stale contents are overwritten
    csr_to_dense_t(y.indptr, y.indices, y.data, out)
    np.testing.assert_array_equal(out, y.toarray().T)
    alive = rng.random(shape[0]) < 0.5
    alive[-1] = True
    dst = np.zeros((shape[1], int(alive.sum())), np.float32)
    compact_columns(out, alive, dst)
    np.testing.assert_array_equal(dst, y.toarray().T[:, alive])


def test_chunks_smaller_than_a_row():
    """A chunk budget below one row's bytes still steps one row at a time."""
    net = make_network(1024, 4, seed=0)
    y = make_inputs(20, 1024, seed=1)
    expected = forward_block(net, y).to_csr()
    out = forward_block(net, y, chunk_bytes=1).to_csr()
    assert (out != expected).nnz == 0


def test_chunks_keep_their_rows_at_every_n():
    """The default chunk is 1 MiB of tile but at least ``chunk-min-rows`` rows (16 rows of
    N = 16384 halved the dense step's rate); a chunk size given is kept as it is."""
    from sdnn_dask import config
    from sdnn_dask.core.kernels import KernelSettings

    minimum = config.get("kernel.chunk-min-rows")
    assert minimum == 256
    default = KernelSettings.resolve()
    assert [default.chunk_rows(n) for n in (1024, 4096, 16384, 65536)] == [256] * 4
    given = KernelSettings.resolve(chunk_bytes=8 * 4 * 4096)
    assert given.chunk_rows(4096) == 8 and given.chunk_rows(65536) == 1
    with pytest.raises(ValueError, match="not both"):
        forward_block(make_network(1024, 1), make_inputs(2, 1024), settings=default,
                      chunk_bytes=1)


@pytest.mark.parametrize("n", [1024, 4096, 16384, 65536])
def test_every_challenge_size_equals_the_reference(n):
    """Every N of the challenge, a few rows through a few layers with the default
    settings (at 65536 several 256-row chunks would not fit a test: 600 rows make 3 at
    1024, 1 at 65536) and with chunks of 8 rows: the reference's rows and values."""
    net = make_network(n, 3, seed=1)
    y = make_inputs(600 if n <= 4096 else 90, n, seed=2)
    expected = infer_reference(net, y)
    assert expected.output.nnz > 0  # rows survive: the comparison has values to compare
    assert_same_result(forward_block(net, y).to_csr(), expected)
    assert_same_result(forward_block(net, y, chunk_bytes=8 * 4 * n).to_csr(), expected)
