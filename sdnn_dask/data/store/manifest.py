"""The network store's format: its file names, its manifest, and their checks.

A *network store* is a folder::

    STORE/manifest.json        format and version, N, L, edges, bias, ymax, name, source,
                               and per layer its nonzeros, its encoding and its files
                               (name, bytes, SHA-256)
    STORE/bias.npy             float32 (N,): only when the bias differs between neurons
    STORE/l1.indptr.npy        int64 (N + 1,): row pointers of W_1 (CSR); none when every
                               row has the same count (encoding "uniform", its row_nnz)
    STORE/l1.indices.npy       uint16 (N <= 65536) or int32 (nnz,): columns, strictly
                               increasing in each row
    STORE/l1.data.npy          float32 (nnz,): weights, finite and nonzero; none when every
                               weight is the same (encoding "constant", its value)
    ...                        l2.* .. lL.* (layers are 1-based, as in the challenge files)

That is version 2, which this release writes (:mod:`.encoding` chooses each layer's
encoding from its data). It also reads version 1, whose layers have no ``encoding`` and
all three files, int64, int32 and float32. Every array is a plain little-endian ``.npy``
file (``np.save(allow_pickle=False)``). :func:`read_manifest` checks a manifest's fields
(each layer's encoding against its N and nonzeros, and that its files are the ones the
encoding keeps) and :func:`check_file` a file against its entry (present, its size, its
``.npy`` header's dtype and shape); anything wrong is a
:class:`~sdnn_dask.data.io.ChallengeFormatError` naming the file or the manifest.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ...version import __version__
from ..io import ChallengeFormatError
from .encoding import VERSION_1, LayerEncoding, parse_encoding

PathLike = str | os.PathLike

#: The ``format`` a manifest names, the ``version`` the writer writes, and the versions
#: :func:`read_manifest` reads.
FORMAT = "sdnn-network-store"
VERSION = 2
READS = (1, 2)
MANIFEST = "manifest.json"
BIAS_FILE = "bias.npy"

_BLOCK = 1 << 20


def layer_file(layer: int, part: str) -> str:
    """Name of one array file of a layer: ``l{layer}.{part}.npy`` (``layer`` 1-based)."""
    return f"l{layer}.{part}.npy"


def expected_array(what: str, dtype: np.dtype, length: int) -> str:
    """What a file of ``length`` values of ``dtype`` should hold, as error messages say it."""
    return f"{what}: {length} {dtype.name} values, shape ({length},)"


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex (read in blocks of 1 MiB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _npy_header(path: Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """``(shape, fortran_order, dtype, data offset)`` from a ``.npy`` file's header."""
    fmt = np.lib.format
    with open(path, "rb") as handle:
        version = fmt.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(handle)
        else:
            raise ValueError(f".npy version {version[0]}.{version[1]}, not 1.0 or 2.0")
        return shape, fortran, dtype, handle.tell()


def check_file(path: Path, file: dict[str, Any], what: str, dtype: np.dtype, length: int
               ) -> None:
    """A file of the store as the manifest says: there, its size, its header."""
    expected = expected_array(what, dtype, length)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ChallengeFormatError(path, f"missing; expected {expected}") from None
    except OSError as error:
        raise ChallengeFormatError(path, f"cannot be read ({error.strerror or error})") from None
    if not path.is_file():
        raise ChallengeFormatError(path, f"not a file; expected {expected}")
    if size != file["bytes"]:
        raise ChallengeFormatError(path, f"{size} bytes; the manifest says {file['bytes']} "
                                   "(truncated, or replaced since the store was written)")
    try:
        shape, _, found, offset = _npy_header(path)
    except Exception as error:  # anything a damaged header raises
        raise ChallengeFormatError(path, f"not a readable .npy file ({type(error).__name__}: "
                                   f"{error}); expected {expected}") from None
    if found != dtype or shape != (length,):  # 1-D: C and Fortran order agree
        raise ChallengeFormatError(path, f"holds a {found} array of shape {shape}; expected "
                                   f"{expected}")
    if offset + dtype.itemsize * length != size:
        raise ChallengeFormatError(path, f"{size} bytes for a {offset}-byte header and "
                                   f"{length} values of {dtype.itemsize} bytes; expected "
                                   f"{offset + dtype.itemsize * length}")


def _bad_manifest(path: Path, message: str) -> ChallengeFormatError:
    versions = " or ".join(map(str, READS))
    return ChallengeFormatError(path, f"{message}; expected the manifest of a "
                                f"{FORMAT} version {versions}")


def _unreadable_version(path: Path, manifest: dict[str, Any]) -> ChallengeFormatError:
    version = manifest.get("version")
    writer = manifest.get("written_by")
    by = f" (written by {writer})" if isinstance(writer, str) else ""
    return ChallengeFormatError(
        path, f"version {version!r} of {FORMAT}{by}; this sdnn_dask {__version__} reads "
        f"versions {' and '.join(map(str, READS))} only: rewrite it from the challenge files "
        f"with this release (sdnn-dask convert CHALLENGE_DIR {path.parent} --overwrite), or "
        f"open it with a release that reads version {version!r}")


