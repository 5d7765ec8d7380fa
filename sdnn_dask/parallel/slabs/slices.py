"""Per-part slices of a network store: what one part of a model-parallel run reads from disk.

A network too large for every worker to hold (or read) whole is run model-parallel from a
*slices folder*, written once per (store, partition) beside the store::

    STORE.slices/{method}-k{k}-{digest}/slices.json   format, the store and partition it
                                                      was cut for, dtypes, per-part files,
                                                      and the partition's volume per layer
        parts.npy               (L + 1, N) uint8/int16: the partition (every part reads the
                                two levels of a layer it runs, ~2 N bytes a layer)
        routes.npy              (L, k, k) int64: columns part q sends part p in layer l
        part{p}.index.npy       (L, 7 + k) int64: per layer, where part p's arrays are
        part{p}.columns.bin     W_l^T[own_p]'s columns (global neuron ids; uint16 when
                                N <= 65536), every layer one after the other
        part{p}.indptr.bin      int64 row pointers, only of layers whose rows differ in count
        part{p}.values.bin      float32 values, only of layers whose values differ
        part{p}.take.bin        positions in p's own level-(l-1) slab of the columns every
                                other part reads from it (same dtype as the columns)

so a part maps only its own files and the partition, and reads per layer about its share
of the layer's nonzeros (two bytes each at N <= 65536 with RadiX-Net's equal weights). On
load, the rest of the part's :class:`~.plans.LayerPlan` is derived: the owned neurons from
the partition, ``needed`` from the columns, the local transpose ``W_l[needed, own]``, the
dense step's order, the bias and the maps to and from the other parts; the result equals
:func:`~.plans.make_part_plans` on the network in memory, array for array.

:class:`SlicedPartPlan` is a :class:`~.plans.PartPlan` over such a folder, with its layers
either *resident* (all loaded at once) or *streamed* (each loaded as the part reaches it, a
window ahead in a background thread, dropped once passed). It pickles as its folder, part
and mode, and a process opens each part once (:func:`open_part`), so a worker holds one copy
whatever Dask does with the handle. Knows nothing of Dask.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ... import config
from ...core.csr import pattern_order, transpose
from ...data.streaming import StreamedNetwork
from ...partition.neurons import NeuronPartition
from .plans import LayerPlan, PartPlan
from .slice_kernels import gather_rows, needed_of, part_layer_csr

FORMAT = "sdnn-part-slices"
VERSION = 1
INDEX_FILE = "slices.json"
PARTS_FILE = "parts.npy"
ROUTES_FILE = "routes.npy"
#: Columns of a part's index table (then one take count per destination part).
INDEX_COLUMNS = ("columns_start", "nnz", "indptr_start", "row_nnz", "values_start",
                 "value_bits", "take_start")
_FIXED = len(INDEX_COLUMNS)
#: A thread that has not asked a streamed part for a layer this long no longer holds any.
CURSOR_SECONDS = 30.0
Progress = Callable[[int, int], None]


def partition_digest(partition: NeuronPartition) -> str:
    """SHA-256 (hex) of a partition's method, ``k`` and every level's owners."""
    digest = hashlib.sha256(f"{partition.method}|{partition.k}|{partition.parts.shape}"
                            .encode())
    for row in partition.parts:  # one level at a time: block partitions are broadcast views
        digest.update(np.ascontiguousarray(row, dtype=np.int32).tobytes())
    return digest.hexdigest()


def slices_folder(store_folder: os.PathLike | str, partition: NeuronPartition) -> Path:
    """Where the slices of ``partition`` of the store at ``store_folder`` are kept:
    ``STORE.slices/{method}-k{k}-{digest[:16]}`` beside the store."""
    store_folder = Path(store_folder)
    key = f"{partition.method}-k{partition.k}-{partition_digest(partition)[:16]}"
    return store_folder.parent / f"{store_folder.name}.slices" / key


def _index_dtype(n_neurons: int) -> np.dtype:
    return np.dtype("<u2") if n_neurons <= 1 << 16 else np.dtype("<i4")


def _parts_dtype(k: int) -> np.dtype:
    return np.dtype("u1") if k <= 255 else np.dtype("<i2")


def level_positions(owners: np.ndarray, k: int) -> np.ndarray:
    """Position (int64) of every neuron of a level within its owner's slab (neurons of
    one owner are numbered in increasing id)."""
    order = np.argsort(owners, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(owners, minlength=k))[:-1]])
    positions = np.empty(len(owners), np.int64)
    positions[order] = np.arange(len(owners)) - starts[owners[order]]
    return positions


def _store_identity(network: StreamedNetwork) -> dict[str, Any]:
    store = network.store
    manifest = (store.folder / "manifest.json").read_bytes()
    return {"folder": store.folder.name, "name": store.name, "n_neurons": store.n_neurons,
            "n_layers": network.n_layers, "edges": network.edges,
            "manifest_sha256": hashlib.sha256(manifest).hexdigest()}


def write_part_slices(network: StreamedNetwork, partition: NeuronPartition, *,
                      folder: os.PathLike | str | None = None,
                      progress: Progress | None = None) -> Path:
    """Write the per-part slices of ``partition`` of a streamed network's store.

    Reads the store once, layer by layer (never more than a layer and its transpose in
    memory), into a hidden folder renamed into place when whole; returns the folder
    (default :func:`slices_folder`). A folder already there for the same store and
    partition is kept as it is.

    Raises
    ------
    ValueError
        The partition is not for the network's neurons and layers.
    """
    n, n_layers = network.n_neurons, network.n_layers
    if partition.parts.shape != (n_layers + 1, n):
        raise ValueError(f"partition is for {partition.parts.shape[0] - 1} layers of "
                         f"{partition.parts.shape[1]} neurons; the network has {n_layers} "
                         f"layers of {n}")
    folder = Path(folder) if folder is not None else slices_folder(network.store.folder,
                                                                   partition)
    if (folder / INDEX_FILE).is_file():
        read_slices_index(folder, network)  # the same store and partition, or refused
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        _write_slices(tmp, network, partition, progress)
        with contextlib.suppress(FileExistsError, OSError):
            os.replace(tmp, folder)  # a concurrent writer may have won: keep theirs
        if not (folder / INDEX_FILE).is_file():
            raise OSError(f"{folder}: could not move the slices into place")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _write_slices(tmp: Path, network: StreamedNetwork, partition: NeuronPartition,
                  progress: Progress | None) -> None:
    n, n_layers, k = network.n_neurons, network.n_layers, partition.k
    index_dtype = _index_dtype(n)
    parts = np.asarray(partition.parts, dtype=_parts_dtype(k))
    np.save(tmp / PARTS_FILE, parts, allow_pickle=False)
    files = {p: {name: open(tmp / f"part{p}.{name}.bin", "xb")
                 for name in ("columns", "indptr", "values", "take")} for p in range(k)}
    offsets = {p: dict.fromkeys(("columns", "indptr", "values", "take"), 0)
               for p in range(k)}
    tables = {p: np.zeros((n_layers, _FIXED + k), np.int64) for p in range(k)}
    routes = np.zeros((n_layers, k, k), np.int64)
    volume = []
    try:
        for layer, w in enumerate(network.layers, start=1):
            wt = transpose(w)  # the compiled one-pass transpose the streamed kernel had
            wt_ptr, wt_idx, wt_data = wt.indptr.astype(np.int64), wt.indices, wt.data
            bits = wt_data.view(np.uint32)
            constant = bool(len(bits)) and bool((bits == bits[0]).all())
            owners_prev, owners = parts[layer - 1].astype(np.int64), parts[layer].astype(
                np.int64)
            prev_pos = level_positions(owners_prev, k)
            rows = {}
            for p in range(k):
                own = np.flatnonzero(owners == p)
                ptr, idx = gather_rows(wt_ptr, wt_idx, own)
                data = (np.full(len(idx), bits[0], np.uint32).view(np.float32) if constant
                        else gather_rows(wt_ptr, wt_data, own)[1])
                rows[p] = ((ptr, idx, data), needed_of(idx, n)[0])
            received = np.zeros(k, np.int64)
            takes: dict[int, list[np.ndarray]] = {q: [np.empty(0, np.int64)] * k
                                                  for q in range(k)}
            for p, (_, needed) in rows.items():
                source = owners_prev[needed]
                for q in np.unique(source):
                    if q != p:
                        takes[int(q)][p] = prev_pos[needed[source == q]]
                received[p] = int(np.count_nonzero(source != p))
            for p, ((ptr, idx, data), _) in rows.items():
                table, out, at = tables[p][layer - 1], files[p], offsets[p]
                counts = np.diff(ptr)
                table[0], table[1] = at["columns"], len(idx)
                at["columns"] += _write(out["columns"], idx, index_dtype)
                if len(counts) and (counts == counts[0]).all():
                    table[2], table[3] = -1, counts[0]
                elif not len(counts):
                    table[2], table[3] = -1, 0
                else:
                    table[2], table[3] = at["indptr"], -1
                    at["indptr"] += _write(out["indptr"], ptr, np.dtype("<i8"))
                part_bits = data.view(np.uint32)
                if len(part_bits) and (part_bits == part_bits[0]).all():
                    table[4], table[5] = -1, int(part_bits[0])
                else:
                    table[4], table[5] = at["values"], 0
                    at["values"] += _write(out["values"], data, np.dtype("<f4"))
                table[6] = at["take"]
                for d in range(k):
                    table[_FIXED + d] = routes[layer - 1, p, d] = len(takes[p][d])
                    at["take"] += _write(out["take"], takes[p][d], index_dtype)
            total = int(received.sum())
            volume.append((layer, total, total, int(received.max())))
            if progress is not None:
                progress(layer, n_layers)
    finally:
        for handles in files.values():
            for handle in handles.values():
                handle.flush()
                os.fsync(handle.fileno())
                handle.close()
    np.save(tmp / ROUTES_FILE, routes, allow_pickle=False)
    for p in range(k):
        np.save(tmp / f"part{p}.index.npy", tables[p], allow_pickle=False)
    sizes = {"columns": index_dtype.itemsize, "indptr": 8, "values": 4,
             "take": index_dtype.itemsize}
    entries = [{"part": p, "bytes": {name: offsets[p][name] * sizes[name]
                                     for name in offsets[p]}} for p in range(k)]
    index = {"format": FORMAT, "version": VERSION, "store": _store_identity(network),
             "partition": {"method": partition.method, "k": k, "params": partition.params,
                           "digest": partition_digest(partition),
                           "seconds": partition.seconds},
             "index_dtype": index_dtype.str, "parts_dtype": parts.dtype.str,
             "parts": entries, "volume": volume}
    (tmp / INDEX_FILE).write_text(json.dumps(index, indent=1))


def _write(handle, array: np.ndarray, dtype: np.dtype) -> int:
    """Append ``array`` as ``dtype`` to an open file; values written."""
    data = np.ascontiguousarray(array, dtype=dtype)
    handle.write(memoryview(data).cast("B"))
    return data.size


def read_slices_index(folder: Path, network: StreamedNetwork | None = None
                      ) -> dict[str, Any]:
    """A slices folder's ``slices.json``, checked (and against ``network``'s store).

    Raises
    ------
    ValueError
        Missing, another format or version, or cut from another store or layer count
        (the message names the folder and says to delete it).
    """
    path = Path(folder) / INDEX_FILE
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a readable slices index ({error})") from None
    if index.get("format") != FORMAT or index.get("version") != VERSION:
        raise ValueError(f"{path}: {index.get('format')!r} version {index.get('version')!r}"
                         f"; expected {FORMAT} version {VERSION} (delete the folder to "
                         "cut the slices again)")
    if network is not None and index["store"] != _store_identity(network):
        raise ValueError(f"{path}: cut from another store or layer count "
                         f"({index['store']}); delete {folder} to cut it again")
    return index


def slices_volume(folder: os.PathLike | str) -> pd.DataFrame:
    """The partition's volume per layer, as :meth:`NeuronPartition.volume` gives it,
    recorded when the slices were cut (no pass over the weights)."""
    index = read_slices_index(Path(folder))
    return pd.DataFrame(index["volume"], columns=["layer", "km1", "volume", "max_received"])


class _PartFiles:
    """One part's maps: its index table, its four array files and the partition."""

    def __init__(self, folder: Path, part: int):
        index = read_slices_index(folder)
        self.folder, self.part = folder, part
        self.k = index["partition"]["k"]
        if not 0 <= part < self.k:
            raise ValueError(f"part must be in [0, {self.k}), got {part}")
        self.n_neurons = index["store"]["n_neurons"]
        self.n_layers = index["store"]["n_layers"]
        self.index_dtype = np.dtype(index["index_dtype"])
        self.table = np.load(folder / f"part{part}.index.npy", allow_pickle=False)
        self.routes = np.load(folder / ROUTES_FILE, allow_pickle=False)
        sizes = index["parts"][part]["bytes"]
        self.files = [folder / f"part{part}.index.npy", folder / PARTS_FILE,
                      folder / ROUTES_FILE]
        # read with pread into arrays of our own, not mapped: a map's pages would stay in
        # the worker's resident memory (and its memory limit) after the layer is copied
        parts_path = folder / PARTS_FILE
        with open(parts_path, "rb") as handle:
            fmt = np.lib.format
            read = (fmt.read_array_header_1_0 if fmt.read_magic(handle) == (1, 0)
                    else fmt.read_array_header_2_0)
            shape, _, dtype = read(handle)
            self._parts_offset = handle.tell()
        self.parts_dtype = np.dtype(dtype)
        self.n_levels = shape[0]
        self._fds = {"parts": os.open(parts_path, os.O_RDONLY)}
        self._dtypes = {"parts": self.parts_dtype}
        for name, dtype in (("columns", self.index_dtype), ("indptr", np.dtype("<i8")),
                            ("values", np.dtype("<f4")), ("take", self.index_dtype)):
            path = folder / f"part{part}.{name}.bin"
            self.files.append(path)
            if path.stat().st_size != sizes[name]:
                raise ValueError(f"{path}: {path.stat().st_size} bytes; {INDEX_FILE} says "
                                 f"{sizes[name]} (delete {folder} to cut it again)")
            self._fds[name] = os.open(path, os.O_RDONLY)
            self._dtypes[name] = dtype
        self.bytes_read = 0
        self._lock = threading.Lock()

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", {}).values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def read(self, name: str, start: int, count: int) -> np.ndarray:
        """``count`` values of the file ``name`` from value ``start``, into a new array."""
        dtype = self._dtypes[name]
        out = np.empty(count, dtype)
        offset = start * dtype.itemsize + (self._parts_offset if name == "parts" else 0)
        view, done = memoryview(out).cast("B"), 0
        while done < out.nbytes:
            got = os.preadv(self._fds[name], [view[done:]], offset + done)
            if got <= 0:
                raise ValueError(f"{self.folder}: part{self.part}.{name} ends early (delete "
                                 "the folder to cut it again)")
            done += got
        return out

    def level(self, level: int) -> np.ndarray:
        """The owners of level ``level``'s neurons (``-1``: the last)."""
        level = level % self.n_levels
        return self.read("parts", level * self.n_neurons, self.n_neurons)

    def layer_bytes(self, layer: int, n_own: int | None = None) -> int:
        """Bytes of this part's files (and the partition's two levels) a layer reads
        (``n_own``: the part's neurons of the layer's level, read from the partition if
        not given)."""
        row = self.table[layer - 1]
        own = int(np.count_nonzero(self.level(layer) == self.part)) if n_own is None \
            else n_own
        total = (row[1] + row[_FIXED:].sum()) * self.index_dtype.itemsize
        total += (own + 1) * 8 if row[2] >= 0 else 0
        total += row[1] * 4 if row[4] >= 0 else 0
        return int(total + 2 * self.n_neurons * self.parts_dtype.itemsize)

    def load(self, layer: int, bias: np.ndarray, positions: Callable[[int], np.ndarray]
             ) -> LayerPlan:
        """Layer ``layer``'s :class:`LayerPlan` of this part, read from the maps."""
        n, k, p = self.n_neurons, self.k, self.part
        row = self.table[layer - 1]
        owners_prev = self.level(layer - 1).astype(np.int64)
        own = np.flatnonzero(self.level(layer) == p)
        start, nnz = int(row[0]), int(row[1])
        columns = self.read("columns", start, nnz)
        if row[2] < 0:
            indptr = np.arange(len(own) + 1, dtype=np.int64) * int(row[3])
        else:
            indptr = self.read("indptr", int(row[2]), len(own) + 1)
        needed, wt_ptr, wt_idx, w_ptr, w_idx, w_from = part_layer_csr(columns, indptr, n)
        if row[4] < 0:  # one value: both matrices share the array (the kernels only read)
            wt_data = w_data = np.full(nnz, np.uint32(row[5]), np.uint32).view(np.float32)
        else:
            wt_data = self.read("values", int(row[4]), nnz)
            w_data = wt_data[w_from]
        wt = _canonical(wt_data, wt_idx, wt_ptr, (len(own), len(needed)))
        w = _canonical(w_data, w_idx, w_ptr, (len(needed), len(own)))
        source = owners_prev[needed]
        put = {int(q): np.flatnonzero(source == q) for q in np.unique(source)}
        prev_pos = positions(layer - 1)
        fetch = {q: prev_pos[needed[at]] for q, at in put.items()}
        take, at = {}, int(row[6])
        for d in range(k):
            count = int(row[_FIXED + d])
            if count:
                take[d] = self.read("take", at, count).astype(np.int64)
            at += count
        if p in put:
            take[p] = fetch[p]
        with self._lock:
            self.bytes_read += self.layer_bytes(layer, len(own))
        return LayerPlan(own=own, needed=needed, w=w, wt=wt,
                         order=pattern_order(wt), bias=np.ascontiguousarray(bias[own]),
                         put=put, take=take, fetch=fetch)


