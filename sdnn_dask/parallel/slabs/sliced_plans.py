"""A part's plan read from its own slices (:mod:`.slices`): what one part of a
model-parallel run on a store holds.

:class:`SlicedPartPlan` is a :class:`~.plans.PartPlan` over a slices folder, with its layers
either *resident* (all loaded at once) or *streamed* (each loaded as the part reaches it, a
window ahead in a background thread, dropped once passed). It pickles as its folder, part
and mode, and a process opens each part once (:func:`open_part`), so a worker holds one copy
whatever Dask does with the handle.

A part maps only its own files and the partition, and reads per layer about its share of
the layer's nonzeros. On load, the rest of the part's :class:`~.plans.LayerPlan` is
derived: the owned neurons from the partition, ``needed`` from the columns, the local
transpose ``W_l[needed, own]``, the dense step's order, the bias and the maps to and from
the other parts; the result equals :func:`~.plans.make_part_plans` on the network in
memory, array for array. Everything is checked as it is read (:mod:`.slice_checks`): the
small files when a part is opened, each level of the partition and each layer before any
compiled pass sees it; a :exc:`~.slice_checks.SliceDamagedError` closes this process's
parts of the folder. Knows nothing of Dask.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ... import config
from ...core.csr import pattern_order
from ...partition.routing import sources_of
from .plans import LayerPlan, PartPlan
from .slice_checks import (
    FIXED_COLUMNS,
    INDEX_FILE,
    PART_ARRAYS,
    PARTS_FILE,
    PARTS_SUMS_FILE,
    ROUTES_FILE,
    SUM_BYTES,
    SliceDamagedError,
    check_layer,
    check_level,
    check_table,
    load_checked,
    read_slices_index,
)
from .slice_kernels import part_layer_csr

#: A thread that has not asked a streamed part for a layer this long no longer holds any.
CURSOR_SECONDS = 30.0


def level_positions(owners: np.ndarray, k: int) -> np.ndarray:
    """Position (int64) of every neuron of a level within its owner's slab (neurons of
    one owner are numbered in increasing id)."""
    order = np.argsort(owners, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(owners, minlength=k))[:-1]])
    positions = np.empty(len(owners), np.int64)
    positions[order] = np.arange(len(owners)) - starts[owners[order]]
    return positions


class _PartFiles:
    """One part's files: its index table and checksums, its four array files and the
    partition, checked as they are read (see the module)."""

    def __init__(self, folder: Path, part: int, cut: str | None = None):
        index = read_slices_index(folder)
        if cut is not None and index["cut"] != cut:
            raise SliceDamagedError(folder / INDEX_FILE, f"cut {index['cut']}, not the cut "
                                    f"{cut} the run placed: the slices changed since")
        self.folder, self.part, self.cut = folder, part, index["cut"]
        self.k = index["partition"]["k"]
        if not 0 <= part < self.k:
            raise ValueError(f"part must be in [0, {self.k}), got {part}")
        self.n_neurons = index["store"]["n_neurons"]
        self.n_layers = index["store"]["n_layers"]
        self.index_dtype = np.dtype(index["index_dtype"])
        own = index["parts"][part]["sha256"]
        self.table = load_checked(folder / f"part{part}.index.npy",
                                   own[f"part{part}.index.npy"])
        self.sums = load_checked(folder / f"part{part}.sums.npy",
                                  own[f"part{part}.sums.npy"])
        self.routes = load_checked(folder / ROUTES_FILE, index["sha256"][ROUTES_FILE])
        self.level_sums = load_checked(folder / PARTS_SUMS_FILE,
                                        index["sha256"][PARTS_SUMS_FILE])
        sizes = index["parts"][part]["bytes"]
        self.files = [folder / f"part{part}.index.npy", folder / f"part{part}.sums.npy",
                      folder / PARTS_FILE, folder / PARTS_SUMS_FILE, folder / ROUTES_FILE]
        # read with pread into arrays of our own, not mapped: a map's pages would stay in
        # the worker's resident memory (and its memory limit) after the layer is copied
        parts_path = folder / PARTS_FILE
        try:
            with open(parts_path, "rb") as handle:
                fmt = np.lib.format
                read = (fmt.read_array_header_1_0 if fmt.read_magic(handle) == (1, 0)
                        else fmt.read_array_header_2_0)
                shape, _, dtype = read(handle)
                self._parts_offset = handle.tell()
        except Exception as error:  # anything a damaged header raises
            raise SliceDamagedError(parts_path, f"not a readable .npy file ({error})"
                                    ) from None
        self.parts_dtype = np.dtype(dtype)
        self.n_levels = shape[0] if len(shape) == 2 else -1
        expected = {"parts": (self.n_layers + 1, self.n_neurons),
                    "routes": (self.n_layers, self.k, self.k),
                    "table": (self.n_layers, FIXED_COLUMNS + self.k),
                    "sums": (self.n_layers, len(PART_ARRAYS), SUM_BYTES),
                    "level_sums": (self.n_layers + 1, SUM_BYTES)}
        found = {"parts": tuple(shape), "routes": self.routes.shape,
                 "table": self.table.shape, "sums": self.sums.shape,
                 "level_sums": self.level_sums.shape}
        if found != expected or self.parts_dtype != np.dtype(index["parts_dtype"]) or \
                self.parts_dtype.kind not in "iu":
            raise SliceDamagedError(folder, f"arrays of shapes {found}; expected {expected} "
                                    f"for {self.n_layers} layers of {self.n_neurons} neurons "
                                    f"in {self.k} parts")
        self._fds = {"parts": os.open(parts_path, os.O_RDONLY)}
        self._dtypes = {"parts": self.parts_dtype}
        self._sizes = {"parts": self.n_levels * self.n_neurons}
        for name, dtype in (("columns", self.index_dtype), ("indptr", np.dtype("<i8")),
                            ("values", np.dtype("<f4")), ("take", self.index_dtype)):
            path = folder / f"part{part}.{name}.bin"
            self.files.append(path)
            try:
                size = path.stat().st_size
            except OSError as error:
                raise SliceDamagedError(path, f"cannot be read ({error.strerror or error})"
                                        ) from None
            if size != sizes[name]:
                raise SliceDamagedError(path, f"{size} bytes; {INDEX_FILE} says "
                                        f"{sizes[name]}")
            self._fds[name] = os.open(path, os.O_RDONLY)
            self._dtypes[name] = dtype
            self._sizes[name] = size // dtype.itemsize
        check_table(self.table, self.routes, part, self._sizes, self.files[0])
        self.bytes_read = 0
        self._lock = threading.Lock()

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", {}).values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def path(self, name: str) -> Path:
        """The file ``name`` (``"columns"``, ..., or ``"parts"``) is read from."""
        return self.folder / (PARTS_FILE if name == "parts" else
                              f"part{self.part}.{name}.bin")

    def read(self, name: str, start: int, count: int) -> np.ndarray:
        """``count`` values of the file ``name`` from value ``start``, into a new array."""
        dtype = self._dtypes[name]
        if start < 0 or count < 0 or start + count > self._sizes[name]:
            raise SliceDamagedError(self.path(name), f"values {start}..{start + count - 1} "
                                    f"asked of {self._sizes[name]}")
        out = np.empty(count, dtype)
        offset = start * dtype.itemsize + (self._parts_offset if name == "parts" else 0)
        view, done = memoryview(out).cast("B"), 0
        while done < out.nbytes:
            got = os.preadv(self._fds[name], [view[done:]], offset + done)
            if got <= 0:
                raise SliceDamagedError(self.path(name), "ends early")
            done += got
        return out

    def level(self, level: int) -> np.ndarray:
        """The owners of level ``level``'s neurons (``-1``: the last), checked against the
        level's SHA-256 and to be parts ``0..k-1``."""
        level = level % self.n_levels
        owners = self.read("parts", level * self.n_neurons, self.n_neurons)
        check_level(owners, level, self.level_sums[level], self.k, self.path("parts"))
        return owners

    def layer_bytes(self, layer: int, n_own: int | None = None) -> int:
        """Bytes of this part's files (and the partition's two levels) a layer reads
        (``n_own``: the part's neurons of the layer's level, read from the partition if
        not given)."""
        row = self.table[layer - 1]
        own = int(np.count_nonzero(self.level(layer) == self.part)) if n_own is None \
            else n_own
        total = (row[1] + row[FIXED_COLUMNS:].sum()) * self.index_dtype.itemsize
        total += (own + 1) * 8 if row[2] >= 0 else 0
        total += row[1] * 4 if row[4] >= 0 else 0
        return int(total + 2 * self.n_neurons * self.parts_dtype.itemsize)

    def load(self, layer: int, bias: np.ndarray, positions: Callable[[int], np.ndarray]
             ) -> LayerPlan:
        """Layer ``layer``'s :class:`LayerPlan` of this part, read and checked (its
        checksum, then its ranges) before any compiled pass sees it.

        Raises
        ------
        SliceDamagedError
            Naming the file that fails (this process's parts of the folder are closed).
        """
        try:
            return self._load(layer, bias, positions)
        except SliceDamagedError:
            _forget(self.folder)  # a later open reads the folder (cut again) afresh
            raise

    def _load(self, layer: int, bias: np.ndarray, positions: Callable[[int], np.ndarray]
              ) -> LayerPlan:
        n, k, p = self.n_neurons, self.k, self.part
        row = self.table[layer - 1]
        owners_prev = self.level(layer - 1).astype(np.int64)
        own = np.flatnonzero(self.level(layer) == p)
        n_prev = int(np.count_nonzero(owners_prev == p))  # p's slab of level l - 1
        start, nnz = int(row[0]), int(row[1])
        # as the slices were written
        digest = {name: hashlib.sha256() for name in PART_ARRAYS}
        columns = self.read("columns", start, nnz)
        digest["columns"].update(memoryview(columns).cast("B"))
        if row[2] < 0:
            indptr = np.arange(len(own) + 1, dtype=np.int64) * int(row[3])
        else:
            indptr = self.read("indptr", int(row[2]), len(own) + 1)
            digest["indptr"].update(memoryview(indptr).cast("B"))
        values = None
        if row[4] >= 0:
            values = self.read("values", int(row[4]), nnz)
            digest["values"].update(memoryview(values).cast("B"))
        takes, at = {}, int(row[6])
        for d in range(k):
            count = int(row[FIXED_COLUMNS + d])
            if count:
                takes[d] = self.read("take", at, count)
                digest["take"].update(memoryview(takes[d]).cast("B"))
            at += count
        paths = {name: self.path(name) for name in PART_ARRAYS}
        if row[2] < 0:
            paths["indptr"] = self.files[0]  # implicit row pointers: the index table's
        check_layer(layer, columns, indptr, takes, digest, self.sums[layer - 1],
                    n_neurons=n, n_prev=n_prev, paths=paths)
        needed, wt_ptr, wt_idx, w_ptr, w_idx, w_from = part_layer_csr(columns, indptr, n)
        if values is None:  # one value: both matrices share the array (the kernels only read)
            wt_data = w_data = np.full(nnz, np.uint32(row[5]), np.uint32).view(np.float32)
        else:
            wt_data = values
            w_data = wt_data[w_from]
        wt = _canonical(wt_data, wt_idx, wt_ptr, (len(own), len(needed)))
        w = _canonical(w_data, w_idx, w_ptr, (len(needed), len(own)))
        put, fetch = sources_of(needed, owners_prev, positions(layer - 1))
        take = {d: array.astype(np.int64) for d, array in takes.items()}
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
        """Bytes of the layer plans held now (loads still under way hold nothing yet).

        Never waits: it is read on a worker's event loop (``client.run``, and Dask's
        ``sizeof`` of a part plan), where waiting for a load would stop the worker's
        heartbeats for as long as the load takes."""
        arrays: dict[int, int] = {}  # by id: w and wt may share their values
        for held in list(self._held.values()):
            if isinstance(held, Future) and (not held.done() or held.cancelled()
                                             or held.exception() is not None):
                continue
            plan = held.result() if isinstance(held, Future) else held
            for array in (plan.w.data, plan.w.indices, plan.w.indptr, plan.wt.data,
                          plan.wt.indices, plan.wt.indptr, plan.own, plan.needed, plan.order):
                arrays[id(array)] = array.nbytes
        return sum(arrays.values())


