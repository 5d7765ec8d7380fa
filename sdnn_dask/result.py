"""One result type for every strategy, and the check against the serial reference."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .network import Network
from .reference import categories as categories_of


@dataclass
class RunResult:
    """What one run of one strategy produced and how long it took.

    Attributes
    ----------
    strategy
        ``"reference"``, ``"kernel"`` (serial) or ``"data"`` (data parallelism).
    partition
        Row partition name (``"none"`` for serial runs, ``"chunks"`` for dask arrays).
    network
        Name, neurons, layers and edges of the network run.
    n_inputs
        Input rows.
    n_workers, n_blocks
        Dask workers used and blocks the rows were split into (1 and 1 when serial).
    output
        Final activations, ``n_inputs x N`` CSR, in the original row order.
    wall_seconds
        Inference time seen by the caller: work submitted until results are back
        (weights and input blocks were placed on the workers before the clock starts).
    blocks
        One row per block: ``block, worker, rows, survivors, compute_s``; ``compute_s`` is
        measured inside the worker around the kernel.
    layers
        One row per (block, layer): ``block, layer, mode, rows_in, rows_out, nnz_out,
        seconds``.
    params
        Other parameters of the run (seed, nbuckets, ...).
    """

    strategy: str
    partition: str
    network: dict[str, Any]
    n_inputs: int
    n_workers: int
    n_blocks: int
    output: sp.csr_matrix
    wall_seconds: float
    blocks: pd.DataFrame
    layers: pd.DataFrame
    params: dict[str, Any] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def categories(self) -> np.ndarray:
        """0-based ids of the rows nonzero after the last layer."""
        return categories_of(self.output)

    @property
    def edges_per_second(self) -> float:
        """The challenge rate: ``inputs * sum_k nnz(W_k) / wall seconds``."""
        return self.n_inputs * self.network["edges"] / self.wall_seconds

    def __repr__(self) -> str:
        return (f"RunResult({self.strategy}/{self.partition}, {self.network['name']}, "
                f"{self.n_inputs} inputs, {self.n_workers} workers x {self.n_blocks} blocks, "
                f"{self.wall_seconds:.3f} s, {self.edges_per_second:.3g} edges/s, "
                f"{len(self.categories)} categories)")


def network_info(network: Network) -> dict[str, Any]:
    """The network's identity as stored in results and records."""
    return {
        "name": network.name,
        "neurons": network.n_neurons,
        "layers": network.n_layers,
        "edges": network.edges,
    }


@dataclass(frozen=True)
class Agreement:
    """How a result compares with the reference."""

    same_categories: bool
    max_abs_diff: float
    tolerance: float
    detail: str

    @property
    def ok(self) -> bool:
        """Same categories and every value within tolerance."""
        return self.same_categories and self.max_abs_diff <= self.tolerance


def compare_outputs(
    output: sp.spmatrix, reference: sp.spmatrix, *, rtol: float = 1e-5, atol: float = 1e-5
) -> Agreement:
    """Compare two final activation matrices: categories, then values to float tolerance.

    The tolerance is ``atol + rtol * max|reference|``: summation order differs between
    kernels, so float32 sums differ in the last bits, never more.
    """
    a, b = sp.csr_matrix(output), sp.csr_matrix(reference)
    if a.shape != b.shape:
        return Agreement(False, float("inf"), 0.0, f"shape {a.shape} != {b.shape}")
    cats_a, cats_b = categories_of(a), categories_of(b)
    same = np.array_equal(cats_a, cats_b)
    diff = abs(a - b)
    max_diff = float(diff.max()) if diff.nnz else 0.0
    scale = float(abs(b).max()) if b.nnz else 0.0
    tolerance = atol + rtol * scale
    detail = f"{len(cats_a)} categories vs {len(cats_b)}; max |diff| {max_diff:.3g}"
    if not same:
        only_a = np.setdiff1d(cats_a, cats_b)[:5] + 1
        only_b = np.setdiff1d(cats_b, cats_a)[:5] + 1
        detail += f"; only here: {only_a.tolist()}, only in reference: {only_b.tolist()}"
    return Agreement(same, max_diff, tolerance, detail)