def _canonical(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
               shape: tuple[int, int]) -> sp.csr_matrix:
    """A CSR over arrays known canonical (sorted, no duplicates or zeros): no checks."""
    matrix = sp.csr_matrix((data, indices, indptr), shape=shape, copy=False)
    matrix.has_sorted_indices = matrix.has_canonical_format = True
    return matrix


class _Layers(Sequence):
    """A part's layer plans: all in memory (resident), or loaded ``window`` ahead of the
    one asked for and dropped once passed (streamed)."""

    def __init__(self, files: _PartFiles, bias: np.ndarray, streamed: bool, window: int):
        self._files, self._bias, self.streamed = files, bias, streamed
        self._window = max(1, window)
        self._positions: OrderedDict[int, np.ndarray] = OrderedDict()
        self._held: dict[int, LayerPlan | Future] = {}
        self._cursors: dict[int, tuple[int, float]] = {}  # thread -> (layer, when)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="sdnn-slices") if streamed \
            else None

    def load_all(self) -> None:
        """Load every layer now (resident; a streamed part loads as it goes)."""
        if not self.streamed:
            for layer in range(1, self._files.n_layers + 1):
                if layer not in self._held:
                    self._held[layer] = self._load(layer)

    def _position(self, level: int) -> np.ndarray:
        with self._lock:
            if level in self._positions:
                return self._positions[level]
        owners = self._files.level(level).astype(np.int64)
        positions = level_positions(owners, self._files.k)
        with self._lock:
            self._positions[level] = positions
            while len(self._positions) > 4:
                self._positions.popitem(last=False)
        return positions

    def _load(self, layer: int) -> LayerPlan:
        return self._files.load(layer, self._bias, self._position)

    def __len__(self) -> int:
        return self._files.n_layers

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"layer index {i} out of range for {n} layers")
        layer = i % n + 1
        if not self.streamed:
            if layer not in self._held:
                self._held[layer] = self._load(layer)
            return self._held[layer]
        with self._lock:
            # where every thread reading these layers is (the hybrid's row groups run one
            # part in one process, each at its own layer): keep what any of them still
            # needs, so they share each load rather than evict each other's
            now = time.monotonic()
            self._cursors[threading.get_ident()] = (layer, now)
            for thread, (_, seen) in list(self._cursors.items()):
                if now - seen > CURSOR_SECONDS:
                    del self._cursors[thread]  # a run that ended, or was abandoned
            at = [x for x, _ in self._cursors.values()]
            held = self._held.get(layer)
            if held is None:
                held = self._held[layer] = self._pool.submit(self._load, layer)
            for ahead in range(layer + 1, min(n, layer + self._window) + 1):
                if ahead not in self._held:
                    self._held[ahead] = self._pool.submit(self._load, ahead)
            for old in [x for x in self._held
                        if not any(c - 1 <= x <= c + self._window for c in at)]:
                del self._held[old]  # passed by every reader (or far ahead of them)
        plan = held.result() if isinstance(held, Future) else held
        return plan

    def held_bytes(self) -> int:
        """Bytes of the layer plans held now."""
        arrays: dict[int, int] = {}  # by id: w and wt may share their values
        for held in list(self._held.values()):
            plan = held.result() if isinstance(held, Future) else held
            for array in (plan.w.data, plan.w.indices, plan.w.indptr, plan.wt.data,
                          plan.wt.indices, plan.wt.indptr, plan.own, plan.needed, plan.order):
                arrays[id(array)] = array.nbytes
        return sum(arrays.values())


