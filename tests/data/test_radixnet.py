"""RadiX-Net generator: the official structure, exactly where it is known."""

from __future__ import annotations

import numpy as np
import pytest

from sdnn_dask.data import io
from sdnn_dask.data.radixnet import make_network, radixnet_layer


def test_first_six_layers_equal_the_official_files(shared_data):
    generated = make_network(1024, 6, seed=123)
    for k in range(1, 7):
        official = io.read_layer(io.layer_path(shared_data, 1024, k), 1024)
        assert (generated.layers[k - 1] != official).nnz == 0, f"layer {k} differs"


def test_later_layers_are_row_permutations_of_the_official(shared_data):
    generated = make_network(1024, 12, seed=5)

    def row_patterns(m):
        return sorted(tuple(m.indices[m.indptr[i] : m.indptr[i + 1]]) for i in range(m.shape[0]))

    for k in (7, 12):
        official = io.read_layer(io.layer_path(shared_data, 1024, k), 1024)
        assert row_patterns(generated.layers[k - 1]) == row_patterns(official)


@pytest.mark.parametrize("n", [1024, 4096, 16384])
def test_every_layer_has_32_per_row_and_column(n):
    layers = 9 if n == 1024 else 3
    net = make_network(n, layers, seed=0)
    for w in net.layers:
        assert w.shape == (n, n) and w.nnz == 32 * n
        assert (np.diff(w.indptr) == 32).all()
        assert (np.bincount(w.indices, minlength=n) == 32).all()
        assert set(np.unique(w.data).tolist()) == {0.0625}


def test_65536_layer_structure():
    w = radixnet_layer(65536, 12)
    assert w.nnz == 32 * 65536
    assert (np.bincount(w.indices, minlength=65536) == 32).all()


def test_seeded():
    a, b, c = make_network(1024, 13, seed=1), make_network(1024, 13, seed=1), \
        make_network(1024, 13, seed=2)
    assert all((x != y).nnz == 0 for x, y in zip(a.layers, b.layers, strict=True))
    assert all((x != y).nnz == 0 for x, y in zip(a.layers[:6], c.layers[:6], strict=True))
    assert (a.layers[6] != c.layers[6]).nnz > 0
    # one permutation per block of six layers
    assert np.array_equal(a.layers[6].indptr, a.layers[11].indptr)


def test_challenge_defaults():
    net = make_network(4096, 2)
    assert net.bias[0] == np.float32(-0.35) and net.ymax == 32.0
    assert net.edges == 2 * 32 * 4096


@pytest.mark.parametrize("n", [0, 16, 100, 1000])
def test_bad_sizes(n):
    with pytest.raises(ValueError, match="16 \\* 2\\^R"):
        make_network(n, 1)


def test_iter_layers_gives_make_networks_layers_one_at_a_time():
    """The generator behind make_network: the same matrices, in order, made lazily (a
    network larger than memory goes to a store as it is generated)."""
    import itertools

    from sdnn_dask.data.radixnet import iter_layers

    net = make_network(1024, 13, seed=4)
    made = list(iter_layers(1024, 13, seed=4))
    assert len(made) == 13
    for a, b in zip(made, net.layers, strict=True):
        assert (a != b).nnz == 0 and a.dtype == b.dtype
    first = list(itertools.islice(iter_layers(65536, 1920, seed=0), 2))  # lazy: cheap
    assert [w.nnz for w in first] == [65536 * 32] * 2
    with pytest.raises(ValueError, match="n_layers must be >= 1"):
        list(iter_layers(1024, 0))
