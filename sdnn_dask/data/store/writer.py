"""A network store written layer by layer, all or nothing.

:func:`write_store` writes one layer at a time into a hidden folder beside the destination
and renames it into place once the manifest (written last) is complete, so a folder named
like the store is always a whole store (see :class:`StoreWriter`). It writes the current
version (:data:`~.manifest.VERSION`, 2): each layer in the encoding
:func:`~.encoding.choose_encoding` finds for its data.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sized
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ... import config
from ...core.network import Network, as_csr32
from ...version import __version__
from ..io import ChallengeFormatError
from .encoding import choose_encoding, encode
from .manifest import BIAS_FILE, FORMAT, MANIFEST, VERSION, PathLike, layer_file

Progress = Callable[[int, int | None], None]


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
    """Write one layer's ``.npy`` files into ``folder``; return its manifest entry.

    The layer is written in the encoding :func:`~.encoding.choose_encoding` finds for it:
    its columns as uint16 when N <= 65536, and no row pointers (values) file when every row
    has the same count (every value is the same); so one to three files.

    Parameters
    ----------
    folder
        The folder being written (a :class:`StoreWriter`'s ``tmp``); it must exist.
    layer
        1-based layer number: the files are ``l{layer}.indices.npy`` and so on.
    matrix
        The weights, ``n_neurons x n_neurons``; made canonical float32 CSR first
        (:func:`~sdnn_dask.core.network.as_csr32`).
    source
        What the layer was converted from, recorded in the manifest as given.

    Returns
    -------
    dict
        ``{"layer", "nnz", "encoding", "files": {part: {"name", "bytes", "sha256"}}
        [, "source"]}``, ``files`` naming only the parts written.
    """
    csr = as_csr32(matrix)
    if csr.shape != (n_neurons, n_neurons):
        raise ValueError(f"layer {layer} has shape {csr.shape}; expected {n_neurons} x "
                         f"{n_neurons}")
    encoding = choose_encoding(csr.indptr, csr.data, n_neurons)
    arrays = encode(encoding, csr.indptr, csr.indices, csr.data)
    files = {part: _save_array(Path(folder) / layer_file(layer, part), array)
             for part, array in arrays.items()}
    entry: dict[str, Any] = {"layer": layer, "nnz": int(csr.nnz),
                             "encoding": encoding.to_manifest(), "files": files}
    if source is not None:
        entry["source"] = source
    return entry


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

    Each layer is written (its ``.npy`` files, flushed to disk) before the next is taken
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
    >>> from sdnn_dask.data.store import open_store
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
