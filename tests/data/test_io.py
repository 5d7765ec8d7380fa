"""Challenge file I/O: round trips, the official files, clear errors, the binary cache."""

from __future__ import annotations

import gzip
import os
import re
import time
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.data import io
from sdnn_dask.data.io import ChallengeFormatError
from sdnn_dask.data.io import cache as io_cache
from sdnn_dask.data.io import text as io_text
from sdnn_dask.data.radixnet import make_network


def _write(path, text: str):
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_triples_round_trip(tmp_path, suffix):
    rng = np.random.default_rng(1)
    m = sp.random(50, 40, density=0.1, format="csr", dtype=np.float32, rng=rng)
    m.data = np.round(m.data * 64) / 16 + 0.0625  # nonzero, exactly representable
    path = io.write_triples(tmp_path / f"m{suffix}", m)
    back = io.read_triples(path, (50, 40))
    assert back.dtype == np.float32 and back.shape == (50, 40)
    assert (back != m).nnz == 0
    first = (gzip.open(path, "rt") if suffix.endswith(".gz") else open(path)).readline()
    r, c = m.tocoo().row, m.tocoo().col
    order = np.lexsort((c, r))
    assert first.split("\t")[:2] == [str(r[order[0]] + 1), str(c[order[0]] + 1)]  # 1-based


def test_weights_and_network_round_trip(tmp_path):
    net = make_network(1024, 3, seed=2)
    paths = io.write_weights(tmp_path, net.layers, compress=True)
    assert [p.name for p in paths] == [f"n1024-l{k}.tsv.gz" for k in (1, 2, 3)]
    back = io.read_network(tmp_path, 1024, 3)
    assert back.edges == net.edges
    for a, b in zip(back.layers, net.layers, strict=True):
        assert (a != b).nnz == 0
    # the neuron{N} folder itself works too
    assert io.read_network(tmp_path / "neuron1024", 1024, 2).n_layers == 2


def test_categories_round_trip(tmp_path):
    ids = np.array([5, 0, 17, 5])
    path = io.write_categories(tmp_path / "c.tsv", ids)
    assert path.read_text() == "1\n6\n18\n"
    assert io.read_categories(path).tolist() == [0, 5, 17]
    empty = io.write_categories(tmp_path / "e.tsv", [])
    assert io.read_categories(empty).size == 0


def test_official_layers_read_fast_and_cached(shared_data, tmp_path):
    start = time.perf_counter()
    net = io.read_network(shared_data, 1024, 120, cache=tmp_path)
    parse = time.perf_counter() - start
    assert net.n_layers == 120 and net.edges == 32 * 1024 * 120
    assert all(w.dtype == np.float32 for w in net.layers)
    assert {float(v) for w in net.layers[:3] for v in np.unique(w.data)} == {0.0625}
    cached = list(tmp_path.glob("*.npz"))
    assert len(cached) == 1
    start = time.perf_counter()
    again = io.read_network(shared_data, 1024, 120, cache=tmp_path)
    print(f"parse {parse:.2f} s, cached {time.perf_counter() - start:.3f} s")
    for a, b in zip(net.layers, again.layers, strict=True):
        assert (a != b).nnz == 0
    # the cache is plain arrays: loadable without pickle
    with np.load(cached[0], allow_pickle=False) as archive:
        assert set(archive.files) == {"nnz", "indptr", "indices", "data", "source"}


def test_cache_is_invalidated_by_an_edited_file(tmp_path):
    data = tmp_path / "data"
    net = make_network(1024, 2, seed=0)
    io.write_weights(data, net.layers)
    cache = tmp_path / "cache"
    io.read_network(data, 1024, 2, cache=cache)
    layer2 = data / "neuron1024" / "n1024-l2.tsv"
    lines = layer2.read_text().splitlines()
    lines[0] = lines[0].rsplit("\t", 1)[0] + "\t0.5"
    layer2.write_text("\n".join(lines) + "\n")
    os.utime(layer2, ns=(time.time_ns(), time.time_ns() + 10**9))
    edited = io.read_network(data, 1024, 2, cache=cache)
    assert edited.layers[1].data.max() == np.float32(0.5)


def test_official_inputs_and_truth(official_inputs, official_truth):
    assert official_inputs.shape == (1200, 1024)
    assert official_inputs.nnz == 122713
    assert set(np.unique(official_inputs.data).tolist()) == {1.0}
    assert len(official_truth) == 19


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("1\t1\t0.5\n2\t2\n", 2, "2 fields"),
        ("1\t1\t0.5\n2\t2\t0.5\t9\n", 2, "4 fields"),
        ("1\t1\t0.5\n2\tx\t0.5\n", 2, "'x', not a number"),
        ("1\t1\t0.5\n0\t2\t0.5\n", 2, "row 0 is below 1"),
        ("1\t1\t0.5\n2\t9\t0.5\n", 2, "column 9 is beyond the declared size 4"),
        ("1\t1\t0.5\n2\t1.5\t0.5\n", 2, "not a whole number"),
        ("1\t1\t0.5\n\n2\t2\t0.5\n", 2, "0 fields"),
    ],
)
@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_bad_triples_name_file_and_line(tmp_path, text, line, fragment, suffix):
    path = _write(tmp_path / f"bad{suffix}", text)
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(path, (4, 4))
    assert info.value.line == line
    assert str(path) in str(info.value)
    assert f"line {line}" in str(info.value)
    assert fragment in str(info.value)


