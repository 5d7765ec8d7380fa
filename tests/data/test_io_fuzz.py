"""Fuzzing the challenge readers: a whole, exact answer or a ChallengeFormatError, nothing else.

Every example writes one file (plain or ``.gz``) and reads it with ``read_triples``,
``read_layer``, ``read_inputs`` or ``read_categories``. The expected outcome comes from
``expect_triples`` / ``expect_categories`` below: a few lines of pure Python over the
file's bytes (no numpy, pandas or ``sdnn_dask``), written from the format as stated here.
The reader must return exactly that matrix (shape, float32 values, canonical CSR with no
stored zeros) or array, or raise :class:`ChallengeFormatError` whose ``.path`` is the file
and whose ``.line`` is the first offending line (``None`` for a file-level problem).

The format, as the readers accept it:

- bytes; a UTF-8 byte-order mark at the very start is ignored (pandas skips it);
- lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r``; the last line may lack one;
- fields are separated by runs of spaces and tabs; spaces and tabs at either end of a line
  are ignored; a weights/inputs line has 3 fields, a categories line 1;
- a field is a decimal number: ``[+-]`` digits with an optional ``.`` and fraction (or
  ``.`` and fraction), an optional exponent ``[eE][+-]digits``, and may carry ``\\v`` or
  ``\\f`` at either end (pandas' number parser skips them). Anything else is bad: ``nan``
  and ``inf`` (never a valid id or value anyway), ``True``, ``1_0``, ``"1"``, ``0x10``,
  non-ASCII bytes, NUL, ...;
- an id (row, column, category) is a whole number (as a float64), at least 1 and at most
  the declared size, or 2**31 - 1 when none is declared (then the size is the largest id);
  ``2.0`` and ``2e0`` are the id 2; when none is declared and every line of a triples
  file is three numbers, an id is also at most the larger of 2**20 and 4 per line (so a
  line cannot make a matrix out of proportion to the file);
- a value must stay finite once rounded to float32 (``1e39`` does not); a value that
  rounds to zero (``0``, ``-0``, ``1e-50``) is accepted and stored as no entry;
- a (row, column) pair may appear on one line only: a repeat is an error at the repeating
  line (summing repeats would depend on the order scipy adds them in, and can overflow);
  categories may repeat and come in any order (the answer is the sorted set);
- a blank line (nothing but spaces and tabs) is an error at its line, unless every line is
  blank: then a weights/inputs file is "empty" (an error with no line) and a categories
  file is the empty answer;
- a plain-named file that starts with gzip's magic bytes is an error about the file.

Generated: random sparse matrices written by ``write_triples`` (and categories by
``write_categories``), hand-formatted files using every freedom above, mutations of those
(a field dropped, added or replaced by text, ids out of range, values that overflow
float32, NaN/inf, blank and garbage lines, random and non-UTF-8 bytes, NUL, duplicated
entries, CRLF/CR endings, a missing final newline, a cut at any byte), some read in tiny
chunks to cross the reader's chunk boundaries, and random bytes; a layer of
``read_network`` read from text and then from its cache; and damaged ``.gz`` files (a
flipped bit or a cut), which must give the original matrix or an error naming the file.
The files the readers got wrong before are kept at the end (``TRIPLES_FOUND``, ...).

Bounded in time: a 2 s ``deadline`` per example and ``max_examples`` per test
(``SETTINGS``: 500, fewer for the gzip and network tests). Measured with
``python -m pytest -p no:cacheprovider tests/data/test_io_fuzz.py`` on the development machine
(2 cores, shared with a running benchmark): 13.0 to 14.2 s in five runs, 14 to 15.4 s
wall (the load average was 1 to 2.8).
``SDNN_FUZZ_EXAMPLES=6000`` runs a longer campaign (2 min 12 s here; found nothing more).
"""

from __future__ import annotations

import gzip
import math
import os
import re
import struct
import zlib
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from sdnn_dask.data import io
from sdnn_dask.data.io import ChallengeFormatError
from sdnn_dask.data.io import text as io_text

