"""Neuron partitions for model parallelism: validity, volume against brute force, Mt-KaHyPar."""

from __future__ import annotations

import re
import sys
import time

import dask.config
import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.core.network import Network
from sdnn_dask.data import io
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.partition import (
    NEURON_PARTITIONS,
    NeuronPartition,
    PartitionCacheWarning,
    bucket_hash,
    column_net_km1,
    even_bounds,
    hypergraph_partition,
    make_neuron_partition,
    partition_columns,
)
from sdnn_dask.partition import hypergraph as hypergraph_module


def _has_mtkahypar() -> bool:
    try:
        import mtkahypar  # noqa: F401
    except ImportError:
        return False
    return True


HAS_MTKAHYPAR = _has_mtkahypar()
needs_mtkahypar = pytest.mark.skipif(
    not HAS_MTKAHYPAR, reason="Mt-KaHyPar not installed: pip install 'sdnn_dask[partition]'"
)
CHEAP = ("block", "hash", "random")


def _methods():
    return [pytest.param(m, marks=needs_mtkahypar) if m == "hypergraph" else m
            for m in NEURON_PARTITIONS]


def random_network(n: int, n_layers: int, density: float, seed: int) -> Network:
    """Random layers with some empty rows and columns (inputs that feed nothing, and so on)."""
    rng = np.random.default_rng(seed)
    layers = []
    for _ in range(n_layers):
        w = sp.random(n, n, density=density, random_state=rng, format="csr")
        w.data[:] = 1.0
        w = sp.diags((rng.random(n) > 0.1).astype(float)) @ w  # empty rows
        layers.append(w @ sp.diags((rng.random(n) > 0.1).astype(float)))  # empty columns
    return Network(layers, bias=-0.1, ymax=32, name=f"random-{seed}")


def brute_km1(w: sp.spmatrix, owner: np.ndarray | None, column_parts: np.ndarray) -> int:
    """``sum_i (|{owner(i)} U {part(j): w[i, j] != 0}| - 1)``, one neuron at a time."""
    dense = sp.csr_matrix(w).toarray() != 0
    total = 0
    for i in range(dense.shape[0]):
        spanned = {int(column_parts[j]) for j in np.flatnonzero(dense[i])}
        if owner is not None:
            spanned.add(int(owner[i]))
        if spanned:
            total += len(spanned) - 1
    return total


@pytest.fixture(scope="module")
def radixnet12():
    return make_network(1024, 12)


@pytest.fixture(scope="module")
def radixnet_partitions(radixnet12):
    """Every method on the generated RadiX-Net 1024-12, k = 4 (hypergraph: ~3 s)."""
    methods = NEURON_PARTITIONS if HAS_MTKAHYPAR else CHEAP
    return {m: make_neuron_partition(radixnet12, 4, m) for m in methods}


# ------------------------------------------------------------------------- validity


@pytest.mark.parametrize("method", _methods())
@pytest.mark.parametrize("k", [1, 3, 4])
def test_every_method_gives_a_valid_partition(method, k):
    net = random_network(48, 3, 0.15, seed=k)
    part = make_neuron_partition(net, k, method, seed=1)
    assert part.method == method and part.k == k
    assert part.parts.shape == (net.n_layers + 1, net.n_neurons) == (part.n_levels,
                                                                      part.n_neurons)
    assert part.parts.dtype == np.int32
    assert part.parts.min() >= 0 and part.parts.max() < k
    for level in range(part.n_levels):
        counts = np.bincount(part.parts[level], minlength=k)
        assert (counts > 0).all(), f"level {level}: an empty part {counts}"
        if method in CHEAP:
            assert counts.max() - counts.min() <= 1
        owned = [part.owned(level, p) for p in range(k)]
        assert np.array_equal(np.sort(np.concatenate(owned)), np.arange(net.n_neurons))
    assert part.seconds >= 0


@pytest.mark.parametrize("method", CHEAP)
def test_more_parts_than_neurons_leaves_parts_empty(method):
    net = random_network(5, 2, 0.5, seed=0)
    part = make_neuron_partition(net, 8, method)
    assert np.bincount(part.parts[0], minlength=8).tolist().count(0) == 3


def test_block_and_hash_follow_their_definitions():
    net = make_network(1024, 2)
    bounds = even_bounds(1024, 3)
    block = make_neuron_partition(net, 3, "block")
    hashed = make_neuron_partition(net, 3, "hash", nbuckets=2)
    for v in (0, 1, 340, 341, 342, 700, 1023):
        blk = int(np.searchsorted(bounds, v, side="right") - 1)
        pos = int(bucket_hash(v, 1024, 2))
        hsh = int(np.searchsorted(bounds, pos, side="right") - 1)
        assert (block.parts[:, v] == blk).all()
        assert (hashed.parts[:, v] == hsh).all()
    assert hashed.params == {"nbuckets": 2}


