"""How a layer's CSR arrays are kept on disk: the encodings of a version-2 store.

A layer is canonical float32 CSR (``indptr``, ``indices``, ``data``). A version-1 store
keeps each array as a file of the kernel's dtype (int64, int32, float32). A version-2
store chooses per layer, from the data, the smallest of:

* ``indptr``: ``"uniform"``, no file, when every row has the same count ``row_nnz`` (then
  ``indptr = arange(N + 1) * row_nnz``); else ``"file"``, int64 (N + 1,);
* ``indices``: ``"uint16"`` when N <= :data:`UINT16_COLUMNS` (every column fits), else
  ``"int32"``; a file either way;
* ``data``: ``"constant"``, no file, when every value has the same float32 bit pattern
  (the manifest keeps the value, as the hex of its bits and as a decimal); else ``"file"``,
  float32 (nnz,).

RadiX-Net's layers (32 nonzeros a row, every weight 1/16) are then one uint16 file each:
2 bytes an edge instead of 12. A layer's manifest entry says its encoding, e.g.
``{"indptr": "uniform", "row_nnz": 32, "indices": "uint16", "data": "constant",
"value": 0.0625, "value_bits": "0x3d800000"}``. :func:`choose_encoding` and :func:`encode`
write it, :func:`parse_encoding` checks it, :func:`decode` turns the files back into the
canonical arrays (bit for bit what a version-1 store of the same layer holds).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: A layer's arrays, in file order.
PARTS = ("indptr", "indices", "data")

#: The dtypes of the files, and of the arrays the kernel takes.
INDPTR = np.dtype("<i8")
INT32 = np.dtype("<i4")
UINT16 = np.dtype("<u2")
FLOAT32 = np.dtype("<f4")

#: The writer stores column indices as uint16 when N is at most this (a test may lower it).
UINT16_COLUMNS = 65536

#: The most columns uint16 indices can address: a manifest saying more is refused.
UINT16_LIMIT = 65536

ENCODINGS = {"indptr": ("file", "uniform"), "indices": ("int32", "uint16"),
             "data": ("file", "constant")}


@dataclass(frozen=True)
class LayerEncoding:
    """How one layer's arrays are stored (see the module's docstring).

    Attributes
    ----------
    indptr
        ``"file"`` or ``"uniform"`` (no file: ``row_nnz`` per row).
    indices
        ``"int32"`` or ``"uint16"``: the dtype of the columns' file.
    data
        ``"file"`` or ``"constant"`` (no file: every value is ``value``).
    row_nnz
        The nonzeros of every row, for ``"uniform"`` (else ``None``).
    value
        The value, a float32, for ``"constant"`` (else ``None``).
    """

    indptr: str = "file"
    indices: str = "int32"
    data: str = "file"
    row_nnz: int | None = None
    value: np.float32 | None = None

    def files(self, n_neurons: int, nnz: int) -> list[tuple[str, np.dtype, int]]:
        """The layer's files: ``(part, dtype, length)`` of each, in file order."""
        files = []
        if self.indptr == "file":
            files.append(("indptr", INDPTR, n_neurons + 1))
        files.append(("indices", UINT16 if self.indices == "uint16" else INT32, nnz))
        if self.data == "file":
            files.append(("data", FLOAT32, nnz))
        return files

    def to_manifest(self) -> dict[str, Any]:
        """The manifest's ``encoding`` of the layer."""
        entry: dict[str, Any] = {"indptr": self.indptr}
        if self.indptr == "uniform":
            entry["row_nnz"] = self.row_nnz
        entry["indices"] = self.indices
        entry["data"] = self.data
        if self.data == "constant":
            # the shortest decimal that reads back as the same float32, for humans; the
            # bits, exact
            entry["value"] = float(str(self.value))
            entry["value_bits"] = value_bits(self.value)
        return entry


#: A version-1 layer: three files, of the kernel's dtypes.
VERSION_1 = LayerEncoding()


def value_bits(value: np.float32) -> str:
    """A float32's bit pattern, as the manifest writes it: ``0x`` and 8 hex digits."""
    return f"0x{int(np.float32(value).view(np.uint32)):08x}"


def choose_encoding(indptr: np.ndarray, data: np.ndarray, n_neurons: int) -> LayerEncoding:
    """The smallest encoding of a canonical CSR layer, from its row pointers and values.

    Parameters
    ----------
    indptr, data
        The layer's row pointers and float32 values.
    n_neurons
        N: uint16 columns when it is at most :data:`UINT16_COLUMNS`.

    Returns
    -------
    LayerEncoding
        ``"uniform"`` rows when every row has the same count; ``"constant"`` values when
        there is at least one and every value has the bit pattern of the first.
    """
    counts = np.diff(indptr)
    uniform = bool((counts == counts[0]).all())
    bits = np.ascontiguousarray(data, dtype=FLOAT32).view(np.uint32)
    constant = bits.size > 0 and bool((bits == bits[0]).all())
    return LayerEncoding(
        indptr="uniform" if uniform else "file",
        row_nnz=int(counts[0]) if uniform else None,
        indices="uint16" if n_neurons <= UINT16_COLUMNS else "int32",
        data="constant" if constant else "file",
        value=bits[:1].view(np.float32)[0] if constant else None)


