"""The challenge's text format: triple files and row-id files, parsed and written.

On disk everything is 1-based triples ``row<TAB>col<TAB>value`` (one per nonzero), plain
or gzipped; in memory indices are 0-based and values float32. Files are parsed by pandas'
C reader; only when that fails is the file re-read line by line to say exactly which line
is wrong and why. A reader returns a whole matrix or raises: nothing half-read escapes.
Anything wrong with a file is a :class:`ChallengeFormatError` naming it (and the line).
"""

from __future__ import annotations

import array
import csv
import gzip
import io as _io
import os
import re
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ...core.network import as_csr32
from ...files import atomic_path

PathLike = str | os.PathLike


class ChallengeFormatError(ValueError):
    """A challenge file is not what the format promises (or cannot be read).

    Also raised for a cache folder that is a file: like a bad file, a user's setting to
    fix, which the CLI reports as ``error: ...`` with exit 2.

    Attributes
    ----------
    path
        The file.
    line
        1-based line number of the first offending line (``None`` if it is about the file).
    """

    def __init__(self, path: PathLike, message: str, line: int | None = None):
        self.path = Path(path)
        self.line = line
        self.message = message
        where = f"{self.path}, line {line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {message}")

    def __reduce__(self):
        # raised in a Dask task, it is pickled to the client: rebuild it from its own
        # arguments (the default, ``cls(*self.args)``, passes the whole text as the path)
        return type(self), (self.path, self.message, self.line)


# --------------------------------------------------------------------------- parsing


def _open_text(path: Path):
    # latin-1: one character per byte, so no byte is lost to decoding and none but ASCII
    # digits can pass for a number (messages show fields with !a: a byte beyond ASCII as
    # its \x escape); newline="": lines end at \n, \r\n or \r, as in pandas
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="latin-1", newline="")
    return path.open("rt", encoding="latin-1", newline="")


# What the line by line reading accepts must be what pandas' C reader accepts, or a line
# pandas rejects passes here and the error names no line. pandas splits fields on spaces
# and tabs only; its number parser skips C whitespace (only \v and \f can be inside a
# field) around a decimal number and takes inf/infinity with a sign in any case; Python's
# float() also takes '1_0', '1\x1c' and non-ASCII digits and spaces, which pandas does not.
_SEP = re.compile(r"[ \t]+")
_NUMBER_TEXT = (r"[\v\f]*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[\v\f]*"
                r"|[+-]?(?:inf|infinity|nan)")  # nan: what pandas reads as NaN
_NUMBER = re.compile(_NUMBER_TEXT, re.IGNORECASE)
# a whole line of n numbers, its end included: one match for a good line (the common case)
_GOOD_LINE = {n: re.compile(r"[ \t]*" + r"[ \t]+".join([f"({_NUMBER_TEXT})"] * n)
                            + r"[ \t]*[\r\n]*", re.IGNORECASE) for n in (1, 3)}
_BOM = "\xef\xbb\xbf"  # UTF-8 byte-order mark, as latin-1: pandas skips it at the start


_GZIP_MAGIC = b"\x1f\x8b"
#: What gzip (and pandas through it) raises for a damaged or foreign .gz file.
GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def unreadable(path: Path, error: OSError) -> ChallengeFormatError:
    """The error for a file that cannot be opened or read (``error`` says why)."""
    reason = error.strerror or str(error)
    return ChallengeFormatError(path, f"cannot be read ({reason}); expected a readable file")