class SlicedPartPlan(PartPlan):
    """A :class:`~.plans.PartPlan` whose layers come from a slices folder (see the module).

    Built by :func:`open_part` (one per process, folder, part and mode). ``streamed``
    loads each layer as the part reaches it; else every layer is loaded at once.
    Pickles as ``(folder, part, streamed, window)``.
    """

    def __init__(self, folder: Path, part: int, *, bias: np.ndarray, ymax: float,
                 streamed: bool, window: int, dense_threshold: float, chunk_bytes: int,
                 min_chunk_rows: int = 1):
        self.folder, self.streamed, self.window = Path(folder), streamed, window
        self._files = _PartFiles(self.folder, part)
        self._bias, self._ymax = bias, ymax
        inputs = np.flatnonzero(self._files.level(0) == part)
        layers = _Layers(self._files, np.asarray(bias, np.float32), streamed, window)
        super().__init__(part, self._files.k, inputs, layers, float(ymax),
                         float(dense_threshold), int(chunk_bytes), int(min_chunk_rows))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (str(self.folder), self.part, self._bias, self._ymax, self.streamed,
                          self.window, self.dense_threshold, self.chunk_bytes,
                          self.min_chunk_rows))

    @property
    def nbytes(self) -> int:
        """Bytes of the layer plans it holds now (all of them when resident)."""
        return self.layers.held_bytes()

    @property
    def bytes_read(self) -> int:
        """Bytes of the slices folder this part has read so far in this process."""
        return self._files.bytes_read

    @property
    def files(self) -> list[Path]:
        """The files this part maps (its own and the partition's, nothing of other
        parts)."""
        return list(self._files.files)

    @property
    def last_own(self) -> np.ndarray:
        """The neurons of the last level this part owns (from the partition)."""
        return np.flatnonzero(self._files.level(-1) == self.part)

    def sources(self, layer: int) -> list[int]:
        """Parts (other than this one) that send columns to this part in ``layer``."""
        sends = self._files.routes[layer - 1, :, self.part]
        return [q for q in range(self.k) if q != self.part and sends[q] > 0]

    def destinations(self, layer: int) -> list[int]:
        """Parts (other than this one) this part sends columns to in ``layer``."""
        sends = self._files.routes[layer - 1, self.part]
        return [d for d in range(self.k) if d != self.part and sends[d] > 0]