class SlicedPartPlan(PartPlan):
    """A :class:`~.plans.PartPlan` whose layers come from a slices folder (see the module).

    Built by :func:`open_part` (one per process, folder, cut, part and mode).
    ``streamed`` loads each layer as the part reaches it; else every layer is loaded at
    once. Pickles as ``(folder, part, streamed, window, cut)``: another process opens the
    same cut of the folder, or raises :exc:`SliceDamagedError`.
    """

    def __init__(self, folder: Path, part: int, *, bias: np.ndarray, ymax: float,
                 streamed: bool, window: int, dense_threshold: float, chunk_bytes: int,
                 min_chunk_rows: int = 1, cut: str | None = None, classes: bool = True):
        self.folder, self.streamed, self.window = Path(folder), streamed, window
        self._files = _PartFiles(self.folder, part, cut)
        self.cut = self._files.cut
        self._bias, self._ymax = bias, ymax
        inputs = np.flatnonzero(self._files.level(0) == part)
        layers = _Layers(self._files, np.asarray(bias, np.float32), streamed, window)
        super().__init__(part, self._files.k, inputs, layers, float(ymax),
                         float(dense_threshold), int(chunk_bytes), int(min_chunk_rows),
                         bool(classes))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (str(self.folder), self.part, self._bias, self._ymax, self.streamed,
                          self.window, self.dense_threshold, self.chunk_bytes,
                          self.min_chunk_rows, self.cut, self.classes))

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
              min_chunk_rows: int | None = None, cut: str | None = None,
              classes: bool | None = None) -> SlicedPartPlan:
    """Part ``part`` of a slices folder in this process, opened once per folder, cut, part
    and mode (later calls return the same plan); opening a part of another folder (or
    another cut of it) closes the process's parts of every other.

    ``cut``: the cut of the folder the caller placed (its ``slices.json``'s ``cut``); a
    folder cut again since raises :exc:`SliceDamagedError`. Resident parts load (and check)
    every layer now.
    """
    window = int(config.get("store.window") if window is None else window)
    if dense_threshold is None:
        dense_threshold = config.get("kernel.dense-threshold")
    if chunk_bytes is None:
        chunk_bytes = config.get("kernel.chunk-bytes")
        if min_chunk_rows is None:
            min_chunk_rows = int(config.get("kernel.chunk-min-rows") or 1)
    min_chunk_rows = max(1, int(min_chunk_rows or 1))
    if classes is None:
        classes = bool(config.get("kernel.classes", True))
    folder = Path(folder).resolve()
    key = (str(folder), cut, int(part), bool(streamed), window, float(dense_threshold),
           int(chunk_bytes), min_chunk_rows, bool(classes))
    with _OPEN_LOCK:
        for other in [x for x in _OPEN if x[:2] != key[:2]]:
            del _OPEN[other]
        if key not in _OPEN:
            _OPEN[key] = SlicedPartPlan(folder, int(part), bias=bias, ymax=ymax,
                                        streamed=bool(streamed), window=window,
                                        dense_threshold=float(dense_threshold),
                                        chunk_bytes=int(chunk_bytes),
                                        min_chunk_rows=min_chunk_rows, cut=cut,
                                        classes=bool(classes))
        plan = _OPEN[key]
    plan.layers.load_all()  # resident: every layer now, not in the run's first step
    return plan