def encode(encoding: LayerEncoding, indptr: np.ndarray, indices: np.ndarray,
           data: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays to write for a layer, ``{part: contiguous array of its file's dtype}``
    (only the parts ``encoding`` keeps in a file)."""
    arrays = {"indptr": indptr, "indices": indices, "data": data}
    return {part: np.ascontiguousarray(arrays[part], dtype=dtype)
            for part, dtype, _ in encoding.files(len(indptr) - 1, len(indices))}


@functools.lru_cache(maxsize=4)
def constant_values(nnz: int, value: float) -> np.ndarray:
    """``nnz`` copies of ``value`` (float32), one array shared by every layer that asks for
    the same: a RadiX-Net store's layers all hold one value, and filling 8 MB a layer
    was a tenth of a streamed deep layer's cost at N = 65536. Writable, as the compiled
    kernels take their arrays (a read-only one would be copied again for them); shared, so
    nothing may write it: the kernels only read weights."""
    return np.full(nnz, value, dtype=np.float32)


def decode(encoding: LayerEncoding, files: dict[str, np.ndarray], n_neurons: int, nnz: int
           ) -> dict[str, np.ndarray]:
    """The canonical arrays of a layer from its files (as :meth:`LayerEncoding.files`).

    Returns ``{"indptr": int64, "indices": int32, "data": float32}``: the files themselves
    where they have that dtype (maps stay maps), else new arrays: uint16 columns widened,
    ``arange(N + 1) * row_nnz``, ``full(nnz, value)``.
    """
    indptr = (files["indptr"] if encoding.indptr == "file"
              else np.arange(n_neurons + 1, dtype=np.int64) * encoding.row_nnz)
    indices = files["indices"]
    if indices.dtype != INT32:
        indices = indices.astype(np.int32)
    data = (files["data"] if encoding.data == "file"
            else constant_values(nnz, encoding.value))
    return {"indptr": indptr, "indices": indices, "data": data}


def parse_encoding(value: Any, n_neurons: int, nnz: int) -> LayerEncoding:
    """A manifest's ``encoding`` of a layer, checked against the layer's N and nonzeros.

    Raises
    ------
    ValueError
        Saying what is wrong: not an object, an unknown or missing key, an unknown
        encoding, ``row_nnz * N`` not the nonzeros, uint16 columns for N over 65536, a
        constant that is zero or not finite, or whose hex and decimal differ.
    """
    if not isinstance(value, dict):
        raise ValueError(f"{value!r}, not an object")
    for part, names in ENCODINGS.items():
        if value.get(part) not in names:
            raise ValueError(f"{part} {value.get(part)!r}, not one of "
                             f"{', '.join(map(repr, names))}")
    allowed = set(ENCODINGS)
    if value["indptr"] == "uniform":
        allowed.add("row_nnz")
    if value["data"] == "constant":
        allowed |= {"value", "value_bits"}
    if set(value) != allowed:
        unknown, missing = sorted(set(value) - allowed), sorted(allowed - set(value))
        said = ([f"unexpected {', '.join(unknown)}"] if unknown else []) + \
            ([f"missing {', '.join(missing)}"] if missing else [])
        raise ValueError(f"keys {sorted(value)}: {'; '.join(said)}")
    row_nnz = None
    if value["indptr"] == "uniform":
        row_nnz = value["row_nnz"]
        if not isinstance(row_nnz, int) or isinstance(row_nnz, bool) or row_nnz < 0:
            raise ValueError(f"row_nnz {row_nnz!r}, not an integer >= 0")
        if row_nnz * n_neurons != nnz:
            raise ValueError(f"uniform rows of {row_nnz} nonzeros: {row_nnz * n_neurons} "
                             f"nonzeros for N = {n_neurons}, not the layer's {nnz}")
    if value["indices"] == "uint16" and n_neurons > UINT16_LIMIT:
        raise ValueError(f"uint16 indices for N = {n_neurons}: they address {UINT16_LIMIT} "
                         "columns at most")
    constant = _constant(value) if value["data"] == "constant" else None
    return LayerEncoding(indptr=value["indptr"], indices=value["indices"], data=value["data"],
                         row_nnz=row_nnz, value=constant)


def _constant(value: dict[str, Any]) -> np.float32:
    """A constant's float32 from its bits, checked against its decimal."""
    bits, decimal = value["value_bits"], value["value"]
    if not (isinstance(bits, str) and len(bits) == 10 and bits.startswith("0x")
            and all(c in "0123456789abcdef" for c in bits[2:])):
        raise ValueError(f"value_bits {bits!r}, not 0x and 8 lowercase hex digits")
    exact = np.array([int(bits, 16)], dtype=np.uint32).view(np.float32)[0]
    if not np.isfinite(exact) or exact == 0:
        raise ValueError(f"constant value {exact} (bits {bits}); expected a finite, nonzero "
                         "weight")
    if not isinstance(decimal, int | float) or isinstance(decimal, bool) or \
            not math.isfinite(decimal):
        raise ValueError(f"value {decimal!r}, not a finite number")
    with np.errstate(over="ignore"):  # a decimal past float32's range: inf, which differs
        said = value_bits(np.float32(decimal))
    if said != bits:
        raise ValueError(f"value {decimal!r} is the float32 {said}, but value_bits says "
                         f"{bits} ({exact}): they disagree")
    return exact