def test_empty_file(tmp_path):
    path = _write(tmp_path / "empty.tsv", "")
    with pytest.raises(ChallengeFormatError, match="empty"):
        io.read_triples(path, (4, 4))


def test_missing_layer_files_are_all_named(tmp_path):
    io.write_weights(tmp_path, make_network(1024, 2).layers)
    with pytest.raises(FileNotFoundError) as info:
        io.read_network(tmp_path, 1024, 5)
    message = str(info.value)
    assert "3 of 5 layer files" in message and "n1024-l3.tsv" in message
    assert "more" not in message  # three are all named
    with pytest.raises(FileNotFoundError) as info:
        io.read_network(tmp_path, 1024, 7)
    assert "5 of 7 layer files" in str(info.value) and " and 2 more" in str(info.value)


def test_format_error_survives_pickling():
    """Raised in a Dask task, the error reaches the client whole (path, line, message)."""
    import pickle

    for error in (ChallengeFormatError("/d/n1024-l3.tsv", "row 0 is below 1", 7),
                  ChallengeFormatError("/d/manifest.json", "missing")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is ChallengeFormatError and str(again) == str(error)
        assert (again.path, again.line, again.message) == (error.path, error.line,
                                                           error.message)


def test_index_beyond_int32_names_its_line(tmp_path):
    path = _write(tmp_path / "big.tsv", "1\t2\t0.5\n3\t4294967296\t0.5\n")
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(path)
    assert str(info.value) == (f"{path}, line 2: column 4294967296 is beyond the largest "
                               "supported index 2147483647")


def test_categories_errors_say_what_a_line_holds(tmp_path):
    path = _write(tmp_path / "c.tsv", "1\n2\t3\n")
    with pytest.raises(ChallengeFormatError, match="expected one 1-based row id per line"):
        io.read_categories(path)


def test_gzip_output_is_reproducible(tmp_path):
    m = sp.csr_matrix(np.array([[0, 1.5], [2.0, 0]], dtype=np.float32))
    a = io.write_triples(tmp_path / "a.tsv.gz", m).read_bytes()
    b = io.write_triples(tmp_path / "b.tsv.gz", m).read_bytes()
    assert a == b and a[4:8] == b"\0\0\0\0"  # no name, mtime 0 in the header


def test_inputs_wider_than_the_network(tmp_path):
    path = _write(tmp_path / "sparse-images-64.tsv", "1\t3\t1\n2\t65\t1\n")
    with pytest.raises(ChallengeFormatError) as info:
        io.read_inputs(path, 64)
    assert info.value.line == 2
    assert "wider than the network's 64 neurons" in str(info.value)


def test_inputs_from_folder_and_declared_rows(tmp_path):
    m = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 0, 0, 0], [0, 1, 1, 0]], dtype=np.float32))
    io.write_inputs(tmp_path / "sparse-images-4.tsv.gz", m)
    assert io.read_inputs(tmp_path, 4).shape == (3, 4)
    assert io.read_inputs(tmp_path, 4, n_rows=10).shape == (10, 4)
    with pytest.raises(ChallengeFormatError, match="beyond the declared size 2"):
        io.read_inputs(tmp_path, 4, n_rows=2)


def test_bad_categories(tmp_path):
    path = _write(tmp_path / "c.tsv", "3\n0\n")
    with pytest.raises(ChallengeFormatError) as info:
        io.read_categories(path)
    assert info.value.line == 2


def test_failed_write_leaves_old_file(tmp_path, monkeypatch):
    path = io.write_categories(tmp_path / "c.tsv", [1, 2])

    class Boom(RuntimeError):
        pass

    def explode(handle):
        handle.write("1\n")
        raise Boom

    with pytest.raises(Boom):
        io_text._atomic_write(path, explode)
    assert path.read_text() == "2\n3\n"
    assert [p.name for p in tmp_path.iterdir()] == ["c.tsv"]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("1e40", "1e+40 overflows float32"), ("-1e40", "-1e+40 overflows float32"),
     ("nan", "'nan' is not finite"), ("inf", "inf is not finite"),
     ("-inf", "-inf is not finite"), ("NaN", "'NaN' is not finite")],
)
@pytest.mark.parametrize("kind", ["weights", "inputs"])
@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_values_that_are_not_finite_float32(tmp_path, value, fragment, kind, suffix):
    name = "n4-l1" if kind == "weights" else "sparse-images-4"
    path = _write(tmp_path / f"{name}{suffix}", f"1\t1\t0.5\n2\t2\t0.5\n3\t3\t{value}\n")
    with pytest.raises(ChallengeFormatError) as info:
        if kind == "weights":
            io.read_layer(path, 4)
        else:
            io.read_inputs(path, 4)
    assert info.value.line == 3 and info.value.path == path
    assert f"{path}, line 3: " in str(info.value)
    assert fragment in str(info.value) and "expected a finite number" in str(info.value)