def _reopen(folder: str, part: int, bias: np.ndarray, ymax: float, streamed: bool,
            window: int, dense_threshold: float, chunk_bytes: int,
            min_chunk_rows: int, cut: str | None = None,
            classes: bool = True) -> SlicedPartPlan:
    return open_part(folder, part, bias, ymax, streamed=streamed, window=window,
                     dense_threshold=dense_threshold, chunk_bytes=chunk_bytes,
                     min_chunk_rows=min_chunk_rows, cut=cut, classes=classes)


def close_parts() -> None:
    """Forget every part this process opened (their memory goes with the last user)."""
    with _OPEN_LOCK:
        _OPEN.clear()


def _forget(folder: Path) -> None:
    """Forget this process's parts of ``folder`` (one of its slices failed a check)."""
    with _OPEN_LOCK:
        for key in [x for x in _OPEN if x[0] == str(folder)]:
            del _OPEN[key]


def part_resident_bytes(folder: os.PathLike | str, part: int) -> int:
    """Bytes part ``part`` holds with every layer resident: ``W_l[needed, own]`` and its
    transpose (int32 indices, float32 values, int32 row pointers) and its index maps,
    from the index table (nothing is loaded)."""
    folder = Path(folder)
    index = read_slices_index(folder)
    name = f"part{part}.index.npy"
    table = load_checked(folder / name, index["parts"][part]["sha256"][name])
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
