"""The survival profile: the rows and nonzeros alive at every level of a network.

The work of every layer depends on them. A profile is measured per row
(:meth:`Survival.measure`, one cheap serial pass, no timing used) or aggregated per level
from the layer records of a run (:meth:`Survival.from_records`); it is resized to other row
counts and extended to more layers (the last measured level repeated).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..core.kernels import KernelSettings, forward_block
from ..core.network import Network, as_csr32
from ..data.images import CHALLENGE_DENSITY
from ..partition import make_row_partition

__all__ = ["Survival", "mean_input_density"]


def mean_input_density(neurons: int, given: float | Mapping[int, float] | None) -> float:
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
    distinct
        ``layers + 1`` distinct rows at each level, where identical live rows are
        computed once (``sdnn.kernel.dedup``): what a deduplicating kernel steps.
        ``None``: not known (every live row taken as distinct). Resizing and splitting
        keep a level's count where rows were merged (the survivors are copies of a few
        vectors: more rows do not make more of them; capped by the live rows) and scale
        it with the live rows where none were.

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
    distinct: np.ndarray | None = field(default=None, repr=False)

    @property
    def layers(self) -> int:
        """Layers described."""
        return len(self.live) - 1

    @property
    def computed(self) -> np.ndarray:
        """Rows a deduplicating kernel computes at each level: :attr:`distinct`, or the
        live rows where it is not known."""
        if self.distinct is None:
            return np.asarray(self.live, float)
        return np.minimum(np.asarray(self.distinct, float), np.asarray(self.live, float))

    @property
    def computed_nnz(self) -> np.ndarray:
        """Nonzeros of the :attr:`computed` rows (a live row's mean nonzeros each)."""
        live = np.asarray(self.live, float)
        share = np.divide(self.computed, live, out=np.ones_like(live), where=live > 0)
        return np.asarray(self.nnz, float) * share

    def _distinct_for(self, live: np.ndarray) -> np.ndarray | None:
        """:attr:`distinct` for the same levels holding ``live`` rows instead (see the
        attribute: merged levels keep their count, capped; others scale)."""
        if self.distinct is None:
            return None
        old = np.asarray(self.live, float)
        kept = np.asarray(self.distinct, float)
        live = np.asarray(live, float)
        merged = kept < old
        return np.where(merged, np.minimum(kept, live), live)

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
    def measure(cls, network: Network, inputs: sp.spmatrix | sp.sparray, *,
                dedup: bool = True) -> Survival:
        """Run ``inputs`` through ``network`` one layer at a time and count, per row, the
        nonzeros of every level; with ``dedup``, also the distinct rows a deduplicating
        kernel computes at each level (:attr:`distinct`: its trace, one more pass).

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
        profile = cls.from_counts(counts, network.n_neurons,
                                  f"measured: {network.name}, {counts.shape[1]} rows")
        if not dedup:
            return profile
        # what a deduplicating kernel computes: its own trace, one more pass
        trace = forward_block(network, inputs,
                              settings=KernelSettings.resolve(dedup=True)).trace
        distinct = np.concatenate([[profile.live[0]], trace["distinct_out"].to_numpy()])
        return replace(profile, distinct=np.minimum(distinct, profile.live))

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
            level_distinct = (by["distinct_out"].max().groupby("layer").sum()
                              if "distinct_out" in t else None)
        else:
            by = trace.groupby("layer")
            level_nnz, level_live = by["nnz_out"].sum(), by["rows_out"].sum()
            entering = by["rows_in"].sum()
            level_distinct = (by["distinct_out"].sum(min_count=1)
                              if "distinct_out" in trace else None)
        nnz[level_nnz.index.to_numpy(int)] = level_nnz.to_numpy()
        live[level_live.index.to_numpy(int)] = level_live.to_numpy()
        live[0] = int(entering.get(1, first["inputs"]))
        nnz[0] = round(live[0] * n * mean_input_density(n, input_density))
        distinct = None
        if (level_distinct is not None and len(level_distinct)
                and pd.notna(level_distinct).all() and str(first.get("dedup", "")) == "on"):
            distinct = live.copy()  # level 0: the inputs, all computed
            distinct[level_distinct.index.to_numpy(int)] = np.minimum(
                level_distinct.to_numpy(float), live[level_distinct.index.to_numpy(int)])
        return cls(n, live, nnz, int(first["inputs"]), None,
                   f"records of run {run_id} ({first['network']}, {first['inputs']} rows)",
                   distinct=distinct)

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
            return self._carrying(Survival.from_counts(self.counts, self.neurons, note,
                                                       level_map=self.level_map,
                                                       row_map=take))
        scale = rows / self.rows  # expected counts: fractions are kept
        return self._carrying(Survival(self.neurons, self.live * scale, self.nnz * scale,
                                       rows, None, note))

    def _carrying(self, other: Survival) -> Survival:
        """``other`` (these levels for other rows) with :attr:`distinct` carried over."""
        if self.distinct is None:
            return other
        return replace(other, distinct=self._distinct_for(other.live))

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
        distinct = None if self.distinct is None else self.distinct[take]
        if self.counts is not None:
            return Survival(self.neurons, self.live[take], self.nnz[take], self.rows,
                            self.counts, note, self.level_map[take], self.row_map, distinct)
        return Survival(self.neurons, self.live[take], self.nnz[take], self.rows, None, note,
                        distinct=distinct)

    def split(self, blocks: int, partition: str = "block", *, seed: int = 0,
              nbuckets: int = 1) -> list[Survival]:
        """The profiles of ``blocks`` row blocks: a per-row profile split by the row
        partition (:func:`~sdnn_dask.partition.make_row_partition`), an aggregated one
        into equal shares."""
        if self.counts is not None:
            part = make_row_partition(partition, self.rows, blocks, seed=seed,
                                      nbuckets=nbuckets)
            return [self._carrying(Survival.from_counts(
                        self.counts, self.neurons, f"{self.source}, block {b} of {blocks}",
                        level_map=self.level_map, row_map=self.row_map[ids]))
                    for b, ids in enumerate(part.blocks())]
        shares = np.diff(np.round(np.linspace(0, self.rows, blocks + 1))).astype(int)
        return [self.resized(int(s)) if s else self._empty() for s in shares]

    def union(self, shares: list[Survival]) -> Survival:
        """One profile of the rows of several of this profile's :meth:`split` shares
        (a worker's blocks, merged by the kernel)."""
        rows = sum(s.rows for s in shares)
        if self.counts is not None:
            return self._carrying(Survival.from_counts(
                self.counts, self.neurons, f"{self.source}, {len(shares)} blocks merged",
                level_map=self.level_map,
                row_map=np.concatenate([s.row_map for s in shares])))
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