def test_largest_float32_is_accepted(tmp_path):
    path = _write(tmp_path / "m.tsv", "1\t1\t3.4028234e38\n2\t2\t-1e-3\n")
    assert io.read_triples(path, (2, 2)).data.tolist() == [np.float32(3.4028234e38),
                                                           np.float32(-1e-3)]


@pytest.mark.parametrize(("text", "fragment"), [("nan\t1\t0.5\n", "field 1 'nan'"),
                                                ("1\tinf\t0.5\n", "column inf is not")])
def test_indices_that_are_not_finite(tmp_path, text, fragment):
    path = _write(tmp_path / "m.tsv", "1\t1\t0.5\n" + text)
    with pytest.raises(ChallengeFormatError, match=fragment) as info:
        io.read_triples(path, (4, 4))
    assert info.value.line == 2


def _gz_bytes(text: str) -> bytes:
    return gzip.compress(text.encode(), mtime=0)


_LINES = "".join(f"{i}\t{i % 7 + 1}\t0.5\n" for i in range(1, 20001))


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        (_gz_bytes(_LINES)[:4000], None, "truncated after"),
        (_LINES.encode(), None, "not gzip data (it starts with b'1\\t2\\t0.5"),
        (_gz_bytes(_LINES) + b"trailing garbage", None, "after the last line (20000)"),
        (_gz_bytes(_LINES) + b"\x1f", None, "trailing bytes"),
        # two members (as `cat a.gz b.gz` makes) and zero padding, then garbage
        (_gz_bytes(_LINES[:300]) + _gz_bytes(_LINES[300:]) + b"\0" * 5 + b"junk", None,
         "after the last line (20000)"),
    ],
    ids=["truncated", "plain-text", "trailing-garbage", "trailing-byte", "two-members"],
)
@pytest.mark.parametrize("reader", ["triples", "categories"])
def test_damaged_gz_is_a_file_error(tmp_path, content, line, fragment, reader):
    path = tmp_path / "m.tsv.gz"
    path.write_bytes(content)
    with pytest.raises(ChallengeFormatError) as info:
        if reader == "triples":
            io.read_triples(path, (20000, 7))
        else:
            io.read_categories(path)
    assert str(info.value).startswith(f"{path}")
    assert fragment in str(info.value) and "expected" in str(info.value)
    if fragment == "truncated after":  # the exact line: see the next test
        assert info.value.line is not None and 1 < info.value.line < 20000
    else:
        assert info.value.line == line


