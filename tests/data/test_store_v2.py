"""The network store's version 2: each layer's encoding chosen from its data and read back
bit for bit as version 1 reads it; its refusals, each naming the file or the manifest; a
store converted into the current version; the bytes it saves."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from store_v1 import write_v1_store

from sdnn_dask.core.network import Network, as_csr32
from sdnn_dask.data import io, store
from sdnn_dask.data.io import ChallengeFormatError
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.data.store import encoding
from sdnn_dask.data.store import reader as store_reader

N = 1024
PARTS = ("indptr", "indices", "data")

#: The mixed network's layers: (indptr, data) encodings, the files each keeps.
ENCODED = [("uniform", "constant"), ("uniform", "file"), ("file", "constant"),
           ("file", "file"), ("uniform", "file")]
FILES = [["indices"], ["indices", "data"], ["indptr", "indices"], PARTS, ["indices", "data"]]


def _irregular(rng: np.random.Generator, n: int, density: float) -> sp.csr_matrix:
    """Rows of any length, the first and last empty, values in +-[0.5, 2)."""
    w = sp.random(n, n, density=density, format="csr", dtype=np.float32, rng=rng)
    w.data = (rng.uniform(0.5, 2.0, w.nnz) * rng.choice([-1, 1], w.nnz)).astype(np.float32)
    keep = np.ones(n, dtype=np.float32)
    keep[[0, n - 1]] = 0
    w = as_csr32(sp.diags(keep) @ w)
    w.eliminate_zeros()
    assert w.nnz % n  # not every row the same count
    return w


@pytest.fixture(scope="module")
def mixed() -> Network:
    """Every combination of rows and values, and a layer with no nonzeros: 1 RadiX-Net (32 a
    row, all 1/16); 2 its pattern, varied values; 3 irregular rows, all -0.3 (not a binary
    fraction); 4 irregular rows and values; 5 empty."""
    rng = np.random.default_rng(7)
    radix = make_network(N, 2, seed=1).layers
    varied = radix[1].copy()
    varied.data = rng.uniform(0.5, 2.0, varied.nnz).astype(np.float32)
    constant = _irregular(rng, N, 0.01)
    constant.data[:] = np.float32(-0.3)
    layers = [radix[0], varied, constant, _irregular(rng, N, 0.02),
              sp.csr_matrix((N, N), dtype=np.float32)]
    return Network(layers, bias=-0.3, ymax=32, name="mixed")


@pytest.fixture(scope="module")
def wide() -> Network:
    """N = 65537: columns need int32. 1 the identity halved (one per row, all 0.5); 2 a few
    irregular nonzeros, one in the last column."""
    n = 65537
    rng = np.random.default_rng(3)
    scattered = sp.random(n, n, density=3e-8, format="lil", dtype=np.float32, rng=rng)
    scattered[5, n - 1] = 1.5
    scattered = as_csr32(scattered)
    scattered.data = rng.uniform(0.5, 2.0, scattered.nnz).astype(np.float32)
    return Network([sp.identity(n, dtype=np.float32, format="csr") * np.float32(0.5),
                    scattered], bias=-0.3, ymax=32, name="wide")


@pytest.fixture
def written(tmp_path, mixed) -> Path:
    return store.write_network(tmp_path / "net", mixed)


def _is_mapped(array: np.ndarray) -> bool:
    return store_reader._mapped_file(array) is not None and not array.flags.writeable


def _identical(a: sp.csr_matrix, b: sp.csr_matrix) -> None:
    """The same CSR arrays, dtypes and bytes."""
    assert a.shape == b.shape and a.has_canonical_format and b.has_canonical_format
    for part in PARTS:
        x, y = getattr(a, part), getattr(b, part)
        assert x.dtype == y.dtype, part
        assert x.shape == y.shape and x.tobytes() == y.tobytes(), part
    assert a.dtype == np.float32 and a.indices.dtype == np.int32


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("columns", ["uint16", "int32"])
def test_every_encoding_reads_back_as_version_1_bit_for_bit(tmp_path, mixed, monkeypatch,
                                                            columns):
    if columns == "int32":  # as for N > 65536: the writer's threshold lowered
        monkeypatch.setattr(encoding, "UINT16_COLUMNS", N // 2)
    v2 = store.open_store(store.write_network(tmp_path / "v2", mixed), verify=True)
    v1 = store.open_store(write_v1_store(tmp_path / "v1", mixed), verify=True)
    assert (v1.version, v2.version) == (1, 2)
    assert v2.nbytes() < v1.nbytes()
    for k, (w, (indptr, data), files) in enumerate(zip(mixed.layers, ENCODED, FILES,
                                                       strict=True), start=1):
        entry = v2.manifest["layers"][k - 1]
        assert (entry["encoding"]["indptr"], entry["encoding"]["data"]) == (indptr, data)
        assert entry["encoding"]["indices"] == columns and list(entry["files"]) == list(files)
        assert sorted(p.name for p in v2.folder.glob(f"l{k}.*")) == sorted(
            f"l{k}.{part}.npy" for part in files)
        got = v2.layer(k)
        _identical(got, v1.layer(k))
        _identical(got, sp.csr_matrix((w.data, w.indices, w.indptr.astype(np.int64)),
                                      shape=w.shape))
        # maps where the file has the kernel's dtype; decoded, writable arrays otherwise
        assert _is_mapped(got.data) == (data == "file")
        assert _is_mapped(got.indices) == (columns == "int32")
        if data == "constant":
            assert got.data.flags.writeable and store_reader._mapped_file(got.data) is None
    # -0.3 exactly: the float32's bits, and the shortest decimal for people
    assert v2.manifest["layers"][2]["encoding"]["value"] == -0.3
    assert v2.manifest["layers"][2]["encoding"]["value_bits"] == "0x" + format(
        int(np.float32(-0.3).view(np.uint32)), "08x")
    again = v2.to_network()
    assert all((a != b).nnz == 0 for a, b in zip(again.layers, mixed.layers, strict=True))
    assert all(w.data.flags.writeable and w.indices.flags.writeable for w in again.layers)


def test_more_than_65536_columns_are_int32(tmp_path, wide):
    v2 = store.open_store(store.write_network(tmp_path / "v2", wide), verify=True)
    v1 = store.open_store(write_v1_store(tmp_path / "v1", wide), verify=True)
    first, second = (entry["encoding"] for entry in v2.manifest["layers"])
    assert first == {"indptr": "uniform", "row_nnz": 1, "indices": "int32",
                     "data": "constant", "value": 0.5, "value_bits": "0x3f000000"}
    assert second == {"indptr": "file", "indices": "int32", "data": "file"}
    for k in (1, 2):
        _identical(v2.layer(k), v1.layer(k))
        assert _is_mapped(v2.layer(k).indices)
    assert v2.layer(2).indices.max() == 65536
    # uint16 columns could not address the last one: a manifest saying so is refused
    _edit_encoding(v2.folder, 2, indices="uint16")
    with pytest.raises(ChallengeFormatError) as info:
        store.open_store(v2.folder)
    assert info.value.path == v2.folder / "manifest.json"
    assert "layer 2's encoding: uint16 indices for N = 65537" in str(info.value)


def test_a_version_1_store_still_reads_as_before(tmp_path, mixed):
    folder = write_v1_store(tmp_path / "v1", mixed)
    opened = store.open_store(folder, verify=True)
    assert opened.version == 1 and opened.encodings == [encoding.VERSION_1] * 5
    assert opened.nbytes() == sum(p.stat().st_size for p in folder.glob("*.npy"))
    for k, w in enumerate(mixed.layers, start=1):
        got = opened.layer(k)
        assert (got != w).nnz == 0 and got.nnz == w.nnz
        assert _is_mapped(got.data) and _is_mapped(got.indices)  # the files, no copies
        assert opened.layer_nbytes(k) == sum(
            (folder / f"l{k}.{part}.npy").stat().st_size for part in PARTS)
    assert [w.nnz for w in opened.layers(window=2)] == [w.nnz for w in mixed.layers]


def test_layer_nbytes_counts_the_files_a_layer_has(written, mixed):
    opened = store.open_store(written)
    for k, files in enumerate(FILES, start=1):
        assert opened.layer_nbytes(k) == sum(
            (written / f"l{k}.{part}.npy").stat().st_size for part in files)
    assert opened.layer_nbytes(1) == 128 + 2 * mixed.layers[0].nnz  # uint16 columns only
    assert opened.nbytes() == sum(opened.layer_nbytes(k) for k in range(1, 6))
    with pytest.raises(IndexError, match=r"this store has layers 1\.\.5"):
        opened.layer_nbytes(6)


def test_files_the_manifest_does_not_list_are_ignored(written, mixed):
    np.save(written / "l1.data.npy", np.zeros(7, np.float32))
    (written / "l1.indptr.npy").write_bytes(b"junk")
    opened = store.open_store(written, verify=True)
    assert (opened.layer(1) != mixed.layers[0]).nnz == 0
    assert opened.layer_nbytes(1) == (written / "l1.indices.npy").stat().st_size


def test_the_radixnet_store_is_a_quarter_of_version_1(tmp_path):
    net = make_network(1024, 120)
    v1 = store.open_store(write_v1_store(tmp_path / "v1", net))
    v2 = store.open_store(store.write_network(tmp_path / "v2", net))
    on_disk = sum(p.stat().st_size for p in v2.folder.glob("*.npy"))
    assert v2.nbytes() == on_disk and v1.nbytes() > 0
    assert v2.nbytes() <= 0.3 * v1.nbytes()
    # 2 bytes an edge and a header a layer, against 12 and N + 1 row pointers
    assert v2.nbytes() == 120 * (128 + 2 * 32 * 1024)
    assert v1.nbytes() == 120 * (3 * 128 + 8 * 1025 + 8 * 32 * 1024)


def test_choose_encoding_compares_bits():
    indptr = np.array([0, 2, 4])
    assert encoding.choose_encoding(indptr, np.full(4, 0.1, np.float32), 2).data == "constant"
    nearly = np.full(4, 0.1, np.float32)
    nearly[3] = np.nextafter(nearly[3], np.float32(1))
    assert encoding.choose_encoding(indptr, nearly, 2).data == "file"
    chosen = encoding.choose_encoding(np.array([0, 0, 3]), np.ones(3, np.float32), 65537)
    assert (chosen.indptr, chosen.row_nnz, chosen.indices) == ("file", None, "int32")
    empty = encoding.choose_encoding(np.zeros(5, np.int64), np.zeros(0, np.float32), 4)
    assert (empty.indptr, empty.row_nnz, empty.data) == ("uniform", 0, "file")


# --------------------------------------------------------------------------- refusals


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _write_manifest(folder: Path, manifest: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _edit_encoding(folder: Path, layer: int, **changes) -> None:
    """Change keys of a layer's encoding (``None``: remove the key)."""
    manifest = _manifest(folder)
    coding = manifest["layers"][layer - 1]["encoding"]
    for key, value in changes.items():
        if value is None:
            coding.pop(key, None)
        else:
            coding[key] = value
    _write_manifest(folder, manifest)