# SDNN_FUZZ_EXAMPLES=6000 for a longer campaign (not in CI)
SETTINGS = settings(max_examples=int(os.environ.get("SDNN_FUZZ_EXAMPLES", "500")),
                    deadline=2000, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --------------------------------------------------------------------------- the format

INDEX_MAX = 2**31 - 1
BOM = b"\xef\xbb\xbf"
NUMBER = re.compile(rb"[\v\f]*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[\v\f]*")


class Empty(Exception):
    """Every line is blank (or there is none)."""


class Bad(Exception):
    """The first offending line (``None``: the file)."""

    def __init__(self, line: int | None):
        super().__init__(line)
        self.line = line


def data_lines(data: bytes) -> list[list[bytes]]:
    """The fields of each line (none for a blank one); raises Empty if all are blank."""
    if data.startswith(BOM):
        data = data[len(BOM):]
    lines = re.split(rb"\r\n|\r|\n", data)
    if lines[-1] == b"":  # what follows the last line end is no line
        lines.pop()
    stripped = [line.strip(b" \t") for line in lines]
    if not any(stripped):
        raise Empty
    return [re.split(rb"[ \t]+", line) if line else [] for line in stripped]


def number(field: bytes) -> float | None:
    return float(field) if NUMBER.fullmatch(field) else None


def whole_id(value: float | None, limit: int) -> bool:
    return (value is not None and math.isfinite(value) and value == math.floor(value)
            and 1 <= value <= limit)


def as_float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]  # rounds to nearest, ties even


def not_plain(data: bytes, plain: bool) -> None:
    if plain and data.startswith(b"\x1f\x8b"):
        raise Bad(None)  # gzip data under a plain name: an error about the file


def expect_triples(data: bytes, shape=(None, None), plain: bool = True):
    """``(shape, {(row, col): float32 value})``, 0-based, or raises Empty or Bad."""
    not_plain(data, plain)
    entries, seen, top = {}, set(), [0, 0]
    lines = data_lines(data)
    # the bound on an undeclared size is the whole file's: it holds once every line parses
    parses = all(len(f) == 3 and all(number(x) is not None for x in f) for f in lines)
    undeclared = min(INDEX_MAX, max(2**20, 4 * len(lines))) if parses else INDEX_MAX
    limits = [undeclared if s is None else s for s in shape]
    for line, fields in enumerate(lines, start=1):
        if len(fields) != 3:
            raise Bad(line)
        row, col, value = (number(f) for f in fields)
        if not (whole_id(row, limits[0]) and whole_id(col, limits[1])) or value is None:
            raise Bad(line)
        value = as_float32(value)
        key = (int(row) - 1, int(col) - 1)
        if not math.isfinite(value) or key in seen:
            raise Bad(line)
        seen.add(key)
        top = [max(top[0], key[0] + 1), max(top[1], key[1] + 1)]
        if value != 0:
            entries[key] = value
    return tuple(t if s is None else s for s, t in zip(shape, top, strict=True)), entries


def expect_categories(data: bytes, plain: bool = True) -> list[int]:
    """Sorted 0-based ids, or raises Bad."""
    not_plain(data, plain)
    try:
        lines = data_lines(data)
    except Empty:
        return []
    ids = set()
    for line, fields in enumerate(lines, start=1):
        value = number(fields[0]) if len(fields) == 1 else None
        if not whole_id(value, INDEX_MAX):
            raise Bad(line)
        ids.add(int(value) - 1)
    return sorted(ids)


# --------------------------------------------------------------------------- checking


def outcome(what: str) -> None:
    """Count ``what`` in ``--hypothesis-show-statistics`` (the mix of verdicts)."""
    if currently_in_test_context():
        event(what)


def write(folder: Path, data: bytes, compress: bool, name: str = "m") -> Path:
    path = folder / (name + (".tsv.gz" if compress else ".tsv"))
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def as_entries(matrix) -> dict:
    assert isinstance(matrix, sp.csr_matrix) and matrix.dtype == np.float32
    assert matrix.has_canonical_format and not (matrix.data == 0).any()
    coo = matrix.tocoo()
    return {(int(r), int(c)): float(v)
            for r, c, v in zip(coo.row, coo.col, coo.data, strict=True)}


def read_matrix(reader: str, path: Path, shape):
    if reader == "layer":
        return io.read_layer(path, shape[0])
    if reader == "inputs":
        return io.read_inputs(path, shape[1], shape[0])
    return io.read_triples(path, shape)