def layer_encoding(manifest: dict[str, Any], layer: int) -> LayerEncoding:
    """How layer ``layer`` (1-based) of a manifest is stored (version 1: three files).

    Raises
    ------
    ValueError
        The layer's ``encoding`` is malformed (see
        :func:`~sdnn_dask.data.store.encoding.parse_encoding`); :func:`read_manifest`
        reports it naming the manifest.
    """
    entry = manifest["layers"][layer - 1]
    if manifest["version"] == 1:
        return VERSION_1
    return parse_encoding(entry.get("encoding"), manifest["n_neurons"], entry["nnz"])


def _integer(value: Any, what: str, path: Path, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise _bad_manifest(path, f"{what} is {value!r}, not an integer >= {low}")
    return value


def _number(value: Any, what: str, path: Path) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or \
            not math.isfinite(value):
        raise _bad_manifest(path, f"{what} is {value!r}, not a finite number")
    return float(value)


def _file_entry(value: Any, name: str, what: str, path: Path) -> dict[str, Any]:
    if not isinstance(value, dict) or value.get("name") != name:
        raise _bad_manifest(path, f"{what} is {value!r}; expected its file {name!r}")
    _integer(value.get("bytes"), f"{what}'s bytes", path)
    sha = value.get("sha256")
    if not (isinstance(sha, str) and len(sha) == 64
            and all(c in "0123456789abcdef" for c in sha)):
        raise _bad_manifest(path, f"{what}'s sha256 is {sha!r}, not 64 hex digits")
    return value


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest, its fields checked (not yet the files)."""
    path = folder / MANIFEST
    if not folder.is_dir():
        raise ChallengeFormatError(folder, f"not a folder; expected a network store (a folder "
                                   f"with {MANIFEST})")
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise ChallengeFormatError(path, "missing; expected the manifest of a network store "
                                   "(a store being written, or whose write was interrupted, "
                                   "has none)") from None
    except OSError as error:
        raise ChallengeFormatError(path, f"cannot be read ({error.strerror or error})") from None
    try:
        manifest = json.loads(text)
    except ValueError as error:
        raise _bad_manifest(path, f"not JSON ({error})") from None
    if not isinstance(manifest, dict):
        raise _bad_manifest(path, f"a JSON {type(manifest).__name__}, not an object")
    if manifest.get("format") != FORMAT:
        raise _bad_manifest(path, f"format {manifest.get('format')!r}")
    if type(manifest.get("version")) is not int or manifest["version"] not in READS:
        raise _unreadable_version(path, manifest)
    n = _integer(manifest.get("n_neurons"), "n_neurons", path, 1)
    n_layers = _integer(manifest.get("n_layers"), "n_layers", path, 1)
    layers = manifest.get("layers")
    if not isinstance(layers, list) or len(layers) != n_layers:
        count = len(layers) if isinstance(layers, list) else repr(layers)
        raise _bad_manifest(path, f"{count} layer entries for n_layers {n_layers}")
    for k, entry in enumerate(layers, start=1):
        if not isinstance(entry, dict) or entry.get("layer") != k:
            raise _bad_manifest(path, f"layer entry {k} is {entry!r}")
        _integer(entry.get("nnz"), f"layer {k}'s nnz", path)
        if entry["nnz"] > n * n:
            raise _bad_manifest(path, f"layer {k}'s nnz {entry['nnz']} exceeds N^2 = {n * n}")
        try:
            encoding = layer_encoding(manifest, k)
        except ValueError as error:
            raise _bad_manifest(path, f"layer {k}'s encoding: {error}") from None
        parts = [part for part, _, _ in encoding.files(n, entry["nnz"])]
        files = entry.get("files")
        if not isinstance(files, dict) or set(files) != set(parts):
            raise _bad_manifest(path, f"layer {k}'s files are {files!r}; its encoding keeps "
                                f"{', '.join(parts)} in files")
        for part in parts:
            _file_entry(files[part], layer_file(k, part), f"layer {k}'s {part}", path)
    edges = sum(entry["nnz"] for entry in layers)
    if manifest.get("edges") != edges:
        raise _bad_manifest(path, f"edges {manifest.get('edges')!r}, but the layers' nnz "
                            f"add up to {edges}")
    if isinstance(manifest.get("bias"), dict):
        _file_entry(manifest["bias"], BIAS_FILE, "bias", path)
    else:
        _number(manifest.get("bias"), "bias", path)
    if _number(manifest.get("ymax"), "ymax", path) <= 0:
        raise _bad_manifest(path, f"ymax is {manifest['ymax']!r}, not positive")
    if not isinstance(manifest.get("name"), str):
        raise _bad_manifest(path, f"name is {manifest.get('name')!r}, not a string")
    return manifest
