"""A network on disk in a binary, memory-mappable form, written and read layer by layer.

A *network store* is a folder::

    STORE/manifest.json        format and version, N, L, edges, bias, ymax, name, source,
                               and per layer its nonzeros and files (name, bytes, SHA-256)
    STORE/bias.npy             float32 (N,): only when the bias differs between neurons
    STORE/l1.indptr.npy        int64 (N + 1,): row pointers of W_1 (CSR)
    STORE/l1.indices.npy       int32 (nnz,):   columns, strictly increasing in each row
    STORE/l1.data.npy          float32 (nnz,): weights, finite and nonzero
    ...                        l2.* .. lL.* (layers are 1-based, as in the challenge files)

Every array is a plain little-endian ``.npy`` file (``np.save(allow_pickle=False)``), read
with ``np.load(mmap_mode="r")``: a layer is a CSR matrix over read-only memory maps, so
only the pages a computation touches are read, and the operating system may drop them
again. :func:`write_store` writes one layer at a time into a hidden folder beside the
destination and renames it into place once the manifest (written last) is complete, so a
folder named like the store is always a whole store; :func:`convert_challenge` does the
same from the challenge's text files, one Dask task per file.

:func:`open_store` checks what is cheap at once (the manifest, and for every file: present,
its size, its ``.npy`` header's dtype and shape) and the contents of a layer when it is
first read (see :meth:`NetworkStore.layer`); :meth:`NetworkStore.verify` also compares
every file with its SHA-256. Anything wrong is a
:class:`~sdnn_dask.data.io.ChallengeFormatError` naming the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import queue
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sized
from pathlib import Path
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from .. import config
from ..core.network import Network, as_csr32
from ..version import __version__
from . import io
from .io import ChallengeFormatError

__all__ = ["FORMAT", "MANIFEST", "VERSION", "NetworkStore", "StoreWriter", "check_destination",
           "convert_challenge", "convert_layer", "open_store", "write_layer_files",
           "write_network", "write_store"]

PathLike = str | os.PathLike
Progress = Callable[[int, int | None], None]

#: The ``format`` a manifest names, and the ``version`` this module writes and reads.
FORMAT = "sdnn-network-store"
VERSION = 1
MANIFEST = "manifest.json"
BIAS_FILE = "bias.npy"

#: A layer's arrays, in file order, with their exact on-disk dtypes.
_PARTS = (("indptr", np.dtype("<i8")), ("indices", np.dtype("<i4")), ("data", np.dtype("<f4")))
_BLOCK = 1 << 20


def layer_file(layer: int, part: str) -> str:
    """Name of one array file of a layer: ``l{layer}.{part}.npy`` (``layer`` 1-based)."""
    return f"l{layer}.{part}.npy"


def _expected(what: str, dtype: np.dtype, length: int) -> str:
    return f"{what}: {length} {dtype.name} values, shape ({length},)"


# --------------------------------------------------------------------------- writing


class _HashingFile:
    """A write-only file object that counts and hashes the bytes on their way to ``handle``."""

    def __init__(self, handle):
        self.handle = handle
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.size += view.nbytes
        return self.handle.write(view)


def _save_array(path: Path, array: np.ndarray) -> dict[str, Any]:
    """Write ``array`` as a new ``.npy`` file, flushed to disk; its manifest entry."""
    # "x": never overwrite (a layer file exists once in a store being written)
    with open(path, "xb") as handle:
        out = _HashingFile(handle)
        np.save(out, array, allow_pickle=False)
        handle.flush()
        os.fsync(handle.fileno())
    return {"name": path.name, "bytes": out.size, "sha256": out.sha.hexdigest()}


def write_layer_files(folder: PathLike, layer: int, matrix: sp.spmatrix | sp.sparray,
                      n_neurons: int, *, source: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
    """Write one layer's three ``.npy`` files into ``folder``; return its manifest entry.

    Parameters
    ----------
    folder
        The folder being written (a :class:`StoreWriter`'s ``tmp``); it must exist.
    layer
        1-based layer number: the files are ``l{layer}.indptr.npy`` and so on.
    matrix
        The weights, ``n_neurons x n_neurons``; made canonical float32 CSR first
        (:func:`~sdnn_dask.core.network.as_csr32`).
    source
        What the layer was converted from, recorded in the manifest as given.

    Returns
    -------
    dict
        ``{"layer", "nnz", "files": {part: {"name", "bytes", "sha256"}}[, "source"]}``.
    """
    csr = as_csr32(matrix)
    if csr.shape != (n_neurons, n_neurons):
        raise ValueError(f"layer {layer} has shape {csr.shape}; expected {n_neurons} x "
                         f"{n_neurons}")
    arrays = {"indptr": csr.indptr, "indices": csr.indices, "data": csr.data}
    files = {part: _save_array(Path(folder) / layer_file(layer, part),
                               np.ascontiguousarray(arrays[part], dtype=dtype))
             for part, dtype in _PARTS}
    entry: dict[str, Any] = {"layer": layer, "nnz": int(csr.nnz), "files": files}
    if source is not None:
        entry["source"] = source
    return entry


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def convert_layer(path: PathLike, n_neurons: int, layer: int, folder: PathLike
                  ) -> tuple[int, dict[str, Any]]:
    """Parse one challenge layer file and write it into ``folder`` (one Dask task).

    Returns ``(layer, entry)`` as :func:`write_layer_files`, the entry's ``source`` the
    file's path, size and SHA-256 (hashed before it is parsed).

    Raises
    ------
    ChallengeFormatError
        The file is malformed (see :func:`sdnn_dask.data.io.read_triples`).
    """
    path = Path(path)
    try:
        source = {"path": str(path), "bytes": path.stat().st_size, "sha256": _file_sha256(path)}
    except OSError as error:
        raise ChallengeFormatError(path, f"cannot be read ({error.strerror or error}); "
                                   "expected a readable layer file") from None
    matrix = io.read_layer(path, n_neurons)
    return layer, write_layer_files(folder, layer, matrix, n_neurons, source=source)


def check_destination(folder: PathLike, overwrite: bool = False) -> None:
    """Make sure a store may be written at ``folder``.

    Free: ``folder`` does not exist or is an empty folder. With ``overwrite``, also a
    folder holding a ``manifest.json`` (a store, replaced only once the new one is whole).

    Raises
    ------
    FileExistsError
        ``folder`` is a file, a folder that is not a store, or a store and not
        ``overwrite``.
    """
    folder = Path(folder)
    if not folder.exists():
        return
    if not folder.is_dir():
        raise FileExistsError(f"{folder}: exists and is not a folder; expected a new folder "
                              "for the network store")
    if not any(folder.iterdir()):
        return
    if not (folder / MANIFEST).is_file():
        raise FileExistsError(f"{folder}: exists and is not a network store (no {MANIFEST}); "
                              "not replaced: expected a new or empty folder")
    if not overwrite:
        raise FileExistsError(f"{folder}: a network store is there already; not replaced "
                              "without overwrite")


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every system opens folders
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _default_folder_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o777 & ~mask


class StoreWriter:
    """A store being written: files go into ``tmp``, beside ``folder``; ``commit`` renames.

    ``tmp`` is a hidden folder ``.NAME.<random>.partial`` next to the destination, so the
    final rename stays on one filesystem. Leaving the ``with`` block on an error (or an
    interrupt) removes it; a process killed outright leaves it behind, without a manifest
    (it is written last), which :func:`open_store` refuses.

    Parameters
    ----------
    folder
        Where the store goes (see :func:`check_destination`, checked here and again on
        commit).
    overwrite
        Replace a store already at ``folder`` (after the new one is complete).
    """

    def __init__(self, folder: PathLike, *, overwrite: bool = False):
        self.folder = Path(folder).absolute()
        self.overwrite = overwrite
        check_destination(self.folder, overwrite)
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(dir=self.folder.parent, prefix=f".{self.folder.name}.",
                                         suffix=".partial"))
        self.entries: dict[int, dict[str, Any]] = {}
        self.committed = False

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if not self.committed:
            self.abort()

    def write_layer(self, layer: int, matrix: sp.spmatrix | sp.sparray, n_neurons: int,
                    source: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write a layer's files (:func:`write_layer_files`) and record its entry."""
        entry = write_layer_files(self.tmp, layer, matrix, n_neurons, source=source)
        self.add(layer, entry)
        return entry

    def add(self, layer: int, entry: dict[str, Any]) -> None:
        """Record the entry of a layer whose files were written into ``tmp`` elsewhere."""
        if layer in self.entries:
            raise ValueError(f"layer {layer} was written twice")
        self.entries[layer] = entry

    def abort(self) -> None:
        """Remove ``tmp`` and everything in it.

        Renamed first, then removed: a Dask task still running opens its files by their
        path in ``tmp``, which then no longer exists, so nothing can appear in the folder
        while it is being removed.
        """
        if not self.tmp.exists():
            return
        trash = self.tmp.with_name(self.tmp.name[: -len(".partial")] + ".removed")
        try:
            os.rename(self.tmp, trash)
        except OSError:
            trash = self.tmp
        shutil.rmtree(trash, ignore_errors=True)

    def commit(self, *, n_neurons: int, bias: float | np.ndarray | None = None,
               ymax: float | None = None, name: str = "network",
               source: dict[str, Any] | None = None) -> Path:
        """Write the manifest and move the store into place; returns ``folder``.

        Every layer ``1..L`` must have an entry, and each of its files must be in ``tmp``
        with the size the entry says (files a worker wrote are checked here).
        """
        n_layers = len(self.entries)
        if n_layers == 0:
            raise ValueError("a network store needs at least one layer")
        if sorted(self.entries) != list(range(1, n_layers + 1)):
            raise ValueError(f"layers {sorted(self.entries)} written; expected 1..{n_layers}")
        layers = [self.entries[k] for k in range(1, n_layers + 1)]
        for entry in layers:
            for file in entry["files"].values():
                path = self.tmp / file["name"]
                size = path.stat().st_size if path.is_file() else None
                if size != file["bytes"]:
                    found = "missing" if size is None else f"{size} bytes"
                    raise ChallengeFormatError(
                        path, f"{found}; expected {file['bytes']} bytes, as written (on a "
                        "cluster the workers write the layer files: the folder must be on a "
                        "filesystem they share with this process, at the same path)")
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "name": str(name),
            "n_neurons": int(n_neurons),
            "n_layers": n_layers,
            "edges": int(sum(entry["nnz"] for entry in layers)),
            "bias": self._bias_entry(bias, n_neurons),
            "ymax": float(config.get("ymax") if ymax is None else ymax),
            "source": source,
            "written_by": f"sdnn_dask {__version__}",
            "layers": layers,
        }
        if not (math.isfinite(manifest["ymax"]) and manifest["ymax"] > 0):
            raise ValueError(f"ymax must be positive and finite, got {manifest['ymax']}")
        path = self.tmp / MANIFEST
        with open(path, "x", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=1)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(self.tmp, _default_folder_mode())  # mkdtemp makes it 0700
        _fsync_folder(self.tmp)
        self._move_into_place()
        self.committed = True
        _fsync_folder(self.folder.parent)
        return self.folder

    def _bias_entry(self, bias: float | np.ndarray | None, n_neurons: int):
        values = np.asarray(config.default_bias(n_neurons) if bias is None else bias,
                            dtype=np.float32)
        if values.ndim == 0 or (values.shape == (n_neurons,) and (values == values[0]).all()):
            # the shortest decimal that reads back as the same float32 (-0.3, not
            # -0.30000001192092896)
            value = float(str(values.reshape(-1)[0]))
            if not math.isfinite(value):
                raise ValueError(f"bias must be finite, got {value}")
            return value
        if values.shape != (n_neurons,):
            raise ValueError(f"bias must be a scalar or a vector of length {n_neurons}, got "
                             f"{values.shape}")
        if not np.isfinite(values).all():
            raise ValueError("bias must be finite")
        return _save_array(self.tmp / BIAS_FILE, np.ascontiguousarray(values, dtype="<f4"))

    def _move_into_place(self) -> None:
        check_destination(self.folder, self.overwrite)
        if not self.folder.exists() or not any(self.folder.iterdir()):
            os.replace(self.tmp, self.folder)  # onto nothing, or onto an empty folder
            return
        old = self.tmp.with_name(self.tmp.name[: -len(".partial")] + ".old")
        os.rename(self.folder, old)
        try:
            os.rename(self.tmp, self.folder)
        except BaseException:
            os.rename(old, self.folder)
            raise
        shutil.rmtree(old, ignore_errors=True)


