"""The format of a slices folder (:mod:`.slices`) and its integrity checks.

What tells slices that may be read from slices that may not: the folder's file names, the
index's format and version (:data:`FORMAT`, :data:`VERSION`), what the slices were cut from
(:func:`store_identity`: the SHA-256 of every layer file) and whether the store still holds
it (:func:`stale_reason`), the index's own checksum (:func:`index_checksum`) and its
reading (:func:`read_slices_index`), the small files checked against their SHA-256
(:func:`load_checked`), and the range checks a part's index table, its levels of the
partition and each of its layers pass before any compiled pass sees them
(:func:`check_table`, :func:`check_level`, :func:`check_layer`).

Slices are checked as they are read, since a damaged one is a wrong answer or, with a
column id out of range, memory written out of bounds: the small files (index table,
routes, checksums) against the SHA-256 in ``slices.json`` when a part is opened, and the
table's ranges; each level of the partition and each layer of a part against its SHA-256
when read, and the layer's ranges (row pointers from 0 to its nonzeros, columns strictly
increasing in ``0..N-1``, takes within the part's slab) before any compiled pass sees it.
A failure is a :exc:`SliceDamagedError` naming the file, on which the executor cuts the
slices again (:mod:`sdnn_dask.parallel.model_executor`). Slices cut from other layer files than the
manifest lists now (a store rewritten, or damaged when they were cut and restored since)
are stale: :func:`~.slices.write_part_slices` cuts them again, with a
:class:`StaleSlicesWarning`. A place where the slices cannot be written is a
:exc:`SlicesError` naming it. Knows nothing of Dask.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from ...data.io import ChallengeFormatError
from ...data.store.manifest import file_sha256
from ...data.streaming import StreamedNetwork
from .slice_kernels import slice_is_sound

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
#: How many columns of a part's index table come before its take counts.
FIXED_COLUMNS = len(INDEX_COLUMNS)
#: Bytes of a SHA-256.
SUM_BYTES = 32
#: A part's array files, in the order of its checksums (``part{p}.sums.npy``).
PART_ARRAYS = ("columns", "indptr", "values", "take")


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


def array_digest(array: np.ndarray) -> np.ndarray:
    """SHA-256 of an array's bytes, as 32 uint8."""
    data = np.ascontiguousarray(array)
    return np.frombuffer(hashlib.sha256(memoryview(data).cast("B")).digest(), np.uint8)


