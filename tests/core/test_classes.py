"""Identical output neurons computed once (core/kernels/classes.py): the classes are exact,
and the kernel with them gives the bits it gives without, on every path."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from dense_reference import BIAS_KINDS, dense_infer, integer_inputs
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnn_dask.core.kernels import KernelSettings, forward_block, stream_blocks
from sdnn_dask.core.kernels import classes as classes_module
from sdnn_dask.core.kernels.classes import column_classes
from sdnn_dask.core.network import Network
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.data.store import write_store
from sdnn_dask.data.streaming import StreamedNetwork


def brute_classes(w: sp.csr_matrix, bias: np.ndarray) -> np.ndarray:
    """Each column's class by comparing dense columns and biases: the first equal column."""
    dense = w.toarray()
    n = dense.shape[1]
    first = np.arange(n)
    for j in range(n):
        for i in range(j):
            if first[i] == i and bias[i] == bias[j] and np.array_equal(
                    dense[:, i].view(np.uint32), dense[:, j].view(np.uint32)):
                first[j] = i
                break
    return first


def assert_exact(layer, w, bias):
    """``layer``'s classes are exactly the groups of equal columns with equal bias."""
    expected = brute_classes(w, bias)
    reps = layer.space.classes  # class ids in order of first neuron
    firsts = np.unique(expected)
    np.testing.assert_array_equal(firsts[reps], expected)
    np.testing.assert_array_equal(layer.space.sizes, np.bincount(expected)[firsts])
    np.testing.assert_array_equal(layer.wt.toarray(), w.toarray()[:, firsts].T)
    np.testing.assert_array_equal(layer.bias, bias[firsts])


def repeated_network(rng, n, layers, base, density, bias_kind, split):
    """Integer layers whose columns copy ``base`` distinct ones (``split`` of the neurons
    then get another bias, or one weight changed, so their copies differ)."""
    weights = []
    for _ in range(layers):
        w0 = sp.random(n, base, density=density, format="csc", dtype=np.float32, rng=rng)
        w0.data = rng.choice(np.array([-2, -1, 1, 2], dtype=np.float32), size=w0.nnz)
        w = w0[:, rng.integers(0, base, n)].tocsr().toarray()
        for j in rng.choice(n, size=int(split * n), replace=False):
            i = rng.integers(0, n)
            w[i, j] = 1.0 if w[i, j] != 1.0 else 2.0  # this copy differs in one weight
        weights.append(sp.csr_matrix(w))
    bias = {"negative": np.full(n, -1.0), "zero": np.zeros(n), "positive": np.full(n, 1.0),
            "mixed": rng.integers(-2, 3, size=n).astype(np.float64)}[bias_kind]
    return weights, bias.astype(np.float32), float(rng.choice([1.0, 4.0, 32.0]))


@pytest.mark.parametrize("n", [1024, 4096])
def test_radixnet_layers_come_16_neurons_to_a_class(n):
    net = make_network(n, 9, seed=3)  # past the first block: permuted rows too
    for k in (0, 5, 8):
        layer = column_classes(net.layers[k], net.bias, k)
        # 16 at least (32 where the shift is N/32: columns j and j + N/32 then match)
        assert layer.space.n <= n // 16 and (layer.space.sizes % 16 == 0).all()
        assert layer.space.sizes.sum() == n
        dense = net.layers[k].toarray() if n == 1024 else None
        if dense is not None:
            assert_exact(layer, net.layers[k], net.bias)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([8, 24, 64]),
       base=st.integers(1, 6), split=st.sampled_from([0.0, 0.1, 0.3]),
       bias_kind=st.sampled_from(BIAS_KINDS))
def test_classes_are_the_equal_columns_with_equal_bias(seed, n, base, split, bias_kind):
    rng = np.random.default_rng(seed)
    weights, bias, _ = repeated_network(rng, n, 1, base, 0.3, bias_kind, split)
    layer = column_classes(weights[0], bias, 0)
    if layer is None:  # too many classes to pay: more than half the neurons
        assert len(np.unique(brute_classes(weights[0], bias))) > n // 2
    else:
        assert_exact(layer, weights[0], bias)