def _gzip_error(path: Path, error: BaseException) -> ChallengeFormatError:
    """Say what is wrong with the gzip data of ``path``, and at which line.

    Re-reads the raw bytes with zlib (the gzip module hides where it stopped), counting
    the lines decompressed before the damage. Only called after a read failed.
    """
    try:
        with path.open("rb") as raw:
            start = raw.read(12)
            if not start.startswith(_GZIP_MAGIC):
                return ChallengeFormatError(
                    path, f"not gzip data (it starts with {start!r}); expected gzip data, "
                    "as the name ends in .gz")
            raw.seek(0)
            lines = 0
            decoder = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer
            data = b""
            while True:
                if not data:
                    data = raw.read(1 << 16)
                    if not data:
                        break
                if decoder.eof:  # a member ended: another may follow, or zero padding
                    data = data.lstrip(b"\0")
                    if len(data) < 2:
                        more = raw.read(1 << 16)
                        if more:
                            data += more
                            continue
                        if not data:
                            break
                    if not data.startswith(_GZIP_MAGIC):
                        return ChallengeFormatError(
                            path, f"trailing bytes that are not gzip data after the last "
                            f"line ({lines}); expected nothing after the gzip stream")
                    decoder = zlib.decompressobj(wbits=31)
                snapshot = decoder.copy()
                try:
                    lines += decoder.decompress(data).count(b"\n")
                    data = decoder.unused_data if decoder.eof else b""
                except zlib.error:
                    # the failed call's output is lost: replay it a byte at a time
                    decoder = snapshot
                    for i in range(len(data)):
                        try:
                            lines += decoder.decompress(data[i : i + 1]).count(b"\n")
                        except zlib.error as bad:
                            if "check" in str(bad):  # zlib: incorrect data/length check
                                # the trailer's CRC-32 or size: the text decompressed whole
                                # but differs from what was compressed, no telling where,
                                # so no line (line {lines} + 1 would be past the last)
                                return ChallengeFormatError(
                                    path, f"corrupt gzip data ({bad}) after {lines} lines: "
                                    "they do not match the checksum in the trailer; "
                                    "expected a valid gzip file")
                            return ChallengeFormatError(
                                path, f"corrupt gzip data ({bad}) after {lines} good lines; "
                                "expected a valid gzip file", lines + 1)
                        if decoder.eof:
                            data = data[i + 1 :]
                            break
                    else:
                        data = b""
    except OSError as bad:
        return unreadable(path, bad)
    if not decoder.eof:
        return ChallengeFormatError(
            path, f"the gzip data is truncated after {lines} complete lines; expected a "
            "whole gzip file", lines + 1)
    return ChallengeFormatError(path, f"unreadable gzip data ({error}); expected a valid "
                                "gzip file")


def _diagnose(path: Path, n_columns: int) -> tuple[np.ndarray, ChallengeFormatError | None]:
    """Re-read ``path`` line by line, up to the first line that breaks the syntax.

    Returns the lines before that one, parsed (``(lines, n_columns)`` float64), and its
    error (``None`` if no line breaks the syntax): the caller checks the ids and values of
    those lines, as one of them may be the first offending line (a row 0 before a line of
    text). Only called after the fast reader failed, so its speed does not matter.
    """
    if path.suffix != ".gz":
        with path.open("rb") as raw:
            if raw.read(2) == _GZIP_MAGIC:
                raise ChallengeFormatError(
                    path, "is gzip data but its name does not end in .gz; expected plain text")
    try:
        return _diagnose_lines(path, n_columns)
    except GZIP_ERRORS as error:
        raise _gzip_error(path, error) from None


def _diagnose_lines(path: Path, n_columns: int) -> tuple[np.ndarray, ChallengeFormatError | None]:
    parsed = array.array("d")
    blank = None  # a blank line before any data: an error only if data follows

    def stop(message: str | None = None, line: int | None = None):
        table = np.array(parsed, dtype=np.float64).reshape(-1, n_columns)
        return table, None if message is None else ChallengeFormatError(path, message, line)

    with _open_text(path) as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            good = _GOOD_LINE[n_columns].fullmatch(raw)
            if good and blank is None:
                values = [float(text) for text in good.groups()]
                if all(map(_fits_float32, values)):
                    parsed.extend(values)
                    continue
            line = raw.rstrip("\r\n").strip(" \t")  # not str.strip(): \f is no blank
            fields = _SEP.split(line) if line else []
            if not fields and not parsed:
                blank = blank or number
                continue
            if blank is not None or not fields:
                return stop(f"0 fields; expected {_expected(n_columns)}", blank or number)
            if len(fields) != n_columns:
                return stop(f"{len(fields)} fields; expected {_expected(n_columns)}", number)
            values = []
            for i, text in enumerate(fields):
                if not _NUMBER.fullmatch(text):
                    return stop(f"field {i + 1} is {text!a}, not a number", number)
                value = float(text)
                if not _fits_float32(value):
                    what = "value" if (n_columns, i) == (3, 2) else f"field {i + 1}"
                    return stop(f"{what} {text!a} is not finite as float32; expected a finite "
                                f"number of magnitude at most {_FLOAT32_MAX:.7g}", number)
                values.append(value)
            parsed.extend(values)
    return stop()


