"""Per-part slices of a network store: what one part of a model-parallel run reads from disk.

A network too large for every worker to hold (or read) whole is run model-parallel from a
*slices folder*, written once per (store, partition) beside the store::

    STORE.slices/{method}-k{k}-{digest}/slices.json   format, the store (the SHA-256 of
                                                      every layer file it was cut from)
                                                      and partition, dtypes, per-part
                                                      files, the partition's volume per
                                                      layer, its own checksum
        parts.npy               (L + 1, N) uint8/int16: the partition (every part reads the
                                two levels of a layer it runs, ~2 N bytes a layer)
        parts.sums.npy          (L + 1, 32) uint8: the SHA-256 of each level of parts.npy
        routes.npy              (L, k, k) int64: columns part q sends part p in layer l
        part{p}.index.npy       (L, 7 + k) int64: per layer, where part p's arrays are
        part{p}.sums.npy        (L, 4, 32) uint8: per layer, the SHA-256 of what part p
                                reads of it from each of its four files below
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

Slices are checked as they are read, since a damaged one is a wrong answer or, with a
column id out of range, memory written out of bounds: the small files (index table,
routes, checksums) against the SHA-256 in ``slices.json`` when a part is opened, and the
table's ranges; each level of the partition and each layer of a part against its SHA-256
when read, and the layer's ranges (row pointers from 0 to its nonzeros, columns strictly
increasing in ``0..N-1``, takes within the part's slab) before any compiled pass sees it.
A failure is a :exc:`SliceDamagedError` naming the file, on which the executor cuts the
slices again (:mod:`sdnn_dask.parallel.model`). Slices cut from other layer files than the
manifest lists now (a store rewritten, or damaged when they were cut and restored since)
are stale: :func:`write_part_slices` cuts them again, with a :class:`StaleSlicesWarning`.
A place where the slices cannot be written is a :exc:`SlicesError` naming it.

:class:`SlicedPartPlan` is a :class:`~.plans.PartPlan` over such a folder, with its layers
either *resident* (all loaded at once) or *streamed* (each loaded as the part reaches it, a
window ahead in a background thread, dropped once passed). It pickles as its folder, part
and mode, and a process opens each part once (:func:`open_part`), so a worker holds one copy
whatever Dask does with the handle. Knows nothing of Dask.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
import warnings
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
from ...data.io import ChallengeFormatError
from ...data.store.manifest import file_sha256
from ...data.streaming import StreamedNetwork
from ...partition.neurons import NeuronPartition
from .plans import LayerPlan, PartPlan
from .slice_kernels import gather_rows, needed_of, part_layer_csr, slice_is_sound

FORMAT = "sdnn-part-slices"
#: 2: the layers' SHA-256, per-layer and per-level checksums, a cut id (version-1 folders
#: are stale: cut again).
VERSION = 2
INDEX_FILE = "slices.json"
PARTS_FILE = "parts.npy"
PARTS_SUMS_FILE = "parts.sums.npy"
ROUTES_FILE = "routes.npy"
#: Columns of a part's index table (then one take count per destination part).
INDEX_COLUMNS = ("columns_start", "nnz", "indptr_start", "row_nnz", "values_start",
                 "value_bits", "take_start")
_FIXED = len(INDEX_COLUMNS)
#: A thread that has not asked a streamed part for a layer this long no longer holds any.
CURSOR_SECONDS = 30.0
Progress = Callable[[int, int], None]
_SUM = 32  # bytes of a SHA-256
#: A part's array files, in the order of its checksums (``part{p}.sums.npy``).
_ARRAYS = ("columns", "indptr", "values", "take")


class SlicesError(ChallengeFormatError):
    """A slices folder that cannot be used, naming the file or folder: one that cannot be
    written, or (:exc:`SliceDamagedError`) a slice that fails its checks.

    A :class:`~sdnn_dask.data.io.ChallengeFormatError`, so the command line says
    ``error: ...`` and exits 2; never an ``OSError``, which placement would take for a
    worker lost.
    """


class SliceDamagedError(SlicesError):
    """A slice file that fails its checksum or a range check (or an index that is not
    the one the run placed): the slices are to be cut again, not the run repeated."""


class StaleSlicesWarning(UserWarning):
    """Slices found beside a store were stale or damaged, and are cut again."""


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


def _store_identity(network: StreamedNetwork,
                    layers: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """What slices are cut from: the store's shape and, per layer, each file's SHA-256
    (``layers``: as read when cutting; default: as the manifest lists them now)."""
    store = network.store
    if layers is None:
        layers = [{part: file["sha256"] for part, file in sorted(entry["files"].items())}
                  for entry in store.manifest["layers"][: network.n_layers]]
    return {"folder": store.folder.name, "name": store.name, "n_neurons": store.n_neurons,
            "n_layers": network.n_layers, "edges": network.edges, "layers": layers}


def _layer_hashes(network: StreamedNetwork, layer: int) -> dict[str, str]:
    """The SHA-256 of layer ``layer``'s files as the store holds them now: the manifest's
    where the store checks its hashes (the layer was just read, so checked), else each
    file hashed (slices cut from a changed file must not pass for the manifest's)."""
    store = network.store
    files = store.manifest["layers"][layer - 1]["files"]
    if store.check_hashes:
        return {part: file["sha256"] for part, file in sorted(files.items())}
    return {part: file_sha256(store.folder / file["name"])
            for part, file in sorted(files.items())}


def _stale(index: dict[str, Any], network: StreamedNetwork) -> str | None:
    """Why slices with ``index`` do not belong to ``network``'s store now (``None``: they
    do): the layers' SHA-256 they were cut from against the manifest's."""
    cut, now = index["store"], _store_identity(network)
    if (cut.get("n_neurons"), cut.get("n_layers")) != (now["n_neurons"], now["n_layers"]):
        return (f"cut from a store of {cut.get('n_layers')} layers of {cut.get('n_neurons')}"
                f" neurons, not {now['n_layers']} of {now['n_neurons']}")
    changed = [k for k, (a, b) in enumerate(zip(cut.get("layers") or [], now["layers"],
                                                strict=False), start=1) if a != b]
    if changed or len(cut.get("layers") or []) != len(now["layers"]):
        which = ", ".join(map(str, changed[:5])) + (" ..." if len(changed) > 5 else "")
        return (f"cut from other files of layer(s) {which or '?'} than the manifest of "
                f"{network.store.folder} lists now (the store was rewritten, or changed "
                "when they were cut)")
    return None


def _checksum(index: dict[str, Any]) -> str:
    """SHA-256 of an index's fields (its own ``checksum`` aside), canonical JSON."""
    rest = {key: value for key, value in index.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def discard_slices(folder: os.PathLike | str) -> None:
    """Remove a slices folder: first renamed aside (a reader never sees half of it), then
    deleted.

    Raises
    ------
    SlicesError
        It cannot be removed (a read-only place), naming it.
    """
    folder = Path(folder)
    if not folder.exists():
        return
    aside = folder.parent / f".{folder.name}.old-{uuid.uuid4().hex[:8]}"
    try:
        os.replace(folder, aside)
    except FileNotFoundError:
        return  # removed meanwhile
    except OSError as error:
        raise SlicesError(folder, f"cannot be removed to cut the slices again "
                          f"({error.strerror or error}); delete it, or make "
                          f"{folder.parent} writable") from None
    shutil.rmtree(aside, ignore_errors=True)


def write_part_slices(network: StreamedNetwork, partition: NeuronPartition, *,
                      folder: os.PathLike | str | None = None,
                      progress: Progress | None = None) -> Path:
    """Write the per-part slices of ``partition`` of a streamed network's store.

    Reads the store once, layer by layer (never more than a layer and its transpose in
    memory; each layer checked as :meth:`~sdnn_dask.data.store.NetworkStore.layer` checks
    it), into a hidden folder renamed into place when whole; returns the folder (default
    :func:`slices_folder`). A folder already there, cut from the layer files the manifest
    lists now, is kept as it is; one cut from others (stale), or whose index is damaged, is
    cut again with a :class:`StaleSlicesWarning`.

    Raises
    ------
    ValueError
        The partition is not for the network's neurons and layers.
    SlicesError
        The slices cannot be written there (a read-only place, a full disk), naming it.
    ChallengeFormatError
        A layer of the store fails its checks (its SHA-256, its contents).
    """
    n, n_layers = network.n_neurons, network.n_layers
    if partition.parts.shape != (n_layers + 1, n):
        raise ValueError(f"partition is for {partition.parts.shape[0] - 1} layers of "
                         f"{partition.parts.shape[1]} neurons; the network has {n_layers} "
                         f"layers of {n}")
    folder = Path(folder) if folder is not None else slices_folder(network.store.folder,
                                                                   partition)
    if folder.exists() or folder.is_symlink():
        try:
            reason = _stale(read_slices_index(folder), network)
        except SlicesError as error:
            reason = f"not usable ({error.message})"
        if reason is None:
            return folder
        warnings.warn(f"slices {folder}: {reason}; cutting them again", StaleSlicesWarning,
                      stacklevel=2)
        discard_slices(folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError as error:
        raise _unwritable(folder, error) from None
    try:
        _write_slices(tmp, network, partition, progress)
        with contextlib.suppress(FileExistsError, OSError):
            os.replace(tmp, folder)  # a concurrent writer may have won: keep theirs
        if not (folder / INDEX_FILE).is_file():
            raise SlicesError(folder, "could not move the slices into place")
    except OSError as error:  # a full disk, a quota: the place, not a worker
        raise _unwritable(folder, error) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _unwritable(folder: Path, error: OSError) -> SlicesError:
    """The error for slices that cannot be written at ``folder``, naming the place."""
    where = Path(error.filename) if error.filename else folder.parent
    return SlicesError(where, f"cannot be written ({error.strerror or error}): model "
                       f"parallelism on a store cuts per-part slices beside it, into "
                       f"{folder.parent}; make that folder writable, or copy the store to a "
                       "writable folder")


def _write_slices(tmp: Path, network: StreamedNetwork, partition: NeuronPartition,
                  progress: Progress | None) -> None:
    n, n_layers, k = network.n_neurons, network.n_layers, partition.k
    index_dtype = _index_dtype(n)
    parts = np.asarray(partition.parts, dtype=_parts_dtype(k))
    np.save(tmp / PARTS_FILE, parts, allow_pickle=False)
    np.save(tmp / PARTS_SUMS_FILE, np.stack([_digest(level) for level in parts]),
            allow_pickle=False)
    sums = {p: np.zeros((n_layers, len(_ARRAYS), _SUM), np.uint8) for p in range(k)}
    layer_hashes = []
    files = {p: {name: open(tmp / f"part{p}.{name}.bin", "xb")
                 for name in ("columns", "indptr", "values", "take")} for p in range(k)}
    offsets = {p: dict.fromkeys(("columns", "indptr", "values", "take"), 0)
               for p in range(k)}
    tables = {p: np.zeros((n_layers, _FIXED + k), np.int64) for p in range(k)}
    routes = np.zeros((n_layers, k, k), np.int64)
    volume = []
    try:
        for layer, w in enumerate(network.layers, start=1):
            layer_hashes.append(_layer_hashes(network, layer))
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
                digest = {name: hashlib.sha256() for name in _ARRAYS}  # what load() reads
                counts = np.diff(ptr)
                table[0], table[1] = at["columns"], len(idx)
                at["columns"] += _write(out["columns"], idx, index_dtype, digest["columns"])
                if len(counts) and (counts == counts[0]).all():
                    table[2], table[3] = -1, counts[0]
                elif not len(counts):
                    table[2], table[3] = -1, 0
                else:
                    table[2], table[3] = at["indptr"], -1
                    at["indptr"] += _write(out["indptr"], ptr, np.dtype("<i8"),
                                           digest["indptr"])
                part_bits = data.view(np.uint32)
                if len(part_bits) and (part_bits == part_bits[0]).all():
                    table[4], table[5] = -1, int(part_bits[0])
                else:
                    table[4], table[5] = at["values"], 0
                    at["values"] += _write(out["values"], data, np.dtype("<f4"),
                                           digest["values"])
                table[6] = at["take"]
                for d in range(k):
                    table[_FIXED + d] = routes[layer - 1, p, d] = len(takes[p][d])
                    at["take"] += _write(out["take"], takes[p][d], index_dtype,
                                         digest["take"])
                sums[p][layer - 1] = [np.frombuffer(digest[name].digest(), np.uint8)
                                      for name in _ARRAYS]
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
        np.save(tmp / f"part{p}.sums.npy", sums[p], allow_pickle=False)
    sizes = {"columns": index_dtype.itemsize, "indptr": 8, "values": 4,
             "take": index_dtype.itemsize}
    entries = [{"part": p, "bytes": {name: offsets[p][name] * sizes[name]
                                     for name in offsets[p]},
                "sha256": {name: file_sha256(tmp / name)
                           for name in (f"part{p}.index.npy", f"part{p}.sums.npy")}}
               for p in range(k)]
    index = {"format": FORMAT, "version": VERSION, "cut": uuid.uuid4().hex,
             "store": _store_identity(network, layer_hashes),
             "partition": {"method": partition.method, "k": k, "params": partition.params,
                           "digest": partition_digest(partition),
                           "seconds": partition.seconds},
             "index_dtype": index_dtype.str, "parts_dtype": parts.dtype.str,
             "sha256": {name: file_sha256(tmp / name)
                        for name in (ROUTES_FILE, PARTS_SUMS_FILE)},
             "parts": entries, "volume": volume}
    index["checksum"] = _checksum(index)
    (tmp / INDEX_FILE).write_text(json.dumps(index, indent=1))


def _digest(array: np.ndarray) -> np.ndarray:
    """SHA-256 of an array's bytes, as 32 uint8."""
    data = np.ascontiguousarray(array)
    return np.frombuffer(hashlib.sha256(memoryview(data).cast("B")).digest(), np.uint8)


def _write(handle, array: np.ndarray, dtype: np.dtype, digest: Any = None) -> int:
    """Append ``array`` as ``dtype`` to an open file (and to ``digest``); values written."""
    data = np.ascontiguousarray(array, dtype=dtype)
    view = memoryview(data).cast("B")
    handle.write(view)
    if digest is not None:
        digest.update(view)
    return data.size


def read_slices_index(folder: Path, network: StreamedNetwork | None = None
                      ) -> dict[str, Any]:
    """A slices folder's ``slices.json``, checked (and against ``network``'s store).

    Raises
    ------
    SliceDamagedError
        Missing, unreadable, another format or version, or its checksum differs (damaged);
        or, given ``network``, cut from other layer files than its manifest lists now
        (:func:`write_part_slices` cuts such slices again).
    """
    path = Path(folder) / INDEX_FILE
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SliceDamagedError(path, f"not a readable slices index ({error})") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT or \
            index.get("version") != VERSION:
        found = index if not isinstance(index, dict) else \
            f"{index.get('format')!r} version {index.get('version')!r}"
        raise SliceDamagedError(path, f"{found}; expected {FORMAT} version {VERSION}")
    if index.get("checksum") != _checksum(index):
        raise SliceDamagedError(path, "its checksum differs: the index changed since the "
                                "slices were cut")
    if network is not None and (reason := _stale(index, network)) is not None:
        raise SliceDamagedError(path, reason)
    return index


def slices_volume(folder: os.PathLike | str) -> pd.DataFrame:
    """The partition's volume per layer, as :meth:`NeuronPartition.volume` gives it,
    recorded when the slices were cut (no pass over the weights)."""
    index = read_slices_index(Path(folder))
    return pd.DataFrame(index["volume"], columns=["layer", "km1", "volume", "max_received"])


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
        self.table = _load_checked(folder / f"part{part}.index.npy",
                                   own[f"part{part}.index.npy"])
        self.sums = _load_checked(folder / f"part{part}.sums.npy",
                                  own[f"part{part}.sums.npy"])
        self.routes = _load_checked(folder / ROUTES_FILE, index["sha256"][ROUTES_FILE])
        self.level_sums = _load_checked(folder / PARTS_SUMS_FILE,
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
                    "table": (self.n_layers, _FIXED + self.k),
                    "sums": (self.n_layers, len(_ARRAYS), _SUM),
                    "level_sums": (self.n_layers + 1, _SUM)}
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
        self._check_table()
        self.bytes_read = 0
        self._lock = threading.Lock()

    def _check_table(self) -> None:
        """Every layer's entries of the index table within its files (so no read runs
        past one), before any is read."""
        t = self.table
        counts = t[:, _FIXED:]
        columns_end = t[:, 0] + t[:, 1]
        values_end = np.where(t[:, 4] >= 0, t[:, 4] + t[:, 1], 0)
        take_end = t[:, 6] + counts.sum(axis=1)
        bad = ((t[:, 0] < 0) | (t[:, 1] < 0) | (columns_end > self._sizes["columns"])
               | ((t[:, 2] < 0) & (t[:, 3] < 0)) | ((t[:, 2] >= 0) & (t[:, 3] != -1))
               | ((t[:, 2] >= 0) & (t[:, 2] >= self._sizes["indptr"]))
               | ((t[:, 4] < 0) & ((t[:, 5] < 0) | (t[:, 5] >= 1 << 32)))
               | (values_end > self._sizes["values"])
               | (t[:, 6] < 0) | (counts < 0).any(axis=1) | (take_end > self._sizes["take"])
               | (self.routes < 0).any(axis=(1, 2))
               | (counts != self.routes[:, self.part, :]).any(axis=1))
        if bad.any():
            layer = int(bad.argmax()) + 1
            raise SliceDamagedError(self.files[0], f"layer {layer}'s entries {t[layer - 1]} "
                                    "run outside the part's files; expected offsets and "
                                    "counts within them")

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
        if not np.array_equal(_digest(owners), self.level_sums[level]):
            raise SliceDamagedError(self.path("parts"), f"level {level}'s checksum differs: "
                                    "the partition changed since the slices were cut")
        if len(owners) and (int(owners.min()) < 0 or int(owners.max()) >= self.k):
            raise SliceDamagedError(self.path("parts"), f"level {level} names parts "
                                    f"{owners.min()}..{owners.max()}; expected 0..{self.k - 1}")
        return owners

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
        digest = {name: hashlib.sha256() for name in _ARRAYS}  # as the slices were written
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
            count = int(row[_FIXED + d])
            if count:
                takes[d] = self.read("take", at, count)
                digest["take"].update(memoryview(takes[d]).cast("B"))
            at += count
        # ranges first (what the compiled passes index by: nothing out of bounds reaches
        # them, and the error says what is wrong), then the checksum (any byte changed)
        if not slice_is_sound(columns, indptr, n):
            if indptr[0] != 0 or indptr[-1] != nnz or (np.diff(indptr) < 0).any():
                where = self.path("indptr") if row[2] >= 0 else self.files[0]
                raise SliceDamagedError(where, f"layer {layer}: row pointers "
                                        f"not from 0 to the slice's {nnz} columns")
            raise SliceDamagedError(self.path("columns"), f"layer {layer}: columns outside "
                                    f"0..{n - 1}, or not strictly increasing in a row")
        for take in takes.values():
            if int(take.max()) >= n_prev:
                raise SliceDamagedError(self.path("take"), f"layer {layer}: positions up to "
                                        f"{int(take.max())} in a slab of {n_prev} neurons")
        for name, expected in zip(_ARRAYS, self.sums[layer - 1], strict=True):
            if digest[name].digest() != expected.tobytes():
                raise SliceDamagedError(self.path(name), f"layer {layer}'s checksum differs: "
                                        "the slices changed since they were cut")
        needed, wt_ptr, wt_idx, w_ptr, w_idx, w_from = part_layer_csr(columns, indptr, n)
        if values is None:  # one value: both matrices share the array (the kernels only read)
            wt_data = w_data = np.full(nnz, np.uint32(row[5]), np.uint32).view(np.float32)
        else:
            wt_data = values
            w_data = wt_data[w_from]
        wt = _canonical(wt_data, wt_idx, wt_ptr, (len(own), len(needed)))
        w = _canonical(w_data, w_idx, w_ptr, (len(needed), len(own)))
        source = owners_prev[needed]
        put = {int(q): np.flatnonzero(source == q) for q in np.unique(source)}
        prev_pos = positions(layer - 1)
        fetch = {q: prev_pos[needed[at]] for q, at in put.items()}
        take = {d: array.astype(np.int64) for d, array in takes.items()}
        if p in put:
            take[p] = fetch[p]
        with self._lock:
            self.bytes_read += self.layer_bytes(layer, len(own))
        return LayerPlan(own=own, needed=needed, w=w, wt=wt,
                         order=pattern_order(wt), bias=np.ascontiguousarray(bias[own]),
                         put=put, take=take, fetch=fetch)


def _load_checked(path: Path, sha256: str) -> np.ndarray:
    """A small ``.npy`` file of a slices folder, its bytes checked against ``sha256``."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SliceDamagedError(path, f"cannot be read ({error.strerror or error})"
                                ) from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SliceDamagedError(path, f"its SHA-256 differs from {INDEX_FILE}'s: changed "
                                "since the slices were cut")
    return np.load(io.BytesIO(data), allow_pickle=False)


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

    Built by :func:`open_part` (one per process, folder, cut, part and mode).
    ``streamed`` loads each layer as the part reaches it; else every layer is loaded at
    once. Pickles as ``(folder, part, streamed, window, cut)``: another process opens the
    same cut of the folder, or raises :exc:`SliceDamagedError`.
    """

    def __init__(self, folder: Path, part: int, *, bias: np.ndarray, ymax: float,
                 streamed: bool, window: int, dense_threshold: float, chunk_bytes: int,
                 min_chunk_rows: int = 1, cut: str | None = None):
        self.folder, self.streamed, self.window = Path(folder), streamed, window
        self._files = _PartFiles(self.folder, part, cut)
        self.cut = self._files.cut
        self._bias, self._ymax = bias, ymax
        inputs = np.flatnonzero(self._files.level(0) == part)
        layers = _Layers(self._files, np.asarray(bias, np.float32), streamed, window)
        super().__init__(part, self._files.k, inputs, layers, float(ymax),
                         float(dense_threshold), int(chunk_bytes), int(min_chunk_rows))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (str(self.folder), self.part, self._bias, self._ymax, self.streamed,
                          self.window, self.dense_threshold, self.chunk_bytes,
                          self.min_chunk_rows, self.cut))

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
              min_chunk_rows: int | None = None, cut: str | None = None) -> SlicedPartPlan:
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
    folder = Path(folder).resolve()
    key = (str(folder), cut, int(part), bool(streamed), window, float(dense_threshold),
           int(chunk_bytes), min_chunk_rows)
    with _OPEN_LOCK:
        for other in [x for x in _OPEN if x[:2] != key[:2]]:
            del _OPEN[other]
        if key not in _OPEN:
            _OPEN[key] = SlicedPartPlan(folder, int(part), bias=bias, ymax=ymax,
                                        streamed=bool(streamed), window=window,
                                        dense_threshold=float(dense_threshold),
                                        chunk_bytes=int(chunk_bytes),
                                        min_chunk_rows=min_chunk_rows, cut=cut)
        plan = _OPEN[key]
    plan.layers.load_all()  # resident: every layer now, not in the run's first step
    return plan


def _reopen(folder: str, part: int, bias: np.ndarray, ymax: float, streamed: bool,
            window: int, dense_threshold: float, chunk_bytes: int,
            min_chunk_rows: int, cut: str | None = None) -> SlicedPartPlan:
    return open_part(folder, part, bias, ymax, streamed=streamed, window=window,
                     dense_threshold=dense_threshold, chunk_bytes=chunk_bytes,
                     min_chunk_rows=min_chunk_rows, cut=cut)


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
    table = _load_checked(folder / name, index["parts"][part]["sha256"][name])
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