def check_triples(path: Path, data: bytes, reader: str, shape) -> None:
    """The reader's answer for ``path`` (holding ``data``, maybe gzipped) is the format's."""
    try:
        expected = expect_triples(data, shape, plain=path.suffix != ".gz")
    except (Empty, Bad) as verdict:
        outcome("empty" if isinstance(verdict, Empty) else
              "error at a line" if verdict.line else "error about the file")
        with pytest.raises(ChallengeFormatError) as info:
            read_matrix(reader, path, shape)
        assert info.value.path == path
        assert info.value.line == (verdict.line if isinstance(verdict, Bad) else None), \
            str(info.value)
        if isinstance(verdict, Empty):
            assert "empty" in str(info.value)
    else:
        outcome("valid")
        matrix = read_matrix(reader, path, shape)
        assert (matrix.shape, as_entries(matrix)) == expected


def check_categories(path: Path, data: bytes) -> None:
    try:
        expected = expect_categories(data, plain=path.suffix != ".gz")
    except Bad as verdict:
        outcome("categories: error at a line" if verdict.line else "categories: file error")
        with pytest.raises(ChallengeFormatError) as info:
            io.read_categories(path)
        assert (info.value.path, info.value.line) == (path, verdict.line), str(info.value)
    else:
        outcome("categories: valid" if expected else "categories: empty")
        ids = io.read_categories(path)
        assert ids.dtype == np.int64 and ids.tolist() == expected


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# --------------------------------------------------------------------------- generating

float32s = st.floats(width=32, allow_nan=False, allow_infinity=False)
SEPARATORS = [b"\t", b" ", b"  ", b"\t\t", b" \t ", b"\t "]
EDGES = [b"", b"", b"", b" ", b"\t", b" \t"]
LINE_ENDS = [b"\n", b"\r\n", b"\r"]


@st.composite
def id_texts(draw, value: int) -> bytes:
    """Ways to write the id ``value`` that mean ``value``."""
    return draw(st.sampled_from([
        b"%d" % value, b"%d" % value, b"%d.0" % value, b"+%d" % value, b"00%d" % value,
        b"%de0" % value, b"%d." % value, b"%de-1" % (value * 10), b"\x0c%d" % value,
        b"%d\x0b" % value, b"%.3E" % value if value < 1000 else b"%d" % value,
    ]))


@st.composite
def value_texts(draw) -> bytes:
    """A decimal number (most finite as float32, a few not: 1e39, 3.5e38)."""
    kind = draw(st.sampled_from(["repr", "g9", "e", "digits", "digits", "special"]))
    if kind == "special":
        return draw(st.sampled_from([b"0", b"-0", b"0.0", b"1e-50", b"-1e-46", b"1e-45",
                                     b"3.4028235e38", b"-3.4028234e38", b"1.0e+00", b".5",
                                     b"5.", b"+.25e1", b"1e39", b"3.5e38", b"1e400"]))
    if kind == "digits":
        sign = draw(st.sampled_from([b"", b"-", b"+"]))
        whole = draw(st.from_regex(rb"\A[0-9]{0,6}\Z"))
        frac = draw(st.from_regex(rb"\A[0-9]{0,6}\Z"))
        if not whole and not frac:
            whole = b"1"
        exp = draw(st.sampled_from([b"", b"", b"e5", b"E-3", b"e+00", b"e-40"]))
        return sign + whole + (b"." + frac if frac or draw(st.booleans()) else b"") + exp
    value = float(draw(float32s))
    return {"repr": repr(value).encode(), "g9": b"%.9g" % value, "e": b"%.6e" % value}[kind]


@st.composite
def hand_written(draw, n_columns: int = 3):
    """A valid file's lines (bytes, no line ends) in any layout the format allows."""
    rows = draw(st.integers(1, 9))
    cols = draw(st.integers(1, 9))
    if n_columns == 1:
        ids = draw(st.lists(st.integers(1, 40), min_size=1, max_size=12))
        lines = [draw(id_texts(i)) for i in ids]
    else:
        cells = draw(st.lists(st.tuples(st.integers(1, rows), st.integers(1, cols)),
                              min_size=1, max_size=14, unique=True))
        lines = []
        for r, c in cells:
            fields = [draw(id_texts(r)), draw(id_texts(c)), draw(value_texts())]
            seps = [draw(st.sampled_from(SEPARATORS)) for _ in range(2)]
            lines.append(fields[0] + seps[0] + fields[1] + seps[1] + fields[2])
    lines = [draw(st.sampled_from(EDGES)) + line + draw(st.sampled_from(EDGES))
             for line in lines]
    return (rows, cols), lines


