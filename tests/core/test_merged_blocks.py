"""Several blocks on one worker, their survivors merged into shared tiles
(:func:`sdnn_dask.core.kernels.forward_blocks`): every block's answer and trace are its own,
worked out from an independent dense recurrence on that block's rows alone."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp
from dense_reference import BIAS_KINDS, dense_infer, integer_inputs, integer_network
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnn_dask.core import kernels
from sdnn_dask.core.kernels import KernelSettings, finish_blocks, forward_blocks, start_block
from sdnn_dask.core.kernels.chunks import Chunk
from sdnn_dask.core.network import Network
from sdnn_dask.data.radixnet import make_inputs, make_network

PATHS = {"sparse": 2.0, "dense": 0.0, "auto": 0.05}


def levels_of(weights, bias, ymax, y) -> list[np.ndarray]:
    """The activations entering each layer and leaving the last, densely in float64."""
    levels = [y.toarray().astype(np.float64)]
    for w in weights:
        levels.append(dense_infer([w], bias, ymax, levels[-1]))
    return levels


def assert_block(out, levels, rows: np.ndarray) -> None:
    """``out`` is block ``rows``'s: values, survivors and per-layer counts."""
    mine = [a[rows] for a in levels]
    np.testing.assert_array_equal(out.to_csr().toarray(), mine[-1])
    assert out.n_rows == len(rows)
    np.testing.assert_array_equal(out.rows, np.flatnonzero(mine[-1].any(axis=1)))
    live = [int(np.count_nonzero(a.any(axis=1))) for a in mine]
    trace = out.trace
    assert trace["rows_in"].tolist() == live[:-1]
    assert trace["rows_out"].tolist() == live[1:]
    assert trace["nnz_out"].tolist() == [int(np.count_nonzero(a)) for a in mine[1:]]
    assert (trace.loc[trace["rows_in"] == 0, "mode"] == "none").all()
    assert (trace["seconds"] >= 0).all()
    assert (trace.loc[trace["rows_in"] == 0, "seconds"] == 0).all()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.sampled_from([8, 33, 64, 257]),
    sizes=st.lists(st.integers(0, 90), min_size=1, max_size=9),
    layers=st.integers(1, 8),
    density=st.floats(0.005, 0.5),
    input_density=st.floats(0.01, 0.6),
    bias_kind=st.sampled_from(BIAS_KINDS),
    path=st.sampled_from(sorted(PATHS)),
    chunk=st.sampled_from([1, 7, 16, 300]),
)
def test_each_block_as_if_alone(seed, n, sizes, layers, density, input_density, bias_kind,
                                path, chunk):
    """Blocks of any size (empty ones too), every bias sign, both kernel paths, chunks
    from one row up: blocks join the shared tiles at different layers and their rows
    interleave when tiles are repacked."""
    rng = np.random.default_rng(seed)
    density = min(density, 40 / n)  # sums stay exact in float32 (dense_reference)
    weights, bias, ymax = integer_network(rng, n, layers, density, bias_kind)
    y = integer_inputs(rng, sum(sizes), n, input_density)
    net = Network(weights, bias=bias, ymax=ymax)
    settings_ = KernelSettings(PATHS[path], chunk * 4 * n)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    blocks = [np.arange(starts[b], starts[b + 1]) for b in range(len(sizes))]
    pieces = [y[rows] for rows in blocks]
    start = time.perf_counter()
    outs = forward_blocks(net, pieces, settings_)
    elapsed = time.perf_counter() - start
    levels = levels_of(weights, bias, ymax, y)
    assert len(outs) == len(blocks)
    # a shared tile's seconds are split among its blocks, not counted once for each
    assert sum(o.trace["seconds"].sum() for o in outs) <= elapsed
    for out, rows in zip(outs, blocks, strict=True):
        assert_block(out, levels, rows)


def test_rows_of_blocks_that_interleave_are_merged_by_id(monkeypatch):
    """A block joining late lands among tiles already shared by earlier blocks: the
    repack that follows must merge rows by id (putting the tiles end to end would
    misattribute them). The merge is counted here to show the case is reached."""
    n, layers = 8, 10
    # W = I and bias -1: a row holding the value v dies at layer v, exactly
    net = Network([sp.identity(n, format="csr", dtype=np.float32)] * layers, bias=-1.0,
                  ymax=32.0)
    values = np.array([12] * 2 + [2] * 37 + [12] * 3 + [12] * 2, np.float32)
    y = sp.csr_matrix((values, (np.arange(44), np.arange(44) % n)), shape=(44, n))
    # tiles of 8 rows: blocks 0 and 2 (2 rows each) skip phase 1 and share a tile; block 1
    # runs two layers alone (where its first tile dies), then joins with 3 rows
    blocks = [np.arange(0, 2), np.arange(2, 42), np.arange(42, 44)]
    settings_ = KernelSettings(0.0, 8 * 4 * n)  # all dense
    states = [start_block(net, y[rows], settings_) for rows in blocks]
    assert [s.layer for s in states] == [0, 2, 0]
    calls = []
    merge = Chunk._merge_dense

    def counted(*args):
        calls.append(1)
        return merge(*args)

    monkeypatch.setattr(Chunk, "_merge_dense", staticmethod(counted))
    outs = finish_blocks(net, states, settings_)
    levels = levels_of(net.layers, net.bias, net.ymax, y)
    for out, rows in zip(outs, blocks, strict=True):
        assert_block(out, levels, rows)
    assert [len(o.rows) for o in outs] == [2, 3, 2]
    assert calls, "no repack merged interleaved rows: the test lost its case"


def test_generated_network_many_small_blocks():
    """The generated 1024-neuron network, 24 blocks of 25 rows merged, against each block
    run alone (the values bit for bit) and against the dense recurrence's counts."""
    net = make_network(1024, 12)
    y = make_inputs(600, 1024, seed=2, order="official-like")
    blocks = np.array_split(np.arange(600), 24)
    pieces = [y[rows] for rows in blocks]
    start = time.perf_counter()
    outs = forward_blocks(net, pieces)
    elapsed = time.perf_counter() - start
    # ~10 blocks share each tile late on: their shares of its seconds add up to it once
    assert sum(o.trace["seconds"].sum() for o in outs) <= elapsed
    levels = levels_of(net.layers, net.bias, net.ymax, y)
    for out, rows in zip(outs, blocks, strict=True):
        alone = kernels.forward_block(net, y[rows])
        np.testing.assert_array_equal(out.rows, alone.rows)
        assert (out.values != alone.values).nnz == 0
        live = [int(np.count_nonzero(a[rows].any(axis=1))) for a in levels]
        assert out.trace["rows_out"].tolist() == live[1:]


def test_blocks_started_with_other_settings_are_refused():
    net = make_network(1024, 2)
    y = make_inputs(10, 1024, seed=0)
    state = start_block(net, y, KernelSettings(0.05, 1 << 20))
    with pytest.raises(ValueError, match="other kernel settings"):
        finish_blocks(net, [state], KernelSettings(0.05, 1 << 18))


def test_no_blocks():
    assert forward_blocks(make_network(1024, 2), []) == []