_OPEN: dict[tuple, SlicedPartPlan] = {}
_OPEN_LOCK = threading.Lock()


def open_part(folder: os.PathLike | str, part: int, bias: np.ndarray, ymax: float, *,
              streamed: bool, window: int | None = None,
              dense_threshold: float | None = None,
              chunk_bytes: int | None = None,
              min_chunk_rows: int | None = None) -> SlicedPartPlan:
    """Part ``part`` of a slices folder in this process, opened once per folder, part and
    mode (later calls return the same plan); opening a part of another folder closes the
    process's parts of every other folder."""
    window = int(config.get("store.window") if window is None else window)
    if dense_threshold is None:
        dense_threshold = config.get("kernel.dense-threshold")
    if chunk_bytes is None:
        chunk_bytes = config.get("kernel.chunk-bytes")
        if min_chunk_rows is None:
            min_chunk_rows = int(config.get("kernel.chunk-min-rows") or 1)
    min_chunk_rows = max(1, int(min_chunk_rows or 1))
    folder = Path(folder).resolve()
    key = (str(folder), int(part), bool(streamed), window, float(dense_threshold),
           int(chunk_bytes), min_chunk_rows)
    with _OPEN_LOCK:
        for other in [x for x in _OPEN if x[0] != key[0]]:
            del _OPEN[other]
        if key not in _OPEN:
            _OPEN[key] = SlicedPartPlan(folder, int(part), bias=bias, ymax=ymax,
                                        streamed=bool(streamed), window=window,
                                        dense_threshold=float(dense_threshold),
                                        chunk_bytes=int(chunk_bytes),
                                        min_chunk_rows=min_chunk_rows)
        plan = _OPEN[key]
    plan.layers.load_all()  # resident: every layer now, not in the run's first step
    return plan