_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INDEX_MAX = int(np.iinfo(np.int32).max)  # 0-based int32 indices hold 1-based ids up to this

# An undeclared size is the largest id read, so one line can ask for any size: "1e9 1 1"
# made a 200-line file a 1e9-row matrix (4 GB of row pointers, and more on the way). The
# rule: without a declared size, an id may be at most the larger of _FREE_IDS (the
# challenge's 60000 rows and any file up to a million rows pass whatever it holds, for at
# most 8 MB of row pointers) and _IDS_PER_LINE per line of the file. A row with no
# nonzero has no line, so ids may run ahead of the lines, but at 4 per line three rows in
# four may be empty and the row pointers (8 bytes a row at most) still cost less than the
# line's own parsing (24 bytes of float64 staging and more for the COO arrays): the matrix
# stays proportional to the file. A larger size is declared (``shape``, ``n_rows=``).
_FREE_IDS = 1 << 20
_IDS_PER_LINE = 4


def justified_ids(lines: int) -> int:
    """The largest id an undeclared size accepts in a file of ``lines`` lines (see above)."""
    return max(_FREE_IDS, _IDS_PER_LINE * lines)


# below this a matrix is not checked against the memory available: such sizes are not what
# the check guards against, and the estimate of what is free is rough (address space
# reserved by threads, freed memory malloc reuses)
_CHECKED_BYTES = 64 << 20


def _available_memory() -> int | None:
    """Bytes this process can still allocate: the memory available, and the headroom under
    ``RLIMIT_AS`` when one is set; ``None`` if it cannot be told."""
    try:
        import psutil

        free = int(psutil.virtual_memory().available)
        try:
            import resource
        except ImportError:  # not on POSIX: no address-space limit to read
            return free
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            free = min(free, soft - int(psutil.Process().memory_info().vms))
        return free
    except (ImportError, OSError, ValueError):
        return None


def _matrix_bytes(shape: tuple[int, int], nnz: int) -> int:
    """Peak bytes of building a ``shape`` CSR of ``nnz`` entries from the parsed lines.

    The row pointers, and per entry: the int64 0-based ids, the COO row and column and the
    CSR indices (int32, or int64 past 2**31), the float32 values twice.
    """
    index = 4 if max(*shape, nnz) < 2**31 else 8
    return index * (shape[0] + 1) + nnz * (16 + 3 * index + 8)


# the smallest magnitude float32 rounds to inf: halfway from its largest value to 2**128
_FLOAT32_OVERFLOW = float.fromhex("0x1.ffffffp+127")


def _fits_float32(value: float) -> bool:
    """Whether ``value`` stays finite once rounded to float32 (no NaN, no overflow)."""
    return abs(value) < _FLOAT32_OVERFLOW  # a comparison: numpy per value was most of the time


def _expected(n_columns: int) -> str:
    if n_columns == 1:
        return "one 1-based row id per line"
    return "3 tab-separated fields 'row col value' (1-based indices)"


_BOOLS = ["True", "TRUE", "true", "False", "FALSE", "false"]  # pandas' words for bools
# lines per chunk of pandas' reader: bounds the float64 staging of the largest files
_CHUNK_LINES = 4_000_000