JUNK = [b"x", b"1_0", b'"1"', b"'1'", b"True", b"False", b"true", b"nan", b"NaN", b"-nan",
        b"inf", b"-inf", b"Infinity", b"1e39", b"-1e39", b"3.4028236e38", b"0", b"-1", b"-0",
        b"0.5", b"2.5", b"1e20", b"4294967296", b"2147483648", b"2147483647",
        b"99999999999999999999", b"1,5", b"0x10", b"1e", b".", b"-", b"+", b"\xff", b"\xe9",
        b"\xef\xbb\xbf1", b"1\x1c", b"\x0c1", b"1\x00", b"\x00", b"NA", b"None", b"null",
        b"1.#IND", b"#", b"1d5", b"\x1f\x8b\x08", b"\xc3\xa9", b"\xef\xbc\x91", b"1e-400"]


@st.composite
def mutated(draw, lines: list[bytes], limits) -> list[bytes]:
    """``lines`` with one to three line-level mutations."""
    lines = list(lines)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["drop", "add", "replace", "replace", "range", "insert",
                                     "duplicate", "bytes"]))
        k = draw(st.integers(0, max(len(lines) - 1, 0)))
        fields = re.split(rb"[ \t]+", lines[k].strip(b" \t")) if lines else []
        if kind == "drop" and fields:
            del fields[draw(st.integers(0, len(fields) - 1))]
        elif kind == "add":
            fields.insert(draw(st.integers(0, len(fields))), draw(st.sampled_from(JUNK[:30])))
        elif kind == "replace" and fields:
            junk = st.sampled_from(JUNK) | st.binary(min_size=1, max_size=3) \
                | st.from_regex(rb"\A[-+0-9.eE]{1,6}\Z")
            fields[draw(st.integers(0, len(fields) - 1))] = draw(junk)
        elif kind == "range" and fields:
            j = draw(st.integers(0, min(len(fields), 2) - 1)) if len(fields) > 1 else 0
            limit = limits[min(j, 1)] or INDEX_MAX
            # 2**20 and one more: either side of the bound on an undeclared size
            fields[j] = b"%d" % draw(st.sampled_from([0, -1, -limit, limit + 1, 2 * limit,
                                                      2**20, 2**20 + 1, 2**31, 2**40,
                                                      10**20]))
        elif kind == "insert":
            line = draw(st.sampled_from([b"", b" ", b"\t", b" \t ", b"\x00", b"#", b"\x1a",
                                         b"\x0c", b"\xff\xfe", b"\x1f\x8b\x08\x00"])
                        | st.binary(max_size=8))
            lines.insert(draw(st.integers(0, len(lines))), line)
            continue
        elif kind == "duplicate" and lines:
            copy = lines[k]
            if len(fields) == 3 and draw(st.booleans()):  # same cell, another value
                copy = fields[0] + b"\t" + fields[1] + b"\t" + draw(value_texts())
            lines.insert(draw(st.integers(0, len(lines))), copy)
            continue
        elif kind == "bytes" and lines:
            at = draw(st.integers(0, len(lines[k])))
            lines[k] = lines[k][:at] + draw(st.binary(min_size=1, max_size=4)) + lines[k][at:]
            continue
        if lines:
            lines[k] = b"\t".join(fields)
    return lines


@st.composite
def assembled(draw, lines: list[bytes]) -> bytes:
    """Join ``lines`` with line ends; maybe a BOM, no final newline, a cut at any byte."""
    if draw(st.booleans()):
        ends = [draw(st.sampled_from(LINE_ENDS))] * len(lines)
    else:
        ends = [draw(st.sampled_from(LINE_ENDS)) for _ in lines]
    data = b"".join(line + end for line, end in zip(lines, ends, strict=True))
    if lines and draw(st.integers(0, 3)) == 0:
        data = data[: -len(ends[-1])]  # no final line end
    if draw(st.integers(0, 9)) == 0:
        data = BOM + data
    if draw(st.integers(0, 9)) == 0:
        data = data[: draw(st.integers(0, len(data)))]
    return data


READERS = st.sampled_from(["triples", "layer", "inputs"])


