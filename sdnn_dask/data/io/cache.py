"""A challenge network read whole, through an optional binary cache of its layers.

:func:`read_network` can keep a binary cache (``.npz``, loaded without pickle) keyed by a
SHA-256 of the layer files' bytes and checked when loaded; a bad cache file is rebuilt with
a :class:`CacheWarning`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ... import config
from ...core.network import Network
from ...files import atomic_path
from .challenge import layer_path, read_weights
from .text import ChallengeFormatError, PathLike, unreadable


class CacheWarning(UserWarning):
    """The ``.npz`` cache of a network could not be used or written (the run goes on)."""


# bumped when the cache's layout changes, so older files are never taken for new ones
_CACHE_FORMAT = "sdnn-npz-3"  # 3: the file holds its key ("source")


def _cache_key(paths: list[Path], extra: str) -> str:
    """Key of the cache of ``paths``: a SHA-256 of the files' bytes, in order, and ``extra``.

    A content hash rather than a stat signature: an edit that keeps the size and mtime
    (``os.utime``, a restore from backup, a coarse clock) changes the key, and a copy of
    the same files elsewhere shares the cache. Measured on the official 1024-neuron network
    (120 ``.gz`` files, 11 MB, warm page cache): 7 ms, against 50 ms for loading the cache
    and 0.85 s for parsing the text; sizes, mtimes, inodes and ctimes alone took 2 ms.

    Raises
    ------
    ChallengeFormatError
        A file cannot be read.
    """
    digest = hashlib.sha256(f"{_CACHE_FORMAT}|{extra}\n".encode())
    for path in paths:
        try:
            with open(path, "rb") as handle:
                digest.update(f"{os.fstat(handle.fileno()).st_size}\n".encode())
                while block := handle.read(1 << 20):
                    digest.update(block)
        except OSError as error:
            raise unreadable(path, error) from None
    return digest.hexdigest()[:32]


def _cache_folder(cache: bool | PathLike) -> Path | None:
    """The cache folder, created if need be; ``None`` (with a warning) if it cannot be.

    Raises
    ------
    ChallengeFormatError
        The folder is a file, or inside one: a setting to fix, not a disk to wait for.
    """
    folder = config.cache_dir() if cache is True else Path(cache)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ChallengeFormatError(
            folder, "the cache folder is a file (or inside one); expected a folder for the "
            ".npz cache: point $SDNN_CACHE_DIR or sdnn.cache-dir elsewhere, or use no cache"
        ) from None
    except OSError as error:
        warnings.warn(f"{folder}: cannot create the cache folder ({error.strerror or error}); "
                      "reading without a cache", CacheWarning, stacklevel=3)
        return None
    return folder


def read_network(
    directory: PathLike,
    n_neurons: int,
    n_layers: int,
    *,
    bias: float | np.ndarray | None = None,
    ymax: float | None = None,
    cache: bool | PathLike = False,
    progress: Callable[[int, int], None] | None = None,
) -> Network:
    """Read a challenge network (weights) into a :class:`~sdnn_dask.core.network.Network`.

    Parameters
    ----------
    directory
        The challenge folder (holding ``neuron{N}/``) or the ``neuron{N}`` folder itself.
    n_neurons, n_layers
        Which network: the first ``n_layers`` layers of the ``n_neurons`` one.
    bias, ymax
        As in :class:`~sdnn_dask.core.network.Network` (challenge values by default).
    cache
        ``True`` to keep a binary copy in the cache folder (``sdnn.cache-dir``), or a folder
        to keep it in. The copy is keyed by a SHA-256 of the layer files' bytes (see
        :func:`_cache_key`), so an edited file is read again whatever its size and mtime.
        A copy is checked when loaded (the key it holds, the zip's CRC-32s, layer count,
        ``N x N`` shapes, dtypes, index ranges, ``indptr`` consistent with the nonzeros,
        finite values); a copy that fails (empty, truncated, flipped bits, foreign, made
        from other files, inconsistent) is discarded and rebuilt from the text files
        with a :class:`CacheWarning`. A cache folder that cannot be created, or a copy
        that cannot be written, also only warns: the network is returned uncached.
    progress
        Called as ``progress(done, total)`` after each layer file is parsed.

    Raises
    ------
    FileNotFoundError
        Layer files are missing (all are named).
    ChallengeFormatError
        A layer file is malformed or unreadable (see :func:`read_triples`), or the cache
        folder is a file (or inside one): a setting to fix, so an error (exit 2 in the CLI)
        rather than a silent fall back.

    Examples
    --------
    >>> import tempfile
    >>> from sdnn_dask.data.io import write_weights
    >>> from sdnn_dask.data.radixnet import make_network
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_weights(folder, make_network(1024, 2).layers)
    >>> read_network(folder, 1024, 2).edges
    65536
    """
    name = f"{Path(directory).name}-{n_neurons}-{n_layers}"
    paths = [layer_path(directory, n_neurons, k) for k in range(1, n_layers + 1)]
    folder = _cache_folder(cache) if cache else None
    cache_file = key = None
    extra = f"{n_neurons}-{n_layers}"
    if folder is not None and all(p.is_file() for p in paths):
        key = _cache_key(paths, extra)
        cache_file = folder / f"n{n_neurons}-l{n_layers}-{key}.npz"
        if cache_file.exists():
            try:
                layers = _load_layers(cache_file, n_neurons, n_layers, key)
            except _BadCache as error:
                warnings.warn(f"{cache_file}: bad cache file ({error}); discarded, rebuilding "
                              "it from the text files", CacheWarning, stacklevel=2)
                with contextlib.suppress(OSError):
                    cache_file.unlink()
            else:
                return Network(layers, bias=bias, ymax=ymax, name=name)
    layers = read_weights(directory, n_neurons, n_layers, progress=progress)
    # a file changed while it was parsed: its layers would be stored under a stale key
    if cache_file is not None and _cache_key(paths, extra) == key:
        _save_layers(cache_file, layers, key)
    return Network(layers, bias=bias, ymax=ymax, name=name)


def _save_layers(path: Path, layers: list[sp.csr_matrix], key: str) -> None:
    """Write the cache file atomically; a failure only warns (the cache is an optimisation).

    ``key`` (:func:`_cache_key` of the text files) is stored in the file too, as
    ``source``: the file's name alone does not tie it to its source.
    """
    counts = np.array([w.nnz for w in layers], dtype=np.int64)
    arrays = {
        "source": np.array([key]),
        "nnz": counts,
        "indptr": np.concatenate([w.indptr.astype(np.int64) for w in layers]),
        "indices": np.concatenate([w.indices.astype(np.int32) for w in layers]),
        "data": np.concatenate([w.data.astype(np.float32) for w in layers]),
    }
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, **arrays)
    except OSError as error:
        warnings.warn(f"{path}: cannot write the cache file ({error.strerror or error}); "
                      "the network is not cached", CacheWarning, stacklevel=3)


class _BadCache(Exception):
    """A cache file that must not be used; the message says why."""


_CACHE_DTYPES = {"nnz": np.int64, "indptr": np.int64, "indices": np.int32, "data": np.float32}


def _load_layers(path: Path, n_neurons: int, n_layers: int, key: str
                 ) -> list[sp.csr_matrix]:
    """The ``n_layers`` layers stored in a cache file, each checked before it is trusted.

    What ties the file to the text files it was made from: ``key`` (their SHA-256) is in
    its name and must be in it as ``source``, so a cache of other files put under this
    name (copied, renamed, restored) is refused; and every array of the ``.npz`` carries
    the CRC-32 zip checks as it is read, so a flipped bit is refused too (it could
    otherwise leave a finite value, valid for every check below, and a wrong answer).

    Raises
    ------
    _BadCache
        The file is unreadable (a CRC-32 that does not match included), or its arrays do
        not make ``n_layers`` valid canonical-size CSR matrices (wrong count, dtype or
        length, ``indptr`` not monotone or not matching the nonzeros, an index outside
        ``0..N-1``, a value that is not finite), or it was made from other files than
        ``key`` says. Out-of-range indices would otherwise crash the compiled kernels.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in _CACHE_DTYPES}
            source = archive["source"] if "source" in archive.files else None
    # anything np.load can raise on a damaged file: EOFError (empty), BadZipFile, ValueError
    # (not an .npz, or a pickle), KeyError (missing array), OSError, zlib.error, ...
    except Exception as error:
        raise _BadCache(f"unreadable: {type(error).__name__}: {error}") from None
    for name, dtype in _CACHE_DTYPES.items():
        array = arrays[name]
        if array.dtype != dtype or array.ndim != 1:
            raise _BadCache(f"{name} is {array.dtype} with {array.ndim} dimensions; expected "
                            f"1-D {np.dtype(dtype)}")
    counts, indptr = arrays["nnz"], arrays["indptr"]
    indices, data = arrays["indices"], arrays["data"]
    if counts.size != n_layers:
        raise _BadCache(f"{counts.size} layers; expected {n_layers}")
    if (counts < 0).any():
        raise _BadCache("a negative nonzero count")
    total = int(counts.sum())
    if indptr.size != n_layers * (n_neurons + 1):
        raise _BadCache(f"{indptr.size} row pointers; expected {n_layers} x {n_neurons + 1}")
    if indices.size != total or data.size != total:
        raise _BadCache(f"{indices.size} indices and {data.size} values; expected {total}")
    pointers = indptr.reshape(n_layers, n_neurons + 1)
    if (pointers[:, 0] != 0).any() or (pointers[:, -1] != counts).any():
        raise _BadCache("row pointers do not run from 0 to each layer's nonzero count")
    if (np.diff(pointers, axis=1) < 0).any():
        raise _BadCache("row pointers decrease")
    if total and (int(indices.min()) < 0 or int(indices.max()) >= n_neurons):
        raise _BadCache(f"column indices outside 0..{n_neurons - 1}")
    if not np.isfinite(data).all():
        raise _BadCache("values that are not finite")
    if source is None or source.shape != (1,) or source.dtype.kind != "U" \
            or str(source[0]) != key:
        made = "no source key" if source is None else f"source key {source.tolist()!r}"
        raise _BadCache(f"made from other files ({made}; expected {key!r})")
    layers = []
    offset = 0
    for k, nnz in enumerate(counts.tolist()):
        layers.append(sp.csr_matrix(
            (data[offset : offset + nnz], indices[offset : offset + nnz], pointers[k]),
            shape=(n_neurons, n_neurons),
        ))
        offset += nnz
    return layers