def test_a_hash_collision_is_found_and_split(monkeypatch):
    """Every column hashed alike: the comparison, not the hash, decides."""
    rng = np.random.default_rng(5)
    weights, bias, _ = repeated_network(rng, 32, 1, 3, 0.4, "zero", 0.0)
    expected = column_classes(weights[0], bias, 0)
    real = classes_module._column_hashes

    def colliding(wp, wi, wx, bias_bits):
        hashes, counts = real(wp, wi, wx, bias_bits)
        return np.zeros_like(hashes), counts

    monkeypatch.setattr(classes_module, "_column_hashes", colliding)
    layer = column_classes(weights[0], bias, 0)
    # one guessed class, split round by round into the same classes as with real hashes
    assert_exact(layer, weights[0], bias)
    np.testing.assert_array_equal(layer.space.sizes, expected.space.sizes)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([16, 40, 128]),
       rows=st.integers(0, 300), layers=st.integers(1, 6), base_share=st.sampled_from(
           [0.05, 0.2, 0.5]), split=st.sampled_from([0.0, 0.05]),
       input_density=st.floats(0.02, 0.6), bias_kind=st.sampled_from(BIAS_KINDS),
       threshold=st.sampled_from([0.0, 0.05, 2.0]), chunk=st.sampled_from([None, 1, 7, 64]),
       dedup=st.booleans())
def test_the_kernel_with_classes_is_the_kernel_without(seed, n, rows, layers, base_share,
                                                       split, input_density, bias_kind,
                                                       threshold, chunk, dedup):
    """Exact against float64 NumPy on integer networks with repeated columns, and the same
    bits, traces and survivors as without classes, on every path and chunking."""
    rng = np.random.default_rng(seed)
    base = max(1, int(base_share * n))
    weights, bias, ymax = repeated_network(rng, n, layers, base, min(0.5, 20 / n),
                                           bias_kind, split)
    y = integer_inputs(rng, rows, n, input_density)
    chunk_bytes = None if chunk is None else chunk * 4 * n
    outs = []
    for classes in (True, False):
        net = Network(weights, bias=bias, ymax=ymax)
        kernel = KernelSettings.resolve(threshold, chunk_bytes, dedup=dedup, classes=classes)
        if chunk is not None:
            kernel = KernelSettings(threshold, chunk_bytes, 1, dedup, classes)
        outs.append(forward_block(net, y, settings=kernel))
    with_classes, without = outs
    expected = dense_infer(weights, bias, ymax, y)
    np.testing.assert_array_equal(with_classes.to_csr().toarray(), expected)
    np.testing.assert_array_equal(with_classes.rows, without.rows)
    a, b = with_classes.to_csr(), without.to_csr()
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data.view(np.uint32), b.data.view(np.uint32))
    columns = ["layer", "rows_in", "rows_out", "nnz_out", "distinct_out"]
    assert with_classes.trace[columns].equals(without.trace[columns])


def test_radixnet_with_classes_is_bit_for_bit_without():
    net, x = make_network(1024, 30, seed=1), make_inputs(700, 1024, seed=2)
    plain = forward_block(net, x, classes=False)
    fast = forward_block(net, x, classes=True)
    assert sum(layer is not None for layer in net.class_layers.values()) == 30
    a, b = fast.to_csr(), plain.to_csr()
    assert (a != b).nnz == 0 and np.array_equal(fast.rows, plain.rows)
    assert fast.trace["nnz_out"].equals(plain.trace["nnz_out"])
    assert set(fast.trace["mode"]) <= {"sparse", "dense", "none"}


@pytest.mark.parametrize("chunk_rows", [7, 20])
def test_a_streamed_network_mixes_classes_and_neurons_exactly(tmp_path, chunk_rows):
    """Streamed, a chunk of fewer than STREAM_CLASS_ROWS rows runs plain while larger
    ones run in classes; repacked together, they go back to neurons."""
    net, x = make_network(256, 16, seed=4, bias=-0.2), make_inputs(45, 256, seed=6)
    store = write_store(tmp_path / "net", net.layers, n_neurons=256, bias=net.bias,
                        ymax=net.ymax)
    outs = []
    for classes in (True, False):
        kernel = KernelSettings(0.05, chunk_rows * 4 * 256, 1, True, classes)
        outs.append(stream_blocks(StreamedNetwork(store), [x[:30], x[30:]], kernel))
    for fast, plain in zip(*outs, strict=True):  # a streamed plain dense step walks W,
        assert np.array_equal(fast.rows, plain.rows)  # not W^T: float rounding apart
        np.testing.assert_allclose(fast.to_csr().toarray(), plain.to_csr().toarray(),
                                   rtol=1e-4)
        assert fast.trace["nnz_out"].equals(plain.trace["nnz_out"])
    # streamed plain dense steps walk W, not W^T: equal to float rounding
    in_memory = forward_block(net, x, classes=False).to_csr().toarray()
    joined = sp.vstack([o.to_csr() for o in outs[0]], format="csr").toarray()
    np.testing.assert_allclose(joined, in_memory, rtol=1e-4)
    assert (joined != 0).sum() > 0
