"""A cost model of run time, calibrated from records, and projections from it.

The model prices the work a run does, term by term, with coefficients fitted by
non-negative least squares on the per-layer, per-block and per-run records
(:mod:`sdnn_dask.records`), never on wall times alone. Its equations, units, what is
calibrated on what, the held-out errors and the published-network projection are in
``docs/projection.md``; in short (all times in seconds):

**One layer of the serial kernel** on one block (:func:`~sdnn_dask.core.kernels.forward_block`,
which runs rows in chunks of ``c = max(chunk_min_rows, chunk_bytes // (4 N))`` rows and
picks, per chunk, a dense tile or sparse rows by the chunk's density)::

    t_layer = a_fma * w * R_dense + a_tile * w * T_dense + a_dcall * steps_dense
            + a_edge * d * Z_sparse + a_scan * N * R_sparse + a_scall * steps_sparse
            + a_dense * N * R_to_dense
            + a_sparse * N * R_to_sparse + a_snnz * Z_to_sparse + a_stile * tiles_to_sparse

with ``w = nnz(W_k)`` (32 N), ``d = w / N`` weights per row (32), ``R`` rows of chunks
run dense or sparse, ``T`` their 256-row tiles, ``Z`` the nonzeros entering sparse
chunks (``d * Z`` is the number of edges actually processed), ``R_to_*`` rows whose chunk
changed form. A block adds ``b_0 + b_row * rows + b_pack * N * R_repacked`` and the
``to_sparse`` terms of its last tiles.

**One layer of a model-parallel part** (:func:`~sdnn_dask.parallel.slabs.part_layer_step`) is
priced with the same arithmetic coefficients on its share (``n_out = N / k`` outputs,
``n_in = n_out + f_l (N - n_out)`` inputs read, ``f_l`` the share of the other parts'
columns read in layer ``l``), plus ``p_entry * 2 n_out * rows`` (dense: copying the own
columns into the input tile, writing the output), ``p_foreign * (n_in - n_out) * rows``
(dense: zeroing the other parts' columns and scattering the pieces into them),
``p_nnz * (nonzeros read + written)`` (sparse) and ``p_step`` per part and layer.

**A run** (single-threaded workers)::

    kernel:  t_block
    data:    max over workers of the sum of its blocks' busy * t_block
             + o_run + o_task * tasks + o_gather * output nonzeros
    model, hybrid:  sum over layers of [(1 + imbalance) * mean part step
                                        * (1 + (m - 1) * shared_step)
                                        + latency + byte * bytes_l]
                    + m_run + m_gather * output nonzeros

where ``busy`` is the slow-down of compute while other workers compute too, ``tasks``
the blocks the busiest worker runs, ``m`` the parts sharing the busiest worker (with
``m > 1`` the ``shared_*`` exchange coefficients apply), ``bytes_l`` the bytes of the
pieces sent between workers for layer ``l`` (predicted from the level's rows and
nonzeros and the slab encoding: 8 bytes a row id, then 8 bytes a nonzero, or a dense
tile of 4 bytes an entry once half the entries are nonzero).

**The survival profile** (:class:`Survival`) supplies the rows and nonzeros alive at
every level, which is what the work depends on. Either per row (exact: the kernel's chunk
schedule is then replayed chunk by chunk, modes and form changes included), measured by
:meth:`Survival.measure` (one cheap serial pass, no timing used), or aggregated per level
from the layer records of a run (:meth:`Survival.from_records`; chunk counts, modes and
form changes are then estimated from the mean density of a level). Scaling to other row
counts assumes rows statistically like the measured ones; extending to more layers
assumes the last measured level repeats (the survivors plateau: on 1024-120 fewer than
1% of them die after layer 20).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.optimize import nnls

from .core.kernels import ROW_TILE, SETUP_ROWS, KernelSettings, forward_block
from .core.network import Network, as_csr32
from .data.images import CHALLENGE_DENSITY
from .partition import make_row_partition

__all__ = [
    "ALL_TERMS",
    "BLOCK_TERMS",
    "EXCHANGE_TERMS",
    "KERNEL_TERMS",
    "PART_TERMS",
    "PUBLISHED",
    "RUN_TERMS",
    "SHARING_TERMS",
    "CostModel",
    "Prediction",
    "Survival",
    "project_published",
    "projection_table",
]

#: The published run projected by :func:`project_published` (Mofrad et al., HPEC 2020).
PUBLISHED = {"neurons": 65536, "layers": 1920, "edges": 4_026_531_840, "inputs": 60000,
             "nodes": 32, "cores_per_node": 28, "workers": 896, "seconds": 51.0}

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

_K = len(KERNEL_TERMS)


# --------------------------------------------------------------------------------------
# The survival profile


def _input_density(neurons: int, given: float | Mapping[int, float] | None) -> float:
    """Mean fraction of nonzero input entries (the official files' by default)."""
    if isinstance(given, Mapping):
        given = given.get(neurons)
    if given is not None:
        return float(given)
    keys = sorted(CHALLENGE_DENSITY)
    return float(np.interp(math.log2(neurons), [math.log2(k) for k in keys],
                           [CHALLENGE_DENSITY[k] for k in keys]))


@dataclass(frozen=True, eq=False)
class Survival:
    """Rows and nonzeros alive at every level of a network, for some input rows.

    Level 0 is the inputs, level ``k`` the output of layer ``k``; layer ``k`` processes
    level ``k - 1``. A profile is either *per row* (every row's nonzeros at every level
    known: the serial kernel's chunk schedule can then be replayed exactly) or
    *aggregated* (only the totals per level).

    Attributes
    ----------
    neurons
        N.
    live
        ``layers + 1`` rows with a nonzero at each level (for an aggregated profile
        scaled to fewer rows, expected values: they may be fractional).
    nnz
        ``layers + 1`` nonzeros at each level (likewise).
    rows
        Input rows described (dead input rows included).
    counts
        Per-row profiles: the measured ``levels x rows`` nonzeros of every row (int32),
        which :attr:`level_map` and :attr:`row_map` index; ``None`` when aggregated.
    source
        Where it came from, and how it was resized or extended (for reports).
    level_map, row_map
        Per-row profiles: the measured level and row each level and row of this profile
        is (so resizing to 60000 rows or extending to 1920 layers copies nothing).

    Examples
    --------
    >>> s = Survival(1024, np.array([10, 4, 4]), np.array([1000, 4096, 4096]), rows=10)
    >>> s.extended(4).live.tolist()  # the last level repeated
    [10, 4, 4, 4, 4]
    >>> s.resized(20).nnz.tolist()  # twice the rows
    [2000.0, 8192.0, 8192.0]
    """

    neurons: int
    live: np.ndarray
    nnz: np.ndarray
    rows: int
    counts: np.ndarray | None = field(default=None, repr=False)
    source: str = ""
    level_map: np.ndarray | None = field(default=None, repr=False)
    row_map: np.ndarray | None = field(default=None, repr=False)

    @property
    def layers(self) -> int:
        """Layers described."""
        return len(self.live) - 1

    @property
    def per_row(self) -> bool:
        """Whether every row's nonzeros are known (the kernel schedule is then exact)."""
        return self.counts is not None

    @classmethod
    def from_counts(cls, counts: np.ndarray, neurons: int, source: str = "", *,
                    level_map: np.ndarray | None = None,
                    row_map: np.ndarray | None = None) -> Survival:
        """A per-row profile from measured ``levels x rows`` nonzero counts (optionally
        indexed by a level map and a row map)."""
        counts = np.ascontiguousarray(counts, dtype=np.int32)
        levels = (np.arange(counts.shape[0]) if level_map is None
                  else np.asarray(level_map, np.int64))
        rows = (np.arange(counts.shape[1]) if row_map is None
                else np.asarray(row_map, np.int64))
        multiplicity = np.bincount(rows, minlength=counts.shape[1]).astype(np.int64)
        live = ((counts > 0).astype(np.int64) @ multiplicity)[levels]
        nnz = (counts.astype(np.int64) @ multiplicity)[levels]
        return cls(int(neurons), live, nnz, len(rows), counts, source, levels, rows)

    @classmethod
    def measure(cls, network: Network, inputs: sp.spmatrix | sp.sparray) -> Survival:
        """Run ``inputs`` through ``network`` one layer at a time and count, per row, the
        nonzeros of every level.

        One serial pass of the compiled kernel (about one kernel run's time); nothing of
        its timing is used. For large N or many rows, pass a sample of the rows and
        :meth:`resized` the profile.
        """
        y = as_csr32(inputs)
        counts = np.zeros((network.n_layers + 1, y.shape[0]), np.int32)
        counts[0] = np.diff(y.indptr)
        live = np.flatnonzero(counts[0])
        y = y[live]
        layers = zip(network.layers, network.transposed, network.output_order, strict=True)
        for k, (w, wt, order) in enumerate(layers, start=1):
            if not len(live):
                break
            one = Network([w], bias=network.bias, ymax=network.ymax, _transposed=[wt],
                          _output_order=[order])
            out = forward_block(one, y)
            live = live[out.rows]
            y = out.values
            counts[k, live] = np.diff(y.indptr)
        return cls.from_counts(counts, network.n_neurons,
                               f"measured: {network.name}, {counts.shape[1]} rows")

    @classmethod
    def from_records(cls, runs: pd.DataFrame, layers: pd.DataFrame, run_id: str, *,
                     input_density: float | Mapping[int, float] | None = None) -> Survival:
        """The aggregated profile of one recorded run, read off its layer records.

        Levels ``k >= 1`` are as recorded (data and serial runs: the blocks' ``rows_out``
        and ``nnz_out`` summed; model and hybrid runs: per row group the parts'
        ``nnz_out`` summed and the most rows any part saw). The inputs' nonzeros are not
        in the records: level 0 is the live input rows times ``N`` times
        ``input_density`` (default: the official files' density for N, which
        :func:`~sdnn_dask.data.images.make_inputs` reproduces).
        """
        run = runs[runs["run_id"] == run_id]
        if run.empty:
            raise ValueError(f"run {run_id!r} is not in the records")
        first = run.iloc[0]
        n = int(first["neurons"])
        trace = layers[layers["run_id"] == run_id]
        if trace.empty:
            raise ValueError(f"run {run_id!r} has no layer records")
        n_layers = int(first["layers"])
        live = np.zeros(n_layers + 1, np.int64)
        nnz = np.zeros(n_layers + 1, np.int64)
        if first["strategy"] in ("model", "hybrid"):
            t = trace.assign(group=trace["block"] // int(first["parts"]))
            by = t.groupby(["group", "layer"])
            level_nnz = by["nnz_out"].sum().groupby("layer").sum()
            level_live = by["rows_out"].max().groupby("layer").sum()
            entering = by["rows_in"].max().groupby("layer").sum()
        else:
            by = trace.groupby("layer")
            level_nnz, level_live = by["nnz_out"].sum(), by["rows_out"].sum()
            entering = by["rows_in"].sum()
        nnz[level_nnz.index.to_numpy(int)] = level_nnz.to_numpy()
        live[level_live.index.to_numpy(int)] = level_live.to_numpy()
        live[0] = int(entering.get(1, first["inputs"]))
        nnz[0] = round(live[0] * n * _input_density(n, input_density))
        return cls(n, live, nnz, int(first["inputs"]), None,
                   f"records of run {run_id} ({first['network']}, {first['inputs']} rows)")

    def resized(self, rows: int) -> Survival:
        """The profile of ``rows`` input rows like these.

        Per row: the first ``rows`` rows (rows of ``make_inputs`` are a prefix of a
        larger draw), repeated cyclically when more are asked for. Aggregated: scaled by
        ``rows / self.rows``.
        """
        rows = int(rows)
        if rows < 1:
            raise ValueError(f"rows must be >= 1, got {rows}")
        if rows == self.rows:
            return self
        note = f"{self.source}, {'first' if rows < self.rows else 'repeated to'} {rows} rows"
        if self.counts is not None:
            take = self.row_map[np.resize(np.arange(self.rows), rows)]
            return Survival.from_counts(self.counts, self.neurons, note,
                                        level_map=self.level_map, row_map=take)
        scale = rows / self.rows  # expected counts: fractions are kept
        return Survival(self.neurons, self.live * scale, self.nnz * scale, rows, None, note)

    def extended(self, layers: int) -> Survival:
        """The profile for ``layers`` layers: the first ones, or the last level repeated
        (the survivors taken to have reached their plateau)."""
        layers = int(layers)
        if layers < 1:
            raise ValueError(f"layers must be >= 1, got {layers}")
        if layers == self.layers:
            return self
        take = np.minimum(np.arange(layers + 1), self.layers)
        note = (f"{self.source}, first {layers} layers" if layers < self.layers else
                f"{self.source}, level {self.layers} repeated to {layers} layers")
        if self.counts is not None:
            return Survival(self.neurons, self.live[take], self.nnz[take], self.rows,
                            self.counts, note, self.level_map[take], self.row_map)
        return Survival(self.neurons, self.live[take], self.nnz[take], self.rows, None, note)

    def split(self, blocks: int, partition: str = "block", *, seed: int = 0,
              nbuckets: int = 1) -> list[Survival]:
        """The profiles of ``blocks`` row blocks: a per-row profile split by the row
        partition (:func:`~sdnn_dask.partition.make_row_partition`), an aggregated one
        into equal shares."""
        if self.counts is not None:
            part = make_row_partition(partition, self.rows, blocks, seed=seed,
                                      nbuckets=nbuckets)
            return [Survival.from_counts(self.counts, self.neurons,
                                         f"{self.source}, block {b} of {blocks}",
                                         level_map=self.level_map,
                                         row_map=self.row_map[ids])
                    for b, ids in enumerate(part.blocks())]
        shares = np.diff(np.round(np.linspace(0, self.rows, blocks + 1))).astype(int)
        return [self.resized(int(s)) if s else self._empty() for s in shares]

    def union(self, shares: list[Survival]) -> Survival:
        """One profile of the rows of several of this profile's :meth:`split` shares
        (a worker's blocks, merged by the kernel)."""
        rows = sum(s.rows for s in shares)
        if self.counts is not None:
            return Survival.from_counts(self.counts, self.neurons,
                                        f"{self.source}, {len(shares)} blocks merged",
                                        level_map=self.level_map,
                                        row_map=np.concatenate([s.row_map for s in shares]))
        return self.resized(rows) if rows else self._empty()

    def _empty(self) -> Survival:
        zero = np.zeros_like(self.live)
        return Survival(self.neurons, zero, zero.copy(), 0, None, f"{self.source}, empty")

    def row_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-row profiles: the measured levels of these rows (``levels x rows``) and
        the level map into them."""
        if self.counts is None:
            raise ValueError("an aggregated profile has no per-row counts")
        used = np.unique(self.level_map)
        remap = np.searchsorted(used, self.level_map)
        return self.counts[np.ix_(used, self.row_map)], remap

    def table(self) -> pd.DataFrame:
        """Per layer: ``layer, rows_in, nnz_in, rows_out, nnz_out``."""
        return pd.DataFrame({"layer": np.arange(1, self.layers + 1),
                             "rows_in": self.live[:-1], "nnz_in": self.nnz[:-1],
                             "rows_out": self.live[1:], "nnz_out": self.nnz[1:]})


# --------------------------------------------------------------------------------------
# The work of the serial kernel on one block


@dataclass
class _Chunk:
    live: np.ndarray
    dense: bool = False


def _kernel_schedule(counts: np.ndarray, levels: np.ndarray, n: int,
                     settings: KernelSettings, weights: float
                     ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Replay :func:`~sdnn_dask.core.kernels.forward_block`'s chunk schedule on per-row counts
    (``counts[levels[k]]`` are level ``k``'s).

    Returns the per-layer regressors (``layers x`` :data:`KERNEL_TERMS`, in their
    units), the block's regressors (:data:`KERNEL_TERMS` for the last tiles made sparse,
    then :data:`BLOCK_TERMS`) and each layer's mode as the trace names it (``dense``,
    ``sparse``, ``mixed`` or ``none``). Once the levels repeat (an extended profile) and
    a layer changed nothing, the remaining layers are copies of it.
    """
    n_layers = len(levels) - 1
    cr = settings.chunk_rows(n)
    thr = float(settings.dense_threshold)
    w_layer = weights * n
    work = np.zeros((n_layers, _K))
    modes: list[set[str]] = [set() for _ in range(n_layers)]
    repacked = 0.0
    live = np.flatnonzero(counts[levels[0]]).astype(np.int64)
    chunks = [_Chunk(live[s: s + cr]) for s in range(0, len(live), cr)]

    def advance(chunk: _Chunk, k: int) -> None:
        rows = len(chunk.live)
        if not rows:
            return
        nnz = float(counts[levels[k], chunk.live].sum())
        dense = nnz >= thr * (1.0 + SETUP_ROWS / rows) * n * rows
        w = work[k]
        if dense:
            if not chunk.dense:
                w[6] += n * rows
            w[0] += w_layer * rows
            w[1] += w_layer * -(-rows // ROW_TILE)
            w[2] += 1
            modes[k].add("dense")
        else:
            if chunk.dense:
                w[7] += n * rows
                w[8] += nnz
                w[9] += 1
            w[3] += weights * nnz
            w[4] += n * rows
            w[5] += 1
            modes[k].add("sparse")
        chunk.dense = dense
        chunk.live = chunk.live[counts[levels[k + 1], chunk.live] > 0]
        if not len(chunk.live):
            chunk.dense = False

    def repack(group: list[_Chunk]) -> list[_Chunk]:
        nonlocal repacked
        rows = np.concatenate([c.live for c in group])
        dense = any(c.dense for c in group)
        if dense:
            repacked += len(rows)
        return [_Chunk(rows[s: s + cr], dense) for s in range(0, len(rows), cr)]

    early = 0
    packed: list[_Chunk] = []
    pending: list[_Chunk] = []
    for i, chunk in enumerate(chunks):
        k = 0
        while k < n_layers and (k < early if i else 4 * len(chunk.live) > cr):
            advance(chunk, k)
            k += 1
        if i == 0:
            early = k
        if len(chunk.live):
            pending.append(chunk)
        if sum(len(c.live) for c in pending) >= cr:
            *full, last = repack(pending)
            packed += full
            pending = [last] if len(last.live) < cr else []
            if not pending:
                packed.append(last)
    chunks = packed + pending
    quiet = False  # the previous layer changed no chunk (no form change, no repack)
    for k in range(early, n_layers):
        if (quiet and k > early and levels[k] == levels[k - 1] == levels[k + 1]
                and levels[k + 1] == levels[-1]):
            work[k:] = work[k - 1]  # the same level in and out from here on
            for j in range(k, n_layers):
                modes[j] = set(modes[k - 1])
            break
        for chunk in chunks:
            advance(chunk, k)
        chunks = [c for c in chunks if len(c.live)]
        live_rows = sum(len(c.live) for c in chunks)
        quiet = work[k, 6] == 0 and work[k, 7] == 0
        if len(chunks) > 1 and len(chunks) >= 2 * -(-live_rows // cr):
            chunks = repack(chunks)
            quiet = False
    block = np.zeros(_K + len(BLOCK_TERMS))
    last = levels[-1]
    for c in chunks:
        if c.dense:
            block[7] += n * len(c.live)
            block[8] += float(counts[last, c.live].sum())
            block[9] += 1
    block[_K:] = [1.0, counts.shape[1], n * repacked]
    names = ["none" if not m else next(iter(m)) if len(m) == 1 else "mixed" for m in modes]
    return work, block, names


def _kernel_estimate(live: np.ndarray, nnz: np.ndarray, n: int, settings: KernelSettings,
                     weights: float, modes: Sequence[str] | None = None
                     ) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """The regressors of :func:`_kernel_schedule` estimated from a block's per-level live
    rows and nonzeros (no per-row counts).

    Chunk counts follow the kernel's rules applied to the level totals (depth-first
    chunks until a quarter of the rows are left, then full chunks, repacked when half
    empty); a layer's mode is ``modes[k]`` when given (records), else the density rule
    applied to the level's mean chunk, and every chunk of a layer is taken to change form
    when the mode changes. Returns also, per layer, whether the estimate is good enough to
    fit on (``False``: a ``mixed`` layer, or one after it, where the form of each chunk
    is unknown).
    """
    n_layers = len(live) - 1
    cr = settings.chunk_rows(n)
    thr = float(settings.dense_threshold)
    w_layer = weights * n
    work = np.zeros((n_layers, _K))
    usable = np.ones(n_layers, bool)
    names: list[str] = []
    block = np.zeros(_K + len(BLOCK_TERMS))
    rows0 = float(live[0])
    if rows0 <= 0:
        block[_K] = 1.0
        return work, block, ["none"] * n_layers, usable
    repacked = 0.0
    first = min(cr, rows0)
    early = 0
    while early < n_layers and 4 * first * live[early] / rows0 > cr:
        early += 1
    chunks = math.ceil(rows0 / cr)
    previous = "sparse"  # the inputs arrive as sparse rows
    for k in range(n_layers):
        rows = float(live[k])
        if k == early and rows:
            if previous == "dense":
                repacked += rows
            chunks = math.ceil(rows / cr)
        elif k > early:
            chunks = min(chunks, math.ceil(rows))
            need = math.ceil(rows / cr)
            if chunks > 1 and chunks >= 2 * need:
                if previous == "dense":
                    repacked += rows
                chunks = need
        if rows <= 0 or chunks <= 0:
            names.append("none")
            continue
        per_chunk = rows / chunks
        if modes is not None:
            mode = modes[k]
        else:
            mode = ("dense" if nnz[k] >= thr * (1.0 + SETUP_ROWS / per_chunk) * n * rows
                    else "sparse")
        names.append(mode)
        if mode == "mixed" or (k and modes is not None and modes[k - 1] == "mixed"):
            usable[k] = False
        w = work[k]
        if mode in ("dense", "mixed"):
            w[0] = w_layer * rows
            w[1] = w_layer * chunks * math.ceil(per_chunk / ROW_TILE)
            w[2] = chunks
            if previous != "dense":
                w[6] = n * rows
        else:
            w[3] = weights * nnz[k]
            w[4] = n * rows
            w[5] = chunks
            if previous == "dense":
                w[7], w[8], w[9] = n * rows, nnz[k], chunks
        previous = "dense" if mode == "mixed" else mode
    if previous == "dense" and live[-1] > 0:
        block[7], block[8] = n * float(live[-1]), float(nnz[-1])
        block[9] = math.ceil(float(live[-1]) / cr)
    block[_K:] = [1.0, rows0, n * repacked]
    return work, block, names, usable


# --------------------------------------------------------------------------------------
# The work of one model-parallel part


def _part_chunk_rows(n_in: float, n_out: float, settings: KernelSettings) -> int:
    rows = max(1, int(settings.chunk_bytes) // (4 * int(max(n_in, n_out))))
    if rows >= ROW_TILE:
        rows -= rows % ROW_TILE
    return rows


def _part_work(rows: float, nnz_read: float, nnz_out: float, n_in: float, n_out: float,
               weights: float, settings: KernelSettings, mode: str | None = None
               ) -> tuple[np.ndarray, np.ndarray, str]:
    """Kernel and part regressors of one part's layer step (:data:`KERNEL_TERMS`,
    :data:`PART_TERMS`); ``weights`` per input row of the part's slice of the layer."""
    k_work = np.zeros(_K)
    p_work = np.zeros(len(PART_TERMS))
    if rows <= 0 or n_out <= 0:
        p_work[2] = 1.0
        return k_work, p_work, "none"
    if mode is None:
        dense = nnz_read >= settings.dense_threshold * (1.0 + SETUP_ROWS / rows) * n_in * rows
        mode = "dense" if dense else "sparse"
    w_part = weights * n_in  # nonzeros of W[needed, own]
    if mode == "dense":
        cr = _part_chunk_rows(n_in, n_out, settings)
        full, rest = divmod(rows, cr)
        tiles = full * math.ceil(cr / ROW_TILE) + (math.ceil(rest / ROW_TILE) if rest else 0)
        k_work[0] = w_part * rows
        k_work[1] = w_part * tiles
        p_work[0] = 2.0 * n_out * rows  # the own columns: copied row-aligned; the output
        p_work[3] = max(0.0, n_in - n_out) * rows  # the pieces: zeroed, then scattered
    else:
        k_work[3] = weights * nnz_read
        k_work[4] = n_out * rows
        p_work[1] = nnz_read + nnz_out
    p_work[2] = 1.0
    return k_work, p_work, mode


def _payload(rows: float, nnz: float, columns: float, block_rows: int = 256) -> float:
    """Bytes of a slab of ``rows x columns`` holding ``nnz`` nonzeros (:class:`~sdnn_dask.
    slabs.Slab`): row ids, then a tile (4 bytes an entry) when at least half the entries
    are nonzero, else block CSC (8 bytes a nonzero, 8 per column and block of
    ``block_rows`` rows: 256, or the dense step's chunk when a dense step made it)."""
    if rows <= 0:
        return 0.0
    if 2 * nnz >= rows * columns:
        return 8.0 * rows + 4.0 * rows * columns
    blocks = math.ceil(rows / block_rows)
    return 8.0 * rows + 8.0 * nnz + 8.0 * blocks * (columns + 1) + 8.0 * (blocks + 1)


def _slots(row_groups: int, parts: int, workers: int) -> np.ndarray:
    """Worker of every (group, part), as the executor places them."""
    g, p = np.meshgrid(np.arange(row_groups), np.arange(parts), indexing="ij")
    return (g * parts + p) % workers


# --------------------------------------------------------------------------------------
# Least squares


def _fit(x: np.ndarray, y: np.ndarray, names: Sequence[str], *,
         robust: bool = True) -> dict[str, float]:
    """Non-negative least squares of ``y`` on the columns of ``x``.

    A column that is zero everywhere (a term the records never exercise) gets
    coefficient 0. With ``robust``, a few Huber reweightings follow: points more than
    2.5 robust standard deviations off (a layer preempted by another process on a shared
    machine) count less, so one outlier cannot drag a coefficient.
    """
    x = np.asarray(x, float).reshape(len(y), -1) if len(y) else np.zeros((0, len(names)))
    y = np.asarray(y, float)
    coef = np.zeros(len(names))
    if not len(y):
        return dict(zip(names, coef.tolist(), strict=True))
    scale = np.abs(x).max(axis=0)
    active = scale > 0
    if not active.any():
        return dict(zip(names, coef.tolist(), strict=True))
    xs = x[:, active] / scale[active]
    weight = np.ones(len(y))
    for _ in range(6 if robust else 1):
        sol, _ = nnls(xs * weight[:, None], y * weight)
        residual = y - xs @ sol
        sigma = 1.4826 * np.median(np.abs(residual - np.median(residual)))
        if not robust or sigma <= 0:
            break
        limit = 2.5 * sigma
        weight = np.sqrt(np.minimum(1.0, limit / np.maximum(np.abs(residual), 1e-300)))
    coef[active] = sol / scale[active]
    return dict(zip(names, coef.tolist(), strict=True))


def _fit_parts(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The part terms (:data:`PART_TERMS`). The other parts' columns cost more per entry
    than the own ones (zeroed, then scattered by row from the pieces, against a
    row-aligned copy), but only runs whose parts read different shares of the others'
    columns (a hypergraph partition next to contiguous parts) tell the two apart: when
    the share is the same in every dense step, one cost per entry is fitted for both."""
    dense = x[:, 0] > 0
    share = x[dense, 3] / x[dense, 0] if dense.any() else np.zeros(0)
    if share.size and np.ptp(share) > 0.05 * max(float(share.max()), 1e-12):
        return _fit(x, y, list(PART_TERMS))
    merged = np.column_stack([x[:, 0] + x[:, 3], x[:, 1], x[:, 2]])
    coef = _fit(merged, y, ["part_entry", "part_nnz", "part_step"])
    return {**coef, "part_foreign": coef["part_entry"]}


def _ratio(measured: np.ndarray, predicted: np.ndarray) -> float:
    """The factor ``f`` minimising ``sum (measured - f * predicted)^2`` (1 without data)."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    denom = float(predicted @ predicted)
    return float(measured @ predicted) / denom if denom > 0 else 1.0


# --------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class Prediction:
    """A predicted run.

    Attributes
    ----------
    strategy, workers, neurons, layers, rows, parts, row_groups
        What was predicted.
    seconds
        Predicted wall seconds: the sum of the four terms below.
    edges_per_s
        ``rows * edges / seconds`` (edges = ``weights_per_row * N * layers``).
    compute_s
        Arithmetic on the critical path: the block (kernel), the busiest worker's blocks
        (data), the sum over layers of the slowest part's step (model, hybrid: the mean
        step times ``1 + imbalance``).
    latency_s
        Per-layer synchronisation: ``layers x latency`` (model, hybrid).
    communication_s
        Bytes moved between workers times the seconds per byte (model, hybrid).
    overhead_s
        Per run, per task and per output nonzero gathered (data, model, hybrid).
    bytes_moved
        Predicted bytes of the pieces moved between workers.
    survival
        Where the survival profile came from.
    """

    strategy: str
    workers: int
    neurons: int
    layers: int
    rows: int
    parts: int
    row_groups: int
    seconds: float
    edges_per_s: float
    compute_s: float
    latency_s: float
    communication_s: float
    overhead_s: float
    bytes_moved: float
    survival: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (one row of a table)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class CostModel:
    """Fitted coefficients of the run-time model.

    Build one with :meth:`calibrate`; :meth:`predict` prices a run. Every coefficient is
    in seconds per unit of its term (see :meth:`terms` and :data:`ALL_TERMS`), except the
    dimensionless sharing factors.

    Attributes
    ----------
    dense_fma, dense_tile, dense_call
        The serial kernel's dense chunk step, one worker alone on the machine (s per
        multiply-add, per weight and 256-row tile, per step).
    sparse_edge, sparse_scan, sparse_call
        Its sparse chunk step (s per edge processed, per accumulator entry scanned, per
        step).
    to_dense, to_sparse, to_sparse_nnz, to_sparse_call
        A chunk changing form (s per entry made dense; s per entry, per nonzero and per
        tile made sparse, also at the end of a block).
    block, block_row, repack
        A block's set-up and tear-down (s per block, per input row, per entry repacked).
    part_entry, part_nnz, part_step, part_foreign
        A model-parallel part's step beyond the arithmetic (s per own input or output
        entry of a dense step, per nonzero read or written by a sparse one, per step, per
        entry of the other parts' columns a dense step scatters into its input tile).
    busy
        Slow-down of compute while other workers compute at the same time (shared caches,
        memory bandwidth and, on a VM, shared physical cores): ``>= 1`` in practice.
    shared_step
        Extra slow-down of a part's step per additional part sharing its core
        (``1`` would be perfect time-slicing).
    imbalance, latency, byte
        Per-layer exchange of model and hybrid runs with one part per core: the layer
        waits for its slowest part (``imbalance`` x the mean step more), then for the
        synchronisation (s per layer) and the pieces (s per byte moved between workers).
    shared_imbalance, shared_latency, shared_byte
        The same with several parts per core (the hybrid on fewer cores than parts; one
        group's exchange then overlaps another's compute).
    data_run, data_gather, model_run, model_gather
        Per run (a data run has one task per worker: its blocks merged), per output
        nonzero gathered.
    weights_per_row
        Nonzeros per weight row (32 in the challenge); edges = ``weights_per_row * N``
        per layer.
    settings
        The kernel settings the schedule is replayed with when predicting.
    calibrated_on
        ``run_id`` of every run the coefficients were fitted on.
    profiles
        A survival profile per N from the calibration (used by :meth:`predict` when no
        ``survival`` is given).
    residuals
        Relative RMS residual of some fitting stages, for the record.
    """

    dense_fma: float = 0.0
    dense_tile: float = 0.0
    dense_call: float = 0.0
    sparse_edge: float = 0.0
    sparse_scan: float = 0.0
    sparse_call: float = 0.0
    to_dense: float = 0.0
    to_sparse: float = 0.0
    to_sparse_nnz: float = 0.0
    to_sparse_call: float = 0.0
    block: float = 0.0
    block_row: float = 0.0
    repack: float = 0.0
    part_entry: float = 0.0
    part_nnz: float = 0.0
    part_step: float = 0.0
    part_foreign: float = 0.0
    busy: float = 1.0
    shared_step: float = 1.0
    imbalance: float = 0.0
    latency: float = 0.0
    byte: float = 0.0
    shared_imbalance: float = 0.0
    shared_latency: float = 0.0
    shared_byte: float = 0.0
    data_run: float = 0.0
    data_gather: float = 0.0
    model_run: float = 0.0
    model_gather: float = 0.0
    weights_per_row: float = 32.0
    settings: KernelSettings = field(default_factory=KernelSettings.resolve)
    calibrated_on: frozenset[str] = field(default_factory=frozenset, repr=False)
    profiles: Mapping[int, Survival] = field(default_factory=dict, compare=False,
                                             repr=False)
    residuals: Mapping[str, float] = field(default_factory=dict, compare=False,
                                           repr=False)

    # ----------------------------------------------------------------- introspection

    def coefficients(self) -> dict[str, float]:
        """Every fitted coefficient by term name."""
        return {name: float(getattr(self, name)) for name in ALL_TERMS}

    def terms(self) -> pd.DataFrame:
        """One row per term: ``term, counts, unit, value``."""
        rows = [{"term": name, "counts": what, "unit": unit, "value": getattr(self, name)}
                for name, (what, unit) in ALL_TERMS.items()]
        return pd.DataFrame(rows)

    @property
    def bandwidth(self) -> float:
        """Effective bandwidth between workers, bytes/s (``1 / byte``; inf if free)."""
        return math.inf if self.byte <= 0 else 1.0 / self.byte

    def _vector(self, terms: Mapping[str, Any]) -> np.ndarray:
        return np.array([getattr(self, name) for name in terms], float)

    # -------------------------------------------------------------------- calibration

    @classmethod
    def calibrate(cls, runs: pd.DataFrame, layers: pd.DataFrame, *,
                  profiles: Mapping[tuple[int, int, int], Survival] | None = None,
                  input_density: float | Mapping[int, float] | None = None,
                  settings: KernelSettings | None = None,
                  **selection: Any) -> CostModel:
        """Fit the coefficients on records.

        Parameters
        ----------
        runs, layers
            Run records (one row per run and block) and layer records (one row per run,
            block and layer), as :func:`~sdnn_dask.records.run_records` and
            :func:`~sdnn_dask.records.layer_records` make them. Only runs of the
            ``kernel``, ``data``, ``model`` and ``hybrid`` strategies are used; model and
            hybrid runs only with the ``direct`` transport (the one with per-layer
            timing).
        profiles
            Per-row survival profiles of the inputs of some runs, by ``(neurons, layers,
            inputs)`` (:meth:`Survival.measure`; a profile with more layers or rows
            serves too, cut down): the kernel's chunk schedule of those runs is then
            replayed exactly, and their ``mixed`` layers (some chunks dense, some sparse)
            are fitted too. Without one, a run's layers are estimated from its records and
            ``mixed`` layers (and the layer after each) are left out.
        input_density
            Fraction of nonzero input entries, for level 0 (not in the records); a number
            or one per N; default the official files' (:data:`~sdnn_dask.data.images.
            CHALLENGE_DENSITY`, which ``make_inputs`` reproduces).
        settings
            The kernel settings of runs whose records have no ``dense_threshold`` /
            ``chunk_bytes`` columns (default: this process's ``sdnn.kernel.*``); also
            the settings the model predicts with.
        **selection
            ``column=value`` (or a list of values) filters applied to ``runs`` first, e.g.
            ``neurons=1024`` or ``study=[...]``.

        Returns
        -------
        CostModel
            Fitted in stages, each on measured quantities (robust non-negative least
            squares): the block terms on ``compute_s`` minus the block's layer seconds;
            the kernel terms on the layer seconds of blocks that ran alone (serial runs,
            data parallelism on one worker); ``busy`` on the blocks of data-parallel runs
            on several workers; the part terms on the layer seconds of model runs (one
            part per core) minus their arithmetic; ``shared_step`` on hybrid runs with
            more parts than cores; the exchange terms on each layer's time minus the
            slowest part's step; the run terms on ``wall_s`` minus the measured critical
            path.
        """
        settings = settings or KernelSettings.resolve()
        runs = _select(runs, selection)
        runs = runs[runs["strategy"].isin([*SERIAL, *PARALLEL])]
        model_like = runs["strategy"].isin(["model", "hybrid"])
        runs = runs[~model_like | (runs["transport"] == "direct")]
        if runs.empty:
            raise ValueError("no kernel, data, model or hybrid (direct) runs match the "
                             "selection")
        layers = layers[layers["run_id"].isin(runs["run_id"])]
        profiles = dict(profiles or {})
        weights = float(np.median(runs["edges"] / (runs["neurons"] * runs["layers"])))
        first = runs.groupby("run_id", sort=False).first()
        traces = {rid: t.sort_values(["block", "layer"])
                  for rid, t in layers.groupby("run_id", sort=False)}
        blocks_of = {rid: b for rid, b in runs.groupby("run_id", sort=False)}
        residuals: dict[str, float] = {}

        # 1. the serial kernel: per layer and per block work, fitted together (the last
        #    tiles of a block are made sparse by the same code as a layer's)
        solo, busy_blocks = [], []
        for rid, run in first.iterrows():
            if run["strategy"] not in ("kernel", "data") or rid not in traces:
                continue
            if _merged(run):  # its blocks' seconds are shares of merged tiles' time
                continue
            n, n_layers = int(run["neurons"]), int(run["layers"])
            run_settings = _run_settings(run, settings)
            per_block = _block_profiles(run, profiles)
            alone = run["strategy"] == "kernel" or min(int(run["workers"]),
                                                       int(run["blocks"])) == 1
            block_rows = blocks_of[rid].set_index("block")
            for b, trace in traces[rid].groupby("block"):
                work, block, usable = _block_work_from_records(
                    trace, n, n_layers, run_settings, weights, input_density,
                    per_block.get(int(b)))
                item = (work, block, usable, trace["seconds"].to_numpy(float),
                        float(block_rows.loc[b, "compute_s"]))
                (solo if alone else busy_blocks).append(item)
        names = [*KERNEL_TERMS, *BLOCK_TERMS]
        pad = np.zeros(len(BLOCK_TERMS))
        x = [np.hstack([it[0][it[2]], np.tile(pad, (int(it[2].sum()), 1))]) for it in solo]
        x += [it[1][None, :] for it in solo]
        y = [it[3][it[2]] for it in solo] + [[it[4] - it[3].sum()] for it in solo]
        x = np.vstack(x) if x else np.zeros((0, len(names)))
        y = np.concatenate(y) if y else np.zeros(0)
        kernel_coef = _fit(x, y, names)
        residuals["kernel"] = _rel_rms(x, y, kernel_coef)
        kvec = np.array([kernel_coef[name] for name in KERNEL_TERMS])
        full = np.array([kernel_coef[name] for name in names])
        predicted = [float(it[0].sum(axis=0) @ kvec + it[1] @ full) for it in busy_blocks]
        busy = max(1.0, _ratio([it[4] for it in busy_blocks], predicted))

        # 2. model and hybrid: part steps, sharing, exchange; 3. run overheads
        part_x, part_y, shared, exchange = [], [], [], {1: ([], []), 2: ([], [])}
        data_x, data_y, model_x, model_y = [], [], [], []
        for rid, run in first.iterrows():
            trace = traces.get(rid)
            blocks = blocks_of[rid]
            if run["strategy"] == "data":
                # a worker's blocks' compute_s add up to its task's (merged or not)
                per_worker = blocks.groupby("worker")["compute_s"].sum()
                data_x.append([1.0, _output_nnz(trace, int(run["layers"]))])
                data_y.append(float(run["wall_s"]) - float(per_worker.max()))
            if run["strategy"] not in ("model", "hybrid") or trace is None:
                continue
            if trace["wait_s"].isna().all():
                continue
            n, k, n_layers = int(run["neurons"]), int(run["parts"]), int(run["layers"])
            share = _parts_per_core(int(run["row_groups"]), k, int(run["workers"]))
            for kw, pw, seconds in _part_work_from_records(
                    trace, n, k, weights, input_density, _run_settings(run, settings)):
                if share == 1:
                    part_x.append(pw)
                    part_y.append(seconds - busy * float(kw @ kvec))
                else:
                    shared.append((kw, pw, seconds, share))
            t = trace.assign(total=trace[["seconds", "send_s", "wait_s", "deserialise_s"]]
                             .fillna(0.0).sum(axis=1))
            per_layer = t.groupby("layer").agg(total=("total", "mean"),
                                               step=("seconds", "mean"),
                                               moved=("bytes_in", "sum"))
            ex, ey = exchange[min(share, 2)]
            ex.append(np.column_stack([per_layer["step"], np.ones(len(per_layer)),
                                       per_layer["moved"].fillna(0.0)]))
            ey.append((per_layer["total"] - per_layer["step"]).to_numpy())
            model_x.append([1.0, _output_nnz(trace, n_layers)])
            model_y.append(float(run["wall_s"]) - float(t.groupby("block")["total"].sum()
                                                        .max()))
        part_coef = _fit_parts(np.array(part_x).reshape(len(part_x), len(PART_TERMS)),
                               np.array(part_y))
        pvec = np.array(list(part_coef.values()))
        alone_steps = np.array([busy * float(kw @ kvec) + float(pw @ pvec)
                                for kw, pw, _, _ in shared])
        extra = np.array([s - 1 for *_, s in shared], float)
        measured = np.array([sec for _, _, sec, _ in shared])
        shared_step = (max(0.0, _ratio(measured - alone_steps, alone_steps * extra))
                       if shared else 1.0)
        exchange_coef = {}
        for share, names in ((1, ["imbalance", "latency", "byte"]),
                             (2, ["shared_imbalance", "shared_latency", "shared_byte"])):
            ex, ey = exchange[share]
            x = np.vstack(ex) if ex else np.zeros((0, 3))
            y = np.concatenate(ey) if ey else np.zeros(0)
            exchange_coef.update(_fit(x, y, names))
            residuals[names[0]] = _rel_rms(x, y, dict(zip(names, [exchange_coef[m]
                                                                  for m in names],
                                                              strict=True)))
        if not exchange[2][0]:  # no shared-core runs: assume the one-part-per-core figures
            for name in ("imbalance", "latency", "byte"):
                exchange_coef[f"shared_{name}"] = exchange_coef[name]
        data_coef = _fit(np.array(data_x), np.array(data_y),
                         ["data_run", "data_gather"])
        model_coef = _fit(np.array(model_x), np.array(model_y),
                          ["model_run", "model_gather"])
        return cls(**kernel_coef, **part_coef, busy=busy,
                   shared_step=shared_step, **exchange_coef, **data_coef, **model_coef,
                   weights_per_row=weights, settings=settings,
                   calibrated_on=frozenset(first.index),
                   profiles=_family_profiles(runs, layers, input_density, profiles),
                   residuals=residuals)

    # --------------------------------------------------------------------- prediction

    def survival_for(self, neurons: int, layers: int, rows: int,
                     survival: Survival | None = None) -> Survival:
        """The survival profile :meth:`predict` uses: ``survival`` (or the calibration
        profile of the same N), extended to ``layers`` and resized to ``rows``."""
        if survival is None:
            survival = self.profiles.get(int(neurons))
            if survival is None:
                raise ValueError(
                    f"no survival profile for N = {neurons}: the model was calibrated on "
                    f"N = {sorted(self.profiles)}; pass survival= (Survival.measure on a "
                    "sample of rows, or Survival.from_records of a run of that network)")
        if survival.neurons != neurons:
            raise ValueError(f"the survival profile is for N = {survival.neurons}, "
                             f"not {neurons}")
        return survival.extended(layers).resized(rows)

    def predict(self, strategy: str, *, workers: int, neurons: int, layers: int, rows: int,
                parts: int | None = None, row_groups: int = 1,
                survival: Survival | None = None, blocks: int | None = None,
                row_partition: str = "block",
                cross_fraction: float | Sequence[float] = 1.0,
                speed: float = 1.0, settings: KernelSettings | None = None,
                merge: bool = True) -> Prediction:
        """Predict a run's seconds and their terms.

        Parameters
        ----------
        strategy
            ``"kernel"``, ``"data"``, ``"model"`` or ``"hybrid"``.
        workers
            Single-threaded workers, one core each.
        neurons, layers, rows
            N, L and input rows.
        parts
            Neuron parts ``k`` (model and hybrid; default one per worker).
        row_groups
            Row groups ``R`` of the hybrid (``model`` is ``R = 1``).
        survival
            Survival profile of this network family (:class:`Survival`), extended to
            ``layers`` and resized to ``rows`` here; default the calibration profile of
            the same N.
        blocks
            Data parallelism's blocks (default one per worker).
        merge
            Data parallelism with more blocks than workers: a worker's blocks run merged
            (default, ``sdnn.data-parallel.merge-blocks``), priced as one block of their
            rows; ``False``: each block alone (their tasks' overhead is not modelled).
        row_partition
            How rows are split into blocks or row groups (a per-row profile is split
            exactly so; an aggregated one evenly).
        cross_fraction
            Fraction of the other parts' columns each part reads in a layer: 1 for
            contiguous neuron parts of a RadiX-Net layer (each input feeds outputs in all
            16 blocks of the layer); less for a hashed or hypergraph partition at large N.
            A number for every layer, or one per layer (layer 1 first; the last repeated
            beyond its end): the share varies much from layer to layer (at N = 4096 a
            hashed part reads 32 of the other part's 2048 columns in layer 1, all of
            them in layer 7), and the heavy first layers must be priced with their own.
        speed
            Speed of the predicted cores relative to the calibration machine's (2 halves
            every compute term; exchange and overheads are not scaled).
        settings
            Kernel settings of the predicted run (default: the model's).

        Returns
        -------
        Prediction
        """
        if strategy not in (*SERIAL, *PARALLEL):
            raise ValueError(f"strategy must be one of kernel, data, model, hybrid; "
                             f"got {strategy!r}")
        workers, rows, layers = int(workers), int(rows), int(layers)
        if workers < 1 or rows < 1 or layers < 1:
            raise ValueError("workers, rows and layers must be >= 1")
        if not speed > 0:
            raise ValueError(f"speed must be positive, got {speed}")
        profile = self.survival_for(neurons, layers, rows, survival)
        settings = settings or self.settings
        n = int(neurons)
        edges = self.weights_per_row * n * layers
        if strategy in SERIAL or strategy == "data":
            n_blocks = 1 if strategy in SERIAL else int(blocks or workers)
            if strategy == "data" and n_blocks > workers and merge:
                # a worker's blocks run merged (sdnn.data-parallel.merge-blocks): as one
                # block of their rows (their early layers, run apart, are not modelled)
                shares = profile.split(n_blocks, row_partition)
                times = np.array([self._block_seconds(profile.union(shares[w::workers]),
                                                      settings) for w in range(workers)])
            else:
                times = self.block_seconds(profile, n_blocks, row_partition, settings)
            if strategy == "data" and min(n_blocks, workers) > 1:
                times = times * self.busy
            per_worker = np.zeros(workers if strategy == "data" else 1)
            for b, t in enumerate(times / speed):  # round robin, as client.scatter does
                per_worker[b % len(per_worker)] += t
            overhead = 0.0
            if strategy == "data":
                overhead = (self.data_run + self.data_gather * float(profile.nnz[-1]))
            return self._prediction(strategy, workers, n, layers, rows, 1, n_blocks,
                                    float(per_worker.max()), 0.0, 0.0, overhead, 0.0,
                                    edges, profile)
        k = int(parts or workers)
        groups = 1 if strategy == "model" else int(row_groups)
        if k < 1 or groups < 1:
            raise ValueError("parts and row_groups must be >= 1")
        fractions = np.atleast_1d(np.asarray(cross_fraction, float))
        if fractions.size == 0 or not ((fractions >= 0.0) & (fractions <= 1.0)).all():
            raise ValueError(f"cross_fraction must be in [0, 1], got {cross_fraction}")
        fractions = np.concatenate([fractions[:layers],
                                    np.repeat(fractions[-1], max(0, layers - fractions.size))])
        share = _parts_per_core(groups, k, workers)
        slots = _slots(groups, k, workers)
        shares = profile.split(groups, row_partition) if groups > 1 else [profile]
        n_out = n / k
        kvec, pvec = self._vector(KERNEL_TERMS), self._vector(PART_TERMS)
        factor = (self.busy if min(groups * k, workers) > 1 else 1.0) / speed
        slowdown = 1.0 + (share - 1) * self.shared_step
        step = np.zeros(layers)
        moved = np.zeros(layers)
        for g, part_share in enumerate(shares):
            remote = [len({int(slots[g, q]) for q in range(k) if q != p} - {int(slots[g, p])})
                      for p in range(k)]
            made_by = "sparse"  # level 0 is cut from the input rows, 256-row blocks
            for layer in range(layers):
                rows_in, level = float(part_share.live[layer]), float(part_share.nnz[layer])
                fraction = float(fractions[layer])
                n_in = n_out + fraction * (n - n_out)
                kw, pw, mode = _part_work(rows_in, level * n_in / n,
                                          float(part_share.nnz[layer + 1]) / k, n_in, n_out,
                                          self.weights_per_row * n_out / n_in, settings)
                seconds = factor * float(kw @ kvec) + float(pw @ pvec) / speed
                step[layer] += seconds * slowdown / len(shares)  # the mean part step
                block_rows = (_part_chunk_rows(n_in, n_out, settings) if made_by == "dense"
                              else 256)
                piece = _payload(rows_in, level / k * fraction, n_out * fraction,
                                 block_rows)
                moved[layer] += piece * sum(remote)
                made_by = mode
        imbalance = self.imbalance if share == 1 else self.shared_imbalance
        per_layer = self.latency if share == 1 else self.shared_latency
        per_byte = self.byte if share == 1 else self.shared_byte
        compute = float(step.sum()) * (1.0 + imbalance)
        overhead = self.model_run + self.model_gather * float(profile.nnz[-1])
        return self._prediction(strategy, workers, n, layers, rows, k, groups,
                                compute, per_layer * layers,
                                per_byte * float(moved.sum()), overhead,
                                float(moved.sum()), edges, profile)

    def _prediction(self, strategy: str, workers: int, n: int, layers: int, rows: int,
                    parts: int, groups: int, compute: float, latency: float,
                    communication: float, overhead: float, moved: float, edges: float,
                    profile: Survival) -> Prediction:
        seconds = compute + latency + communication + overhead
        return Prediction(strategy, workers, n, layers, rows, parts,
                          groups if strategy == "hybrid" else 1, seconds,
                          rows * edges / seconds if seconds > 0 else math.inf, compute,
                          latency, communication, overhead, moved, profile.source)

    def _block_work(self, share: Survival, settings: KernelSettings
                    ) -> tuple[np.ndarray, np.ndarray, list[str]]:
        n = share.neurons
        if share.counts is not None:
            counts, levels = share.row_counts()
            return _kernel_schedule(counts, levels, n, settings, self.weights_per_row)
        work, block, modes, _ = _kernel_estimate(share.live, share.nnz, n, settings,
                                                 self.weights_per_row)
        return work, block, modes

    def block_seconds(self, survival: Survival, blocks: int = 1,
                      row_partition: str = "block",
                      settings: KernelSettings | None = None) -> np.ndarray:
        """Predicted ``compute_s`` of each of ``blocks`` row blocks of ``survival``'s rows,
        each run alone by the serial kernel (data parallelism multiplies them by
        :attr:`busy` when several workers compute at once)."""
        if int(blocks) < 1:
            raise ValueError(f"blocks must be >= 1, got {blocks}")
        settings = settings or self.settings
        shares = survival.split(int(blocks), row_partition) if blocks > 1 else [survival]
        return np.array([self._block_seconds(s, settings) for s in shares])

    def _block_seconds(self, share: Survival, settings: KernelSettings) -> float:
        """Predicted ``compute_s`` of one block of the serial kernel, alone."""
        if share.rows == 0 or share.live[0] == 0:
            return float(self.block)
        work, block, _ = self._block_work(share, settings)
        kvec = self._vector(KERNEL_TERMS)
        return float((work @ kvec).sum() + block @ np.concatenate(
            [kvec, self._vector(BLOCK_TERMS)]))

    def block_layers(self, share: Survival, settings: KernelSettings | None = None
                     ) -> pd.DataFrame:
        """Per layer of one block run alone: its mode, regressors (:data:`KERNEL_TERMS`)
        and predicted seconds."""
        work, _, modes = self._block_work(share, settings or self.settings)
        frame = pd.DataFrame(work, columns=list(KERNEL_TERMS))
        frame.insert(0, "mode", modes)
        frame.insert(0, "layer", np.arange(1, len(modes) + 1))
        frame["seconds"] = work @ self._vector(KERNEL_TERMS)
        return frame

    def with_coefficients(self, **changes: float) -> CostModel:
        """A copy with some coefficients replaced (what-if projections)."""
        unknown = sorted(set(changes) - set(ALL_TERMS))
        if unknown:
            raise ValueError(f"unknown terms {unknown}; see CostModel.terms()")
        return replace(self, **changes)


# --------------------------------------------------------------------------------------
# Calibration helpers


def _select(runs: pd.DataFrame, selection: Mapping[str, Any]) -> pd.DataFrame:
    for column, value in selection.items():
        if column not in runs:
            raise ValueError(f"cannot select on {column!r}: no such column in the records")
        if isinstance(value, (list, tuple, set, frozenset, np.ndarray, pd.Series)):
            runs = runs[runs[column].isin(list(value))]
        else:
            runs = runs[runs[column] == value]
    return runs


def _rel_rms(x: np.ndarray, y: np.ndarray, coef: Mapping[str, float],
             total: Sequence[float] | np.ndarray | None = None) -> float:
    if not len(y):
        return float("nan")
    fit = np.asarray(x, float) @ np.array(list(coef.values()))
    denom = np.asarray(total if total is not None else y, float)
    return float(np.sqrt(np.mean((fit - y) ** 2)) / max(np.mean(np.abs(denom)), 1e-12))


def _output_nnz(trace: pd.DataFrame | None, n_layers: int) -> float:
    if trace is None or trace.empty:
        return 0.0
    return float(trace.loc[trace["layer"] == n_layers, "nnz_out"].sum())


def _run_settings(run: pd.Series, default: KernelSettings) -> KernelSettings:
    """The kernel settings of a recorded run: its ``dense_threshold``, ``chunk_bytes`` and
    ``chunk_min_rows`` columns where the records have them, else ``default``'s. A record
    with ``chunk_bytes`` but no ``chunk_min_rows`` was made before the minimum existed:
    its chunks were ``chunk_bytes`` alone (at N = 4096, 64 rows where now 256)."""
    threshold, chunk = run.get("dense_threshold"), run.get("chunk_bytes")
    min_rows = run.get("chunk_min_rows")
    has_chunk = chunk is not None and pd.notna(chunk)
    if min_rows is not None and pd.notna(min_rows):
        min_rows = int(min_rows)
    else:
        min_rows = 1 if has_chunk else default.min_chunk_rows
    return KernelSettings(
        float(threshold) if threshold is not None and pd.notna(threshold)
        else default.dense_threshold,
        int(chunk) if has_chunk else default.chunk_bytes, max(1, min_rows))


def _merged(run: pd.Series) -> bool:
    """A data run whose workers ran several blocks each, merged into shared tiles (records
    made before merging existed have no ``merge_blocks``: their blocks ran alone)."""
    return (run["strategy"] == "data" and int(run["blocks"]) > int(run["workers"])
            and str(run.get("merge_blocks", "")) == "merged")


def _parts_per_core(row_groups: int, parts: int, workers: int) -> int:
    """Parts sharing the busiest worker (single-threaded workers: one core each)."""
    return int(np.bincount(_slots(row_groups, parts, workers).ravel(),
                           minlength=workers).max())


def _block_profiles(run: pd.Series,
                    profiles: Mapping[tuple[int, int, int], Survival]) -> dict[int, Survival]:
    """Per-row profiles of a run's blocks, when a profile of its inputs is given."""
    key = (int(run["neurons"]), int(run["layers"]), int(run["inputs"]))
    profile = _matching_profile(profiles, *key)
    if profile is None or profile.counts is None:
        return {}
    n_blocks = int(run["blocks"])
    partition = run["partition"] if run["partition"] in ("block", "hash") else None
    if n_blocks == 1:
        return {0: profile}
    if partition is None:
        return {}
    shares = profile.extended(key[1]).split(n_blocks, partition)
    return dict(enumerate(shares))


def _block_work_from_records(trace: pd.DataFrame, n: int, n_layers: int,
                             settings: KernelSettings, weights: float,
                             input_density: float | Mapping[int, float] | None,
                             profile: Survival | None
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layer and block regressors of one recorded block, and the layers to fit on.

    With a per-row profile whose replayed schedule matches the records (the same rows and
    nonzeros leaving every layer, the same modes), the exact schedule; otherwise the
    estimate from the recorded levels and modes.
    """
    rows_in = trace["rows_in"].to_numpy(float)
    rows_out = trace["rows_out"].to_numpy(float)
    nnz_out = trace["nnz_out"].to_numpy(float)
    modes = trace["mode"].astype(str).tolist()
    if profile is not None and profile.layers >= n_layers:
        share = profile.extended(n_layers)
        counts, levels = share.row_counts()
        work, block, names = _kernel_schedule(counts, levels, n, settings, weights)
        if (names == modes and np.array_equal(share.live[1:], rows_out)
                and np.array_equal(share.nnz[1:], nnz_out)):
            return work, block, np.ones(n_layers, bool)
    live = np.concatenate([[rows_in[0] if len(rows_in) else 0.0], rows_out])
    nnz0 = live[0] * n * _input_density(n, input_density)
    nnz = np.concatenate([[nnz0], nnz_out])
    work, block, _, usable = _kernel_estimate(live, nnz, n, settings, weights, modes)
    return work, block, usable


def _part_work_from_records(trace: pd.DataFrame, n: int, k: int, weights: float,
                            input_density: float | Mapping[int, float] | None,
                            settings: KernelSettings
                            ) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Per (part, layer) of a model/hybrid run: kernel regressors (weighed), part
    regressors, and the step's seconds."""
    out = []
    n_out = n / k
    own = {}
    for (block, layer), nnz in trace.set_index(["block", "layer"])["nnz_out"].items():
        own[(int(block), int(layer))] = float(nnz)
    for row in trace.itertuples(index=False):
        mode = str(row.mode)
        if mode not in ("dense", "sparse"):
            continue
        foreign = float(row.nnz_in) if pd.notna(row.nnz_in) else 0.0
        columns = float(row.columns_in) if pd.notna(row.columns_in) else 0.0
        n_in = columns + n_out
        layer, block = int(row.layer), int(row.block)
        if layer == 1:
            mine = foreign * n_out / columns if columns else (
                float(row.rows_in) * n_out * _input_density(n, input_density))
        else:
            mine = own.get((block, layer - 1), 0.0)
        read = mine + foreign
        kw, pw, _ = _part_work(float(row.rows_in), read, float(row.nnz_out), n_in, n_out,
                               weights * n_out / n_in, settings, mode)
        out.append((kw, pw, float(row.seconds)))
    return out


def _family_profiles(runs: pd.DataFrame, layers: pd.DataFrame,
                     input_density: float | Mapping[int, float] | None,
                     profiles: Mapping[tuple[int, int, int], Survival]
                     ) -> dict[int, Survival]:
    """Per N, the survival profile of the calibration: a given per-row profile with the
    most layers and rows, else the aggregated one of the recorded serial or data run with
    the most layers and rows."""
    best: dict[int, Survival] = {}
    for (n, _, _), profile in profiles.items():
        current = best.get(n)
        if current is None or (profile.layers, profile.rows) > (current.layers,
                                                                current.rows):
            best[n] = profile
    candidates = runs[runs["strategy"].isin(["kernel", "data"])].drop_duplicates("run_id")
    for n, group in candidates.groupby("neurons"):
        if int(n) in best:
            continue
        top = group.sort_values(["layers", "inputs"]).iloc[-1]
        best[int(n)] = Survival.from_records(runs, layers, top["run_id"],
                                             input_density=input_density)
    return best


# --------------------------------------------------------------------------------------
# Tables and the published network


def projection_table(model: CostModel, runs: pd.DataFrame, layers: pd.DataFrame, *,
                     profiles: Mapping[tuple[int, int, int], Survival] | None = None,
                     input_density: float | Mapping[int, float] | None = None
                     ) -> pd.DataFrame:
    """Measured against projected seconds for every run in the records.

    Each run is projected with the model from its own configuration and a survival
    profile of its own inputs: the per-row one in ``profiles`` (by ``(neurons, layers,
    inputs)``, or one with more layers and rows, cut down) when given, else the aggregated
    profile read off the run's own layer records (:meth:`Survival.from_records`). So the
    table tests the time model, not the extrapolation of survival. Model and hybrid runs
    are projected with the share of the other parts' columns their partition made each
    part read, layer by layer (``columns_in`` of the layer records, mean over the parts:
    1 for contiguous parts of a RadiX-Net layer; at N = 4096 much less for hashed or
    hypergraph parts in the first, heaviest layers).

    Returns
    -------
    pandas.DataFrame
        One row per run: ``run_id, network, neurons, layers, strategy, partition,
        workers, parts, row_groups, rows, measured_s, projected_s, error_pct, held_out``
        (``held_out``: the run was not among those the model was calibrated on).
    """
    profiles = dict(profiles or {})
    rows = []
    first = runs.groupby("run_id", sort=False).first()
    for rid, run in first.iterrows():
        strategy = run["strategy"]
        if strategy not in (*SERIAL, *PARALLEL):
            continue
        n, n_layers, inputs = int(run["neurons"]), int(run["layers"]), int(run["inputs"])
        profile = _matching_profile(profiles, n, n_layers, inputs)
        if profile is None:
            profile = Survival.from_records(runs, layers, rid, input_density=input_density)
        kwargs: dict[str, Any] = {"workers": int(run["workers"]), "neurons": n,
                                  "layers": n_layers, "rows": inputs, "survival": profile,
                                  "settings": _run_settings(run, model.settings)}
        if strategy == "data":
            kwargs["blocks"] = int(run["blocks"])
            kwargs["merge"] = _merged(run)
            if run["partition"] in ("block", "hash"):
                kwargs["row_partition"] = run["partition"]
        if strategy in ("model", "hybrid"):
            k = int(run["parts"])
            kwargs["parts"] = k
            kwargs["row_groups"] = int(run["row_groups"])
            read = (layers.loc[layers["run_id"] == rid].groupby("layer")["columns_in"]
                    .mean().sort_index())
            if k > 1 and read.notna().all() and len(read):  # the partition's measured share
                kwargs["cross_fraction"] = np.clip(read.to_numpy(float) / (n - n / k),
                                                   0.0, 1.0)  # of columns read, per layer
        projected = model.predict(strategy, **kwargs).seconds
        measured = float(run["wall_s"])
        rows.append({"run_id": rid, "network": run["network"], "neurons": n,
                     "layers": n_layers, "strategy": strategy,
                     "partition": run["partition"], "workers": int(run["workers"]),
                     "parts": int(run["parts"]), "row_groups": int(run["row_groups"]),
                     "rows": inputs, "measured_s": measured, "projected_s": projected,
                     "error_pct": 100.0 * (projected - measured) / measured,
                     "held_out": rid not in model.calibrated_on})
    return pd.DataFrame(rows)


def _matching_profile(profiles: Mapping[tuple[int, int, int], Survival], n: int,
                      n_layers: int, inputs: int) -> Survival | None:
    exact = profiles.get((n, n_layers, inputs))
    if exact is not None:
        return exact
    for (pn, pl, pr), profile in profiles.items():
        if pn == n and pl >= n_layers and pr >= inputs and profile.counts is not None:
            return profile.extended(n_layers).resized(inputs)
    return None


def project_published(model: CostModel, survival: Survival | None = None, *,
                      workers: int = PUBLISHED["workers"],
                      bandwidth_gbit_s: float = 100.0, speed: float = 1.0,
                      row_partition: str = "block") -> dict[str, Any]:
    """Project the paper's 65536-neuron, 1920-layer run (4,026,531,840 edges, 60000
    inputs) on 32 nodes x 28 cores, against its published 51 s.

    Data parallelism across all ``workers`` (896 single-threaded workers, one block of
    about 67 rows each; DistSparseDNN splits rows across ranks, its "model parallelism"
    only splits a layer among one rank's threads), so no activations cross the network
    between layers. The only traffic is gathering the survivors' activations at the end,
    priced at ``bandwidth_gbit_s`` (100 Gb/s, InfiniBand-class: an assumption) in place
    of this toolkit's client-side gather and assembly measured here (``data_gather``; the
    challenge times inference only).

    Parameters
    ----------
    model
        A calibrated model (its per-core coefficients are this machine's).
    survival
        Survival profile for N = 65536, e.g. :meth:`Survival.measure` of a sample of rows
        through the first few dozen layers (the survivors plateau by layer 20); it is
        extended to 1920 layers by repeating its last level and resized to 60000 rows by
        repeating its rows. Default: the model's profile of the largest N it knows, with
        its fraction of live rows and their density carried over level by level to
        N = 65536 (an extrapolation across N, and an even split: no imbalance).
    workers
        Workers (896).
    bandwidth_gbit_s
        Network bandwidth between nodes, Gb/s.
    speed
        Per-core speed of their cores relative to this machine's (unknown: 1 assumes
        equal).
    row_partition
        How the rows are split into the workers' blocks (``"block"``: contiguous).

    Returns
    -------
    dict
        ``prediction`` (:class:`Prediction`, the slowest worker's block setting the
        time), ``published_s`` (51), ``ratio`` (projected / published),
        ``mean_block_s`` and ``max_block_s`` (a worker's compute: with perfectly balanced
        survivors the run would take about the mean), ``survivors`` (per block: mean and
        max), ``assumptions`` (list of strings).
    """
    p = PUBLISHED
    n, n_layers, rows = p["neurons"], p["layers"], p["inputs"]
    cr = model.settings.chunk_rows(n)
    dense_above = model.settings.dense_threshold * (1 + SETUP_ROWS / cr)
    assumptions = [
        f"data parallelism over {workers} single-threaded workers (32 nodes x 28 cores), "
        f"one {row_partition} of rows each, every worker holding all 1920 layers (48 GB "
        "per node; not runnable on this 2-core VM)",
        f"per-core speed of their cores = {speed:g} x this machine's (unknown; their "
        "kernel is not this one either); every core busy slows compute by the busy "
        f"factor measured here ({model.busy:.2f}, 2 workers on 2 cores)",
        f"network {bandwidth_gbit_s:g} Gb/s (InfiniBand-class), only for gathering the "
        "survivors' activations (8 bytes a nonzero); run and task overheads as measured "
        "here",
        f"kernel settings as calibrated: {model.settings.chunk_bytes}-byte chunks of at "
        f"least {model.settings.min_chunk_rows} rows, so at N = 65536 a chunk is {cr} rows, "
        f"and a chunk runs dense above {dense_above:.3g} of its entries nonzero (dense "
        f"threshold {model.settings.dense_threshold:g} x (1 + 100 / {cr}))"
        + ("; so every layer runs sparse" if dense_above > 1 else ""),
    ]
    if survival is None:
        if not model.profiles:
            raise ValueError("the model has no survival profile to carry over: pass "
                             "survival= (Survival.measure of a 65536-neuron sample)")
        base = model.profiles[max(model.profiles)]
        survival = _carry_over(base, n)
        assumptions.append(
            f"survival: the N = {base.neurons} calibration profile ({base.source}) carried "
            "over to N = 65536 level by level (same fraction of live rows, same density "
            f"of a live row), its last level repeated to {n_layers} layers, split evenly")
    else:
        assumptions.append(f"survival: {survival.source}; its last level repeated to "
                           f"{n_layers} layers and its rows to {rows}")
    profile = survival.extended(n_layers).resized(rows)
    if profile.neurons != n:
        raise ValueError(f"the survival profile is for N = {profile.neurons}, not {n}")
    blocks = model.block_seconds(profile, workers, row_partition)
    blocks = blocks * (model.busy if workers > 1 else 1.0) / speed
    network_s = 8.0 * float(profile.nnz[-1]) / (bandwidth_gbit_s * 1e9 / 8.0)
    overhead = model.data_run + network_s
    edges = model.weights_per_row * n * n_layers
    prediction = model._prediction("data", workers, n, n_layers, rows, 1, workers,
                                   float(blocks.max()), 0.0, 0.0, overhead, 0.0, edges,
                                   profile)
    if profile.counts is not None:
        shares = profile.split(workers, row_partition)
        survivors = np.array([float(s.live[-1]) for s in shares])
    else:
        survivors = np.full(workers, float(profile.live[-1]) / workers)
    return {"prediction": prediction, "published_s": p["seconds"],
            "ratio": prediction.seconds / p["seconds"],
            "mean_block_s": float(blocks.mean()), "max_block_s": float(blocks.max()),
            "survivors": {"mean": float(survivors.mean()), "max": float(survivors.max())},
            "assumptions": assumptions}


def _carry_over(base: Survival, neurons: int) -> Survival:
    """An aggregated profile for another N with the same live-row fraction and live-row
    density at every level."""
    live = base.live.astype(float)
    density = np.divide(base.nnz, live * base.neurons, out=np.zeros_like(live),
                        where=live > 0)
    return Survival(int(neurons), base.live.copy(),
                    np.round(live * density * neurons).astype(np.int64), base.rows, None,
                    f"{base.source}, carried over to N = {neurons}")


# --------------------------------------------------------------------------- the report

#: Generated networks are named ``radixnet-{N}-{L}-s{seed}`` (:func:`sdnn_dask.data.radixnet.
#: make_network`): enough, with the rows, to make their inputs again.
_GENERATED = re.compile(r"^radixnet-(\d+)-(\d+)-s(\d+)$")


def generated_profiles(runs: pd.DataFrame) -> dict[tuple[int, int, int], Survival]:
    """Per-row survival profiles of the generated problems of ``runs``, made again.

    A problem whose ``source`` is ``generated`` is fully named by its records (network
    ``radixnet-{N}-{L}-s{seed}`` and the inputs' row count): its inputs are generated
    again and run once through the network (:meth:`Survival.measure`; no timing used).
    Problems read from challenge files are left out (their profile is then estimated from
    their own layer records).
    """
    from .data.images import generated_source, make_inputs
    from .data.radixnet import make_network

    profiles: dict[tuple[int, int, int], Survival] = {}
    first = runs.drop_duplicates(["network", "inputs"])
    for _, run in first.iterrows():
        match = _GENERATED.match(str(run["network"]))
        source = str(run.get("source", "generated"))
        # "generated" alone: records made while iid was the generator's default
        orders = {"generated": "iid", "": "iid", generated_source("iid"): "iid",
                  generated_source("official-like"): "official-like"}
        if match is None or source not in orders:
            continue
        n, n_layers, seed = (int(g) for g in match.groups())
        rows = int(run["inputs"])
        network = make_network(n, n_layers, seed=seed)
        inputs = make_inputs(rows, n, seed=seed, order=orders[source])
        profiles[n, n_layers, rows] = Survival.measure(network, inputs)
    return profiles


def held_out_split(runs: pd.DataFrame) -> tuple[dict[str, Any], str]:
    """Which runs a report calibrates on, as a :meth:`CostModel.calibrate` selection, and
    the rule in words.

    With several N: the smallest N calibrates, every other N is held out. With one N and
    several problems: all but the largest (layers x rows) calibrate. With one problem:
    it calibrates on all (nothing held out: the table would show the model's fit only,
    which :func:`report_projection` refuses).
    """
    problems = (runs.drop_duplicates(["neurons", "layers", "inputs"])
                [["neurons", "layers", "inputs"]].astype(int))
    sizes = sorted(problems["neurons"].unique())
    if len(sizes) > 1:
        return ({"neurons": int(sizes[0])},
                f"calibrated on N = {sizes[0]}, held out: N = "
                f"{', '.join(map(str, sizes[1:]))}")
    if len(problems) > 1:
        work = problems["layers"] * problems["inputs"]
        largest = problems.loc[work.idxmax()]
        held = (runs["layers"] == largest["layers"]) & (runs["inputs"] == largest["inputs"])
        return ({"run_id": sorted(runs.loc[~held, "run_id"].astype(str).unique())},
                f"calibrated on the smaller problems, held out: the largest "
                f"({int(largest['layers'])} layers, {int(largest['inputs'])} rows)")
    return {}, "calibrated on every run (one problem: nothing held out, the fit only)"


def report_projection(runs: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Measured against projected for a report: calibrated and held out by
    :func:`held_out_split`, each run projected from its own configuration (graph-transport
    runs left out: not modelled), one row per configuration (medians over its repeats;
    ``runs`` counts them; the rule in ``attrs["rule"]``).

    Raises
    ------
    ValueError
        When the calibration runs cannot determine the model (too few kinds of runs).
    """
    # the graph transport is not modelled (its per-layer scheduling is another latency)
    runs = runs[runs["strategy"].isin([*SERIAL, *PARALLEL]) & (runs["transport"] != "graph")]
    if runs.empty:
        raise ValueError("no kernel, data, model or hybrid runs to calibrate on")
    selection, rule = held_out_split(runs)
    calibrating = runs
    for column, value in selection.items():
        calibrating = calibrating[calibrating[column].isin(np.atleast_1d(value))]
    sizes = calibrating.drop_duplicates(["neurons", "layers", "inputs"])
    if len(sizes) < 2:
        raise ValueError("calibrating the cost model needs runs of at least two problem "
                         "sizes (layers x rows) at one N; studies/quick.yaml has five")
    profiles = generated_profiles(runs)
    model = CostModel.calibrate(runs, layers, profiles=profiles, **selection)
    table = projection_table(model, runs, layers, profiles=profiles)
    # one row per configuration: the medians of its repeats
    settings = runs.drop_duplicates("run_id").set_index("run_id")["dense_threshold"]
    sparse_only = (table["strategy"] == "kernel") & (
        table["run_id"].map(settings).astype(float) > 1)
    table = table.assign(partition=table["partition"].where(~sparse_only,
                                                            "none (no dense step)"))
    keys = ["network", "rows", "strategy", "partition", "workers", "parts", "row_groups",
            "held_out"]
    out = (table.groupby(keys, sort=False, dropna=False)
           .agg(runs=("run_id", "count"), measured_s=("measured_s", "median"),
                projected_s=("projected_s", "median")).reset_index())
    out["error_pct"] = 100.0 * (out["projected_s"] / out["measured_s"] - 1.0)
    out.attrs["rule"] = rule
    return out
