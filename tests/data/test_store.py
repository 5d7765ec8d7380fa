"""The network store: round trips, the layer window, all-or-nothing writes, bad files.

The store is written in version 2 (``tests/data/test_store_v2.py`` tests its encodings); the
checks of files that only version 1 always has (row pointers, values) run on a version-1
store (:func:`store_v1.write_v1_store`), which this release still reads.
"""

from __future__ import annotations

import gc
import hashlib
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from store_v1 import write_v1_store

from sdnn_dask.core.kernels import forward_block
from sdnn_dask.core.network import Network
from sdnn_dask.core.reference import categories, infer_reference, layer_reference
from sdnn_dask.data import io, store
from sdnn_dask.data.io import ChallengeFormatError
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.data.store import reader as store_reader

N, L = 1024, 4


@pytest.fixture(scope="module")
def net() -> Network:
    return make_network(N, L, seed=2)


@pytest.fixture
def written(tmp_path, net):
    """A store of ``net`` at ``tmp_path / "net"``."""
    return store.write_network(tmp_path / "net", net)


@pytest.fixture
def written_v1(tmp_path, net):
    """A version-1 store of ``net`` at ``tmp_path / "net"``."""
    return write_v1_store(tmp_path / "net", net)


def _same_layer(a: sp.csr_matrix, b: sp.csr_matrix) -> bool:
    return (a.shape == b.shape and a.dtype == b.dtype == np.float32
            and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.data, b.data))


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sdnn-store-prefetch")]


def _is_mapped(array: np.ndarray) -> bool:
    return store_reader._mapped_file(array) is not None and not array.flags.writeable


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("bias", ["scalar", "per-neuron"])
def test_round_trip_keeps_every_layer_bias_ymax_and_name(tmp_path, net, bias):
    if bias == "per-neuron":
        net = Network(net.layers, bias=np.linspace(-0.5, -0.1, N, dtype=np.float32), ymax=8.5,
                      name="mine")
    folder = store.write_network(tmp_path / "net", net, source={"made": "by the test"})
    opened = store.open_store(folder, verify=True)
    assert (opened.n_neurons, opened.n_layers, opened.edges) == (N, L, net.edges)
    assert (opened.name, opened.ymax, opened.source) == (net.name, net.ymax,
                                                         {"made": "by the test"})
    assert opened.bias.dtype == np.float32 and np.array_equal(opened.bias, net.bias)
    assert (folder / "bias.npy").exists() == (bias == "per-neuron")
    for k, expected in enumerate(net.layers, start=1):
        layer = opened.layer(k)
        assert _same_layer(layer, expected), k
        # RadiX-Net: one file of uint16 columns, decoded (the values are one number)
        assert not _is_mapped(layer.indices) and layer.indices.flags.writeable
        assert store_reader._mapped_file(layer.data) is None
    again = opened.to_network()
    assert np.array_equal(again.bias, net.bias) and again.ymax == net.ymax
    assert again.name == net.name
    # fewer layers: named as a StreamedNetwork of them is, so records tell them apart
    assert opened.to_network(1).name == f"{net.name} (layers 1-1)"


def test_irregular_and_empty_layers_round_trip(tmp_path):
    """Rows of any length, empty rows first and last, an empty layer: no false alarm."""
    rng = np.random.default_rng(5)
    irregular = sp.random(N, N, density=0.01, format="csr", dtype=np.float32, rng=rng)
    irregular.data += 0.5  # no zeros
    keep = np.ones(N, dtype=np.float32)
    keep[[0, 1, 5, N - 1]] = 0
    irregular = sp.csr_matrix(sp.diags(keep) @ irregular)
    irregular.eliminate_zeros()
    empty = sp.csr_matrix((N, N), dtype=np.float32)
    net = Network([irregular, empty, irregular.T.tocsr()], bias=-0.25, ymax=32)
    opened = store.open_store(store.write_network(tmp_path / "net", net), verify=True)
    assert [opened.layer(k).nnz for k in (1, 2, 3)] == [w.nnz for w in net.layers]
    assert all(_same_layer(a, b) for a, b in zip(opened.layers(window=1), net.layers,
                                                 strict=True))