def declared(reader: str, size, draw) -> tuple[int | None, int | None]:
    rows, cols = size
    if reader == "layer":
        return (max(rows, cols),) * 2
    if reader == "inputs":
        return (draw(st.sampled_from([None, rows])), cols)
    return (draw(st.sampled_from([None, rows])), draw(st.sampled_from([None, cols])))


# --------------------------------------------------------------------------- the tests


@st.composite
def written_matrices(draw):
    rows, cols = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    cells = draw(st.lists(st.tuples(st.integers(0, rows - 1), st.integers(0, cols - 1)),
                          min_size=1, max_size=30, unique=True))
    values = draw(st.lists(float32s.map(lambda v: v or 1.0), min_size=len(cells),
                           max_size=len(cells)))
    r, c = zip(*cells, strict=True)
    return sp.csr_matrix((np.array(values, dtype=np.float32), (r, c)), shape=(rows, cols))


@SETTINGS
@given(matrix=written_matrices(), compress=st.booleans(), data=st.data())
def test_written_files_read_back_exactly(folder, matrix, compress, data):
    """What ``write_triples`` writes reads back as the same matrix, as the format says."""
    path = io.write_triples(folder / ("w.tsv.gz" if compress else "w.tsv"), matrix)
    text = gzip.decompress(path.read_bytes()) if compress else path.read_bytes()
    check_triples(path, text, "triples", matrix.shape)
    assert as_entries(io.read_triples(path, matrix.shape)) == as_entries(io.as_csr32(matrix))
    # and mutated: the reader agrees with the format on every damaged copy
    lines = text.decode("ascii").splitlines()
    bad = data.draw(assembled(data.draw(mutated([s.encode() for s in lines], matrix.shape))))
    check_triples(write(folder, bad, compress), bad, "triples", matrix.shape)


@SETTINGS
@given(doc=hand_written(), reader=READERS, compress=st.booleans(), damage=st.booleans(),
       small_chunks=st.booleans(), data=st.data())
def test_hand_written_and_mutated_triples(folder, doc, reader, compress, damage,
                                          small_chunks, data):
    size, lines = doc
    shape = declared(reader, size, data.draw)
    if damage:
        lines = data.draw(mutated(lines, shape))
    content = data.draw(assembled(lines))
    path = write(folder, content, compress)
    with mock.patch.object(io_text, "_CHUNK_LINES", 2 if small_chunks else io_text._CHUNK_LINES):
        check_triples(path, content, reader, shape)


@SETTINGS
@given(content=st.binary(max_size=64), reader=READERS, compress=st.booleans(),
       size=st.tuples(st.integers(1, 9), st.integers(1, 9)), data=st.data())
def test_random_bytes(folder, content, reader, compress, size, data):
    path = write(folder, content, compress)
    check_triples(path, content, reader, declared(reader, size, data.draw))
    check_categories(path, content)


@SETTINGS
@given(doc=hand_written(n_columns=1), damage=st.booleans(), compress=st.booleans(),
       small_chunks=st.booleans(), data=st.data())
def test_categories(folder, doc, damage, compress, small_chunks, data):
    _, lines = doc
    if damage:
        lines = data.draw(mutated(lines, (None, None)))
    content = data.draw(assembled(lines))
    path = write(folder, content, compress, name="c")
    with mock.patch.object(io_text, "_CHUNK_LINES", 2 if small_chunks else io_text._CHUNK_LINES):
        check_categories(path, content)


@SETTINGS
@given(ids=st.lists(st.integers(0, 10**6), max_size=20), compress=st.booleans())
def test_written_categories_read_back(folder, ids, compress):
    path = io.write_categories(folder / ("c.tsv.gz" if compress else "c.tsv"), ids)
    text = gzip.decompress(path.read_bytes()) if compress else path.read_bytes()
    assert expect_categories(text) == sorted(set(ids))
    check_categories(path, text)


@settings(SETTINGS, max_examples=150)
@given(matrix=written_matrices(), where=st.floats(0, 1, exclude_max=True),
       how=st.sampled_from(["cut", "flip"]), bit=st.integers(0, 7))
