"""Model parallelism's per-part data and step, without Dask: every conversion and fill
helper of :mod:`sdnn_dask.parallel.slabs` against plain numpy (dense arrays), and the part step
against the serial kernel, bit for bit."""

from __future__ import annotations

import pickle
import time

import numpy as np
import pytest
import scipy.sparse as sp
from dense_reference import BIAS_KINDS, dense_infer, integer_inputs, integer_network
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnn_dask.core.kernels import forward_block
from sdnn_dask.core.network import Network
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import slabs as S
from sdnn_dask.parallel.slabs import (
    BlockCSC,
    Slab,
    assemble,
    forward_parts,
    make_part_plans,
    part_layer_step,
    piece_for,
    take_columns,
)
from sdnn_dask.parallel.slabs import part_layer as slab_step
from sdnn_dask.parallel.slabs import tiles as slab_tiles
from sdnn_dask.partition import NeuronPartition, make_neuron_partition


def random_dense(rng, rows, columns, density, empty_rows=()):
    """A float32 ``rows x columns`` array, ``density`` of it nonzero (exact eighths)."""
    a = (rng.integers(1, 64, (rows, columns)) / 8).astype(np.float32)
    a[rng.random((rows, columns)) >= density] = 0
    a[list(empty_rows)] = 0
    return a


def dense_of(slab: Slab) -> np.ndarray:
    """A slab's values as a dense ``len(rows) x columns`` array."""
    if slab.tile is not None:
        return slab.tile.T.copy()
    out = np.zeros(slab.blocks.shape, np.float32)
    row, col, val = slab.blocks.tocoo()
    out[row, col] = val
    return out


def check_blocks(blocks: BlockCSC) -> None:
    """The structural invariants of a BlockCSC."""
    starts, bounds = blocks.starts, blocks.block_rows
    assert starts.shape[0] + 1 == len(bounds) and np.all(np.diff(bounds) >= 0)
    assert starts[0, 0] == 0 and starts[-1, -1] == blocks.nnz
    assert np.all(starts[1:, 0] == starts[:-1, -1]) and np.all(np.diff(starts, axis=1) >= 0)
    for b in range(starts.shape[0]):
        for j in range(starts.shape[1] - 1):
            run = blocks.indices[starts[b, j] : starts[b, j + 1]]
            assert np.all(np.diff(run) > 0)
            assert np.all((run >= bounds[b]) & (run < bounds[b + 1]))
    assert np.all(blocks.data != 0)