def _read_columns(path: Path, n_columns: int) -> tuple[np.ndarray, ChallengeFormatError | None]:
    """All numbers of a 1- or 3-column file as float64, ``(lines, n_columns)``.

    Returns them with ``None``, or, if a line breaks the syntax (fields, numbers), the
    lines before it with its error, for the caller to check their ids and values first. A
    file of blank lines only (or none) gives no lines and no error. Read in chunks of
    ``_CHUNK_LINES`` lines so the float64 staging stays bounded for the largest files.
    """
    if path.is_dir():
        raise ChallengeFormatError(path, "is a folder; expected a file with "
                                   + _expected(n_columns))
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".gz" and path.stat().st_size == 0:
        # gzip reads an empty file as no text, so this was an empty answer for categories;
        # but gzip data has at least a header, so it is a copy cut short
        raise ChallengeFormatError(path, "not gzip data (the file is empty); expected gzip "
                                   "data, as the name ends in .gz")
    parts = []
    try:
        reader = pd.read_csv(
            path,
            sep=r"\s+",
            header=None,
            dtype=np.float64,
            engine="c",
            compression="gzip" if path.suffix == ".gz" else None,
            chunksize=_CHUNK_LINES,
            # a blank line is an error, and keeping it keeps row index == line number - 1
            skip_blank_lines=False,
            # the format has no quoting: '"1"' is no number (pandas would unquote it)
            quoting=csv.QUOTE_NONE,
            # a column of nothing but True/False would be read as bools and cast to 1/0:
            # as missing values they are NaN, which _diagnose reports as "not a number"
            na_values=_BOOLS,
        )
        with reader:
            for chunk in reader:
                table = chunk.to_numpy()
                # a missing field and a 'nan' both read as NaN: _diagnose tells them apart
                if table.shape[1] != n_columns or np.isnan(table).any():
                    raise ValueError("ragged or missing fields")
                parts.append(table)
    except pd.errors.EmptyDataError:
        # no line, only blank lines, or blank lines before the first line of data (which
        # pandas also takes for an empty file): only the line by line reading tells
        return _diagnosed(path, n_columns, "no data")
    except GZIP_ERRORS as error:  # truncated, not gzip, trailing garbage, corrupt
        raise _gzip_error(path, error) from None
    except OSError as error:  # PermissionError and the like, opening or reading
        raise unreadable(path, error) from None
    except (ValueError, pd.errors.ParserError) as error:
        return _diagnosed(path, n_columns, str(error))
    if not parts:
        return np.empty((0, n_columns)), None
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)), None


def _diagnosed(path: Path, n_columns: int, reason: str):
    """:func:`_diagnose` after pandas failed with ``reason``, as :func:`_read_columns` returns."""
    try:
        table, error = _diagnose(path, n_columns)
    except OSError as bad:
        raise unreadable(path, bad) from None
    if error is None and len(table):  # pandas failed where the line by line reading did not
        error = ChallengeFormatError(path, f"unreadable ({reason}); expected "
                                     + _expected(n_columns))
    return table, error


def _first_problem(checks: Iterable[tuple[np.ndarray, Callable[[int], str]]]):
    """``(line, message)`` for the first line any check flags, or ``None``.

    ``checks`` gives ``(mask, message)``: ``mask`` flags lines (0-based), ``message(i)``
    says what is wrong with line ``i + 1``. The earliest line over all checks, not the
    first check that flags some line, so the error names the first offending line; a line
    flagged by several checks gets the first one's message.
    """
    first = None
    for mask, message in checks:
        if mask.any():
            i = int(mask.argmax())
            if first is None or i < first[0]:
                first = (i, message)
    return None if first is None else (first[0] + 1, first[1](first[0]))


def _triple_checks(table: np.ndarray, values32: np.ndarray, shape, width_note: str,
                   justified: int | None):
    """The ``(mask, message)`` checks of :func:`_first_problem` for triples' ids and values.

    ``justified`` bounds the ids of an undeclared size (:func:`justified_ids`); ``None``
    when the lines read are not the whole file (a syntax error stopped the reading): the
    bound is the whole file's, and that file is an error anyway.
    """
    for field in (0, 1):
        what, column = ("row", "column")[field], table[:, field]
        whole = np.isfinite(column) & (column == np.floor(column))
        yield ~whole, lambda i, w=what, c=column: f"{w} {float(c[i])!r} is not a whole number"
        yield whole & (column < 1), lambda i, w=what, c=column: (
            f"{w} {int(c[i])} is below 1 (indices are 1-based)")
        limit = None if shape is None else shape[field]
        if limit is not None:
            note = width_note if field == 1 else ""
            yield whole & (column > limit), lambda i, w=what, c=column, n=limit, t=note: (
                f"{w} {int(c[i])} is beyond the declared size {n}{t}")
        else:
            # an undeclared size is the largest index: bound it before it sizes the matrix
            yield whole & (column > _INDEX_MAX), lambda i, w=what, c=column: (
                f"{w} {int(c[i])} is beyond the largest supported index {_INDEX_MAX}")
            if justified is not None:
                yield whole & (column > justified), lambda i, w=what, c=column, b=justified: (
                    f"{w} {int(c[i])} is beyond the {b} {w}s the file's {len(c)} lines "
                    f"justify without a declared size (the larger of {_FREE_IDS} and "
                    f"{_IDS_PER_LINE} per line); expected {w} ids up to {b}, or the size "
                    "declared")

    def value_message(i: int) -> str:
        value = float(table[i, 2])
        why = "is not finite" if not np.isfinite(value) else "overflows float32"
        return (f"value {value!r} {why}; expected a finite number of magnitude at most "
                f"{_FLOAT32_MAX:.7g}")

    yield ~np.isfinite(values32), value_message