def test_random_is_seeded():
    net = random_network(64, 2, 0.1, seed=0)
    a = make_neuron_partition(net, 4, "random", seed=3)
    b = make_neuron_partition(net, 4, "random", seed=3)
    c = make_neuron_partition(net, 4, "random", seed=4)
    assert np.array_equal(a.parts, b.parts)
    assert not np.array_equal(a.parts, c.parts)


def test_unknown_method_and_bad_arguments():
    net = random_network(8, 1, 0.5, seed=0)
    with pytest.raises(ValueError, match=r"unknown neuron partition 'metis'.*'hypergraph'"):
        make_neuron_partition(net, 2, "metis")
    with pytest.raises(ValueError, match="k must be a positive integer"):
        make_neuron_partition(net, 0)
    with pytest.raises(ValueError, match="must lie in"):
        NeuronPartition("block", 2, np.array([[0, 2], [0, 1]]))
    with pytest.raises(ValueError, match="L >= 1"):
        NeuronPartition("block", 2, np.zeros((1, 4), dtype=int))
    with pytest.raises(ValueError, match="integers"):
        NeuronPartition("block", 2, np.zeros((2, 4)))
    other = random_network(8, 2, 0.5, seed=0)
    part = make_neuron_partition(net, 2)
    with pytest.raises(ValueError, match="the network has 2 layers"):
        part.volume(other)
    with pytest.raises(ValueError, match=r"layer must be in 1\.\.1"):
        part.needed(net, 0, 0)
    with pytest.raises(ValueError, match="part must be in"):
        part.owned(0, 2)


# ------------------------------------------------------------- against the matrices


@pytest.mark.parametrize("method", _methods())
@pytest.mark.parametrize("seed", [0, 1])
def test_owned_needed_volume_and_work_match_brute_force(method, seed):
    net = random_network(40, 3, 0.12, seed=seed)
    k = 3
    part = make_neuron_partition(net, k, method, seed=seed)
    table = part.volume(net)
    assert table["layer"].tolist() == [1, 2, 3]
    work = part.work(net)
    for layer, w in enumerate(net.layers, start=1):
        dense = w.toarray() != 0
        owner, column_parts = part.parts[layer - 1], part.parts[layer]
        received = []
        for p in range(k):
            own = [j for j in range(40) if column_parts[j] == p]
            assert part.owned(layer, p).tolist() == own
            need = [i for i in range(40) if dense[i, own].any()]
            assert part.needed(net, layer, p).tolist() == need
            received.append(sum(owner[i] != p for i in need))
            assert work[layer - 1, p] == dense[:, own].sum()
        expected = brute_km1(w, owner, column_parts)
        row = table.iloc[layer - 1]
        assert row["km1"] == expected == sum(received) == row["volume"]
        assert row["max_received"] == max(received)
    imb = part.imbalance(net)
    assert np.allclose(imb, work.max(axis=1) / work.mean(axis=1))


@pytest.mark.parametrize("seed", range(4))
def test_column_net_km1_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    w = sp.random(30, 25, density=0.1, random_state=rng, format="csr")
    parts = rng.integers(0, 4, 25)
    assert column_net_km1(w, parts) == brute_km1(w, None, parts)
    with pytest.raises(ValueError, match="one entry per column"):
        column_net_km1(w, parts[:-1])


def test_block_volume_on_radixnet(radixnet12, radixnet_partitions):
    # every input of a RadiX-Net layer feeds all 16 groups of 64 columns: all 4 blocks
    block = radixnet_partitions["block"]
    assert block.volume(radixnet12)["km1"].tolist() == [3072] * 12


# ----------------------------------------------------------------------- save, load


@pytest.mark.parametrize("method", _methods())
def test_save_load_round_trip(method, tmp_path):
    net = random_network(32, 2, 0.2, seed=5)
    part = make_neuron_partition(net, 3, method, seed=2, nbuckets=1)
    path = tmp_path / "part.npz"
    part.save(path)
    back = NeuronPartition.load(path)
    assert (back.method, back.k, back.params, back.seconds) == (
        part.method, part.k, part.params, part.seconds)
    assert np.array_equal(back.parts, part.parts) and back.parts.dtype == np.int32
    with np.load(path, allow_pickle=False) as archive:  # readable without pickle
        assert set(archive.files) == {"method", "k", "parts", "params", "seconds"}
    assert [p.name for p in tmp_path.iterdir()] == ["part.npz"]  # no temporary left


