"""The challenge's layer files converted into a network store, one Dask task per file; a
store rewritten in the current version.

:func:`convert_challenge` parses and writes each file with :func:`convert_layer` (on a
``distributed.Client``, or one after another here) into a :class:`~.writer.StoreWriter`,
which writes the manifest last, once every layer is done. :func:`convert_store` reads a
store of any version this release reads and writes it again, layer by layer, in the
current one (:data:`~.manifest.VERSION`).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...dask_workers import worker_info
from .. import io
from ..io import ChallengeFormatError
from .manifest import PathLike, file_sha256
from .reader import open_store, writable_array
from .writer import Progress, StoreWriter, write_layer_files


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
        source = {"path": str(path), "bytes": path.stat().st_size, "sha256": file_sha256(path)}
    except OSError as error:
        raise ChallengeFormatError(path, f"cannot be read ({error.strerror or error}); "
                                   "expected a readable layer file") from None
    matrix = io.read_layer(path, n_neurons)
    return layer, write_layer_files(folder, layer, matrix, n_neurons, source=source)


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


def convert_store(
    source: PathLike,
    folder: PathLike,
    *,
    n_layers: int | None = None,
    overwrite: bool = False,
    verify: bool = True,
    progress: Progress | None = None,
) -> Path:
    """Rewrite a network store in the current version, one layer at a time.

    Each layer is read from ``source`` (checked, and its files' SHA-256 with ``verify``),
    written in the encoding the writer chooses for it, and dropped before the next: the
    network is never held whole. The bias, ymax, name and every layer's ``source`` are
    kept; the new manifest's ``source`` says which store, of which version, it was
    rewritten from. ``folder`` may be ``source`` itself, with ``overwrite``: the old store
    is replaced once the new one is whole.

    Parameters
    ----------
    source
        A store of a version this release reads (1 or 2).
    folder
        The new store (see :func:`~.writer.write_store`).
    n_layers
        Rewrite layers ``1..n_layers`` only (default: all); the name then says so.
    overwrite
        As in :func:`~.writer.write_store`.
    verify
        Check each layer's files against their SHA-256 as they are read (the contents are
        checked either way), so a file changed since ``source`` was written is not given
        new hashes.
    progress
        Called as ``progress(done, n_layers)`` after each layer.

    Returns
    -------
    Path
        ``folder``, absolute.

    Raises
    ------
    ChallengeFormatError
        ``source`` is not a store this release reads, or a layer fails its checks; nothing
        is written.
    FileExistsError
        See :func:`~.writer.check_destination`.
    """
    opened = open_store(source, check_hashes=False)  # verify_layer hashes, as asked
    total = opened.n_layers if n_layers is None else n_layers
    if isinstance(total, bool) or not isinstance(total, int) or \
            not 1 <= total <= opened.n_layers:
        raise ValueError(f"n_layers must be in 1..{opened.n_layers} (the store's layers), got "
                         f"{n_layers!r}")
    name = opened.name if total == opened.n_layers else f"{opened.name} (layers 1-{total})"
    origin = {"store": str(opened.folder.absolute()), "version": opened.version,
              "source": opened.source}
    n = opened.n_neurons
    with StoreWriter(folder, overwrite=overwrite) as writer:
        for k in range(1, total + 1):
            if verify:
                opened.verify_layer(k)
            w = opened.layer(k)
            # writable (scipy's canonical checks write), copied only where w is a map
            w = sp.csr_matrix((writable_array(w.data), writable_array(w.indices),
                               writable_array(w.indptr)), shape=w.shape, copy=False)
            writer.write_layer(k, w, n, source=opened.manifest["layers"][k - 1].get("source"))
            del w
            if progress is not None:
                progress(k, total)
        return writer.commit(n_neurons=n, bias=opened.bias, ymax=opened.ymax, name=name,
                             source=origin)


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
    threads = sum(w.get("nthreads", 1) for w in worker_info(client).values())
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
