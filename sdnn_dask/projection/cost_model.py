"""The cost model itself: its coefficients (:class:`CostModel`) and how a run's seconds are
predicted from them (:class:`Prediction`).

The coefficients are fitted by :mod:`~sdnn_dask.projection.calibration`; the work they
price comes from :mod:`~sdnn_dask.projection.kernel_work` (the serial kernel's blocks) and
:mod:`~sdnn_dask.projection.part_work` (model-parallel parts).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd

from ..core.kernels import KernelSettings
from .calibration import fitted_coefficients
from .kernel_work import kernel_estimate, kernel_schedule
from .part_work import part_chunk_rows, part_slots, part_work, parts_per_core, payload
from .survival import Survival
from .terms import (
    ALL_TERMS,
    BLOCK_TERMS,
    KERNEL_TERMS,
    PARALLEL,
    PART_TERMS,
    SERIAL,
    class_share,
)

__all__ = ["CostModel", "Prediction", "join_layer"]


def join_layer(live: Sequence[float] | np.ndarray, stable: float = 0.9) -> int:
    """Layers a joined data-parallel run's workers step apart (0-based index of the first
    joined layer), from a profile's live rows per level: the kernel's early passes stop
    once at most a 16th of their rows are live, or after two layers in a row each leave
    at least ``stable`` of the rows they took (:func:`~sdnn_dask.core.kernels.
    run_early_layers`, with :class:`~sdnn_dask.core.kernels.dedup.DedupPolicy`'s
    ``stable``)."""
    live = np.asarray(live, float)
    n_layers = len(live) - 1
    stop = max(1.0, live[0] // 16)
    k = steady = 0
    while k < n_layers and steady < 2:
        if live[k] <= stop:
            break
        steady = steady + 1 if k and live[k + 1] >= stable * live[k] else 0
        k += 1
    return k


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
    class_edge
        A class step's first layer (``sdnn.kernel.classes``): s per edge scattered from
        the sparse input rows into the tile over the classes.
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
    class_edge: float = 0.0
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
        return cls(**fitted_coefficients(runs, layers, profiles=profiles,
                                         input_density=input_density, settings=settings,
                                         selection=selection))

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
                merge: bool = True, join: bool = False) -> Prediction:
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
        join
            Data parallelism on several workers: every worker's survivors go on together
            on one worker after the early layers (``sdnn.data-parallel.join``, weights
            streamed from a store), so the deep layers are stepped once, by one worker
            (their identical rows merged across workers), after the slowest worker's
            early layers. The join comes where the kernel's passes stop
            (:func:`join_layer`).
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
            joined = strategy == "data" and join and min(n_blocks, workers) > 1
            at = join_layer(profile.live) if joined else layers
            if strategy == "data" and n_blocks > workers and merge:
                # a worker's blocks run merged (sdnn.data-parallel.merge-blocks): as one
                # block of their rows (their early layers, run apart, are not modelled)
                shares = profile.split(n_blocks, row_partition)
                times = np.array([self._block_seconds(profile.union(shares[w::workers]),
                                                      settings, at)
                                  for w in range(workers)])
            else:
                times = self.block_seconds(profile, n_blocks, row_partition, settings, at)
            if strategy == "data" and min(n_blocks, workers) > 1:
                times = times * self.busy
            per_worker = np.zeros(workers if strategy == "data" else 1)
            for b, t in enumerate(times / speed):  # round robin, as client.scatter does
                per_worker[b % len(per_worker)] += t
            if joined:  # the deep layers: every survivor, on one worker, the others idle
                per_worker[:] = per_worker.max() + self._deep_seconds(profile, settings,
                                                                      at) / speed
            overhead = 0.0
            if strategy == "data":
                overhead = (self.data_run + self.data_gather * float(profile.nnz[-1]))
            return self.prediction(strategy, workers, n, layers, rows, 1, n_blocks,
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
        share = parts_per_core(groups, k, workers)
        slots = part_slots(groups, k, workers)
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
            if settings.dedup:  # only distinct rows are computed and exchanged
                rows_at, nnz_at = part_share.computed, part_share.computed_nnz
            else:
                rows_at, nnz_at = part_share.live, part_share.nnz
            for layer in range(layers):
                rows_in, level = float(rows_at[layer]), float(nnz_at[layer])
                fraction = float(fractions[layer])
                n_in = n_out + fraction * (n - n_out)
                kw, pw, mode = part_work(rows_in, level * n_in / n,
                                         float(nnz_at[layer + 1]) / k, n_in, n_out,
                                         self.weights_per_row * n_out / n_in, settings,
                                         class_share=class_share(settings.classes))
                seconds = factor * float(kw @ kvec) + float(pw @ pvec) / speed
                step[layer] += seconds * slowdown / len(shares)  # the mean part step
                block_rows = (part_chunk_rows(n_in, n_out, settings) if made_by == "dense"
                              else 256)
                piece = payload(rows_in, level / k * fraction, n_out * fraction,
                                block_rows)
                moved[layer] += piece * sum(remote)
                made_by = mode
        imbalance = self.imbalance if share == 1 else self.shared_imbalance
        per_layer = self.latency if share == 1 else self.shared_latency
        per_byte = self.byte if share == 1 else self.shared_byte
        compute = float(step.sum()) * (1.0 + imbalance)
        overhead = self.model_run + self.model_gather * float(profile.nnz[-1])
        return self.prediction(strategy, workers, n, layers, rows, k, groups,
                               compute, per_layer * layers,
                               per_byte * float(moved.sum()), overhead,
                               float(moved.sum()), edges, profile)

    def prediction(self, strategy: str, workers: int, n: int, layers: int, rows: int,
                   parts: int, groups: int, compute: float, latency: float,
                   communication: float, overhead: float, moved: float, edges: float,
                   profile: Survival) -> Prediction:
        """The :class:`Prediction` of a run from its terms (``seconds`` is their sum)."""
        seconds = compute + latency + communication + overhead
        return Prediction(strategy, workers, n, layers, rows, parts,
                          groups if strategy == "hybrid" else 1, seconds,
                          rows * edges / seconds if seconds > 0 else math.inf, compute,
                          latency, communication, overhead, moved, profile.source)

    def _block_work(self, share: Survival, settings: KernelSettings
                    ) -> tuple[np.ndarray, np.ndarray, list[str]]:
        n = share.neurons
        merged = (settings.dedup and share.distinct is not None
                  and bool((np.asarray(share.distinct) < np.asarray(share.live)).any()))
        if share.counts is not None and not settings.classes and not merged:
            counts, levels = share.row_counts()
            return kernel_schedule(counts, levels, n, settings, self.weights_per_row)
        # identical rows or neurons computed once: estimated from the level totals (the
        # exact replay steps every live row, one value per neuron)
        work, block, modes, _ = kernel_estimate(
            share.live, share.nnz, n, settings, self.weights_per_row,
            distinct=share.distinct if settings.dedup else None,
            class_share=class_share(settings.classes))
        return work, block, modes

    def block_seconds(self, survival: Survival, blocks: int = 1,
                      row_partition: str = "block",
                      settings: KernelSettings | None = None,
                      layers: int | None = None) -> np.ndarray:
        """Predicted ``compute_s`` of each of ``blocks`` row blocks of ``survival``'s rows,
        each run alone by the serial kernel (data parallelism multiplies them by
        :attr:`busy` when several workers compute at once); with ``layers``, of their
        first ``layers`` layers only (and the block's own terms)."""
        if int(blocks) < 1:
            raise ValueError(f"blocks must be >= 1, got {blocks}")
        settings = settings or self.settings
        shares = survival.split(int(blocks), row_partition) if blocks > 1 else [survival]
        if survival.counts is not None:
            return np.array([self._block_seconds(s, settings, layers) for s in shares])
        # an aggregated profile's shares differ only in their rows: each size priced once
        # (896 blocks of 1920 layers in the published run)
        priced: dict[int, float] = {}
        for s in shares:
            if s.rows not in priced:
                priced[s.rows] = self._block_seconds(s, settings, layers)
        return np.array([priced[s.rows] for s in shares])

    def _block_seconds(self, share: Survival, settings: KernelSettings,
                       layers: int | None = None) -> float:
        """Predicted ``compute_s`` of one block of the serial kernel, alone (its first
        ``layers`` layers, default all)."""
        if share.rows == 0 or share.live[0] == 0:
            return float(self.block)
        work, block, _ = self._block_work(share, settings)
        kvec = self._vector(KERNEL_TERMS)
        return float((work[:layers] @ kvec).sum() + block @ np.concatenate(
            [kvec, self._vector(BLOCK_TERMS)]))

    def _deep_seconds(self, survival: Survival, settings: KernelSettings,
                      start: int) -> float:
        """Predicted seconds of layers ``start + 1`` on of all of ``survival``'s rows in
        one block (a joined data-parallel run's deep layers)."""
        if start >= survival.layers or survival.live[0] == 0:
            return 0.0
        work, _, _ = self._block_work(survival, settings)
        return float((work[start:] @ self._vector(KERNEL_TERMS)).sum())

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