def write_store(
    folder: PathLike,
    layers: Iterable[sp.spmatrix | sp.sparray],
    *,
    n_neurons: int,
    bias: float | np.ndarray | None = None,
    ymax: float | None = None,
    name: str = "network",
    source: dict[str, Any] | None = None,
    n_layers: int | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> Path:
    """Write a network store, one layer at a time, all or nothing.

    Each layer is written (three ``.npy`` files, flushed to disk) before the next is taken
    from ``layers``, so a generator of layers is never held whole. The store appears at
    ``folder`` only once complete (see :class:`StoreWriter`).

    Parameters
    ----------
    folder
        The store's folder: new, empty, or (``overwrite``) a store to replace.
    layers
        The weight matrices ``W_1 .. W_L``, each ``n_neurons x n_neurons`` (any sparse
        format; stored as canonical float32 CSR).
    n_neurons
        N.
    bias, ymax
        As in :class:`~sdnn_dask.core.network.Network` (``None``: the challenge value for N,
        ``sdnn.ymax``). A bias the same for every neuron is stored as one number.
    name
        The network's label.
    source
        What the network came from, recorded in the manifest as given.
    n_layers
        How many layers ``layers`` yields, when it has no ``len``: the total given to
        ``progress``, and checked.
    overwrite
        Replace a store at ``folder``.
    progress
        Called as ``progress(done, total)`` after each layer (``total`` ``None`` if
        unknown). An exception it raises interrupts the write, which leaves nothing.

    Returns
    -------
    Path
        ``folder``, absolute.

    Examples
    --------
    >>> import tempfile
    >>> from sdnn_dask.data.radixnet import make_network
    >>> net = make_network(1024, 3)
    >>> folder = write_store(tempfile.mkdtemp() + "/net", net.layers, n_neurons=1024,
    ...                      bias=net.bias, ymax=net.ymax, name=net.name)
    >>> store = open_store(folder)
    >>> store.n_layers, store.edges, (store.layer(2) != net.layers[1]).nnz
    (3, 98304, 0)
    """
    total = n_layers if n_layers is not None else (len(layers) if isinstance(layers, Sized)
                                                   else None)
    with StoreWriter(folder, overwrite=overwrite) as writer:
        count = 0
        for count, matrix in enumerate(layers, start=1):
            writer.write_layer(count, matrix, n_neurons)
            if progress is not None:
                progress(count, total)
        if n_layers is not None and count != n_layers:
            raise ValueError(f"{count} layers given; n_layers says {n_layers}")
        return writer.commit(n_neurons=n_neurons, bias=bias, ymax=ymax, name=name,
                             source=source)


def write_network(folder: PathLike, network: Network, *, source: dict[str, Any] | None = None,
                  overwrite: bool = False, progress: Progress | None = None) -> Path:
    """Write a :class:`~sdnn_dask.core.network.Network` as a store (see :func:`write_store`)."""
    return write_store(folder, network.layers, n_neurons=network.n_neurons, bias=network.bias,
                       ymax=network.ymax, name=network.name, source=source,
                       overwrite=overwrite, progress=progress)


def convert_challenge(
    directory: PathLike,
    folder: PathLike,
    n_neurons: int,
    n_layers: int,
    *,
    client: Any = None,
    bias: float | np.ndarray | None = None,
    ymax: float | None = None,
    name: str | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> Path:
    """Convert challenge layer files (``neuron{N}/n{N}-l{k}.tsv[.gz]``) into a store.

    Each file is parsed and written by :func:`convert_layer`: one Dask task per file on
    ``client`` (whose workers must see ``folder``'s parent at the same path), or one after
    another here without one. The manifest is written here, last, once every task is done.

    Parameters
    ----------
    directory
        The challenge folder, or its ``neuron{N}`` folder.
    folder
        The store (see :func:`write_store`).
    n_neurons, n_layers
        Which network: layers ``1..n_layers`` of the ``n_neurons`` one.
    client
        A ``distributed.Client``, or ``None``.
    bias, ymax, overwrite
        As in :func:`write_store`.
    name
        The network's label (default ``{directory name}-{N}-{L}``, as
        :func:`~sdnn_dask.data.io.read_network` names it).
    progress
        Called as ``progress(done, n_layers)`` as each file is converted.

    Raises
    ------
    FileNotFoundError
        Layer files are missing (all named, before any is parsed).
    FileExistsError
        See :func:`check_destination`.
    ChallengeFormatError
        A layer file is malformed (the first error a task raised); nothing is left.
    """
    directory = Path(directory)
    paths = io.layer_paths(directory, n_neurons, n_layers)
    name = name or f"{directory.name}-{n_neurons}-{n_layers}"
    source = {"challenge": str(directory.absolute())}
    with StoreWriter(folder, overwrite=overwrite) as writer:
        tmp = str(writer.tmp)
        if client is None:
            for done, path in enumerate(paths, start=1):
                writer.add(*convert_layer(path, n_neurons, done, tmp))
                if progress is not None:
                    progress(done, n_layers)
        else:
            _convert_on(client, paths, n_neurons, tmp, writer, progress)
        return writer.commit(n_neurons=n_neurons, bias=bias, ymax=ymax, name=name,
                             source=source)


def _convert_task(path: str, n_neurons: int, layer: int, folder: str):
    """:func:`convert_layer` on a worker; a bad file is returned, not raised.

    A user's mistake, not a failure of the task: raised, the worker would log it as an
    error with a traceback before the client reports it.
    """
    try:
        return convert_layer(path, n_neurons, layer, folder)
    except ChallengeFormatError as error:
        return layer, error


def _convert_on(client: Any, paths: list[Path], n_neurons: int, tmp: str, writer: StoreWriter,
                progress: Progress | None) -> None:
    """One task per file, at most two per worker thread at a time.

    After a bad file no more are submitted, and the ones running are waited for (about one
    file's time): so the error is reported, and the store's folder removed, with no task
    left writing into it or cancelled mid-way (which the workers would log). The error of
    the lowest layer found bad is raised. An interrupt cancels every task.
    """
    from distributed import as_completed

    token = uuid.uuid4().hex[:8]
    threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
    todo = iter(enumerate(paths, start=1))
    futures = []

    def submit() -> None:
        k, path = next(todo)
        futures.append(client.submit(_convert_task, str(path.absolute()), n_neurons, k, tmp,
                                     key=f"sdnn-convert-{token}-l{k}", pure=False))

    for _ in range(min(len(paths), 2 * max(threads, 1))):
        submit()
    errors: list[tuple[int, ChallengeFormatError]] = []
    try:
        running = as_completed(futures, loop=client.loop)
        for future in running:
            layer, result = future.result()
            if isinstance(result, ChallengeFormatError):
                errors.append((layer, result))
                continue
            writer.add(layer, result)
            if progress is not None:
                progress(len(writer.entries), len(paths))
            if not errors and len(futures) < len(paths):
                submit()
                running.add(futures[-1])
    except BaseException:
        client.cancel(futures)
        raise
    if errors:
        raise min(errors, key=lambda found: found[0])[1]


# --------------------------------------------------------------------------- reading


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


def _check_file(path: Path, file: dict[str, Any], what: str, dtype: np.dtype, length: int
                ) -> None:
    """A file of the store as the manifest says: there, its size, its header."""
    expected = _expected(what, dtype, length)
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
    return ChallengeFormatError(path, f"{message}; expected the manifest of a "
                                f"{FORMAT} version {VERSION}")


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


def _read_manifest(folder: Path) -> dict[str, Any]:
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
    if manifest.get("version") != VERSION:
        raise ChallengeFormatError(path, f"version {manifest.get('version')!r} of {FORMAT}; "
                                   f"this sdnn_dask {__version__} reads version {VERSION} only")
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
        files = entry.get("files")
        if not isinstance(files, dict) or set(files) != {part for part, _ in _PARTS}:
            raise _bad_manifest(path, f"layer {k}'s files are {files!r}")
        for part, _ in _PARTS:
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


def open_store(folder: PathLike, *, verify: bool = False) -> NetworkStore:
    """Open a network store for reading.

    Checks the manifest (present, this format and version, consistent counts) and every
    file it lists (present, its size, its ``.npy`` header: dtype and shape), which reads a
    few hundred bytes per file. The arrays' contents are checked when a layer is first read
    (:meth:`NetworkStore.layer`); ``verify`` checks them all now, and every SHA-256.

    Raises
    ------
    ChallengeFormatError
        Naming the manifest or the file that is wrong, and what was expected.
    """
    folder = Path(folder)
    manifest = _read_manifest(folder)
    n = manifest["n_neurons"]
    for k, entry in enumerate(manifest["layers"], start=1):
        lengths = {"indptr": n + 1, "indices": entry["nnz"], "data": entry["nnz"]}
        for part, dtype in _PARTS:
            file = entry["files"][part]
            _check_file(folder / file["name"], file, f"layer {k}'s {part}", dtype,
                        lengths[part])
    store = NetworkStore(folder, manifest)
    if verify:
        store.verify()
    return store


class NetworkStore:
    """A network store opened for reading (see :func:`open_store`): layers on demand.

    Attributes
    ----------
    folder
        The store's folder.
    manifest
        The manifest, as read.
    n_neurons, n_layers, edges, name, ymax
        As in :class:`~sdnn_dask.core.network.Network`.
    bias
        The per-neuron bias, float32 (N,), as in :class:`~sdnn_dask.core.network.Network` (the
        manifest keeps one number when every neuron has the same).
    source
        What the store was written from (the manifest's ``source``; ``None`` if unknown).
    """

    def __init__(self, folder: Path, manifest: dict[str, Any]):
        self.folder = folder
        self.manifest = manifest
        self.n_neurons: int = manifest["n_neurons"]
        self.n_layers: int = manifest["n_layers"]
        self.edges: int = manifest["edges"]
        self.name: str = manifest["name"]
        self.ymax = float(manifest["ymax"])
        self.source = manifest.get("source")
        self.bias: np.ndarray = (self._load_bias(manifest["bias"])
                                 if isinstance(manifest["bias"], dict)
                                 else np.full(self.n_neurons, manifest["bias"], np.float32))
        self._checked: set[int] = set()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"NetworkStore({str(self.folder)!r}, name={self.name!r}, "
                f"n_neurons={self.n_neurons}, n_layers={self.n_layers}, edges={self.edges})")

    def _load_bias(self, file: dict[str, Any]) -> np.ndarray:
        path = self.folder / BIAS_FILE
        dtype = np.dtype("<f4")
        _check_file(path, file, "the per-neuron bias", dtype, self.n_neurons)
        bias = np.load(path, allow_pickle=False)
        if not np.isfinite(bias).all():
            raise ChallengeFormatError(path, "values that are not finite; expected a finite "
                                       "bias per neuron")
        return bias

    def _files(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        for entry in self.manifest["layers"]:
            for part, _ in _PARTS:
                yield self.folder / entry["files"][part]["name"], entry["files"][part]
        if isinstance(self.manifest["bias"], dict):
            yield self.folder / BIAS_FILE, self.manifest["bias"]

    def nbytes(self) -> int:
        """Bytes of the store's array files (the manifest aside)."""
        return sum(file["bytes"] for _, file in self._files())

    def layer(self, k: int) -> sp.csr_matrix:
        """Layer ``k`` (1-based), a read-only CSR matrix over memory maps of its files.

        ``data`` and ``indices`` are the maps themselves (no copy); scipy keeps ``indptr``
        as int32, a copy of ``N + 1`` values. The first time a layer is read from this
        store its contents are checked, which reads all of it once: ``indptr`` from 0 to
        the layer's nonzeros, never decreasing; columns in ``0..N-1``, strictly increasing
        in each row; values finite and nonzero. So the matrix is canonical CSR (scipy
        never needs to sort or write it).

        Raises
        ------
        IndexError
            ``k`` is not in ``1..n_layers``.
        ChallengeFormatError
            Naming the file that fails a check (or cannot be mapped).
        """
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or \
                not 1 <= k <= self.n_layers:
            raise IndexError(f"layer {k!r}: this store has layers 1..{self.n_layers}")
        k = int(k)
        arrays = self._map(k)
        with self._lock:
            checked = k in self._checked
        if not checked:
            self._check_layer(k, arrays)
            with self._lock:
                self._checked.add(k)
        n = self.n_neurons
        matrix = sp.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]),
                               shape=(n, n), copy=False)
        matrix.has_sorted_indices = True
        matrix.has_canonical_format = True
        return matrix

    def read_ahead(self, k: int) -> None:
        """Ask the operating system to read layer ``k``'s files (1-based) into the page
        cache, asynchronously (``posix_fadvise(WILLNEED)``; nothing where there is none).
        Neither maps nor checks the layer."""
        entry = self.manifest["layers"][k - 1]
        for part, _ in _PARTS:
            _will_need(self.folder / entry["files"][part]["name"])

    def _map(self, k: int) -> dict[str, np.ndarray]:
        entry = self.manifest["layers"][k - 1]
        lengths = {"indptr": self.n_neurons + 1, "indices": entry["nnz"], "data": entry["nnz"]}
        arrays = {}
        for part, dtype in _PARTS:
            path = self.folder / entry["files"][part]["name"]
            what = _expected(f"layer {k}'s {part}", dtype, lengths[part])
            try:
                array = np.load(path, mmap_mode="r", allow_pickle=False)
            except Exception as error:  # replaced since open_store, or unreadable
                raise ChallengeFormatError(path, f"cannot be mapped ({type(error).__name__}: "
                                           f"{error}); expected {what}") from None
            if array.dtype != dtype or array.shape != (lengths[part],):
                raise ChallengeFormatError(path, f"holds a {array.dtype} array of shape "
                                           f"{array.shape}; expected {what}")
            arrays[part] = array
        return arrays

    def _check_layer(self, k: int, arrays: dict[str, np.ndarray]) -> None:
        entry = self.manifest["layers"][k - 1]
        nnz, n = entry["nnz"], self.n_neurons
        if _layer_is_sound(arrays["indptr"], arrays["indices"], arrays["data"], nnz, n):
            return  # one compiled pass; the checks below find what is wrong, and where
        where = {part: self.folder / entry["files"][part]["name"] for part, _ in _PARTS}
        indptr, indices, data = arrays["indptr"], arrays["indices"], arrays["data"]
        if indptr[0] != 0 or indptr[-1] != nnz:
            raise ChallengeFormatError(where["indptr"], f"row pointers run from {indptr[0]} to "
                                       f"{indptr[-1]}; expected 0 to the layer's {nnz} "
                                       "nonzeros")
        falls = np.diff(indptr) < 0
        if falls.any():
            row = int(falls.argmax()) + 1
            raise ChallengeFormatError(where["indptr"], f"row pointers decrease at row {row} "
                                       "(1-based); expected them never to decrease")
        if not nnz:
            return
        low, high = int(indices.min()), int(indices.max())
        if low < 0 or high >= n:
            raise ChallengeFormatError(where["indices"], f"columns {low}..{high}; expected "
                                       f"columns in 0..{n - 1}")
        increasing = np.diff(indices) > 0
        starts = np.asarray(indptr[1:-1])
        increasing[starts[(starts > 0) & (starts < nnz)] - 1] = True  # across rows
        if not increasing.all():
            row = int(np.searchsorted(indptr, int(increasing.argmin()) + 1, "right"))
            raise ChallengeFormatError(where["indices"], f"columns not strictly increasing in "
                                       f"row {row} (1-based); expected sorted columns, each "
                                       "once per row")
        if not np.isfinite(data).all():
            raise ChallengeFormatError(where["data"], "values that are not finite; expected "
                                       "finite weights")
        if not data.all():
            raise ChallengeFormatError(where["data"], "explicit zeros; expected nonzero weights "
                                       "only (a zero is no edge)")
        # the compiled pass said no, these found nothing: never accept the layer silently
        raise ChallengeFormatError(where["indptr"], "fails the layer's checks; expected "
                                   "canonical CSR (see sdnn_dask.data.store)")

    def layers(self, window: int = 2) -> Iterator[sp.csr_matrix]:
        """Every layer in order, the next ``window`` prepared by a background thread.

        The thread maps a layer, checks it on its first read (which reads it) and asks the
        operating system to read its files ahead (``posix_fadvise(WILLNEED)`` where there
        is one, else by reading a byte of every page), at most ``window`` layers ahead of
        the one last yielded; so about ``window + 1`` layers are mapped at a time, and a
        layer's maps close once the caller drops it. ``window=0`` reads each layer when it
        is asked for, in the caller's thread. Closing the iterator early (``close()``, or
        dropping it) stops and joins the thread.

        Raises
        ------
        ChallengeFormatError
            When the caller reaches a layer that fails its check.
        """
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ValueError(f"window must be an integer >= 0, got {window!r}")
        return self._layers(window)

    def _layers(self, window: int) -> Iterator[sp.csr_matrix]:
        if window == 0:
            for k in range(1, self.n_layers + 1):
                yield self.layer(k)
            return
        ready: queue.SimpleQueue = queue.SimpleQueue()
        ahead = threading.Semaphore(window)
        stop = threading.Event()

        def prefetch() -> None:
            for k in range(1, self.n_layers + 1):
                while not ahead.acquire(timeout=0.05):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                try:
                    matrix = self.layer(k)
                    _read_ahead(matrix)
                except BaseException as error:  # the caller raises it at layer k
                    ready.put((None, error))
                    return
                ready.put((matrix, None))
                del matrix

        thread = threading.Thread(target=prefetch, name=f"sdnn-store-prefetch {self.folder}",
                                  daemon=True)
        thread.start()
        try:
            for _ in range(self.n_layers):
                matrix, error = ready.get()
                if error is not None:
                    raise error
                ahead.release()  # this layer is the caller's now: prepare one more
                yield matrix
                del matrix
        finally:
            stop.set()
            ahead.release()
            thread.join()

    def to_network(self, n_layers: int | None = None) -> Network:
        """Every layer (or the first ``n_layers``) read into memory (copies, not maps): a
        :class:`Network`.

        For networks that fit in memory; the layers are read with :meth:`layers`.
        """
        if n_layers is not None and not 1 <= n_layers <= self.n_layers:
            raise ValueError(f"n_layers must be in 1..{self.n_layers}, got {n_layers}")
        layers = []
        for w in self.layers(window=2):
            if n_layers is not None and len(layers) == n_layers:
                break
            layers.append(sp.csr_matrix((np.array(w.data), np.array(w.indices),
                                         np.array(w.indptr)), shape=w.shape))
        return Network(layers, bias=self.bias, ymax=self.ymax, name=self.name)

    def verify(self) -> None:
        """Check every file against its SHA-256 in the manifest, and every layer.

        Reads the whole store.

        Raises
        ------
        ChallengeFormatError
            Naming the first file whose hash differs or that fails a check.
        """
        for path, file in self._files():
            try:
                digest = _file_sha256(path)
            except OSError as error:
                raise ChallengeFormatError(path, f"cannot be read ({error.strerror or error})"
                                           ) from None
            if digest != file["sha256"]:
                raise ChallengeFormatError(path, f"SHA-256 {digest[:16]}... differs from the "
                                           f"manifest's {file['sha256'][:16]}...: the file "
                                           "changed since the store was written")
        for k in range(1, self.n_layers + 1):
            self.layer(k)


