"""The terms of the cost model: what each regressor counts and the unit of its coefficient.

The equations they enter are in the package docstring (:mod:`sdnn_dask.projection`) and in
``docs/projection.md``.
"""

from __future__ import annotations

__all__ = [
    "ALL_TERMS",
    "BLOCK_TERMS",
    "CLASS_SHARE",
    "EXCHANGE_TERMS",
    "KERNEL_TERMS",
    "PARALLEL",
    "PART_TERMS",
    "RUN_TERMS",
    "SERIAL",
    "SHARING_TERMS",
    "K",
]

#: Kernel terms per layer: name -> (what the regressor counts, unit of the coefficient).
KERNEL_TERMS = {
    "dense_fma": ("weights x rows run in dense tiles", "s per multiply-add"),
    "dense_tile": ("weights x 256-row tiles of dense chunks", "s per weight and tile"),
    "dense_call": ("dense chunk steps", "s per step"),
    "sparse_edge": ("edges processed by sparse chunks (input nonzeros x weights per row)",
                    "s per edge"),
    "sparse_scan": ("N x rows of sparse chunks (the accumulator scanned)", "s per entry"),
    "sparse_call": ("sparse chunk steps", "s per step"),
    "to_dense": ("N x rows of chunks turned from sparse rows into a tile", "s per entry"),
    "to_sparse": ("N x rows of tiles turned into sparse rows", "s per entry"),
    "to_sparse_nnz": ("nonzeros of tiles turned into sparse rows", "s per nonzero"),
    "to_sparse_call": ("tiles turned into sparse rows", "s per tile"),
    "class_edge": ("edges scattered from sparse input rows into a tile over classes (a "
                   "class step's first layer: input nonzeros x weights per row / 16)",
                   "s per edge"),
}
#: Kernel terms per block, outside the layers (the last tiles are made sparse with the
#: ``to_sparse*`` terms).
BLOCK_TERMS = {
    "block": ("blocks", "s per block"),
    "block_row": ("input rows", "s per row"),
    "repack": ("N x rows repacked into full dense chunks", "s per entry"),
}
#: Extra terms of a model-parallel part's layer step (its arithmetic is priced as above).
PART_TERMS = {
    "part_entry": ("(own inputs + outputs) x rows of dense part steps", "s per entry"),
    "part_nnz": ("nonzeros read and written by sparse part steps", "s per nonzero"),
    "part_step": ("part steps (one per part and layer)", "s per step"),
    "part_foreign": ("other parts' input columns x rows of dense part steps (scattered "
                     "into the tile)", "s per entry"),
}
#: Factors for cores shared by several busy workers or parts (dimensionless).
SHARING_TERMS = {
    "busy": ("compute of a block or part while other workers compute too, against alone",
             "multiplier"),
    "shared_step": ("each part beyond one per core (the OS time-slices them)",
                    "added multiplier"),
}
#: Per-layer exchange terms of model and hybrid runs: one part per core, and more.
EXCHANGE_TERMS = {
    "imbalance": ("the mean part step (one part per core): the slowest part sets the pace",
                  "added multiplier"),
    "latency": ("layers (one part per core)", "s per layer (synchronisation)"),
    "byte": ("bytes moved between workers (one part per core)",
             "s per byte (1 / bandwidth)"),
    "shared_imbalance": ("the mean part step (several parts per core)", "added multiplier"),
    "shared_latency": ("layers (several parts per core)", "s per layer"),
    "shared_byte": ("bytes moved between workers (several parts per core)", "s per byte"),
}
#: Per-run terms.
RUN_TERMS = {
    "data_run": ("data-parallel runs", "s per run"),
    "data_gather": ("output nonzeros gathered", "s per nonzero"),
    "model_run": ("model/hybrid runs", "s per run"),
    "model_gather": ("output nonzeros gathered", "s per nonzero"),
}
ALL_TERMS = {**KERNEL_TERMS, **BLOCK_TERMS, **PART_TERMS, **SHARING_TERMS,
             **EXCHANGE_TERMS, **RUN_TERMS}

SERIAL = ("kernel",)
PARALLEL = ("data", "model", "hybrid")

#: Number of kernel terms: the width of a layer's regressors (:data:`KERNEL_TERMS`).
K = len(KERNEL_TERMS)

#: Share of a layer's output neurons computed where equal columns are computed once
#: (``sdnn.kernel.classes``): RadiX-Net, the challenge's networks, hold every column 16
#: times (:mod:`sdnn_dask.core.kernels.classes`).
CLASS_SHARE = 1.0 / 16.0


def class_share(classes: bool) -> float:
    """:data:`CLASS_SHARE` with classes on, else 1 (every neuron computed)."""
    return CLASS_SHARE if classes else 1.0