def _edit_entry(folder: Path, layer: int, **changes) -> None:
    manifest = _manifest(folder)
    entry = manifest["layers"][layer - 1]
    for key, value in changes.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    _write_manifest(folder, manifest)


def _list_file(folder: Path, layer: int, part: str) -> None:
    manifest = _manifest(folder)
    files = manifest["layers"][layer - 1]["files"]
    files[part] = dict(files["indices"], name=f"l{layer}.{part}.npy")
    _write_manifest(folder, manifest)


def _same_size(folder: Path, name: str, dtype: str) -> None:
    """Replace a file with one of another dtype and the same size (its header too)."""
    array = np.load(folder / name)
    size = array.size * array.itemsize // np.dtype(dtype).itemsize
    np.save(folder / name, np.ones(size, dtype))


def _truncate(folder: Path, name: str) -> None:
    path = folder / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _version(folder: Path, version) -> None:
    manifest = _manifest(folder)
    manifest["version"] = version
    _write_manifest(folder, manifest)


MANIFEST = "manifest.json"
BAD = [
    # the files the encodings keep
    ("truncated-uint16", lambda f: _truncate(f, "l1.indices.npy"), "l1.indices.npy",
     "32832 bytes; the manifest says 65664 (truncated"),
    ("uint16-is-int32", lambda f: _same_size(f, "l1.indices.npy", "<i4"), "l1.indices.npy",
     "holds a int32 array of shape (16384,); expected layer 1's indices: 32768 uint16 values, "
     "shape (32768,)"),
    ("data-is-float64", lambda f: _same_size(f, "l2.data.npy", "<f8"), "l2.data.npy",
     "holds a float64 array of shape (16384,); expected layer 2's data: 32768 float32 values"),
    ("missing-indptr", lambda f: (f / "l4.indptr.npy").unlink(), "l4.indptr.npy",
     "missing; expected layer 4's indptr: 1025 int64 values, shape (1025,)"),
    ("missing-uint16", lambda f: (f / "l5.indices.npy").unlink(), "l5.indices.npy",
     "missing; expected layer 5's indices: 0 uint16 values, shape (0,)"),
    # the encodings
    ("row-nnz-wrong", lambda f: _edit_encoding(f, 1, row_nnz=31), MANIFEST,
     "layer 1's encoding: uniform rows of 31 nonzeros: 31744 nonzeros for N = 1024, not the "
     "layer's 32768"),
    ("row-nnz-negative", lambda f: _edit_encoding(f, 1, row_nnz=-1), MANIFEST,
     "layer 1's encoding: row_nnz -1, not an integer >= 0"),
    ("row-nnz-bool", lambda f: _edit_encoding(f, 5, row_nnz=False), MANIFEST,
     "layer 5's encoding: row_nnz False, not an integer"),
    ("row-nnz-text", lambda f: _edit_encoding(f, 1, row_nnz="32"), MANIFEST,
     "layer 1's encoding: row_nnz '32', not an integer"),
    ("row-nnz-missing", lambda f: _edit_encoding(f, 2, row_nnz=None), MANIFEST,
     "layer 2's encoding: keys ['data', 'indices', 'indptr']: missing row_nnz"),
    ("irregular-said-uniform", lambda f: _edit_encoding(f, 4, indptr="uniform", row_nnz=20),
     MANIFEST, "layer 4's encoding: uniform rows of 20 nonzeros: 20480 nonzeros for N = "
               "1024, not the layer's"),
    ("row-nnz-with-a-file", lambda f: _edit_encoding(f, 4, row_nnz=20), MANIFEST,
     "layer 4's encoding: keys ['data', 'indices', 'indptr', 'row_nnz']: unexpected row_nnz"),
    ("unknown-indices", lambda f: _edit_encoding(f, 1, indices="uint8"), MANIFEST,
     "layer 1's encoding: indices 'uint8', not one of 'int32', 'uint16'"),
    ("unknown-data", lambda f: _edit_encoding(f, 2, data="zstd"), MANIFEST,
     "layer 2's encoding: data 'zstd', not one of 'file', 'constant'"),
    ("unknown-indptr", lambda f: _edit_encoding(f, 3, indptr="delta"), MANIFEST,
     "layer 3's encoding: indptr 'delta', not one of 'file', 'uniform'"),
    ("unknown-key", lambda f: _edit_encoding(f, 2, compression="none"), MANIFEST,
     "layer 2's encoding: keys ['compression', 'data', 'indices', 'indptr', 'row_nnz']: "
     "unexpected compression"),
    ("no-encoding", lambda f: _edit_entry(f, 2, encoding=None), MANIFEST,
     "layer 2's encoding: None, not an object"),
    ("encoding-a-list", lambda f: _edit_entry(f, 2, encoding=["uniform"]), MANIFEST,
     "layer 2's encoding: ['uniform'], not an object"),
    # the constant
    ("constant-zero", lambda f: _edit_encoding(f, 1, value=0.0, value_bits="0x00000000"),
     MANIFEST, "layer 1's encoding: constant value 0.0 (bits 0x00000000); expected a finite, "
               "nonzero weight"),
    ("constant-minus-zero", lambda f: _edit_encoding(f, 1, value=-0.0,
                                                     value_bits="0x80000000"),
     MANIFEST, "layer 1's encoding: constant value -0.0 (bits 0x80000000)"),
    ("constant-nan", lambda f: _edit_encoding(f, 1, value=math.nan, value_bits="0x7fc00000"),
     MANIFEST, "layer 1's encoding: constant value nan (bits 0x7fc00000)"),
    ("constant-inf", lambda f: _edit_encoding(f, 3, value=math.inf, value_bits="0x7f800000"),
     MANIFEST, "layer 3's encoding: constant value inf (bits 0x7f800000)"),
    ("hex-damaged", lambda f: _edit_encoding(f, 1, value_bits="0x3d800001"), MANIFEST,
     "layer 1's encoding: value 0.0625 is the float32 0x3d800000, but value_bits says "
     "0x3d800001 (0.0625000074505806): they disagree"),
    ("hex-no-prefix", lambda f: _edit_encoding(f, 1, value_bits="3d800000"), MANIFEST,
     "layer 1's encoding: value_bits '3d800000', not 0x and 8 lowercase hex digits"),
    ("hex-upper-case", lambda f: _edit_encoding(f, 1, value_bits="0x3D800000"), MANIFEST,
     "value_bits '0x3D800000', not 0x and 8 lowercase hex digits"),
    ("hex-a-number", lambda f: _edit_encoding(f, 1, value_bits=1031798784), MANIFEST,
     "value_bits 1031798784, not 0x and 8"),
    ("decimal-differs", lambda f: _edit_encoding(f, 3, value=-0.31), MANIFEST,
     "layer 3's encoding: value -0.31 is the float32 0xbe9eb852, but value_bits says "
     "0xbe99999a"),
    ("decimal-too-large", lambda f: _edit_encoding(f, 3, value=1e300), MANIFEST,
     "value 1e+300 is the float32 0x7f800000, but value_bits says 0xbe99999a"),
    ("decimal-text", lambda f: _edit_encoding(f, 1, value="0.0625"), MANIFEST,
     "layer 1's encoding: value '0.0625', not a finite number"),
    ("decimal-missing", lambda f: _edit_encoding(f, 1, value=None), MANIFEST,
     "layer 1's encoding: keys ['data', 'indices', 'indptr', 'row_nnz', 'value_bits']: "
     "missing value"),
    ("bits-missing", lambda f: _edit_encoding(f, 3, value_bits=None), MANIFEST,
     "missing value_bits"),
    # the files against the encoding
    ("a-file-it-does-not-keep", lambda f: _list_file(f, 1, "data"), MANIFEST,
     "layer 1's files are {'indices': "),
    ("constant-said-file", lambda f: _edit_encoding(f, 1, data="file", value=None,
                                                    value_bits=None), MANIFEST,
     "; its encoding keeps indices, data in files"),
    ("file-said-constant", lambda f: _edit_encoding(f, 2, data="constant", value=1.0,
                                                    value_bits="0x3f800000"), MANIFEST,
     "layer 2's files are {'indices': {'name': 'l2.indices.npy', "),
    ("no-files", lambda f: _edit_entry(f, 1, files=None), MANIFEST,
     "layer 1's files are None; its encoding keeps indices in files"),
    # the version
    ("version-1-with-encodings", lambda f: _version(f, 1), MANIFEST,
     "layer 1's files are {'indices': "),
    ("version-3", lambda f: _version(f, 3), MANIFEST,
     "version 3 of sdnn-network-store (written by sdnn_dask 0.1.0); this sdnn_dask 0.1.0 "
     "reads versions 1 and 2 only: rewrite it from the challenge files with this release "
     "(sdnn-dask convert CHALLENGE_DIR "),
    ("version-float", lambda f: _version(f, 2.0), MANIFEST, "version 2.0 of sdnn-network"),
    ("version-text", lambda f: _version(f, "2"), MANIFEST, "version '2' of sdnn-network"),
]