@numba.njit(nogil=True, cache=True)
def _layer_is_sound(indptr, indices, data, nnz, n):  # pragma: no cover - compiled
    """Whether a layer passes every check of :meth:`NetworkStore._check_layer`, in one
    pass (four times faster than the NumPy checks, which then only run on a bad layer)."""
    if indptr[0] != 0 or indptr[indptr.shape[0] - 1] != nnz:
        return False
    for i in range(indptr.shape[0] - 1):
        start, end = indptr[i], indptr[i + 1]
        if end < start:
            return False
        previous = -1
        for p in range(start, end):
            j = indices[p]
            if j <= previous or j >= n:  # also j < 0: previous starts at -1
                return False
            previous = j
            x = data[p]
            if x == 0.0 or not np.isfinite(x):
                return False
    return True


def _read_ahead(matrix: sp.csr_matrix) -> None:
    """Ask for the pages of a mapped layer to be read (asynchronously where possible)."""
    for array in (matrix.indices, matrix.data):
        if not _will_need(_mapped_file(array)):
            flat = np.asarray(array).reshape(-1).view(np.uint8)
            int(flat[::_PAGE].sum())  # a byte of every page: reads them all


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _mapped_file(array: np.ndarray) -> PathLike | None:
    """The file behind a view of an ``np.memmap`` (``None`` if it is not one)."""
    base = array
    while base is not None and not isinstance(base, np.memmap):
        base = getattr(base, "base", None)
    return getattr(base, "filename", None)


def _will_need(filename: PathLike | None) -> bool:
    """``posix_fadvise(WILLNEED)`` on a file: the kernel reads it ahead; False if not done."""
    if not filename or not hasattr(os, "posix_fadvise"):
        return False
    try:
        fd = os.open(filename, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True
