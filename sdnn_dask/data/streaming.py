"""A network streamed from a store: its layers read once, in order, a bounded window ahead.

A network larger than memory cannot be held by every worker (nor by one process), so a
run over it goes layer by layer: every row a process holds through layer 1, then all of
them through layer 2, ... (:func:`~sdnn_dask.core.kernels.stream_blocks`). A
:class:`StreamedNetwork` is the network such a run sees. It has a
:class:`~sdnn_dask.core.network.Network`'s attributes (N, L, bias, clamp, name, edges) but no
layers in memory: :meth:`StreamedNetwork.kernel_layers` yields each layer's weights and an
order of its inputs, prepared by two background threads ``window`` layers ahead of the one
computing (reading the files, checking them on their first read), so reading overlaps
compute and at most ``window + 1`` layers are held at a time. No transpose is built: the
kernel's dense step walks ``W`` itself.

The layers are read from memory maps of the store's files, so processes on one machine
that stream the same store read the same pages of the operating system's page cache
rather than each a private copy; on a cluster they read from the shared file system. (A
version-2 store's compact files, uint16 columns and no file for uniform rows or a
constant value, are what is read and cached; each process decodes them.) A streamed network
pickles as its store's folder, layer count, window and whether layers are checked against
their SHA-256 (``sdnn.store.verify``, read once where the network is made: the client): a
worker given one opens the store itself (once per process) and checks what it reads.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import scipy.sparse as sp

from .. import config
from ..core.kernels import InputOrder
from ..core.kernels.steps import LazyInputOrder, StoredLayer
from .store import NetworkStore, open_store, writable_array

__all__ = ["StreamedNetwork", "bytes_read", "resident_bytes"]

PathLike = str | os.PathLike

#: Layers beyond the prepared window whose files are asked of the disk ahead (page cache
#: only: a RadiX-Net layer at N = 65536 is 4.2 MB in a version-2 store, 25 MB in version 1).
READ_AHEAD = 4

#: Stores opened in this process, by folder, manifest time and hash checking: a worker
#: opens each once.
_OPENED: dict[tuple[str, int, bool], NetworkStore] = {}
_OPENED_LOCK = threading.Lock()

#: Bytes of store files this process has read for the kernel, by store folder.
_READ: dict[str, int] = {}


def bytes_read(folder: PathLike) -> int:
    """Bytes of the store at ``folder`` this process has read for streamed runs so far
    (each layer's files as the manifest lists them, counted when the layer is prepared)."""
    return _READ.get(str(Path(folder).resolve()), 0)


def _opened(folder: Path, check_hashes: bool | None = None) -> NetworkStore:
    if check_hashes is None:
        check_hashes = bool(config.get("store.verify", True))
    key = (str(folder.resolve()), (folder / "manifest.json").stat().st_mtime_ns,
           bool(check_hashes))
    with _OPENED_LOCK:
        if key not in _OPENED:
            _OPENED[key] = open_store(folder, check_hashes=check_hashes)
        return _OPENED[key]


def resident_bytes(store: NetworkStore, n_layers: int | None = None) -> int:
    """Bytes a process holds to keep the first ``n_layers`` layers in memory for the
    kernel: each layer's CSR and its transpose (int32 indices, float32 values), and an
    output order (int64) per layer."""
    n_layers = store.n_layers if n_layers is None else n_layers
    nnz = sum(entry["nnz"] for entry in store.manifest["layers"][:n_layers])
    per_matrix = 8 * nnz + 4 * (store.n_neurons + 1) * n_layers
    return 2 * per_matrix + 8 * store.n_neurons * n_layers


class StreamedNetwork:
    """The first ``n_layers`` layers of a network store, read as a run reaches them.

    Parameters
    ----------
    store
        A :class:`~sdnn_dask.data.store.NetworkStore`, or its folder.
    n_layers
        Layers to run (default: all the store holds).
    window
        Layers prepared ahead of the one computing (default ``sdnn.store.window``).
    check_hashes
        Whether the processes that read the layers check them against their SHA-256 on
        their first read (default: the store's own setting if a store is given, else
        ``sdnn.store.verify``).

    Examples
    --------
    >>> from sdnn_dask.core.kernels import stream_blocks  # doctest: +SKIP
    >>> net = StreamedNetwork("data/stores/radixnet-65536-1920")  # doctest: +SKIP
    >>> out, = stream_blocks(net, [inputs])  # doctest: +SKIP
    """

    def __init__(self, store: NetworkStore | PathLike, n_layers: int | None = None,
                 window: int | None = None, check_hashes: bool | None = None):
        if check_hashes is None and isinstance(store, NetworkStore):
            check_hashes = store.check_hashes
        if check_hashes is None:  # resolved here, once: a worker is given the answer
            check_hashes = bool(config.get("store.verify", True))
        self.check_hashes = bool(check_hashes)
        self.store = (store if isinstance(store, NetworkStore)
                      and store.check_hashes == self.check_hashes
                      else _opened(Path(store.folder if isinstance(store, NetworkStore)
                                        else store), self.check_hashes))
        held = self.store.n_layers
        self.n_layers = held if n_layers is None else int(n_layers)
        if not 1 <= self.n_layers <= held:
            raise ValueError(f"n_layers must be in 1..{held} (the store's layers), got "
                             f"{n_layers}")
        self.window = int(config.get("store.window") if window is None else window)
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        self.n_neurons = self.store.n_neurons
        self.bias = self.store.bias
        self.ymax = self.store.ymax
        self.name = self.store.name if self.n_layers == held else \
            f"{self.store.name} (layers 1-{self.n_layers})"
        self.edges = int(sum(e["nnz"] for e in self.store.manifest["layers"][: self.n_layers]))
        self._class_layers: dict = {}

    @property
    def class_layers(self) -> dict:
        """Layer index (0-based) -> its output neurons in classes, or ``None``, as the
        kernel found them for a run's first passes of rows
        (:mod:`sdnn_dask.core.kernels.classes`); kept in this process, never pickled."""
        return self._class_layers

    def __repr__(self) -> str:
        return (f"StreamedNetwork({str(self.store.folder)!r}, n_layers={self.n_layers}, "
                f"window={self.window})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (StreamedNetwork, (str(self.store.folder), self.n_layers, self.window,
                                  self.check_hashes))

    @property
    def layers(self) -> _Layers:
        """The weights ``W_1 .. W_L``, read in order as they are iterated (read-only maps),
        for code that only walks them, such as the reference."""
        return _Layers(self)

    def resident_bytes(self) -> int:
        """Bytes the kernel would hold with every layer in memory (see
        :func:`resident_bytes`)."""
        return resident_bytes(self.store, self.n_layers)

    def kernel_layers(self, start: int = 0
                      ) -> Iterator[tuple[sp.csr_matrix | StoredLayer, None, InputOrder]]:
        """Each layer's ``(W, None, input order)``, in order, as the kernel needs them,
        from layer ``start + 1`` on (``start`` layers already done).

        ``W`` is canonical CSR, or, for a layer a version-2 store keeps as uniform rows of
        one value (RadiX-Net), a :class:`~sdnn_dask.core.kernels.StoredLayer`: its
        columns' file as stored, checked, which the sparse step takes as it is (a deep
        layer's one or few rows), decoded in the computing thread only when a step needs
        canonical CSR.

        No transpose: the kernel's dense step then walks ``W`` itself
        (:func:`~sdnn_dask.core.kernels.dense_step_w`), visiting the inputs in an order that
        groups those feeding the same outputs, four at a time where four feed the same
        ones; measured at N = 65536 with 34 live rows (``benchmarks/bench_dense_w.py``),
        that step is faster than the one on ``W^T``, and building ``W^T`` would cost more
        than either, in every worker. Two background threads prepare the layers
        ``window`` ahead (read, checked on the first read, copied out of the maps, since
        the compiled kernels take writable arrays, unless the store decoded them into
        new arrays already; the inputs' order), and the files of
        :data:`READ_AHEAD` more layers are asked of the disk. A layer is dropped as the
        caller moves on; closing the iterator stops the threads.
        """

        folder = str(self.store.folder.resolve())
        layers = self.store.manifest["layers"]

        def canonical(k: int) -> sp.csr_matrix:
            read = self.store.layer(k)  # checked on its first read
            w = sp.csr_matrix((writable_array(read.data), writable_array(read.indices),
                               writable_array(read.indptr)), shape=read.shape, copy=False)
            w.has_sorted_indices = w.has_canonical_format = True
            return w

        def prepare(k: int) -> tuple[sp.csr_matrix | StoredLayer, None, InputOrder]:
            uniform = self.store.uniform_layer(k)  # checked on its first read
            with _OPENED_LOCK:
                _READ[folder] = _READ.get(folder, 0) + sum(
                    file["bytes"] for file in layers[k - 1]["files"].values())
            n = self.n_neurons
            w = (canonical(k) if uniform is None  # decoded only if a step asks for it
                 else StoredLayer(uniform, partial(canonical, k), (n, n)))
            ahead = k + self.window + READ_AHEAD
            if ahead <= self.n_layers:  # the disk reads on while these are prepared
                self.store.read_ahead(ahead)
            return w, None, LazyInputOrder(w)  # the dense step alone needs it

        with ThreadPoolExecutor(2, thread_name_prefix="sdnn-stream") as pool:
            ahead = deque(pool.submit(prepare, k) for k in
                          range(start + 1, min(start + self.window, self.n_layers) + 1))
            following = start + len(ahead) + 1
            try:
                while ahead:
                    layer = ahead.popleft().result()
                    if following <= self.n_layers:
                        ahead.append(pool.submit(prepare, following))
                        following += 1
                    yield layer
                    del layer
            finally:
                for future in ahead:
                    future.cancel()


class _Layers:
    """``W_1 .. W_L`` of a streamed network: a length, and iteration in order."""

    def __init__(self, network: StreamedNetwork):
        self._network = network

    def __len__(self) -> int:
        return self._network.n_layers

    def __iter__(self) -> Iterator[sp.csr_matrix]:
        layers = self._network.store.layers(window=self._network.window)
        try:
            for _, w in zip(range(self._network.n_layers), layers, strict=False):
                yield w
        finally:
            layers.close()