@pytest.mark.parametrize(("damage", "file", "message"), [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_a_bad_version_2_store_is_refused_on_open_naming_the_file(written, damage, file,
                                                                  message):
    damage(written)
    with pytest.raises(ChallengeFormatError) as info:
        store.open_store(written)
    assert info.value.path == written / file
    assert str(info.value).startswith(str(written / file))
    assert message in str(info.value), str(info.value)
    if file == MANIFEST and "version" not in message:
        assert "expected the manifest of a sdnn-network-store version 1 or 2" in str(
            info.value)


def test_an_unreadable_version_says_how_to_rewrite_the_store(written):
    _version(written, 7)
    with pytest.raises(ChallengeFormatError) as info:
        store.open_store(written)
    said = str(info.value)
    assert f"sdnn-dask convert CHALLENGE_DIR {written} --overwrite" in said
    assert "reads versions 1 and 2 only" in said and "reads version 7" in said


def _set(folder: Path, name: str, index: int, value) -> None:
    array = np.load(folder / name, mmap_mode="r+")
    array[index] = value
    array.flush()


@pytest.mark.parametrize(("damage", "file", "message"), [
    (lambda f: _set(f, "l1.indices.npy", 7, 2000), "l1.indices.npy",
     "columns 0..2000; expected columns in 0..1023"),
    (lambda f: _set(f, "l1.indices.npy", 33, 0), "l1.indices.npy",
     "columns not strictly increasing in row 2 (1-based)"),
    (lambda f: _set(f, "l3.indices.npy", 0, 1023), "l3.indices.npy",
     "columns not strictly increasing in row 2 (1-based)"),
    (lambda f: _set(f, "l2.data.npy", 9, np.nan), "l2.data.npy", "not finite"),
    (lambda f: _set(f, "l4.data.npy", 9, 0.0), "l4.data.npy", "explicit zeros"),
    (lambda f: _set(f, "l4.indptr.npy", 5, 10**6), "l4.indptr.npy", "row pointers decrease"),
    (lambda f: _set(f, "l3.indptr.npy", -1, 7), "l3.indptr.npy",
     "row pointers run from 0 to 7; expected 0 to the layer's"),
], ids=["uint16-out-of-range", "uint16-unsorted", "irregular-unsorted", "nan", "zero",
        "indptr-decreasing", "indptr-end"])
def test_bad_version_2_contents_are_found_when_the_layer_is_first_read(written, damage, file,
                                                                       message):
    damage(written)
    # sizes and headers are right; the contents' checks (the hashes would find it first)
    opened = store.open_store(written, check_hashes=False)
    k = int(file[1])
    with pytest.raises(ChallengeFormatError) as info:
        opened.layer(k)
    assert info.value.path == written / file and message in str(info.value)
    for other in set(range(1, 6)) - {k}:
        opened.layer(other)
    with pytest.raises(ChallengeFormatError) as info:  # its hash differs, first
        store.open_store(written, verify=True)
    assert info.value.path == written / file


# --------------------------------------------------------------------------- conversion


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.glob("*.npy"))}