def test_partition_is_frozen_but_leaves_the_callers_array_alone():
    mine = np.zeros((2, 8), dtype=np.int32)
    part = NeuronPartition("block", 2, mine)
    with pytest.raises(ValueError, match="read-only"):
        part.parts[0, 0] = 1
    mine[0, 0] = 1
    assert part.parts[0, 0] == 0


# ----------------------------------------------------------------------- hypergraph


@needs_mtkahypar
def test_hypergraph_beats_block_on_radixnet(radixnet12, radixnet_partitions):
    km1 = {m: int(p.volume(radixnet12)["km1"].sum()) for m, p in radixnet_partitions.items()}
    hyper = radixnet_partitions["hypergraph"]
    print(f"total km1 on RadiX-Net 1024-12, k=4: {km1}; hypergraph took {hyper.seconds:.1f} s")
    # seen: block 36864, hash 22375, random 36864, hypergraph 6267
    assert km1["hypergraph"] * 4 < km1["block"]
    assert km1["hypergraph"] < km1["hash"] / 2
    # every column weighs 32, so balance within epsilon means near-equal counts; seen: 1.0
    assert hyper.imbalance(radixnet12).max() <= 1.03 + 1e-9


@needs_mtkahypar
def test_hypergraph_is_deterministic_given_the_seed():
    net = make_network(1024, 3)
    a = hypergraph_partition(net, 4, seed=7)
    b = hypergraph_partition(net, 4, seed=7)
    c = hypergraph_partition(net, 4, seed=8)
    assert np.array_equal(a.parts, b.parts)
    assert not np.array_equal(a.parts, c.parts)
    assert a.params["seed"] == 7 and a.params["epsilon"] == 0.03


@needs_mtkahypar
def test_hypergraph_respects_fixed_rows_and_balance():
    w = make_network(1024, 7).layers[6]
    rng = np.random.default_rng(0)
    fixed = rng.integers(0, 4, 1024)
    parts = partition_columns(w, 4, epsilon=0.03, seed=0, fixed_rows=fixed)
    work = np.bincount(parts, weights=np.diff(w.tocsc().indptr), minlength=4)
    assert work.max() <= 1.03 * work.mean()
    # fixed owners cost: each input's owner joins its net, but far below blocks (3072)
    assert brute_km1(w, fixed, parts) < 1024
    with pytest.raises(ValueError, match="one part per row"):
        partition_columns(w, 4, fixed_rows=fixed[:-1])


@needs_mtkahypar
def test_hypergraph_progress_and_trivial_k():
    net = make_network(1024, 3)
    calls = []
    hypergraph_partition(net, 2, progress=lambda *call: calls.append(call))
    assert calls == [("mtkahypar", 1, 3), ("mtkahypar", 2, 3), ("mtkahypar", 3, 3)]
    assert (hypergraph_partition(net, 1).parts == 0).all()


@needs_mtkahypar
def test_hypergraph_cache(tmp_path, monkeypatch):
    net = make_network(1024, 2)
    first = hypergraph_partition(net, 4, seed=1, cache=tmp_path)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"

    def no_partitioning(*args, **kwargs):
        raise AssertionError("recomputed instead of loading the cache")

    monkeypatch.setattr(hypergraph_module, "partition_columns", no_partitioning)
    again = make_neuron_partition(net, 4, "hypergraph", seed=1, cache=tmp_path)
    assert np.array_equal(again.parts, first.parts)
    assert again.params == first.params and again.seconds == first.seconds
    for change in ({"k": 2, "seed": 1}, {"k": 4, "seed": 2}, {"k": 4, "seed": 1, "epsilon": 0.1}):
        with pytest.raises(AssertionError, match="recomputed"):
            hypergraph_partition(net, cache=tmp_path, **change)
    other = Network([net.layers[1], net.layers[0]], bias=net.bias)  # same sizes, other layers
    with pytest.raises(AssertionError, match="recomputed"):
        hypergraph_partition(other, 4, seed=1, cache=tmp_path)