def index_checksum(index: dict[str, Any]) -> str:
    """SHA-256 of an index's fields (its own ``checksum`` aside), canonical JSON."""
    rest = {key: value for key, value in index.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def store_identity(network: StreamedNetwork,
                   layers: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """What slices are cut from: the store's shape and, per layer, each file's SHA-256
    (``layers``: as read when cutting; default: as the manifest lists them now)."""
    store = network.store
    if layers is None:
        layers = [{part: file["sha256"] for part, file in sorted(entry["files"].items())}
                  for entry in store.manifest["layers"][: network.n_layers]]
    return {"folder": store.folder.name, "name": store.name, "n_neurons": store.n_neurons,
            "n_layers": network.n_layers, "edges": network.edges, "layers": layers}


def layer_file_hashes(network: StreamedNetwork, layer: int) -> dict[str, str]:
    """The SHA-256 of layer ``layer``'s files as the store holds them now: the manifest's
    where the store checks its hashes (the layer was just read, so checked), else each
    file hashed (slices cut from a changed file must not pass for the manifest's)."""
    store = network.store
    files = store.manifest["layers"][layer - 1]["files"]
    if store.check_hashes:
        return {part: file["sha256"] for part, file in sorted(files.items())}
    return {part: file_sha256(store.folder / file["name"])
            for part, file in sorted(files.items())}


def stale_reason(index: dict[str, Any], network: StreamedNetwork) -> str | None:
    """Why slices with ``index`` do not belong to ``network``'s store now (``None``: they
    do): the layers' SHA-256 they were cut from against the manifest's."""
    cut, now = index["store"], store_identity(network)
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


def read_slices_index(folder: Path, network: StreamedNetwork | None = None
                      ) -> dict[str, Any]:
    """A slices folder's ``slices.json``, checked (and against ``network``'s store).

    Raises
    ------
    SliceDamagedError
        Missing, unreadable, another format or version, or its checksum differs (damaged);
        or, given ``network``, cut from other layer files than its manifest lists now
        (:func:`~.slices.write_part_slices` cuts such slices again).
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
    if index.get("checksum") != index_checksum(index):
        raise SliceDamagedError(path, "its checksum differs: the index changed since the "
                                "slices were cut")
    if network is not None and (reason := stale_reason(index, network)) is not None:
        raise SliceDamagedError(path, reason)
    return index


def load_checked(path: Path, sha256: str) -> np.ndarray:
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


def check_table(table: np.ndarray, routes: np.ndarray, part: int, sizes: dict[str, int],
                path: Path) -> None:
    """Check every layer's entries of part ``part``'s index table lie within its files (so
    no read runs past one), before any is read.

    Parameters
    ----------
    table, routes
        The part's index table (:data:`INDEX_COLUMNS`, then a take count per part) and the
        folder's routes.
    sizes
        Values each of the part's array files (:data:`PART_ARRAYS`) holds.
    path
        The index table's file, named by the error.

    Raises
    ------
    SliceDamagedError
        A layer's entries run outside the files, or disagree with the routes.
    """
    t = table
    counts = t[:, FIXED_COLUMNS:]
    columns_end = t[:, 0] + t[:, 1]
    values_end = np.where(t[:, 4] >= 0, t[:, 4] + t[:, 1], 0)
    take_end = t[:, 6] + counts.sum(axis=1)
    bad = ((t[:, 0] < 0) | (t[:, 1] < 0) | (columns_end > sizes["columns"])
           | ((t[:, 2] < 0) & (t[:, 3] < 0)) | ((t[:, 2] >= 0) & (t[:, 3] != -1))
           | ((t[:, 2] >= 0) & (t[:, 2] >= sizes["indptr"]))
           | ((t[:, 4] < 0) & ((t[:, 5] < 0) | (t[:, 5] >= 1 << 32)))
           | (values_end > sizes["values"])
           | (t[:, 6] < 0) | (counts < 0).any(axis=1) | (take_end > sizes["take"])
           | (routes < 0).any(axis=(1, 2))
           | (counts != routes[:, part, :]).any(axis=1))
    if bad.any():
        layer = int(bad.argmax()) + 1
        raise SliceDamagedError(path, f"layer {layer}'s entries {t[layer - 1]} "
                                "run outside the part's files; expected offsets and "
                                "counts within them")


def check_level(owners: np.ndarray, level: int, expected: np.ndarray, k: int,
                path: Path) -> None:
    """Check the owners of a level of the partition (read from ``path``) against the
    level's SHA-256 (``expected``, 32 uint8) and to be parts ``0..k-1``.

    Raises
    ------
    SliceDamagedError
        Naming ``path``.
    """
    if not np.array_equal(array_digest(owners), expected):
        raise SliceDamagedError(path, f"level {level}'s checksum differs: "
                                "the partition changed since the slices were cut")
    if len(owners) and (int(owners.min()) < 0 or int(owners.max()) >= k):
        raise SliceDamagedError(path, f"level {level} names parts "
                                f"{owners.min()}..{owners.max()}; expected 0..{k - 1}")


def check_layer(layer: int, columns: np.ndarray, indptr: np.ndarray,
                takes: dict[int, np.ndarray], digests: dict[str, Any], sums: np.ndarray, *,
                n_neurons: int, n_prev: int, paths: dict[str, Path]) -> None:
    """Check a part's slice of layer ``layer`` as read, before any compiled pass sees it:
    its ranges first (what the compiled passes index by: nothing out of bounds reaches
    them, and the error says what is wrong), then its checksums (any byte changed).

    Parameters
    ----------
    columns, indptr, takes
        The slice's columns, row pointers and the positions each other part takes.
    digests
        A running SHA-256 of what was read of each of :data:`PART_ARRAYS`.
    sums
        The layer's row of ``part{p}.sums.npy``: the SHA-256 written of each.
    n_neurons, n_prev
        Neurons of the network, and of the part's slab of level ``layer - 1``.
    paths
        The file each of :data:`PART_ARRAYS` was read from, named by the error (for
        ``"indptr"``, the index table when the layer's row pointers are implicit).

    Raises
    ------
    SliceDamagedError
        Naming the file that fails.
    """
    nnz = len(columns)
    if not slice_is_sound(columns, indptr, n_neurons):
        if indptr[0] != 0 or indptr[-1] != nnz or (np.diff(indptr) < 0).any():
            raise SliceDamagedError(paths["indptr"], f"layer {layer}: row pointers "
                                    f"not from 0 to the slice's {nnz} columns")
        raise SliceDamagedError(paths["columns"], f"layer {layer}: columns outside "
                                f"0..{n_neurons - 1}, or not strictly increasing in a row")
    for take in takes.values():
        if int(take.max()) >= n_prev:
            raise SliceDamagedError(paths["take"], f"layer {layer}: positions up to "
                                    f"{int(take.max())} in a slab of {n_prev} neurons")
    for name, expected in zip(PART_ARRAYS, sums, strict=True):
        if digests[name].digest() != expected.tobytes():
            raise SliceDamagedError(paths[name], f"layer {layer}'s checksum differs: "
                                    "the slices changed since they were cut")
