"""A version-1 network store, written as the release before version 2 wrote it.

The writer writes version 2 only; stores of version 1 are still on users' disks, and must
read as they did. :func:`write_v1_store` writes one: the manifest as the writer makes it
(bias, ymax, name, written_by), and per layer the three files of version 1, int64 row
pointers, int32 columns and float32 values (``np.ascontiguousarray`` of the canonical CSR,
as that writer did), each entry ``{"layer", "nnz", "files"}`` with no ``encoding``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from sdnn_dask.core.network import Network, as_csr32
from sdnn_dask.data import store

V1_PARTS = (("indptr", np.dtype("<i8")), ("indices", np.dtype("<i4")),
            ("data", np.dtype("<f4")))


def write_v1_store(folder: Path, network: Network) -> Path:
    """``network`` as a version-1 store at ``folder`` (new); returns ``folder``."""
    folder = store.write_network(folder, network)
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    for k, entry in enumerate(manifest["layers"], start=1):
        for file in entry["files"].values():
            (folder / file["name"]).unlink()
        csr = as_csr32(network.layers[k - 1])
        arrays = {"indptr": csr.indptr, "indices": csr.indices, "data": csr.data}
        files = {}
        for part, dtype in V1_PARTS:
            name = f"l{k}.{part}.npy"
            np.save(folder / name, np.ascontiguousarray(arrays[part], dtype=dtype),
                    allow_pickle=False)
            raw = (folder / name).read_bytes()
            files[part] = {"name": name, "bytes": len(raw),
                           "sha256": hashlib.sha256(raw).hexdigest()}
        manifest["layers"][k - 1] = {"layer": k, "nnz": entry["nnz"], "files": files}
    manifest["version"] = 1
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return folder