def read_triples(
    path: PathLike,
    shape: tuple[int | None, int | None] | None = None,
    *,
    width_note: str = "",
) -> sp.csr_matrix:
    """Read a challenge triple file into a 0-based float32 CSR matrix.

    Parameters
    ----------
    path
        ``row col value`` per line, 1-based, tab (or space) separated, plain or ``.gz``.
    shape
        Declared ``(rows, columns)``; indices beyond it are an error. ``None`` (for either
        or both): the largest index read, which must be at most :func:`justified_ids` of
        the file's line count (the larger of 2**20 and 4 per line): one line cannot make
        a matrix out of proportion to the file.
    width_note
        Appended to the message for a column beyond the declared width.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ChallengeFormatError
        Empty file, wrong number of fields, a non-numeric field, an index below 1 or
        beyond ``shape`` (or, undeclared, beyond :func:`justified_ids`), a value that is
        NaN or infinite once cast to float32 (``inf``, ``nan``, ``1e40``), a (row,
        column) on more than one line; the message names the file and the first
        offending line. A matrix that would not fit in the memory available (checked
        before it is built, from 64 MiB up). Also a file that cannot be read
        (permissions, a folder) and a damaged ``.gz`` (truncated, not gzip, trailing
        bytes, corrupt), with the line where it is known.
    """
    path = Path(path)
    table, error = _read_columns(path, 3)
    # checked after the cast: 1e40 is finite as float64 but inf as float32
    with np.errstate(over="ignore"):
        values32 = table[:, 2].astype(np.float32)
    justified = justified_ids(len(table)) if error is None else None
    problem = _first_problem(_triple_checks(table, values32, shape, width_note, justified))
    if problem is not None or error is not None:
        # a (row, column) repeated before the bad line is an earlier offending line
        problem = _first_repeat(table[: len(table) if problem is None else problem[0] - 1]) \
            or problem
    if problem is not None:  # before the syntax error, if any: it is on an earlier line
        raise ChallengeFormatError(path, problem[1], problem[0])
    if error is not None:
        raise error
    if not len(table):
        raise ChallengeFormatError(path, "the file is empty; expected " + _expected(3))
    rows, cols = table[:, 0], table[:, 1]
    declared = (None, None) if shape is None else shape
    full_shape = (
        int(rows.max()) if declared[0] is None else int(declared[0]),
        int(cols.max()) if declared[1] is None else int(declared[1]),
    )
    _check_fits(path, table, full_shape, declared)
    matrix = sp.csr_matrix(
        (values32, (rows.astype(np.int64) - 1, cols.astype(np.int64) - 1)),
        shape=full_shape,
    )
    # the conversion from COO sums repeated entries (zeros not yet dropped): fewer entries
    # than lines means a (row, column) on several lines
    if matrix.nnz != len(table):
        line, message = _first_repeat(table)
        raise ChallengeFormatError(path, message, line)
    return as_csr32(matrix)