def test_truncated_gz_names_the_line_it_stops_in(tmp_path):
    full = _gz_bytes(_LINES)
    path = tmp_path / "m.tsv.gz"
    path.write_bytes(full[: len(full) // 2])
    decoder = zlib.decompressobj(wbits=31)
    whole_lines = decoder.decompress(full[: len(full) // 2]).count(b"\n")
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(path, (20000, 7))
    assert info.value.line == whole_lines + 1
    assert f"line {whole_lines + 1}: the gzip data is truncated" in str(info.value)


def test_multi_member_and_zero_padded_gz_are_valid(tmp_path):
    path = tmp_path / "m.tsv.gz"
    path.write_bytes(_gz_bytes(_LINES[:100]) + _gz_bytes(_LINES[100:]) + b"\0" * 8)
    assert io.read_triples(path, (20000, 7)).nnz == 20000


def test_corrupt_gz_is_a_file_error(tmp_path):
    data = bytearray(_gz_bytes(_LINES))
    data[-6] ^= 0xFF  # inside the CRC trailer: the text is whole, the check fails
    path = tmp_path / "m.tsv.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(ChallengeFormatError, match=r"corrupt gzip data \(.*\) after 20000 "):
        io.read_triples(path, (20000, 7))


def test_gzip_data_in_a_plain_name(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_bytes(_gz_bytes(_LINES))
    with pytest.raises(ChallengeFormatError, match=r"name does not end in \.gz"):
        io.read_triples(path, (20000, 7))


@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_unreadable_file_is_a_file_error(tmp_path, monkeypatch, suffix):
    path = _write(tmp_path / f"m{suffix}", "1\t1\t0.5\n")
    real_open = open

    def refuse(file, *args, **kwargs):
        if os.fspath(file) == os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refuse)
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(path, (4, 4))
    assert str(info.value) == f"{path}: cannot be read (Permission denied); expected a " \
        "readable file"


def test_folder_instead_of_a_file(tmp_path):
    folder = tmp_path / "sparse-images-4.tsv"
    folder.mkdir()
    with pytest.raises(ChallengeFormatError, match="is a folder; expected a file"):
        io.read_triples(folder, (4, 4))
    with pytest.raises(ChallengeFormatError, match="is a folder"):
        io.read_categories(folder)


# --------------------------------------------------------------------------- the cache


@pytest.fixture
def six_layers(tmp_path):
    """A 1024-neuron, 6-layer network on disk, its cache folder, and the network."""
    data = tmp_path / "data"
    net = make_network(1024, 6, seed=3)
    io.write_weights(data, net.layers)
    return data, tmp_path / "cache", net


def _same(network, expected) -> bool:
    return network.n_layers == expected.n_layers and all(
        (a != b).nnz == 0 for a, b in zip(network.layers, expected.layers, strict=True))


def _no_text_parsing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the text files were parsed")

    monkeypatch.setattr(io_text, "_read_columns", refuse)


def test_second_read_comes_from_the_cache(six_layers, monkeypatch):
    data, cache, net = six_layers
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _same(io.read_network(data, 1024, 6, cache=cache), net)
        _no_text_parsing(monkeypatch)
        assert _same(io.read_network(data, 1024, 6, cache=cache), net)
    # a copy of the same bytes elsewhere shares the cache (the key is the content)
    copy = data.parent / "copy"
    copy.mkdir()
    os.rename(data / "neuron1024", copy / "neuron1024")
    assert _same(io.read_network(copy, 1024, 6, cache=cache), net)


def test_in_place_edit_keeping_size_and_mtime_is_read_again(six_layers):
    data, cache, _ = six_layers
    io.read_network(data, 1024, 6, cache=cache)
    layer = data / "neuron1024" / "n1024-l4.tsv"
    before = layer.stat()
    text = layer.read_text()
    value = text.split("\n", 1)[0].rsplit("\t", 1)[1]
    assert value == "0.0625"
    with open(layer, "r+") as handle:  # same inode, same size
        handle.write(text.split("\n", 1)[0].rsplit("\t", 1)[0] + "\t0.1250")
    os.utime(layer, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = layer.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size, before.st_mtime_ns, before.st_ino)
    edited = io.read_network(data, 1024, 6, cache=cache)
    assert edited.layers[3].data.max() == np.float32(0.125)
    assert _same(io.read_network(data, 1024, 6), edited)
    assert len(list(cache.glob("*.npz"))) == 2


def _only_cache_file(cache):
    (found,) = cache.glob("*.npz")
    return found


def _three_layer_cache(path):
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    counts = arrays["nnz"][:3]
    return {"nnz": counts, "indptr": arrays["indptr"][: 3 * 1025],
            "indices": arrays["indices"][: counts.sum()], "data": arrays["data"][: counts.sum()]}


def _out_of_range_cache(path):
    with np.load(path) as archive:
        arrays = {name: archive[name].copy() for name in archive.files}
    arrays["indices"][12345] = 5000
    return arrays


def _down_by_one_cache(path):
    """Row pointers that fall by exactly one once, still from 0 to the nonzero count."""
    with np.load(path) as archive:
        arrays = {name: archive[name].copy() for name in archive.files}
    arrays["indptr"][6] = arrays["indptr"][5] - 1
    return arrays


def _damage(path, how):
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "garbage":
        path.write_bytes(os.urandom(4096))
    elif how == "pickle":
        np.save(path.with_suffix(".npy"), np.array([object()], dtype=object), allow_pickle=True)
        os.replace(path.with_suffix(".npy"), path)
    else:
        arrays = {"three-layers": _three_layer_cache, "out-of-range": _out_of_range_cache,
                  "float64": lambda p: {**dict(np.load(p)),
                                        "data": np.load(p)["data"].astype(np.float64)},
                  "decreasing": lambda p: {**dict(np.load(p)),
                                           "indptr": np.load(p)["indptr"][::-1].copy()},
                  "down-by-one": _down_by_one_cache,
                  "short-indices": lambda p: {**dict(np.load(p)),
                                              "indices": np.load(p)["indices"][:-1]},
                  "offset": lambda p: {**dict(np.load(p)),  # starts at 1, ends right
                                       "indptr": np.concatenate([[1], np.load(p)["indptr"][1:]])},
                  }[how](path)
        with open(path, "wb") as handle:
            np.savez(handle, **arrays)


@pytest.mark.parametrize(
    ("how", "reason"),
    [("empty", "EOFError"), ("truncated", "unreadable"), ("garbage", "unreadable"),
     ("pickle", "unreadable"), ("three-layers", "3 layers; expected 6"),
     ("out-of-range", "column indices outside 0..1023"), ("float64", "data is float64"),
     ("decreasing", "row pointers"), ("offset", "row pointers do not run from 0"),
     ("short-indices", "indices and"),
     ("down-by-one", "row pointers")],
)
def test_bad_cache_is_rebuilt_with_a_warning(six_layers, monkeypatch, how, reason):
    data, cache, net = six_layers
    io.read_network(data, 1024, 6, cache=cache)
    cached = _only_cache_file(cache)
    _damage(cached, how)
    with pytest.warns(io.CacheWarning) as record:
        again = io.read_network(data, 1024, 6, cache=cache)
    assert _same(again, net)
    message = str(record[0].message)
    assert str(cached) in message and "discarded, rebuilding" in message and reason in message
    # rebuilt in place: the next read is from the cache, silently
    assert _only_cache_file(cache) == cached
    _no_text_parsing(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _same(io.read_network(data, 1024, 6, cache=cache), net)


def test_cache_folder_that_is_a_file(six_layers, monkeypatch):
    data, cache, net = six_layers
    cache.write_text("not a folder")
    monkeypatch.setenv("SDNN_CACHE_DIR", str(cache))
    for where in (True, cache, cache / "inside"):
        with pytest.raises(ChallengeFormatError, match="the cache folder is a file") as info:
            io.read_network(data, 1024, 6, cache=where)
        assert str(info.value).startswith(str(cache))
    assert _same(io.read_network(data, 1024, 6, cache=False), net)


def test_cache_that_cannot_be_written_only_warns(six_layers, monkeypatch):
    data, cache, net = six_layers

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(io_cache.np, "savez", refuse)
    with pytest.warns(io.CacheWarning) as record:
        assert _same(io.read_network(data, 1024, 6, cache=cache), net)
    assert not list(cache.glob("*"))
    message = str(record[0].message)
    assert "cannot write the cache file (Permission denied); the network is not cached" in message
    assert record[0].filename == __file__  # attributed to the caller of read_network


def test_bad_cache_warning_points_at_the_caller(six_layers):
    data, cache, _ = six_layers
    io.read_network(data, 1024, 6, cache=cache)
    assert re.fullmatch(r"n1024-l6-[0-9a-f]{32}\.npz", _only_cache_file(cache).name)
    _damage(_only_cache_file(cache), "garbage")
    with pytest.warns(io.CacheWarning) as record:
        io.read_network(data, 1024, 6, cache=cache)
    assert record[0].filename == __file__


def test_a_file_edited_while_parsed_is_not_cached(six_layers, monkeypatch):
    data, cache, net = six_layers
    real = io.read_weights

    def read_then_edit(*args, **kwargs):
        layers = real(*args, **kwargs)
        with open(io.layer_path(data, 1024, 3), "a") as handle:  # edited meanwhile
            handle.write("1\t1\t0.5\n")
        return layers

    monkeypatch.setattr(io_cache, "read_weights", read_then_edit)
    assert _same(io.read_network(data, 1024, 6, cache=cache), net)
    assert not list(cache.glob("*.npz"))  # its key would no longer match its contents


def test_unreadable_layer_file_with_a_cache(six_layers):
    data, cache, _ = six_layers
    layer = data / "neuron1024" / "n1024-l2.tsv"
    layer.unlink()
    layer.mkdir()  # named for what it is, not as missing
    with pytest.raises(ChallengeFormatError, match=r"n1024-l2\.tsv: is a folder; expected "
                       "the file of layer 2"):
        io.read_network(data, 1024, 6, cache=cache)


def test_undeclared_size_is_bounded(tmp_path):
    path = _write(tmp_path / "m.tsv", "1\t1\t0.5\n3000000000\t1\t0.5\n")
    with pytest.raises(ChallengeFormatError, match="beyond the largest supported index") as info:
        io.read_triples(path)
    assert info.value.line == 2


def test_format_messages_name_the_field_and_value(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("1\t2\t0.5\n1\tx\t0.5\n")
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(bad, (4, 4))
    assert str(info.value) == f"{bad}, line 2: field 2 is 'x', not a number"
    bad.write_text("1\t2\tinf\n")
    with pytest.raises(ChallengeFormatError, match=r"line 1: value '?inf'? is not finite"):
        io.read_triples(bad, (4, 4))
    bad.write_text("1\t2\tinf\n1\tx\t3\n")  # the line-by-line diagnosis names it too
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(bad, (4, 4))
    assert str(info.value).startswith(f"{bad}, line 1: value 'inf' is not finite as float32")
    bad.write_text("1\tinf\t3\n1\tx\t3\n")  # a non-finite index is a field
    with pytest.raises(ChallengeFormatError, match="line 1: field 2 'inf' is not finite"):
        io.read_triples(bad, (4, 4))


def test_not_gzip_message_shows_the_first_twelve_bytes(tmp_path):
    fake = tmp_path / "n.tsv.gz"
    fake.write_bytes(b"hello world! and more")
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(fake, (4, 4))
    assert "not gzip data (it starts with b'hello world!'); expected gzip data" in str(info.value)


def test_categories_one_byte_file_and_bad_id_message(tmp_path):
    one = tmp_path / "one.tsv"
    one.write_text("5")  # a single id, no newline: 1 byte, still an answer
    assert io.read_categories(one).tolist() == [4]
    bad = tmp_path / "bad.tsv"
    bad.write_text("1\n2\n2.5\n")
    with pytest.raises(ChallengeFormatError) as info:
        io.read_categories(bad)
    assert str(info.value) == f"{bad}, line 3: row id 2.5 is not a whole number >= 1"


def test_cache_folder_that_cannot_be_made_only_warns(six_layers, monkeypatch):
    data, cache, net = six_layers
    real_mkdir = io_cache.Path.mkdir

    def refuse(self, *args, **kwargs):
        if self == cache:
            raise PermissionError(13, "Permission denied")
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(io_cache.Path, "mkdir", refuse)
    with pytest.warns(io.CacheWarning) as record:
        assert _same(io.read_network(data, 1024, 6, cache=cache), net)
    assert str(record[0].message) == (f"{cache}: cannot create the cache folder (Permission "
                                      "denied); reading without a cache")
    assert record[0].filename == __file__  # attributed to the caller of read_network
    assert not cache.exists()


def test_unreadable_layer_while_keying_the_cache(six_layers, monkeypatch):
    data, cache, _ = six_layers
    layer = io.layer_path(data, 1024, 4)

    def refuse(path, *args, **kwargs):
        if Path(path) == layer:
            raise PermissionError(13, "Permission denied", str(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(io_cache, "open", refuse, raising=False)  # io's own open() calls
    with pytest.raises(ChallengeFormatError, match=r"n1024-l4\.tsv") as info:
        io.read_network(data, 1024, 6, cache=cache)
    assert "Permission denied" in str(info.value)


def test_a_network_with_empty_rows_is_cached_faithfully(tmp_path, monkeypatch):
    layers = [sp.csr_matrix(np.diag([1.0, 0.0, 2.0, 0.0]).astype(np.float32))] * 2
    io.write_weights(tmp_path, layers)
    first = io.read_network(tmp_path, 4, 2, cache=tmp_path / "cache", bias=-0.1)
    _no_text_parsing(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rows without entries are no damage
        again = io.read_network(tmp_path, 4, 2, cache=tmp_path / "cache", bias=-0.1)
    assert _same(again, first)


def test_categories_of_blank_lines_are_empty(tmp_path):
    path = _write(tmp_path / "c.tsv", "\n\n")
    assert io.read_categories(path).tolist() == []


# --------------------------------------------------------------------------- first offending line


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        # the checks of ids and values run over every line; the earliest line wins, not
        # the first check (rows were checked before columns, columns before values)
        ("1\t1\t0.5\n3\t1.5\t1\n0\t1\t1\n", 2, "column 1.5 is not a whole number"),
        ("1\t1\t0.5\n1\t1\t1e40\n0\t1\t1\n", 2, "1e+40 overflows float32"),
        ("1\t9\t0.5\n0\t1\t1\n", 1, "column 9 is beyond the declared size 4"),
        # a bad id before a line the fast reader cannot parse (the line by line reading
        # used to check only fields and numbers, naming line 3)
        ("1\t1\t0.5\n0\t1\t1\n3\tx\t1\n", 2, "row 0 is below 1"),
        ("1\t1\t0.5\n2\t5\t1\n3\t3\n", 2, "column 5 is beyond the declared size 4"),
        # a blank line before the data: pandas takes the file for empty
        ("\n1\t1\t0.5\n", 1, "0 fields"),
        (" \t\n\n2\tx\t0.5\n", 1, "0 fields"),
    ],
)
@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
@pytest.mark.parametrize("chunk_lines", [1, 2, 4_000_000])
def test_the_first_offending_line_is_named(tmp_path, monkeypatch, text, line, fragment,
                                           suffix, chunk_lines):
    monkeypatch.setattr(io_text, "_CHUNK_LINES", chunk_lines)
    path = _write(tmp_path / f"m{suffix}", text)
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(path, (4, 4))
    assert (info.value.path, info.value.line) == (path, line)
    assert fragment in str(info.value)


@pytest.mark.parametrize(("text", "line"), [("\n5\n", 1), ("\n\n5\n6\n", 1), ("0\nx\n", 1),
                                            ("2\n1.5\n\n", 2)])
def test_categories_name_the_first_offending_line(tmp_path, text, line):
    path = _write(tmp_path / "c.tsv", text)  # "\n5\n" read as no row at all before
    with pytest.raises(ChallengeFormatError) as info:
        io.read_categories(path)
    assert (info.value.path, info.value.line) == (path, line)


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        # pandas rejects these, Python's float() took them: the error named no line
        (b"1\t1\t0.5\n2\t2\t1_0\n", 2, "field 3 is '1_0', not a number"),
        (b"1\t1\t0.5\n2\t2\t0.5\x1c\n", 2, "field 3 is '0.5\\x1c', not a number"),
        (b"1\t1\t0.5\n2\t2\t0.5\xa0\n", 2, "field 3 is '0.5\\xa0', not a number"),
        # pandas skips a byte-order mark: the first line is fine, the second is not
        (b"\xef\xbb\xbf1\t1\t0.5\n2\tx\t1\n", 2, "field 2 is 'x'"),
        (b"1\t1\t0.5\n2\t\xff\t1\n", 2, "field 2 is '\\xff', not a number"),
    ],
)
def test_the_line_by_line_reading_accepts_what_pandas_accepts(tmp_path, content, line,
                                                               fragment):
    path = tmp_path / "m.tsv"
    path.write_bytes(content)
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(path, (4, 4))
    assert info.value.line == line
    assert fragment in str(info.value)


def test_byte_order_mark_and_form_feeds_are_read_as_pandas_reads_them(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_bytes(b"\xef\xbb\xbf1\t1\t0.5\x0c\r\n\x0b2 \t2\t1\r")
    assert io.read_triples(path, (2, 2)).toarray().tolist() == [[0.5, 0], [0, 1]]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('"1"\t1\t0.5\n', "field 1 is '\"1\"', not a number"),  # was read as 1
        ("1\t1\t'0.5'\n", "field 3 is \"'0.5'\", not a number"),
        ("1\t1\tTrue\n2\t2\tFalse\n", "field 3 is 'True', not a number"),  # was 1.0, 0.0
        ("true\t1\t0.5\n", "field 1 is 'true', not a number"),  # was row 1
    ],
)
@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_quotes_and_bools_are_not_numbers(tmp_path, text, fragment, suffix):
    path = _write(tmp_path / f"m{suffix}", text)
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(path, (4, 4))
    assert info.value.line == 1 and fragment in str(info.value)
    categories = _write(tmp_path / f"c{suffix}", "TRUE\n" if "True" in text else '"3"\n')
    with pytest.raises(ChallengeFormatError, match="not a number") as info:
        io.read_categories(categories)  # was [0] and [2]
    assert info.value.line == 1


@pytest.mark.parametrize(("text", "fragment"), [
    ("1\ninf\n", "row id inf is not a whole number >= 1"),  # was 2**63 - 1, with a warning
    ("1\n1e20\n", "row id 100000000000000000000 is beyond the largest supported index"),
    ("1\n2147483648\n", "row id 2147483648 is beyond the largest supported index 2147483647"),
])
def test_categories_ids_are_bounded(tmp_path, text, fragment):
    path = _write(tmp_path / "c.tsv", text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ChallengeFormatError) as info:
            io.read_categories(path)
    assert info.value.line == 2 and fragment in str(info.value)
    assert io.read_categories(_write(tmp_path / "top.tsv", "2147483647\n")).tolist() == [
        2147483646]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        # summed before: to inf here, to 0.75 or to nothing (0.5 - 0.5) in the others
        ("1\t1\t3e38\n2\t2\t1\n1\t1\t3e38\n", 3, "row 1 column 1 again (first on line 1)"),
        ("1\t1\t0.5\n1\t1\t0.25\n", 2, "row 1 column 1 again"),
        ("2\t3\t0.5\n1\t1\t1\n2\t3\t-0.5\n", 3, "row 2 column 3 again (first on line 1)"),
        # a repeat before a bad line is the first offending line, and after one it is not
        ("1\t1\t0.5\n1\t1\t0.5\n0\t1\t1\n", 2, "again"),
        ("1\t1\t0.5\n1\t1\t0.5\n3\tx\t1\n", 2, "again"),
        ("1\t1\t0.5\n0\t1\t1\n1\t1\t0.5\n", 2, "row 0 is below 1"),
    ],
)
@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_a_repeated_entry_is_an_error(tmp_path, text, line, fragment, suffix):
    path = _write(tmp_path / f"m{suffix}", text)
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(path, (4, 4))
    assert info.value.line == line and fragment in str(info.value)


def test_an_empty_gz_file_is_not_an_empty_answer(tmp_path):
    path = tmp_path / "neuron1024-l120-categories.tsv.gz"
    path.write_bytes(b"")  # a download cut at 0 bytes: was read as "no row survives"
    for read in (io.read_categories, io.read_triples):
        with pytest.raises(ChallengeFormatError) as info:
            read(path)
        assert str(info.value) == (f"{path}: not gzip data (the file is empty); expected "
                                   "gzip data, as the name ends in .gz")
    # gzip data of no text is an empty answer, as is an empty plain file
    assert io.read_categories(io.write_categories(path, [])).size == 0
    assert io.read_categories(_write(tmp_path / "c.tsv", "")).size == 0


# ------------------------------------------------------------------ damaged .gz, changed files

# 2000 lines: a 10-byte header, a deflate stream, an 8-byte trailer (CRC-32, size)
_GZ = _gz_bytes("".join(_LINES.splitlines(keepends=True)[:2000]))


@pytest.mark.parametrize("cut", [1, 2, 3, 9, 10, 11, 40, len(_GZ) // 2, len(_GZ) - 9,
                                 len(_GZ) - 8, len(_GZ) - 4, len(_GZ) - 1],
                         ids=lambda cut: f"cut{cut}")
@pytest.mark.parametrize("reader", ["triples", "categories"])
def test_gz_cut_anywhere_is_an_error_naming_the_file(tmp_path, cut, reader):
    """Cut inside the 10-byte header, inside the deflate stream, inside the 8-byte trailer."""
    path = tmp_path / "m.tsv.gz"
    path.write_bytes(_GZ[:cut])
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(path, (20000, 7)) if reader == "triples" else io.read_categories(path)
    assert info.value.path == path and str(info.value).startswith(f"{path}")
    if cut < 2:  # not even the magic bytes
        assert info.value.line is None and "not gzip data" in str(info.value)
    else:  # the line where the text stops: the first not decompressed whole
        whole = zlib.decompressobj(wbits=31).decompress(_GZ[:cut]).count(b"\n")
        assert info.value.line == whole + 1
        assert f"truncated after {whole} complete lines" in str(info.value)


@pytest.mark.parametrize("field", ["data", "length"])
@pytest.mark.parametrize("reader", ["triples", "categories"])
def test_gz_with_a_wrong_trailer_is_an_error_naming_the_file(tmp_path, field, reader):
    data = bytearray(_GZ)
    data[-8 if field == "data" else -4] ^= 0x01  # CRC-32, then size: the text is whole
    path = tmp_path / "m.tsv.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(ChallengeFormatError) as info:
        io.read_triples(path, (20000, 7)) if reader == "triples" else io.read_categories(path)
    assert info.value.path == path and str(info.value).startswith(f"{path}: corrupt gzip")
    assert info.value.line is None  # was 2001, past the last line: the damage is no line's
    assert (f"(Error -3 while decompressing data: incorrect {field} check) after 2000 lines: "
            "they do not match the checksum") in str(info.value)


def _replace(path, layer):
    """Replace ``path`` by a new file (a new inode), as an editor or a download does."""
    io.write_triples(path, layer)


@pytest.mark.parametrize("which", [1, 5], ids=["parsed-already", "not-parsed-yet"])
def test_a_layer_replaced_while_the_network_is_read(six_layers, which):
    """read_network's progress callback runs between two layer files: the replacement of
    one there is a real interleaving, with no monkeypatching of the reader."""
    data, cache, net = six_layers
    path = io.layer_path(data, 1024, which)
    new = net.layers[which - 1] * np.float32(2)  # same pattern: same size of text
    done = []

    def replace_after_layer_two(k, total):
        done.append(k)
        if k == 2:
            _replace(path, new)

    read = io.read_network(data, 1024, 6, cache=cache, progress=replace_after_layer_two)
    assert done == [1, 2, 3, 4, 5, 6]
    expected = net.layers[which - 1] if which == 1 else new  # each file as it was read
    assert (read.layers[which - 1] != expected).nnz == 0
    # the layers read belong to no single state of the files: nothing may be cached for
    # them, neither under the key of the files before nor under the key of those after
    assert not list(cache.glob("*.npz"))
    again = io.read_network(data, 1024, 6, cache=cache)
    assert (again.layers[which - 1] != new).nnz == 0
    assert len(list(cache.glob("*.npz"))) == 1  # now cached, and used:
    assert (io.read_network(data, 1024, 6, cache=cache).layers[which - 1] != new).nnz == 0


def test_a_cached_network_whose_gz_layer_is_replaced_is_read_again(tmp_path):
    """A stale cache is never used: a .gz layer replaced by one of the same size and mtime
    is read again (the key hashes the bytes; an in-place edit of a plain file is above)."""
    data, cache = tmp_path / "data" / "neuron2", tmp_path / "cache"
    data.mkdir(parents=True)

    def stored(text):  # deflate's stored blocks: the same length of text, the same size
        return gzip.compress(text.encode(), compresslevel=0, mtime=0)

    (data / "n2-l1.tsv.gz").write_bytes(stored("1\t1\t1\n2\t2\t1\n"))
    path = data / "n2-l2.tsv.gz"
    path.write_bytes(stored("1\t1\t0.5\n2\t2\t0.25\n"))
    assert io.read_network(data, 2, 2, cache=cache, bias=0.0).layers[1][0, 0] == 0.5
    before = path.stat()
    path.with_suffix(".new").write_bytes(stored("1\t1\t1.5\n2\t2\t0.25\n"))
    os.replace(path.with_suffix(".new"), path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert io.read_network(data, 2, 2, cache=cache, bias=0.0).layers[1][0, 0] == 1.5
    assert len(list(cache.glob("*.npz"))) == 2
