"""A network store opened for reading: memory-mapped CSR layers, checked, read ahead.

Every file is read with ``np.load(mmap_mode="r")``: a layer is a CSR matrix over read-only
memory maps where its files hold the kernel's dtypes (a version-1 store, or a version-2
layer's float32 values and int32 columns), so only the pages a computation touches are
read, and the operating system may drop them again; what a version-2 store keeps more
compactly (uint16 columns, a constant value, uniform rows: :mod:`.encoding`) is decoded
into new arrays, the same values bit for bit. :func:`open_store` checks what is cheap at
once (the manifest, and for every file: present, its size, its ``.npy`` header's dtype
and shape) and a layer when a process first reads it (see :meth:`NetworkStore.layer`):
its files against the SHA-256 the manifest lists (unless ``sdnn.store.verify`` is false),
then its contents; :meth:`NetworkStore.verify` checks every file and layer at once.
Anything wrong is a :class:`~sdnn_dask.data.io.ChallengeFormatError` naming the file (or
the manifest, for what it holds).

A process hashes each file once (:func:`check_hash_once` remembers the files it checked,
by path, expected hash, size, times and inode), so a run pays for it once per process:
in the thread that reads the layer ahead (:meth:`NetworkStore.layers`, the streamed
kernel's), where hashlib releases the GIL. A file changed since, even in place, is
hashed again.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from ... import config
from ...core.kernels.steps import UniformWeights
from ...core.network import Network
from ..io import ChallengeFormatError
from .encoding import PARTS, decode
from .manifest import (
    BIAS_FILE,
    MANIFEST,
    PathLike,
    check_file,
    expected_array,
    file_sha256,
    layer_encoding,
    read_manifest,
)


def open_store(folder: PathLike, *, verify: bool = False, check_hashes: bool | None = None
               ) -> NetworkStore:
    """Open a network store for reading.

    Checks the manifest (present, this format and a version this release reads: 1 or 2,
    consistent counts and encodings) and every file it lists (present, its size, its
    ``.npy`` header: dtype and shape), which reads a few hundred bytes per file. A layer's
    files are checked against their SHA-256 and its arrays' contents when it is first read
    (:meth:`NetworkStore.layer`); ``verify`` checks them all now.

    Parameters
    ----------
    folder
        The store's folder.
    verify
        Check every file's SHA-256 and every layer now (reads the whole store).
    check_hashes
        Check each layer's files against their SHA-256 when this process first reads them
        (default ``sdnn.store.verify``, true); false skips it, knowingly: a file changed
        in place, within its columns' range, is then read as it is.

    Raises
    ------
    ChallengeFormatError
        Naming the manifest or the file that is wrong, and what was expected.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    n = manifest["n_neurons"]
    for k, entry in enumerate(manifest["layers"], start=1):
        for part, dtype, length in layer_encoding(manifest, k).files(n, entry["nnz"]):
            file = entry["files"][part]
            check_file(folder / file["name"], file, f"layer {k}'s {part}", dtype, length)
    if check_hashes is None:
        check_hashes = bool(config.get("store.verify", True))
    store = NetworkStore(folder, manifest, check_hashes=check_hashes)
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
    version
        The store's format version (1 or 2).
    encodings
        How each layer is stored, layer ``k`` at ``k - 1``
        (:class:`~sdnn_dask.data.store.encoding.LayerEncoding`).
    check_hashes
        Whether a layer's files (and the bias file) are checked against their SHA-256
        when this process first reads them (see :func:`open_store`).
    """

    def __init__(self, folder: Path, manifest: dict[str, Any], *, check_hashes: bool = True):
        self.folder = folder
        self.manifest = manifest
        self.check_hashes = bool(check_hashes)
        self.n_neurons: int = manifest["n_neurons"]
        self.n_layers: int = manifest["n_layers"]
        self.edges: int = manifest["edges"]
        self.name: str = manifest["name"]
        self.ymax = float(manifest["ymax"])
        self.source = manifest.get("source")
        self.version: int = manifest["version"]
        self.encodings = [layer_encoding(manifest, k) for k in range(1, self.n_layers + 1)]
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
        check_file(path, file, "the per-neuron bias", dtype, self.n_neurons)
        if self.check_hashes:
            check_hash_once(path, file)
        bias = np.load(path, allow_pickle=False)
        if not np.isfinite(bias).all():
            raise ChallengeFormatError(path, "values that are not finite; expected a finite "
                                       "bias per neuron")
        return bias

    def _layer_files(self, k: int) -> Iterator[tuple[Path, dict[str, Any]]]:
        """Layer ``k``'s files (those its encoding keeps), with their manifest entries."""
        files = self.manifest["layers"][k - 1]["files"]
        for part in PARTS:
            if part in files:
                yield self.folder / files[part]["name"], files[part]

    def _files(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        for k in range(1, self.n_layers + 1):
            yield from self._layer_files(k)
        if isinstance(self.manifest["bias"], dict):
            yield self.folder / BIAS_FILE, self.manifest["bias"]

    def nbytes(self) -> int:
        """Bytes of the store's array files (the manifest aside)."""
        return sum(file["bytes"] for _, file in self._files())

    def layer_nbytes(self, k: int) -> int:
        """Bytes layer ``k`` (1-based) occupies on disk: the sizes of its files (what reading
        it reads; a version-2 layer may have one file only)."""
        self._check_index(k)
        return sum(file["bytes"] for _, file in self._layer_files(int(k)))

    def _check_index(self, k: Any) -> None:
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or \
                not 1 <= k <= self.n_layers:
            raise IndexError(f"layer {k!r}: this store has layers 1..{self.n_layers}")

    def layer(self, k: int) -> sp.csr_matrix:
        """Layer ``k`` (1-based), a canonical CSR matrix: float32 ``data``, int32
        ``indices``, as from a version-1 store of the same network, bit for bit.

        Over memory maps of its files where they hold these dtypes: ``data`` and
        ``indices`` are then the read-only maps themselves (no copy); else new, writable
        arrays decoded from the manifest and files (uint16 columns widened, a constant
        value repeated; see :func:`~sdnn_dask.data.store.encoding.decode`). scipy keeps
        ``indptr`` as int32, a copy of ``N + 1`` values. The first time a layer is read
        from this store its contents are checked, as decoded, which reads all of it once:
        ``indptr`` from 0 to the layer's nonzeros, never decreasing; columns in
        ``0..N-1``, strictly increasing in each row; values finite and nonzero. So the
        matrix is canonical CSR (scipy never needs to sort or write it). Before that, with
        :attr:`check_hashes`, the first time this process reads each of the layer's files
        (or reads it again since it changed) it is hashed and compared with the manifest's
        SHA-256, which reads the file once more (then from the page cache).

        Raises
        ------
        IndexError
            ``k`` is not in ``1..n_layers``.
        ChallengeFormatError
            Naming the file that fails a check (or cannot be mapped).
        """
        self._check_index(k)
        k = int(k)
        if self.check_hashes:  # before anything of the layer is used
            for path, file in self._layer_files(k):
                check_hash_once(path, file)
        arrays = self._map(k)
        with self._lock:
            checked = k in self._checked
        if not checked:
            self._check_layer(k, arrays)
            with self._lock:
                self._checked.add(k)
        return self._canonical(arrays)

    def uniform_layer(self, k: int) -> UniformWeights | None:
        """Layer ``k`` (1-based) as its files keep it, where every row holds the same
        number of nonzeros of one value (``"uniform"`` rows, a ``"constant"`` value: a
        RadiX-Net layer in a version-2 store): its columns' file, mapped, read-only, not
        widened; ``None`` for a layer of another encoding (read it with :meth:`layer`).

        Checked as :meth:`layer` checks, before it is returned: the files' SHA-256 on
        this process's first read of them, and the first time the layer is read from
        this store, its columns (in ``0..N-1``, strictly increasing in each row), in one
        compiled pass over the file as stored; a layer that fails is decoded and
        :meth:`layer`'s checks name the fault.
        """
        self._check_index(k)
        k = int(k)
        encoding = self.encodings[k - 1]
        if encoding.indptr != "uniform" or encoding.data != "constant":
            return None
        if self.check_hashes:
            for path, file in self._layer_files(k):
                check_hash_once(path, file)
        files = self._mapped_files(k)
        indices = files["indices"]
        _touch_pages(indices)  # the computing thread then finds every page mapped
        with self._lock:
            checked = k in self._checked
        if not checked:
            if not _uniform_is_sound(indices, encoding.row_nnz, self.n_neurons):
                self._check_layer(k, decode(encoding, files, self.n_neurons,
                                            int(indices.shape[0])))
            with self._lock:
                self._checked.add(k)
        return UniformWeights(indices, int(encoding.row_nnz), np.float32(encoding.value))

    def _canonical(self, arrays: dict[str, np.ndarray]) -> sp.csr_matrix:
        """A checked layer's decoded arrays as a canonical CSR matrix."""
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
        for path, _ in self._layer_files(k):
            _will_need(path)

    def _map(self, k: int) -> dict[str, np.ndarray]:
        """Layer ``k``'s files mapped, decoded into the canonical arrays."""
        entry = self.manifest["layers"][k - 1]
        return decode(self.encodings[k - 1], self._mapped_files(k), self.n_neurons,
                      entry["nnz"])

    def _mapped_files(self, k: int) -> dict[str, np.ndarray]:
        """Layer ``k``'s files mapped (read-only), each checked for its dtype and length."""
        entry = self.manifest["layers"][k - 1]
        encoding = self.encodings[k - 1]
        arrays = {}
        for part, dtype, length in encoding.files(self.n_neurons, entry["nnz"]):
            path = self.folder / entry["files"][part]["name"]
            what = expected_array(f"layer {k}'s {part}", dtype, length)
            try:
                with _LOAD_LOCK:  # the .npy header is parsed with ast, not thread-safe
                    array = np.load(path, mmap_mode="r", allow_pickle=False)
            except Exception as error:  # replaced since open_store, or unreadable
                raise ChallengeFormatError(path, f"cannot be mapped ({type(error).__name__}: "
                                           f"{error}); expected {what}") from None
            if array.dtype != dtype or array.shape != (length,):
                raise ChallengeFormatError(path, f"holds a {array.dtype} array of shape "
                                           f"{array.shape}; expected {what}")
            arrays[part] = array
        return arrays

    def _check_layer(self, k: int, arrays: dict[str, np.ndarray]) -> None:
        entry = self.manifest["layers"][k - 1]
        nnz, n = entry["nnz"], self.n_neurons
        if _layer_is_sound(arrays["indptr"], arrays["indices"], arrays["data"], nnz, n):
            return  # one compiled pass; the checks below find what is wrong, and where
        # a part with no file comes from the manifest (checked when it was read)
        where = {part: self.folder / (entry["files"][part]["name"] if part in entry["files"]
                                      else MANIFEST) for part in PARTS}
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
            layers.append(sp.csr_matrix((writable_array(w.data), writable_array(w.indices),
                                         writable_array(w.indptr)), shape=w.shape))
        name = self.name if len(layers) == self.n_layers else \
            f"{self.name} (layers 1-{len(layers)})"  # as a StreamedNetwork of them is named
        return Network(layers, bias=self.bias, ymax=self.ymax, name=name)

    def verify(self) -> None:
        """Check every file against its SHA-256 in the manifest, and every layer.

        Reads the whole store.

        Raises
        ------
        ChallengeFormatError
            Naming the first file whose hash differs or that fails a check.
        """
        for path, file in self._files():
            check_hash_once(path, file, again=True)  # asked for: read every byte now
        for k in range(1, self.n_layers + 1):
            self.layer(k)

    def verify_layer(self, k: int) -> None:
        """Check layer ``k``'s files (1-based) against their SHA-256, and the layer.

        Reads the layer's files (which leaves them in the page cache, for a read that
        follows).

        Raises
        ------
        ChallengeFormatError
            Naming the first file whose hash differs or that fails a check.
        """
        self._check_index(k)
        for path, file in self._layer_files(int(k)):
            check_hash_once(path, file, again=True)
        self.layer(k)


#: Files this process has found to hold their manifest's SHA-256, each as
#: :func:`_file_identity` says it was then: a file written since (in place too) has
#: another modification or change time, or inode, and is hashed again.
_HASHED: set[tuple[Any, ...]] = set()
_HASHED_LOCK = threading.Lock()


def _file_identity(path: Path, file: dict[str, Any]) -> tuple[Any, ...]:
    status = os.stat(path)
    return (os.path.abspath(path), file["sha256"], status.st_size, status.st_mtime_ns,
            status.st_ctime_ns, status.st_ino, status.st_dev)


def check_hash_once(path: Path, file: dict[str, Any], *, again: bool = False) -> bool:
    """A file's SHA-256 against its manifest entry, unless this process checked the same
    file (path, hash, size, times, inode) before and not ``again``.

    Returns
    -------
    bool
        Whether it was hashed now.

    Raises
    ------
    ChallengeFormatError
        Naming the file: its hash differs, or it cannot be read.
    """
    try:
        identity = _file_identity(path, file)  # before reading: a write after is seen
    except OSError as error:
        raise ChallengeFormatError(path, f"cannot be read ({error.strerror or error})"
                                   ) from None
    with _HASHED_LOCK:
        if identity in _HASHED and not again:
            return False
    _check_hash(path, file)
    with _HASHED_LOCK:
        _HASHED.add(identity)
    return True


def forget_hashes() -> None:
    """Forget which files this process has hashed (the next read of each hashes it)."""
    with _HASHED_LOCK:
        _HASHED.clear()


def _check_hash(path: Path, file: dict[str, Any]) -> None:
    """A file's SHA-256 against its manifest entry."""
    try:
        digest = file_sha256(path)
    except OSError as error:
        raise ChallengeFormatError(path, f"cannot be read ({error.strerror or error})"
                                   ) from None
    if digest != file["sha256"]:
        raise ChallengeFormatError(path, f"SHA-256 {digest[:16]}... differs from the "
                                   f"manifest's {file['sha256'][:16]}...: the file "
                                   "changed since the store was written (restore it, or "
                                   "write the store again)")


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


@numba.njit(nogil=True, cache=True)
def _uniform_is_sound(indices, row_nnz, n):  # pragma: no cover - compiled
    """Whether every row of ``row_nnz`` columns (``indices``, as stored) holds columns in
    ``0..n-1``, strictly increasing."""
    if row_nnz <= 0:
        return indices.shape[0] == 0
    for start in range(0, indices.shape[0], row_nnz):
        previous = -1
        for p in range(start, start + row_nnz):
            j = np.int64(indices[p])
            if j <= previous or j >= n:
                return False
            previous = j
    return True


#: np.load parses a .npy header with ``ast.literal_eval``, which CPython 3.11 does not
#: make safe across threads ("AST constructor recursion depth mismatch", seen when the
#: computing thread decoded a layer while a background one mapped the next).
_LOAD_LOCK = threading.Lock()


def _touch_pages(array: np.ndarray) -> None:
    """Read a byte of every page of a mapped array, so its pages are mapped into this
    process (in a thread that prepares layers: the page faults are taken there)."""
    flat = np.asarray(array).reshape(-1).view(np.uint8)
    int(flat[::_PAGE].sum())


def _read_ahead(matrix: sp.csr_matrix) -> None:
    """Ask for the pages of a mapped layer to be read (asynchronously where possible);
    arrays that are not maps (decoded) are in memory already."""
    for array in (matrix.indices, matrix.data):
        filename = _mapped_file(array)
        if filename is not None and not _will_need(filename):
            flat = np.asarray(array).reshape(-1).view(np.uint8)
            int(flat[::_PAGE].sum())  # a byte of every page: reads them all


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _mapped_file(array: np.ndarray) -> PathLike | None:
    """The file behind a view of an ``np.memmap`` (``None`` if it is not one)."""
    base = array
    while base is not None and not isinstance(base, np.memmap):
        base = getattr(base, "base", None)
    return getattr(base, "filename", None)


def writable_array(array: np.ndarray) -> np.ndarray:
    """``array`` itself when it is writable memory of its own (decoded, or a copy
    already), else a copy of it (a read-only memory map of a store's file).

    Parameters
    ----------
    array
        An array of a layer from :meth:`NetworkStore.layer`.

    Returns
    -------
    numpy.ndarray
        Writable and not a memory map: what the compiled kernels take.
    """
    if array.flags.writeable and _mapped_file(array) is None:
        return array
    return np.array(array)


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
