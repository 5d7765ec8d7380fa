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
        ``"reference"``, ``"kernel"`` (serial), ``"data"`` (data parallelism),
        ``"model"`` (model parallelism) or ``"hybrid"`` (row groups x neuron parts).
    partition
        Row partition name for data parallelism (``"none"`` for serial runs,
        ``"chunks"`` for dask arrays); neuron partition name for model and hybrid.
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
        measured inside the worker around the kernel. In model and hybrid runs a block is
        one part of one row group (``block = group * k + part``; columns ``group, part``
        too), and ``survivors`` counts the rows nonzero in that part's columns.
    layers
        One row per (block, layer): ``block, layer, mode, rows_in, rows_out, nnz_out,
        seconds``; model and hybrid runs add what the part received (``columns_in``
        predicted, ``bytes_in`` measured, ``pieces_in, nnz_in, rows_received``).
    params
        Other parameters of the run (seed, nbuckets, ...).
    parts
        Neuron parts ``k`` (model parallelism and hybrid; 1 otherwise).
    row_groups
        Row groups ``R`` of the hybrid (1 for model parallelism; ``n_blocks`` for data
        parallelism, where every block is a row group of one part).
    bytes_moved
        Bytes of the pieces moved between workers during the run, counted by the direct
        transport or read from Dask's transfer logs for the graph one (model
        parallelism and hybrid; ``None`` where not measured).
    predicted_volume
        The neuron partition's communication volume: activation columns sent between
        parts, summed over layers and row groups (``None`` without a neuron partition).
    predicted_bytes
        The bytes forecast from a sample of the inputs before the run
        (:func:`~sdnn_dask.parallel.exchange_forecast.forecast_exchange`; ``None`` unless
        asked for).
    partition_seconds
        Time taken to compute the neuron partition (``None`` without one).
    communication
        Per layer: predicted ``km1``, ``volume`` and ``max_received`` (columns), and the
        measured ``bytes_moved`` and ``transfers``, with what the receiving parts saw
        (``columns_in``, ``nnz_in``, ``rows_received``); the direct transport adds
        ``wire_bytes`` (what the comms wrote, framing included) and the parts' summed
        ``wait_s``, ``send_s``, ``serialise_s``, ``deserialise_s``; ``None`` for other
        strategies.
    transport
        How model-parallel parts exchanged pieces: ``"direct"`` (worker to worker) or
        ``"graph"`` (a Dask task per part and layer); ``None`` for other strategies.
    messages
        One row per piece sent between workers: ``group, layer, source, parts, sender,
        receiver, payload_bytes`` (the arrays' bytes), ``frame_bytes`` and ``wire_bytes``
        (direct only: serialised frames, and what the comm wrote); ``None`` for other
        strategies.
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
    parts: int = 1
    row_groups: int | None = None
    bytes_moved: int | None = None
    predicted_volume: int | None = None
    predicted_bytes: float | None = None
    partition_seconds: float | None = None
    communication: pd.DataFrame | None = field(default=None, repr=False)
    transport: str | None = None
    messages: pd.DataFrame | None = field(default=None, repr=False)
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