def test_damaged_gzip(folder, matrix, where, how, bit):
    """A cut or a flipped bit anywhere in a .gz: the original matrix or an error naming it."""
    path = io.write_triples(folder / "d.tsv.gz", matrix)
    whole = path.read_bytes()
    at = int(where * len(whole))
    if how == "cut":
        damaged = whole[:at]
    else:
        damaged = whole[:at] + bytes([whole[at] ^ (1 << bit)]) + whole[at + 1 :]
    path.write_bytes(damaged)
    try:
        read = io.read_triples(path, matrix.shape)
    except ChallengeFormatError as error:
        assert error.path == path
        if how == "cut" and at >= 2:  # the first line not decompressed whole
            lines = zlib.decompressobj(wbits=31).decompress(damaged).count(b"\n")
            assert error.line == lines + 1, str(error)
        elif how == "cut":  # not even gzip's two magic bytes
            assert error.line is None and "not gzip data" in str(error)
    else:
        # a bit the text does not depend on: in the header FTEXT and the reserved flags
        # (Python's gzip ignores them), mtime, XFL, OS; the padding after the last block
        assert how == "flip"
        outcome("flip read as the original" + (" (header)" if at < 10 else ""))
        assert as_entries(read) == as_entries(io.as_csr32(matrix))


@settings(SETTINGS, max_examples=100)
@given(doc=hand_written(), damage=st.booleans(), compress=st.booleans(), data=st.data())
def test_read_network_with_its_cache(folder, doc, damage, compress, data):
    """Layer 2 of a network is any file: read_network (text, then its cache) gives exactly
    the layers the format says, or the error names that file and its first bad line."""
    (rows, cols), lines = doc
    n = max(rows, cols)
    if damage:
        lines = data.draw(mutated(lines, (n, n)))
    content = data.draw(assembled(lines))
    net = folder / "net" / f"neuron{n}"
    for old in net.glob("*"):
        old.unlink()
    io.write_triples(net / f"n{n}-l1.tsv", sp.identity(n, format="csr"))
    layer = write(net, content, compress, name=f"n{n}-l2")
    try:
        shape, entries = expect_triples(content, (n, n))
    except (Empty, Bad) as verdict:
        with pytest.raises(ChallengeFormatError) as info:
            io.read_network(net, n, 2, bias=0.0, ymax=32, cache=folder / "cache")
        assert info.value.path == layer
        assert info.value.line == getattr(verdict, "line", None), str(info.value)
        return
    for _ in ("parsed", "cached"):
        read = io.read_network(net, n, 2, bias=0.0, ymax=32, cache=folder / "cache")
        assert as_entries(read.layers[0]) == {(i, i): 1.0 for i in range(n)}
        assert (read.layers[1].shape, as_entries(read.layers[1])) == (shape, entries)
        assert list((folder / "cache").glob(f"n{n}-l2-*.npz"))  # the second read used it


# --------------------------------------------------------------------------- regressions

# Files the readers got wrong before this test (each fixed in io.py, see the git log):
TRIPLES_FOUND = [
    b"1\t1\t0.5\n3\t1.5\t1\n0\t1\t1\n",  # named line 3 (rows were checked before columns)
    b"1\t1\t0.5\n0\t1\t1\n3\tx\t1\n",  # named line 3 (the re-reading checked no ids)
    b"\n1\t1\t0.5\n",  # 'the file is empty', no line
    b"1\t1\t0.5\n2\t2\t1_0\n",  # no line: float() takes '1_0', pandas does not
    b"1\t1\t0.5\n2\t2\t0.5\x1c\n",  # no line: float() strips \x1c, pandas does not
    b"\xef\xbb\xbf1\t1\t0.5\n2\tx\t1\n",  # named line 1 (the BOM pandas skips)
    b'"1"\t1\t0.5\n',  # read as row 1: pandas unquoted it
    b"1\t1\tTrue\n2\t2\tFalse\n",  # read as 1.0 and no entry: a bool column
    b"1\t1\t3e38\n1\t1\t3e38\n",  # read as inf: repeats were summed
]
CATEGORIES_FOUND = [
    b"\n5\n",  # read as no row at all
    b"1\ninf\n",  # read as row 2**63 - 2
    b"1\n1e20\n",  # likewise
    b'"3"\n',  # read as row 2
    b"TRUE\n",  # read as row 0
    b"0\nx\n",  # named line 2
]


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("content", TRIPLES_FOUND)
def test_found_triples(folder, content, compress):
    for reader in ("triples", "layer", "inputs"):
        check_triples(write(folder, content, compress), content, reader, (4, 4))


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("content", CATEGORIES_FOUND)
def test_found_categories(folder, content, compress):
    check_categories(write(folder, content, compress, name="c"), content)