@pytest.mark.parametrize("version", [1, 2])
def test_convert_store_gives_the_same_network(tmp_path, mixed, version):
    write = write_v1_store if version == 1 else store.write_network
    source = write(tmp_path / "source", mixed)
    said = []
    folder = store.convert_store(source, tmp_path / "out",
                                 progress=lambda *a: said.append(a))
    assert said == [(k, 5) for k in range(1, 6)]
    old, new = store.open_store(source), store.open_store(folder, verify=True)
    assert new.version == 2 and new.manifest["version"] == store.VERSION
    assert (new.name, new.ymax, new.n_neurons, new.edges) == (old.name, old.ymax, N,
                                                             mixed.edges)
    assert np.array_equal(new.bias, old.bias) and new.manifest["bias"] == -0.3
    assert new.source == {"store": str(source), "version": version, "source": None}
    for k in range(1, 6):
        _identical(new.layer(k), old.layer(k))
    # the writer is deterministic: the same files as the network written directly
    assert _hashes(folder) == _hashes(store.write_network(tmp_path / "direct", mixed))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["direct", "out", "source"]


def test_convert_store_in_place_and_some_layers(tmp_path, mixed):
    folder = write_v1_store(tmp_path / "net", mixed)
    before = store.open_store(folder).nbytes()
    with pytest.raises(FileExistsError, match="a network store is there already"):
        store.convert_store(folder, folder)
    assert store.convert_store(folder, folder, overwrite=True) == folder
    rewritten = store.open_store(folder, verify=True)
    assert rewritten.version == 2 and rewritten.nbytes() < before
    assert [p.name for p in tmp_path.iterdir()] == ["net"]  # no partial or old folder
    assert all((rewritten.layer(k) != w).nnz == 0 for k, w in enumerate(mixed.layers, 1))
    some = store.open_store(store.convert_store(folder, tmp_path / "some", n_layers=2))
    assert some.n_layers == 2 and some.name == "mixed (layers 1-2)"
    for bad in (0, 6, True):
        with pytest.raises(ValueError, match=r"n_layers must be in 1\.\.5"):
            store.convert_store(folder, tmp_path / "bad", n_layers=bad)