def _check_fits(path: Path, table: np.ndarray, shape: tuple[int, int],
                declared: tuple[int | None, int | None]) -> None:
    """Raise if the ``shape`` matrix of ``table``'s entries would not fit in memory.

    Checked before it is built, so a size that cannot be had is an error naming its cause
    (the line with the largest row id, or the declared row count) rather than a
    ``MemoryError`` half way, or the machine swapping.
    """
    need = _matrix_bytes(shape, len(table))
    if need < _CHECKED_BYTES:
        return
    free = _available_memory()
    if free is None or need <= free:
        return
    size = f"a {shape[0]} x {shape[1]} matrix of {len(table)} entries needs {need / 1e9:.2f} GB"
    have = f"more than the {max(free, 0) / 1e9:.2f} GB of memory available"
    if declared[0] is not None:
        raise ChallengeFormatError(path, f"the declared {shape[0]} rows make {size}, {have}; "
                                   "expected a row count whose matrix fits in memory")
    line = int(table[:, 0].argmax()) + 1  # the first line with the largest row id
    raise ChallengeFormatError(
        path, f"row {shape[0]} (the largest row id) makes {size}, {have}; expected a file "
        "whose matrix fits in memory", line)


def _first_repeat(table: np.ndarray) -> tuple[int, str] | None:
    """``(line, message)`` for the first line whose (row, column) an earlier line has.

    A repeat is an error rather than a sum: the sum would depend on the order scipy adds
    the values in (float32), could overflow to inf, and the format has one line per entry.
    """
    if not len(table):
        return None
    keys = table[:, :2]
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    earliest = first[inverse.reshape(-1)]  # the first line of each line's (row, column)
    repeats = earliest != np.arange(len(keys))
    if not repeats.any():
        return None
    i = int(repeats.argmax())
    return i + 1, (f"row {int(keys[i, 0])} column {int(keys[i, 1])} again (first on line "
                   f"{int(earliest[i]) + 1}); expected each (row, column) on one line only")


def write_triples(path: PathLike, matrix: sp.spmatrix | sp.sparray) -> Path:
    """Write ``matrix`` as 1-based ``row<TAB>col<TAB>value`` lines (gzipped if ``.gz``).

    Rows are written in order, columns increasing within a row. The write is atomic: the
    file appears whole or not at all.
    """
    coo = as_csr32(matrix).tocoo()
    frame = pd.DataFrame({"row": coo.row + 1, "col": coo.col + 1, "value": coo.data})
    return _atomic_write(Path(path), lambda handle: frame.to_csv(
        handle, sep="\t", header=False, index=False, float_format="%.9g"))


def _atomic_write(path: Path, write: Callable[[_io.TextIOBase], object]) -> Path:
    with atomic_path(path) as tmp:
        if path.suffix == ".gz":
            # no name and mtime=0 in the header: identical content gives identical bytes
            with open(tmp, "wb") as out, \
                    gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as raw, \
                    _io.TextIOWrapper(raw, encoding="ascii", newline="") as handle:
                write(handle)
        else:
            with open(tmp, "w", encoding="ascii", newline="") as handle:
                write(handle)
    return path


# --------------------------------------------------------------------------- categories


def read_categories(path: PathLike) -> np.ndarray:
    """Read a truth/categories file: sorted 0-based row ids (int64).

    An empty file (or one of blank lines only) is a valid answer (no row survives) and
    gives an empty array.
    """
    path = Path(path)
    table, error = _read_columns(path, 1)
    ids = table[:, 0]
    # inf passed 'ids != floor(ids)', and ids beyond int64 were cast to garbage
    whole = np.isfinite(ids) & (ids == np.floor(ids))
    problem = _first_problem([
        (~whole | (ids < 1), lambda i: f"row id {ids[i]:g} is not a whole number >= 1"),
        (whole & (ids > _INDEX_MAX), lambda i: f"row id {int(ids[i])} is beyond the largest "
                                               f"supported index {_INDEX_MAX}"),
    ])
    if problem is not None:
        raise ChallengeFormatError(path, problem[1], problem[0])
    if error is not None:
        raise error
    return np.unique(ids.astype(np.int64) - 1)


def write_categories(path: PathLike, categories: Iterable[int]) -> Path:
    """Write 0-based row ids as a 1-based categories file, one per line, increasing."""
    ids = np.unique(np.asarray(list(categories) if not isinstance(categories, np.ndarray)
                               else categories, dtype=np.int64))
    return _atomic_write(Path(path), lambda handle: handle.write(
        "".join(f"{i + 1}\n" for i in ids.tolist())))