@needs_mtkahypar
def test_hypergraph_cache_remakes_an_unreadable_copy(tmp_path):
    net = make_network(1024, 1)
    first = hypergraph_partition(net, 2, cache=tmp_path)
    (path,) = tmp_path.iterdir()
    path.write_bytes(path.read_bytes()[:100])  # torn
    with pytest.warns(PartitionCacheWarning, match="unreadable: BadZipFile"):
        again = hypergraph_partition(net, 2, cache=tmp_path)
    assert np.array_equal(again.parts, first.parts)
    assert np.array_equal(NeuronPartition.load(path).parts, first.parts)


@needs_mtkahypar
def test_hypergraph_cache_true_uses_the_cache_dir(tmp_path):
    net = make_network(1024, 1)
    with dask.config.set({"sdnn.cache-dir": str(tmp_path)}):
        part = hypergraph_partition(net, 2, cache=True)
    files = list((tmp_path / "partitions").iterdir())
    assert len(files) == 1
    assert np.array_equal(NeuronPartition.load(files[0]).parts, part.parts)


def test_missing_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "mtkahypar", None)  # import now raises ImportError
    net = make_network(1024, 1)
    message = r"needs Mt-KaHyPar: pip install 'sdnn_dask\[partition\]'"
    with pytest.raises(ImportError, match=message):
        make_neuron_partition(net, 2, "hypergraph")
    with pytest.raises(ImportError, match=message):
        partition_columns(net.layers[0], 2)


@pytest.fixture(scope="module")
def official_layer7(shared_data):
    return io.read_layer(io.layer_path(shared_data, 1024, 7), 1024)