def _reopen(folder: str, part: int, bias: np.ndarray, ymax: float, streamed: bool,
            window: int, dense_threshold: float, chunk_bytes: int,
            min_chunk_rows: int) -> SlicedPartPlan:
    return open_part(folder, part, bias, ymax, streamed=streamed, window=window,
                     dense_threshold=dense_threshold, chunk_bytes=chunk_bytes,
                     min_chunk_rows=min_chunk_rows)


def close_parts() -> None:
    """Forget every part this process opened (their memory goes with the last user)."""
    with _OPEN_LOCK:
        _OPEN.clear()


def part_resident_bytes(folder: os.PathLike | str, part: int) -> int:
    """Bytes part ``part`` holds with every layer resident: ``W_l[needed, own]`` and its
    transpose (int32 indices, float32 values, int32 row pointers) and its index maps,
    from the index table (nothing is loaded)."""
    folder = Path(folder)
    index = read_slices_index(folder)
    table = np.load(folder / f"part{part}.index.npy", allow_pickle=False)
    n, n_layers = index["store"]["n_neurons"], index["store"]["n_layers"]
    nnz = int(table[:, 1].sum())
    return 2 * 8 * nnz + n_layers * (4 * 8 * n // index["partition"]["k"] + 8 * n)


def open_parts(folder: os.PathLike | str) -> list[dict[str, Any]]:
    """The parts of ``folder`` this process has open: ``part``, ``weights`` (resident or
    streamed), ``weight_bytes`` held now and ``store_bytes_read`` so far."""
    folder = str(Path(folder).resolve())
    with _OPEN_LOCK:
        plans = [plan for key, plan in _OPEN.items() if key[0] == folder]
    return [{"part": plan.part, "weights": "streamed" if plan.streamed else "resident",
             "weight_bytes": plan.nbytes, "store_bytes_read": plan.bytes_read}
            for plan in plans]