def test_manifest_and_files_are_plain_and_say_their_sizes_and_hashes(written, net):
    manifest = json.loads((written / "manifest.json").read_text())
    assert (manifest["format"], manifest["version"]) == ("sdnn-network-store", 2)
    assert manifest["bias"] == -0.3  # the shortest decimal of the float32 bias
    # RadiX-Net: 32 nonzeros a row, every weight 1/16: only the columns have a file
    assert sorted(p.name for p in written.iterdir()) == sorted(
        ["manifest.json"] + [f"l{k}.indices.npy" for k in range(1, L + 1)])
    for k, entry in enumerate(manifest["layers"], start=1):
        assert entry["nnz"] == net.layers[k - 1].nnz
        assert entry["encoding"] == {"indptr": "uniform", "row_nnz": 32, "indices": "uint16",
                                     "data": "constant", "value": 0.0625,
                                     "value_bits": "0x3d800000"}
        assert list(entry["files"]) == ["indices"]
        file = entry["files"]["indices"]
        path = written / file["name"]
        assert file["bytes"] == path.stat().st_size
        assert file["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        array = np.load(path, allow_pickle=False)
        assert array.dtype == np.dtype("<u2") and array.shape == (entry["nnz"],)


def test_write_store_takes_one_layer_at_a_time(tmp_path, net):
    """Each layer is on disk before the next is asked for; the store appears at the end."""
    seen = []

    def layers():
        for layer in net.layers:
            (partial,) = tmp_path.glob(".net.*.partial")
            seen.append(len(list(partial.glob("l*.indices.npy"))))
            assert not (tmp_path / "net").exists()
            yield layer

    progress = []
    store.write_store(tmp_path / "net", layers(), n_neurons=N, n_layers=L, name="gen",
                      progress=lambda done, total: progress.append((done, total)))
    assert seen == [0, 1, 2, 3]
    assert progress == [(k, L) for k in range(1, L + 1)]
    assert [p.name for p in tmp_path.iterdir()] == ["net"]
    assert store.open_store(tmp_path / "net").name == "gen"


def test_a_layer_count_that_differs_from_n_layers_writes_nothing(tmp_path, net):
    with pytest.raises(ValueError, match="3 layers given; n_layers says 4"):
        store.write_store(tmp_path / "net", iter(net.layers[:3]), n_neurons=N, n_layers=4)
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------- the window


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("window", [0, 1, 2, 7])
def test_layers_come_in_order_whatever_the_window(tmp_path, net, window, version):
    folder = (write_v1_store if version == 1 else store.write_network)(tmp_path / "net", net)
    opened = store.open_store(folder)
    assert opened.version == version
    got = list(opened.layers(window=window))
    assert len(got) == L and all(_same_layer(a, b) for a, b in zip(got, net.layers,
                                                                    strict=True))
    # version 1: read-only maps of the files, not copies; version 2: decoded
    assert all(_is_mapped(w.data) == _is_mapped(w.indices) == (version == 1) for w in got)
    if version == 1:
        assert [Path(store_reader._mapped_file(w.data)).name for w in got] == [
            f"l{k}.data.npy" for k in range(1, L + 1)]
    assert not _prefetch_threads()


@pytest.mark.parametrize("window", [1, 2])
def test_prefetch_stays_within_the_window_and_stops_when_closed(written, window):
    opened = store.open_store(written)
    asked = []
    real = opened.layer

    def layer(k):
        asked.append(k)
        return real(k)

    opened.layer = layer  # the prefetch thread calls it through the instance
    layers = opened.layers(window=window)
    first = next(layers)
    assert first.nnz == opened.manifest["layers"][0]["nnz"]
    deadline = time.monotonic() + 5
    while len(asked) < 1 + window and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # time to go further, if it would
    assert asked == list(range(1, 2 + window))  # layer 1 and `window` ahead, no more
    assert len(_prefetch_threads()) == 1
    layers.close()  # early: the thread is stopped and joined
    assert not _prefetch_threads()
    assert asked == list(range(1, 2 + window))

    dropped = opened.layers(window=window)
    next(dropped)
    del dropped  # dropped without close: the same
    gc.collect()
    assert not _prefetch_threads()


def test_a_bad_layer_is_raised_when_the_iterator_reaches_it(written, net):
    indices = np.load(written / "l3.indices.npy", mmap_mode="r+")
    indices[100] = N + 5
    indices.flush()
    del indices
    # the contents are checked lazily (the hashes aside, which would find it first)
    opened = store.open_store(written, check_hashes=False)
    layers = opened.layers(window=3)
    assert _same_layer(next(layers), net.layers[0])
    assert _same_layer(next(layers), net.layers[1])
    with pytest.raises(ChallengeFormatError) as info:
        next(layers)
    assert info.value.path == written / "l3.indices.npy"
    assert "expected columns in 0..1023" in str(info.value)
    assert not _prefetch_threads()


def test_window_must_be_a_count(written):
    with pytest.raises(ValueError, match="window must be an integer >= 0"):
        store.open_store(written).layers(window=-1)  # at once, not at the first next()


def test_layers_are_numbered_from_one(written):
    opened = store.open_store(written)
    for k in (0, L + 1, True, 1.0):
        with pytest.raises(IndexError, match=f"this store has layers 1..{L}"):
            opened.layer(k)


# --------------------------------------------------------------------------- inference


def test_to_network_runs_as_the_original(written, net):
    inputs = make_inputs(300, N, seed=4)
    loaded = store.open_store(written).to_network()
    assert all(_same_layer(a, b) for a, b in zip(loaded.layers, net.layers, strict=True))
    assert all(w.data.flags.writeable for w in loaded.layers)  # copies, in memory
    expected, got = forward_block(net, inputs), forward_block(loaded, inputs)
    assert 0 < len(got.rows) < inputs.shape[0]
    assert np.array_equal(got.rows, expected.rows)
    assert (got.values != expected.values).nnz == 0
    # the reference recurrence straight over the mapped layers, streamed
    opened = store.open_store(written)
    y = inputs
    for w in opened.layers(window=2):
        y = layer_reference(y, w, opened.bias, np.float32(opened.ymax))
    reference = infer_reference(net, inputs)
    assert np.array_equal(categories(y), reference.categories)
    assert (y != reference.output).nnz == 0


# --------------------------------------------------------------------------- all or nothing


def test_an_interrupted_write_leaves_nothing(tmp_path, net):
    def interrupt(done, total):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.write_network(tmp_path / "net", net, progress=interrupt)
    assert not list(tmp_path.iterdir())  # no store, no partial folder
    with pytest.raises(ChallengeFormatError, match="not a folder"):
        store.open_store(tmp_path / "net")


def test_a_killed_write_leaves_a_folder_open_store_refuses(tmp_path, net):
    writer = store.StoreWriter(tmp_path / "net")  # killed: neither committed nor aborted
    for k, layer in enumerate(net.layers, start=1):
        writer.write_layer(k, layer, N)
    (partial,) = tmp_path.iterdir()
    assert partial.name.startswith(".net.") and partial.name.endswith(".partial")
    with pytest.raises(ChallengeFormatError) as info:
        store.open_store(partial)
    assert info.value.path == partial / "manifest.json" and "missing" in str(info.value)
    assert not (tmp_path / "net").exists()


def test_a_failed_rewrite_keeps_the_old_store(written, net):
    def interrupt(done, total):
        raise RuntimeError("disk full")

    other = make_network(N, 2, seed=9)
    with pytest.raises(RuntimeError, match="disk full"):
        store.write_network(written, other, overwrite=True, progress=interrupt)
    assert [p.name for p in written.parent.iterdir()] == ["net"]
    assert store.open_store(written, verify=True).n_layers == L
    store.write_network(written, other, overwrite=True)
    replaced = store.open_store(written, verify=True)
    assert replaced.n_layers == 2 and _same_layer(replaced.layer(2), other.layers[1])
    assert [p.name for p in written.parent.iterdir()] == ["net"]


def test_what_a_store_may_be_written_over(tmp_path, written, net):
    with pytest.raises(FileExistsError, match="a network store is there already"):
        store.write_network(written, net)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is not a network store"):
        store.write_network(other, net, overwrite=True)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is not a folder"):
        store.write_network(tmp_path / "file", net)
    empty = tmp_path / "empty"
    empty.mkdir()
    store.write_network(empty, net)
    assert store.open_store(empty).n_layers == L
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file", "net", "other"]


# --------------------------------------------------------------------------- bad stores


def _edit_manifest(folder, **changes):
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))