def test_official_layer7_blocks(official_layer7):
    assert column_net_km1(official_layer7, np.arange(1024) // 256) == 3072


@needs_mtkahypar
def test_official_layer7_hypergraph(official_layer7):
    w = official_layer7
    start = time.perf_counter()
    parts = partition_columns(w, 4, epsilon=0.03, seed=0)
    seconds = time.perf_counter() - start
    km1 = column_net_km1(w, parts)
    work = np.bincount(parts, weights=np.diff(w.tocsc().indptr), minlength=4)
    print(f"official layer 7, k=4: hypergraph km1 {km1} (blocks: 3072), "
          f"work imbalance {work.max() / work.mean():.4f}, {seconds:.2f} s")
    # seen: 64, imbalance 1.0, about 0.2 s
    assert km1 <= 128
    assert work.max() <= 1.03 * work.mean()


def test_partition_limits_and_messages(tmp_path):
    net = make_network(1024, 2, seed=0)
    parts = np.zeros((3, 1024), dtype=np.int64)
    one = NeuronPartition("block", 1, parts)
    assert one.seconds == 0.0 and one.params == {} and "parts" not in repr(one)
    with pytest.raises(ValueError, match="k must be a positive integer, got 0"):
        NeuronPartition("block", 0, parts)
    bad = parts.copy()
    bad[1, 5] = -1
    with pytest.raises(ValueError, match=r"parts must lie in \[0, 2\), got values in \[-1, 0\]"):
        NeuronPartition("block", 2, bad)
    part = make_neuron_partition(net, 2, "block")
    assert part.owned(0, 1).tolist() == list(range(512, 1024))  # level 0: the inputs
    for level in (-1, 3):
        with pytest.raises(ValueError, match=rf"level must be in \[0, 3\), got {level}"):
            part.owned(level, 0)
    for bad_part in (-1, 2):
        with pytest.raises(ValueError, match=rf"part must be in \[0, 2\), got {bad_part}"):
            part.owned(0, bad_part)
    assert len(part.needed(net, 2, 0)) > 0
    for layer in (0, 3):
        with pytest.raises(ValueError, match=rf"layer must be in 1..2 \(1-based\), got {layer}"):
            part.needed(net, layer, 0)
    with pytest.raises(ValueError, match=r"^partition is for 2 layers of 1024 neurons; the "
                                         r"network has 3 layers of 1024$"):
        part.volume(make_network(1024, 3, seed=0))
    # params are stored with sorted keys, whatever order they came in
    NeuronPartition("block", 2, part.parts, params={"b": 1, "a": 2}).save(tmp_path / "p.npz")
    with np.load(tmp_path / "p.npz") as archive:
        assert archive["params"][0] == '{"a": 2, "b": 1}'
    # the random method's default seed is 0; the time it took is measured
    start = time.perf_counter()
    default = make_neuron_partition(net, 2, "random")
    elapsed = time.perf_counter() - start
    assert default.parts.tolist() == make_neuron_partition(net, 2, "random", seed=0).parts.tolist()
    assert 0 <= default.seconds <= elapsed


def test_column_net_km1_edges():
    assert column_net_km1(sp.csr_matrix((3, 4)), np.array([0, 1, 0, 1])) == 0  # no pins
    with pytest.raises(ValueError, match=r"^column_parts must have one entry per column \(4\), "
                                         r"got shape \(3,\)$"):
        column_net_km1(sp.csr_matrix((2, 4)), np.array([0, 1, 0]))


@needs_mtkahypar
def test_hypergraph_limits_and_the_balance_cap():
    import inspect

    assert inspect.signature(partition_columns).parameters["epsilon"].default == 0.03
    # one net over columns 0..2, one over column 3: work 3 + 1
    w = sp.csr_matrix(([1.0] * 4, ([0, 0, 0, 1], [0, 1, 2, 3])), shape=(4, 4))
    loose = partition_columns(w, 2, epsilon=0.5)  # cap floor(1.5 * 4 / 2) = 3: no cut
    assert column_net_km1(w, loose) == 0 and sorted(np.bincount(loose).tolist()) == [1, 3]
    tight = partition_columns(w, 2, epsilon=0.0)  # cap 2: the first net must be cut
    assert np.bincount(tight).tolist() == [2, 2] and column_net_km1(w, tight) == 1
    odd = sp.csr_matrix(([1.0] * 3, ([0, 1, 2], [0, 1, 2])), shape=(3, 3))
    parts = partition_columns(odd, 2, epsilon=0.0)  # cap ceil(3 / 2) = 2, not floor
    assert sorted(np.bincount(parts).tolist()) == [1, 2]
    assert sorted(partition_columns(odd, 3).tolist()) == [0, 1, 2]  # k = columns is fine
    for k in (0, 1.5):
        with pytest.raises(ValueError, match="k must be a positive integer"):
            partition_columns(odd, k)


@needs_mtkahypar
def test_hypergraph_arguments_cache_names_and_stale_copies(tmp_path):
    import inspect

    assert inspect.signature(partition_columns).parameters["seed"].default == 0
    assert inspect.signature(hypergraph_partition).parameters["seed"].default == 0
    w = sp.csr_matrix(np.array([[1.0, 0, 2.0, 0], [0, 3.0, 0, 0], [0, 0, 0, 1.0],
                                [1.0, 1.0, 0, 0]], dtype=np.float32))
    w.data[1] = 0.0  # an explicit zero the caller keeps
    before = (w.data.copy(), w.indices.copy(), w.indptr.copy())
    partition_columns(w, 2)
    assert all(np.array_equal(a, b) for a, b in zip(before, (w.data, w.indices, w.indptr),
                                                    strict=True))
    with pytest.raises(ValueError, match=r"epsilon must be >= 0, got -0\.5"):
        partition_columns(w, 2, epsilon=-0.5)
    for fixed in ([0, 1, 2, 0], [0, -1, 1, 0]):
        with pytest.raises(ValueError, match=r"fixed_rows must lie in \[0, 2\)"):
            partition_columns(w, 2, fixed_rows=np.array(fixed))

    net = make_network(1024, 1)
    start = time.perf_counter()
    part = hypergraph_partition(net, 2, cache=tmp_path)
    assert 0 < part.seconds <= time.perf_counter() - start
    (path,) = tmp_path.iterdir()
    assert re.fullmatch(r"neurons-hypergraph-n1024-l1-k2-[0-9a-f]{24}\.npz", path.name)
    # a copy under the right name that is not a hypergraph partition for this k is remade,
    # whether it records no stamp (an old file) or this partition's stamp
    stamp = NeuronPartition.read_stamp(path)
    assert stamp is not None and stamp["k"] == 2 and stamp["key"] in path.name
    NeuronPartition("block", 2, make_neuron_partition(net, 2, "block").parts).save(path)
    with pytest.warns(PartitionCacheWarning, match="does not record what it was made for"):
        assert np.array_equal(hypergraph_partition(net, 2, cache=tmp_path).parts, part.parts)
    NeuronPartition("hypergraph", 3, np.zeros((2, 1024), np.int32)).save(path, stamp=stamp)
    with pytest.warns(PartitionCacheWarning, match="into 3 parts"):
        assert np.array_equal(hypergraph_partition(net, 2, cache=tmp_path).parts, part.parts)
    assert NeuronPartition.read_stamp(path) == stamp  # replaced by the right one


def test_one_part_needs_no_partitioner(monkeypatch):
    monkeypatch.setitem(sys.modules, "mtkahypar", None)  # import now raises ImportError
    part = make_neuron_partition(make_network(1024, 2), 1, "hypergraph")
    assert part.k == 1 and not part.parts.any()
