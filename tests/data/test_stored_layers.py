"""Layers given to the kernel as a store keeps them (uniform rows of one value, uint16
columns): the sparse step on them is the plain one bit for bit, and they are checked
before a step reads them."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnn_dask.core.kernels import sparse_step, sparse_step_uniform
from sdnn_dask.data import store
from sdnn_dask.data.io import ChallengeFormatError
from sdnn_dask.data.radixnet import make_network


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([16, 64, 300]),
       row_nnz=st.integers(0, 12), rows=st.integers(0, 20),
       value=st.sampled_from([0.0625, -0.5, 1.5, 3.0e-3]),
       dtype=st.sampled_from([np.uint16, np.int32]))
def test_the_uniform_sparse_step_is_the_plain_one(seed, n, row_nnz, rows, value, dtype):
    """The same rows kept, the same columns, the values to float rounding (four inputs are
    scattered at a time), and bit for bit where no two of four inputs share an output."""
    rng = np.random.default_rng(seed)
    row_nnz = min(row_nnz, n)
    columns = np.stack([np.sort(rng.choice(n, row_nnz, replace=False)) for _ in range(n)])
    w = sp.csr_matrix((np.full(n * row_nnz, value, np.float32), columns.ravel(),
                       np.arange(n + 1) * row_nnz), shape=(n, n))
    y = sp.random(rows, n, density=0.4, format="csr", dtype=np.float32, rng=rng)
    y.data = (y.data * 7).astype(np.float32)
    bias = (rng.random(n).astype(np.float32) - 0.5)
    ymax = np.float32(rng.choice([1.0, 32.0]))
    plain = sparse_step(y.indptr, y.indices, y.data, w.indptr, w.indices, w.data, bias, ymax,
                        n, True)
    stored = sparse_step_uniform(y.indptr, y.indices, y.data,
                                 columns.ravel().astype(dtype), row_nnz, np.float32(value),
                                 bias, ymax, n, True)
    for part in (0, 1, 3):  # indptr, columns, rows kept
        np.testing.assert_array_equal(plain[part], stored[part])
    np.testing.assert_allclose(stored[2], plain[2], rtol=1e-5, atol=1e-6)
    if row_nnz == 1 and len(set(columns.ravel().tolist())) == n:  # a permutation: no
        np.testing.assert_array_equal(stored[2].view(np.uint32),  # output fed twice
                                      plain[2].view(np.uint32))


@pytest.fixture()
def written(tmp_path):
    net = make_network(1024, 3, seed=2)
    return store.write_network(tmp_path / "net", net), net


def test_a_stored_layer_is_its_file_as_written(written):
    folder, net = written
    held = store.open_store(folder)
    found = held.uniform_layer(2)
    assert found.indices.dtype == np.uint16 and not found.indices.flags.writeable
    assert found.row_nnz == 32 and found.value == np.float32(1 / 16)
    np.testing.assert_array_equal(found.indices, net.layers[1].indices)


@pytest.mark.parametrize("fault, message", [
    ("swap", r"columns not strictly increasing in row 1 \(1-based\)"),
    ("wide", r"columns 0\.\.1500; expected columns in 0\.\.1023"),
])
def test_a_stored_layer_is_checked_before_a_step_reads_it(written, fault, message):
    """The hashes off (a file changed after the manifest's hash was taken cannot be told
    this way): the columns are still checked as stored, and the fault named."""
    folder, _ = written
    path = folder / "l2.indices.npy"
    columns = np.load(path)
    if fault == "swap":
        columns[[0, 1]] = columns[[1, 0]]
    else:
        columns[5] = 1500
    np.save(path, columns)
    held = store.open_store(folder, check_hashes=False)
    with pytest.raises(ChallengeFormatError, match=message) as caught:
        held.uniform_layer(2)
    assert "l2.indices.npy" in str(caught.value)
    assert held.uniform_layer(1) is not None  # the others are sound
    with pytest.raises(ChallengeFormatError, match=message):  # and again: never accepted
        held.uniform_layer(2)