@pytest.mark.parametrize("block", [1, 3, 256])
@pytest.mark.parametrize("shape", [(0, 5), (1, 1), (7, 4), (600, 33)])
def test_block_csc_from_csr(shape, block):
    rng = np.random.default_rng(1)
    a = random_dense(rng, *shape, 0.3)
    blocks = BlockCSC.from_csr(sp.csr_matrix(a), block)
    check_blocks(blocks)
    assert blocks.shape == shape and blocks.nnz == np.count_nonzero(a)
    n_blocks = max(1, -(-shape[0] // block))  # ceil, and one block when there are no rows
    assert blocks.block_rows.tolist() == [min(b * block, shape[0]) for b in range(n_blocks)] + [
        shape[0]] and blocks.starts.shape == (n_blocks, shape[1] + 1)
    assert blocks.nbytes == sum(x.nbytes for x in (blocks.indices, blocks.data, blocks.starts,
                                                   blocks.block_rows))
    np.testing.assert_array_equal(dense_of(Slab(np.arange(shape[0]), blocks=blocks)), a)


def test_from_rows_drops_empty_rows():
    rng = np.random.default_rng(2)
    x = random_dense(rng, 50, 20, 0.2, empty_rows=[0, 7, 49])
    columns = np.array([1, 4, 5, 11, 19])
    slab = Slab.from_rows(sp.csr_matrix(x), columns)
    keep = np.flatnonzero(x[:, columns].any(axis=1))
    np.testing.assert_array_equal(slab.rows, keep)
    np.testing.assert_array_equal(dense_of(slab), x[np.ix_(keep, columns)])
    assert slab.nnz == np.count_nonzero(x[:, columns])


def test_slab_holds_one_form_and_pickles():
    with pytest.raises(ValueError, match="exactly one"):
        Slab(np.arange(2))
    tile = np.array([[1, 0, 2], [0, 0, 3]], np.float32)
    a = Slab(np.array([4, 5, 9]), tile=tile)
    assert a.nnz == 3 and a.n_columns == 2
    assert a.nbytes == a.rows.nbytes + tile.nbytes
    b = Slab.from_rows(sp.csr_matrix(tile.T), np.arange(2))
    assert b.nbytes == b.rows.nbytes + b.blocks.nbytes
    for slab in (a, b, Slab.empty(3)):
        back = pickle.loads(pickle.dumps(slab, protocol=5))
        np.testing.assert_array_equal(dense_of(back), dense_of(slab))
        np.testing.assert_array_equal(back.rows, slab.rows)
        np.testing.assert_array_equal(back.to_csr().toarray(), dense_of(slab))


@pytest.mark.parametrize("form", ["blocks", "tile"])
@pytest.mark.parametrize("density", [0.05, 0.3, 0.9])
def test_take_columns(form, density):
    rng = np.random.default_rng(3)
    values = random_dense(rng, 300, 24, density)
    values = values[values.any(axis=1)]  # a slab holds no empty row
    rows = np.sort(rng.choice(10_000, len(values), replace=False))
    slab = Slab(rows, tile=np.ascontiguousarray(values.T)) if form == "tile" else Slab(
        rows, blocks=BlockCSC.from_csr(sp.csr_matrix(values), 64))
    for positions in (np.arange(24), np.array([0, 3, 4, 20]), np.array([7]),
                      np.array([], np.int64)):
        for label in (False, True):
            piece = take_columns(slab, positions, label=label)
            keep = values[:, positions].any(axis=1)
            np.testing.assert_array_equal(piece.rows, rows[keep])
            np.testing.assert_array_equal(dense_of(piece), values[np.ix_(keep, positions)])
            assert piece.nnz == np.count_nonzero(values[:, positions])
            assert piece.trace == []
            if label:
                np.testing.assert_array_equal(piece.columns, positions)
            else:
                assert piece.columns is None
            if piece.blocks is not None:
                check_blocks(piece.blocks)
                if form == "tile":  # cut from a tile: a block per BLOCK_ROWS of its rows
                    expected = max(1, -(-len(rows) // S.BLOCK_ROWS))
                    assert len(piece.blocks.block_rows) == expected + 1
            if form == "tile" and len(piece.rows) and len(positions) < 24:
                # the smaller form: a tile once at least half the entries are nonzero
                half = 2 * piece.nnz >= len(positions) * len(piece.rows)
                assert (piece.tile is not None) == half


def test_take_columns_of_nothing():
    empty = Slab.empty(6)
    piece = take_columns(empty, np.array([1, 2]), label=True)
    assert len(piece.rows) == 0 and piece.n_columns == 2 and piece.nnz == 0
    # columns all zero: a piece with no rows
    slab = Slab.from_rows(sp.csr_matrix(np.array([[1, 0, 0], [2, 0, 0]], np.float32)),
                          np.arange(3))
    none = take_columns(slab, np.array([1, 2]))
    assert len(none.rows) == 0 and none.n_columns == 2 and none.nnz == 0


@pytest.mark.parametrize("append",
                         [slab_tiles._append_nonzeros, slab_tiles._append_nonzeros_scalar])
@pytest.mark.parametrize("m", [0, 1, 15, 16, 17, 64, 300])
def test_append_nonzeros(m, append):
    rng = np.random.default_rng(m)
    src = random_dense(rng, 1, m + 5, 0.4)[0]
    rank = rng.permutation(m + 5).astype(np.int32)
    oi = np.full(m + 8, -1, np.int32)
    ox = np.zeros(m + 8, np.float32)
    w = append(src, 2, m, rank, 1, oi, ox, 3)
    run = src[2 : 2 + m]
    nonzero = np.flatnonzero(run)
    assert w == 3 + len(nonzero)
    np.testing.assert_array_equal(ox[3:w], run[nonzero])
    np.testing.assert_array_equal(oi[3:w], rank[1:][nonzero])


def _inputs(rng, kinds, n_union, n_columns):
    """Slabs of the given kinds over subsets of ``n_union`` rows, each providing some of
    the layer's ``n_columns`` inputs, and the dense ``n_union x n_columns`` they make."""
    put = np.array_split(rng.permutation(n_columns), len(kinds))
    expected = np.zeros((n_union, n_columns), np.float32)
    inputs = []
    for (form, subset, extra), cols in zip(kinds, put, strict=True):
        cols = np.sort(cols)
        rows = np.sort(rng.choice(n_union, n_union // 2, replace=False)) if subset else \
            np.arange(n_union)
        width = len(cols) + extra
        values = random_dense(rng, len(rows), width, 0.4 if form == "blocks" else 0.8)
        read = np.sort(rng.choice(width, len(cols), replace=False)) if extra else \
            np.arange(width)
        # rows zero in the columns read (the union may lack them), none zero overall
        values[::7, :] = 0
        values[::7, np.setdiff1d(np.arange(width), read)[:1] if extra else 0] = 1.5
        keep = values.any(axis=1)
        rows, values = rows[keep], values[keep]
        slab = Slab(rows, tile=np.ascontiguousarray(values.T)) if form == "tile" else Slab(
            rows, blocks=BlockCSC.from_csr(sp.csr_matrix(values), 37))
        expected[np.ix_(rows, cols)] = values[:, read]
        inputs.append(slab_step._Input(slab, read if extra else None, cols))
    return inputs, expected


@pytest.mark.parametrize("kinds", [
    [("blocks", False, 0)],
    [("tile", False, 0)],
    [("blocks", False, 0), ("tile", False, 0)],
    [("blocks", True, 0), ("tile", True, 3)],
    [("blocks", True, 5), ("blocks", False, 0), ("tile", True, 0)],
])
@pytest.mark.parametrize("chunk", [1, 16, 100, 1000])
def test_fill_tile_and_gather(kinds, chunk):
    rng = np.random.default_rng(len(kinds) * 1000 + chunk)
    n_columns = 12
    inputs, expected = _inputs(rng, kinds, 230, n_columns)
    live = [s for s in inputs if s.nnz]
    rows, positions = slab_step._union_rows(live)
    np.testing.assert_array_equal(rows, np.flatnonzero(expected.any(axis=1)))
    dense = expected[rows]
    args = slab_step._kernel_args(live, positions)
    starts, bounds, idxs, vals, poss, same, kind, srcs, tiles = args
    bases = np.concatenate([[0], np.cumsum([len(s) for s in srcs])])
    cur = np.concatenate([st[0][s] for st, s in zip(starts, srcs, strict=True)])
    rcur = np.zeros(len(live), np.int64)
    cblk = np.zeros(len(live), np.int64)
    for c0 in range(0, len(rows), chunk):
        m = min(len(rows), c0 + chunk) - c0
        width = m + 3  # padding columns come out zero
        yt = np.full((n_columns, width), np.nan, np.float32)  # every entry is written
        slab_tiles._fill_tile(starts, bounds, idxs, vals, poss, same, kind, srcs, tiles, cur,
                     bases[:-1], rcur, cblk, c0, m, yt)
        np.testing.assert_array_equal(yt[:, :m], dense[c0 : c0 + m].T)
        assert not yt[:, m:].any()
    xp, xi, xx = slab_step._gather_csr(*args, n_columns, len(rows))
    x = sp.csr_matrix((xx, xi, xp), shape=(len(rows), n_columns))
    assert x.has_sorted_indices
    np.testing.assert_array_equal(x.toarray(), dense)


def layer_reference(net, layer, x):
    """One layer of the recurrence in float64 numpy (the tolerance reference)."""
    z = x.astype(np.float64) @ net.layers[layer - 1].toarray()
    z = np.where(z != 0, z + np.broadcast_to(net.bias, z.shape[1:]), 0.0)
    return np.clip(z, 0, net.ymax)


@pytest.fixture(scope="module")
def small():
    net = make_network(1024, 6, seed=5)
    return net, make_inputs(400, 1024, seed=5)


@pytest.mark.parametrize("threshold", [0.0, 2.0, None])  # dense, sparse, chosen
@pytest.mark.parametrize(("method", "k"), [("block", 1), ("block", 2), ("hash", 3),
                                           ("random", 4)])
def test_forward_parts_is_the_kernel_bit_for_bit(small, method, k, threshold):
    net, x = small
    part = make_neuron_partition(net, k, method, seed=3)
    out, finals = forward_parts(net, part, x, dense_threshold=threshold)
    ref = forward_block(net, x, dense_threshold=threshold).to_csr()
    assert out.shape == ref.shape
    np.testing.assert_array_equal(out.indptr, ref.indptr)
    np.testing.assert_array_equal(out.indices, ref.indices)
    np.testing.assert_array_equal(out.data, ref.data)
    modes = {t[1] for slab in finals for t in slab.trace} - {"none"}
    if threshold is not None:
        assert modes == {"dense" if threshold == 0.0 else "sparse"}


@pytest.mark.parametrize("threshold", [0.0, 2.0])
def test_part_step_against_numpy(small, threshold):
    """One layer per part against float64 numpy, each source providing its whole slab,
    a piece for this part alone, or a labelled piece for several parts."""
    net, x = small
    part = make_neuron_partition(net, 3, "hash", seed=1)
    plans = make_part_plans(net, part, dense_threshold=threshold)
    y = x.toarray()
    slabs = [Slab.from_rows(x, plan.inputs) for plan in plans]
    for layer in range(1, 4):
        expected = layer_reference(net, layer, y)
        nxt = []
        for p, plan in enumerate(plans):
            lp = plan.layers[layer - 1]
            sources = plan.sources(layer)
            given = {}
            for i, q in enumerate(sources):
                how = (layer + i) % 3
                if how == 0:
                    given[q] = slabs[q]
                elif how == 1:
                    given[q] = piece_for(plans[q].layers[layer - 1], [p], slabs[q])
                else:
                    others = [d for d in plans[q].destinations(layer) if d != p][:1]
                    given[q] = piece_for(plans[q].layers[layer - 1], [p, *others], slabs[q])
            out = part_layer_step(plan, layer, slabs[p], given)
            got = np.zeros((x.shape[0], len(lp.own)), np.float32)
            got[out.rows] = dense_of(out)
            np.testing.assert_allclose(got, expected[:, lp.own], rtol=1e-5, atol=1e-5)
            assert set(np.flatnonzero(got.any(axis=1))) == set(out.rows)
            t = out.trace[-1]
            assert t[0] == layer and t[1] == ("dense" if threshold == 0.0 else "sparse")
            assert t[4] == out.nnz == np.count_nonzero(got)
            nxt.append(out)
        slabs = nxt
        y = expected.astype(np.float32)
    full = assemble(slabs, [plan.layers[2].own for plan in plans], y.shape)
    np.testing.assert_allclose(full.toarray(), y, rtol=1e-5, atol=1e-5)


def test_step_with_nothing_alive():
    """Empty inputs, and inputs that all die: empty slabs, traced."""
    n = 8
    net = Network([sp.identity(n, format="csr", dtype=np.float32)] * 2, bias=-1.0, ymax=4.0)
    part = make_neuron_partition(net, 2, "block")
    x = sp.csr_matrix(np.full((5, n), 0.5, np.float32))  # 0.5 - 1 < 0: every row dies
    for threshold in (0.0, 2.0):
        out, finals = forward_parts(net, part, x, dense_threshold=threshold)
        assert out.nnz == 0 and out.shape == (5, n)
        assert all(len(s.rows) == 0 for s in finals)
        assert [t[1] for t in finals[0].trace] == [
            "dense" if threshold == 0.0 else "sparse", "none"]
    out, finals = forward_parts(net, part, x[:0])
    assert out.shape == (0, n) and all(t[1] == "none" for t in finals[0].trace)
    # a layer with nothing alive: no rows in or out, nothing made, a time that was measured
    start = time.perf_counter()
    out, finals = forward_parts(net, part, x[:0])
    elapsed = time.perf_counter() - start
    for final in finals:
        for row in final.trace:
            assert dict(zip(S.PART_TRACE_COLUMNS[:5], row[:5], strict=True)) == {
                "layer": row[0], "mode": "none", "rows_in": 0, "rows_out": 0, "nnz_out": 0}
            assert 0 <= row[5] <= elapsed
    _, finals = forward_parts(net, part, x, dense_threshold=2.0)  # a sparse step, traced
    first = finals[0].trace[0]
    assert first[:5] == (1, "sparse", 5, 0, 0) and 0 <= first[5] <= time.perf_counter() - start


def test_warm_up_parts():
    assert S.warm_up_parts() == "ok"


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.sampled_from([8, 40, 96, 300]),
    rows=st.integers(0, 700),
    layers=st.integers(1, 6),
    density=st.floats(0.005, 0.3),
    input_density=st.floats(0.01, 0.7),
    bias_kind=st.sampled_from(BIAS_KINDS),
    method=st.sampled_from(["block", "hash", "random", "per-level"]),
    k=st.integers(1, 4),
    threshold=st.sampled_from([0.0, 2.0, None]),
    chunk=st.sampled_from([None, 1, 16, 300]),
)
def test_parts_match_an_independent_dense_recurrence(seed, n, rows, layers, density,
                                                     input_density, bias_kind, method, k,
                                                     threshold, chunk):
    """Exact agreement with float64 NumPy on integer networks (every bias sign, sums that
    cancel to 0), for any partition, both step forms, tiles and blocks, several chunks."""
    rng = np.random.default_rng(seed)
    density = min(density, 40 / n)  # sums stay exact in float32
    weights, bias, ymax = integer_network(rng, n, layers, density, bias_kind)
    y = integer_inputs(rng, rows, n, input_density)
    net = Network(weights, bias=bias, ymax=ymax)
    if method == "per-level":  # every level split its own way, as hypergraph ones are
        part = NeuronPartition("random", k, rng.integers(0, k, size=(layers + 1, n)))
    else:
        part = make_neuron_partition(net, k, method, seed=seed % 1000)
    kwargs = {} if chunk is None else {"chunk_bytes": chunk * 4 * n}
    out, finals = forward_parts(net, part, y, dense_threshold=threshold, dedup=False,
                                **kwargs)
    expected = dense_infer(weights, bias, ymax, y)
    np.testing.assert_array_equal(out.toarray(), expected)
    merged, _ = forward_parts(net, part, y, dense_threshold=threshold, dedup=True, **kwargs)
    np.testing.assert_array_equal(merged.toarray(), expected)  # with dedup on (looks
    # start at layer 8: merging itself is tested in test_model_dedup)
    assert (out.data != 0).all()
    assert len(finals) == k
    for p, slab in enumerate(finals):  # each part holds exactly its live rows and columns
        own = part.owned(layers, p)
        alive = np.flatnonzero(expected[:, own].any(axis=1))
        assert slab.rows.tolist() == alive.tolist()
        assert slab.nnz == np.count_nonzero(expected[:, own])


def test_plan_size_and_width_message():
    """A plan's bytes are its weight slices (both orientations) and index maps; a block
    partition of a 2-layer identity network, worked out by hand."""
    n = 8
    net = Network([sp.identity(n, format="csr", dtype=np.float32)] * 2, bias=-1.0, ymax=4.0)
    part = make_neuron_partition(net, 2, "block")
    plan = S.make_part_plans(net, part)[0]
    # per layer: W_l[needed, own] is 4 x 4 with 4 entries, as CSR twice (4 float32 values,
    # 4 int32 indices, 5 int32 pointers each), own/needed/order (4 each) and 4 biases, and
    # the maps: put[0] (4 positions), take[0] (4; no other part reads this one)
    per_layer = 2 * (4 * 4 + 4 * 4 + 5 * 4)
    per_layer += plan.layers[0].own.nbytes + plan.layers[0].needed.nbytes
    per_layer += plan.layers[0].order.nbytes + 4 * 4
    per_layer += sum(a.nbytes for a in plan.layers[0].put.values())
    per_layer += sum(a.nbytes for a in plan.layers[0].take.values())
    per_layer += sum(a.nbytes for a in plan.layers[0].fetch.values())
    assert plan.nbytes == 2 * per_layer
    with pytest.raises(ValueError, match=r"^inputs have 5 columns, the network has 8 neurons$"):
        forward_parts(net, part, sp.csr_matrix((2, 5)))


def test_piece_cut_from_a_tile_of_255_rows_is_one_block():
    """ceil(255 / 256) = 1 block: the rounding of the block count, at its edge."""
    values = np.zeros((255, 8), np.float32)
    values[:, 0] = 1.0  # every row alive
    values[::50, 5] = 2.0  # a sparse column: the piece of it is cut into blocks
    slab = Slab(np.arange(255), tile=np.ascontiguousarray(values.T))
    piece = take_columns(slab, np.array([2, 3, 5]))  # 6 of 18 entries: blocks
    assert piece.blocks is not None and piece.blocks.block_rows.tolist() == [0, 6]
    assert piece.rows.tolist() == list(range(0, 255, 50))


def test_a_dense_output_is_stored_as_a_tile_and_a_dead_one_as_one_block():
    n = 16
    net = Network([sp.identity(n, format="csr", dtype=np.float32)] * 2, bias=0.5, ymax=4.0)
    part = make_neuron_partition(net, 2, "block")
    x = sp.csr_matrix(np.ones((6, n), np.float32))  # every output nonzero
    _, finals = forward_parts(net, part, x, dense_threshold=0.0)
    assert all(s.tile is not None and s.blocks is None for s in finals)
    dead = Network([sp.identity(n, format="csr", dtype=np.float32)] * 2, bias=-5.0, ymax=4.0)
    _, finals = forward_parts(dead, part, x, dense_threshold=0.0)
    for s in finals:  # nothing survived: one empty block
        assert s.nnz == 0 and s.tile is None and s.blocks.block_rows.tolist() == [0, 0]


@pytest.mark.parametrize(("method", "k"), [("block", 2), ("hash", 2), ("random", 3)])
def test_parts_compute_each_class_of_identical_neurons_once(small, method, k):
    """A part's dense steps copy a neuron whose column and bias equal one computed before
    it (RadiX-Net: 16 to a class): the same bits as computing every one."""
    from sdnn_dask.parallel.slabs.plans import make_part_plans

    net, x = small
    part = make_neuron_partition(net, k, method, seed=3)
    plans = make_part_plans(net, part, dense_threshold=0.0)
    for plan in plans:
        for lp in plan.layers:
            copied = np.flatnonzero(lp.copy_of >= 0)
            assert len(copied) >= len(lp.own) // 2  # 16 to a class, split among k parts
            dense = lp.wt.toarray()
            source = lp.copy_of[copied]
            np.testing.assert_array_equal(dense[copied], dense[source])
            np.testing.assert_array_equal(lp.bias[copied], lp.bias[source])
            rank = np.empty(len(lp.order), np.int64)
            rank[lp.order] = np.arange(len(lp.order))
            assert (rank[source] < rank[copied]).all()  # computed before it is copied
            assert (lp.copy_of[source] < 0).all()
    fast, _ = forward_parts(net, part, x, dense_threshold=0.0, classes=True)
    plain, _ = forward_parts(net, part, x, dense_threshold=0.0, classes=False)
    np.testing.assert_array_equal(fast.indptr, plain.indptr)
    np.testing.assert_array_equal(fast.indices, plain.indices)
    np.testing.assert_array_equal(fast.data.view(np.uint32), plain.data.view(np.uint32))
