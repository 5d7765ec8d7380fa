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
of the layer's nonzeros (two bytes each at N <= 65536 with RadiX-Net's equal weights).

This module cuts them: :func:`write_part_slices` reads the store once, layer by layer, into
a hidden folder renamed into place when whole (:func:`slices_folder`, beside the store),
and keeps slices already there unless they are stale or damaged, which it cuts again with
a :class:`~.slice_checks.StaleSlicesWarning`; :func:`discard_slices` removes a folder and
:func:`slices_volume` gives the partition's volume recorded when cutting. The folder's
format and every check of it as it is read are :mod:`.slice_checks`; a part opened from its
slices (:class:`~.sliced_plans.SlicedPartPlan`, :func:`~.sliced_plans.open_part`), resident
or streamed, is :mod:`.sliced_plans`. Knows nothing of Dask.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...core.csr import transpose
from ...data.store.manifest import file_sha256
from ...data.streaming import StreamedNetwork
from ...partition.neurons import NeuronPartition
from .slice_checks import (
    FIXED_COLUMNS,
    FORMAT,
    INDEX_FILE,
    PART_ARRAYS,
    PARTS_FILE,
    PARTS_SUMS_FILE,
    ROUTES_FILE,
    SUM_BYTES,
    VERSION,
    SlicesError,
    StaleSlicesWarning,
    array_digest,
    index_checksum,
    layer_file_hashes,
    read_slices_index,
    stale_reason,
    store_identity,
)
from .slice_kernels import gather_rows, needed_of
from .sliced_plans import close_parts, level_positions, open_part, part_resident_bytes

__all__ = [
    "SlicesError",
    "StaleSlicesWarning",
    "close_parts",
    "discard_slices",
    "level_positions",
    "open_part",
    "part_resident_bytes",
    "partition_digest",
    "read_slices_index",
    "slices_folder",
    "slices_volume",
    "write_part_slices",
]

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
            reason = stale_reason(read_slices_index(folder), network)
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
    np.save(tmp / PARTS_SUMS_FILE, np.stack([array_digest(level) for level in parts]),
            allow_pickle=False)
    sums = {p: np.zeros((n_layers, len(PART_ARRAYS), SUM_BYTES), np.uint8) for p in range(k)}
    layer_hashes = []
    files = {p: {name: open(tmp / f"part{p}.{name}.bin", "xb")
                 for name in ("columns", "indptr", "values", "take")} for p in range(k)}
    offsets = {p: dict.fromkeys(("columns", "indptr", "values", "take"), 0)
               for p in range(k)}
    tables = {p: np.zeros((n_layers, FIXED_COLUMNS + k), np.int64) for p in range(k)}
    routes = np.zeros((n_layers, k, k), np.int64)
    volume = []
    try:
        for layer, w in enumerate(network.layers, start=1):
            layer_hashes.append(layer_file_hashes(network, layer))
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
                digest = {name: hashlib.sha256() for name in PART_ARRAYS}  # what load() reads
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
                    table[FIXED_COLUMNS + d] = routes[layer - 1, p, d] = len(takes[p][d])
                    at["take"] += _write(out["take"], takes[p][d], index_dtype,
                                         digest["take"])
                sums[p][layer - 1] = [np.frombuffer(digest[name].digest(), np.uint8)
                                      for name in PART_ARRAYS]
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
             "store": store_identity(network, layer_hashes),
             "partition": {"method": partition.method, "k": k, "params": partition.params,
                           "digest": partition_digest(partition),
                           "seconds": partition.seconds},
             "index_dtype": index_dtype.str, "parts_dtype": parts.dtype.str,
             "sha256": {name: file_sha256(tmp / name)
                        for name in (ROUTES_FILE, PARTS_SUMS_FILE)},
             "parts": entries, "volume": volume}
    index["checksum"] = index_checksum(index)
    (tmp / INDEX_FILE).write_text(json.dumps(index, indent=1))


def _write(handle, array: np.ndarray, dtype: np.dtype, digest: Any = None) -> int:
    """Append ``array`` as ``dtype`` to an open file (and to ``digest``); values written."""
    data = np.ascontiguousarray(array, dtype=dtype)
    view = memoryview(data).cast("B")
    handle.write(view)
    if digest is not None:
        digest.update(view)
    return data.size


def slices_volume(folder: os.PathLike | str) -> pd.DataFrame:
    """The partition's volume per layer, as :meth:`NeuronPartition.volume` gives it,
    recorded when the slices were cut (no pass over the weights)."""
    index = read_slices_index(Path(folder))
    return pd.DataFrame(index["volume"], columns=["layer", "km1", "volume", "max_received"])