def _same_size_float64(folder):
    data = np.load(folder / "l1.data.npy")
    np.save(folder / "l1.data.npy", data[: data.size // 2].astype(np.float64))


def _garbage_header(folder):
    path = folder / "l2.indptr.npy"
    raw = bytearray(path.read_bytes())
    raw[:16] = b"not a npy header"
    path.write_bytes(bytes(raw))


def _truncate(folder):
    path = folder / "l3.data.npy"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(("damage", "file", "message"), [
    (lambda f: (f / "manifest.json").unlink(), "manifest.json", "missing"),
    (lambda f: (f / "manifest.json").write_text("{not json"), "manifest.json", "not JSON"),
    (lambda f: _edit_manifest(f, version=3), "manifest.json",
     "version 3 of sdnn-network-store (written by sdnn_dask 0.1.0); this sdnn_dask 0.1.0 "
     "reads versions 1 and 2 only: rewrite it from the challenge files with this release "
     "(sdnn-dask convert CHALLENGE_DIR "),
    (lambda f: _edit_manifest(f, version=True), "manifest.json",
     "version True of sdnn-network-store"),
    (lambda f: _edit_manifest(f, format="other"), "manifest.json", "format 'other'"),
    (lambda f: _edit_manifest(f, n_layers=5), "manifest.json", "4 layer entries for n_layers 5"),
    (lambda f: _edit_manifest(f, edges=1), "manifest.json", "the layers' nnz add up to"),
    (lambda f: (f / "l2.indices.npy").unlink(), "l2.indices.npy",
     "missing; expected layer 2's indices: 32768 int32 values, shape (32768,)"),
    (_truncate, "l3.data.npy", "bytes; the manifest says 131200"),
    (_garbage_header, "l2.indptr.npy", "not a readable .npy file"),
    (_same_size_float64, "l1.data.npy", "holds a float64 array of shape (16384,); expected "
                                        "layer 1's data: 32768 float32 values"),
], ids=["no-manifest", "manifest-not-json", "version", "version-bool", "format",
        "layer-count", "edges", "missing-file", "truncated", "garbage-header", "float64"])
def test_a_bad_store_is_refused_on_open_naming_the_file(written_v1, damage, file, message):
    """A version-1 store (its three files a layer); version 2's: tests/data/test_store_v2.py."""
    written = written_v1
    damage(written)
    with pytest.raises(ChallengeFormatError) as info:
        store.open_store(written)
    assert info.value.path == written / file
    assert message in str(info.value) and str(info.value).startswith(str(written / file))


def _set(folder, name, index, value):
    array = np.load(folder / name, mmap_mode="r+")
    array[index] = value
    array.flush()


@pytest.mark.parametrize(("damage", "file", "message"), [
    (lambda f: _set(f, "l2.indices.npy", 7, -1), "l2.indices.npy",
     "columns -1..1023; expected columns in 0..1023"),
    (lambda f: _set(f, "l1.indptr.npy", 5, 10**6), "l1.indptr.npy", "row pointers decrease at"),
    (lambda f: _set(f, "l1.indptr.npy", -1, 7), "l1.indptr.npy",
     "row pointers run from 0 to 7; expected 0 to the layer's 32768 nonzeros"),
    (lambda f: _set(f, "l4.indices.npy", 33, 0), "l4.indices.npy",
     "columns not strictly increasing in row 2 (1-based)"),
    (lambda f: _set(f, "l3.data.npy", 9, np.nan), "l3.data.npy", "not finite"),
    (lambda f: _set(f, "l3.data.npy", 9, 0.0), "l3.data.npy", "explicit zeros"),
], ids=["index-out-of-range", "indptr-decreasing", "indptr-end", "unsorted", "nan", "zero"])
def test_bad_contents_are_found_when_the_layer_is_first_read(written_v1, damage, file,
                                                             message):
    written = written_v1
    damage(written)
    # sizes and headers are right; the contents' checks (the hashes would find it first)
    opened = store.open_store(written, check_hashes=False)
    k = int(file[1])
    with pytest.raises(ChallengeFormatError) as info:
        opened.layer(k)
    assert info.value.path == written / file and message in str(info.value)
    for other in set(range(1, L + 1)) - {k}:
        opened.layer(other)
    with pytest.raises(ChallengeFormatError) as info:  # its hash differs, first
        store.open_store(written, verify=True)
    assert info.value.path == written / file


def test_verify_finds_a_changed_weight_by_its_hash(written_v1):
    written = written_v1
    _set(written, "l2.data.npy", 3, 0.125)  # a valid weight: only the hash tells
    opened = store.open_store(written, check_hashes=False)  # sdnn.store.verify: false
    assert opened.layer(2).data[3] == np.float32(0.125)
    with pytest.raises(ChallengeFormatError) as info:
        opened.verify()
    assert info.value.path == written / "l2.data.npy"
    assert "differs from the manifest's" in str(info.value)
    with pytest.raises(ChallengeFormatError, match="differs from the manifest's"):
        store.open_store(written).layer(2)  # the default: checked on the first read


# --------------------------------------------------------------------------- conversion


def test_convert_challenge_without_a_cluster(tmp_path, net):
    data = tmp_path / "data"
    io.write_weights(data, net.layers, compress=True)
    progress = []
    folder = store.convert_challenge(data, tmp_path / "net", N, L,
                                     progress=lambda *a: progress.append(a))
    opened = store.open_store(folder, verify=True)
    assert all(_same_layer(opened.layer(k), w) for k, w in enumerate(net.layers, start=1))
    assert progress == [(k, L) for k in range(1, L + 1)]
    assert opened.name == f"data-{N}-{L}" and opened.source == {"challenge": str(data)}
    first = opened.manifest["layers"][0]["source"]
    assert first["path"] == str(data / "neuron1024" / "n1024-l1.tsv.gz")
    raw = (data / "neuron1024" / "n1024-l1.tsv.gz").read_bytes()
    assert first == {"path": first["path"], "bytes": len(raw),
                     "sha256": hashlib.sha256(raw).hexdigest()}


def test_convert_challenge_stops_at_a_bad_file_and_leaves_nothing(tmp_path, net):
    data = tmp_path / "data"
    io.write_weights(data, net.layers)
    with open(data / "neuron1024" / "n1024-l3.tsv", "a") as handle:
        handle.write("1\t0\t0.5\n")
    with pytest.raises(ChallengeFormatError) as info:
        store.convert_challenge(data, tmp_path / "net", N, L)
    assert info.value.path == data / "neuron1024" / "n1024-l3.tsv"
    assert info.value.line == 32 * N + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    with pytest.raises(FileNotFoundError, match="2 of 6 layer files"):
        store.convert_challenge(data, tmp_path / "net", N, 6)


def test_commit_checks_the_files_tasks_wrote(tmp_path, net):
    """A layer entry whose file is not there (a worker on another filesystem): refused."""
    with pytest.raises(ChallengeFormatError) as info, store.StoreWriter(tmp_path / "net") as w:
        entry = store.write_layer_files(w.tmp, 1, net.layers[0], N)
        w.add(1, entry)
        (w.tmp / "l1.indices.npy").unlink()
        w.commit(n_neurons=N)
    assert info.value.path.name == "l1.indices.npy"
    assert "missing; expected 65664 bytes" in str(info.value)  # 32768 uint16 columns
    assert not list(tmp_path.iterdir())


def test_a_store_is_a_data_folder_for_the_network(written, net, capsys):
    """``--data STORE`` (``study.load_network``): the store's first layers, capped at what it
    holds with a message; a store of another N is a user error (exit 2)."""
    from sdnn_dask.cli import main
    from sdnn_dask.study import ProblemSpec, StudyError, load_network

    said = []
    got, spec = load_network(ProblemSpec(neurons=net.n_neurons, layers=2, data=str(written)),
                             progress=said.append)
    assert got.n_layers == 2 and spec.layers == 2
    for a, b in zip(got.layers, net.layers[:2], strict=True):
        assert _same_layer(a, b)
    got, spec = load_network(ProblemSpec(neurons=net.n_neurons, layers=50, data=str(written)),
                             progress=said.append)
    assert got.n_layers == net.n_layers == spec.layers
    assert any(f"holds layers 1-{net.n_layers}, not 50" in line for line in said)
    with pytest.raises(StudyError, match=f"a store of N = {net.n_neurons}, not 4096"):
        load_network(ProblemSpec(neurons=4096, layers=2, data=str(written)))
    with pytest.raises(SystemExit) as exit_:
        main(["train", "-N", "4096", "--data", str(written), "--no-write", "-q"])
    assert exit_.value.code == 2
    assert "a store of N = 1024, not 4096" in capsys.readouterr().err