def test_convert_store_keeps_each_layers_source(tmp_path, mixed):
    data = tmp_path / "data"
    io.write_weights(data, mixed.layers[:4])
    challenge = store.convert_challenge(data, tmp_path / "net", N, 4)
    again = store.open_store(store.convert_store(challenge, tmp_path / "again"))
    assert [e["source"] for e in again.manifest["layers"]] == [
        e["source"] for e in store.open_store(challenge).manifest["layers"]]
    assert again.source["source"] == {"challenge": str(data)}


@pytest.mark.parametrize("change", ["nan", "valid"])
def test_convert_store_refuses_a_damaged_store_and_writes_nothing(tmp_path, mixed, change):
    folder = write_v1_store(tmp_path / "net", mixed)
    _set(folder, "l3.data.npy", 4, np.nan if change == "nan" else 0.125)
    for verify in (True, False):
        if not verify and change == "valid":  # without the hashes, a weight like any other
            out = store.convert_store(folder, tmp_path / "out", verify=False)
            assert store.open_store(out).layer(3).data[4] == np.float32(0.125)
            continue
        with pytest.raises(ChallengeFormatError) as info:
            store.convert_store(folder, tmp_path / "out", verify=verify)
        assert info.value.path == folder / "l3.data.npy"
        assert ("differs from the manifest's" if verify else "not finite") in str(info.value)
        assert [p.name for p in tmp_path.iterdir()] == ["net"]
