"""A row group's rows in passes through the parts: joining the passes, and the output.
Knows nothing of Dask (the executor's :mod:`~sdnn_dask.parallel.model_passes` runs them).

A part holds its columns of every row of its group through a layer; at N = 65536 on 60000
rows that is 7.8 GB a part (k = 2) in layer 1. So the rows go through the early layers in
passes (:func:`pass_ranges`), their slabs numbered by the row's position in its group (not
in the pass), and the passes' survivors are joined, on each part's worker, into one slab
(:func:`join_passes`: rows, values, identical-row groups and traces), which goes on through
the deep layers. :func:`assemble_output` builds the run's output from the last slabs of every
pass set, identical rows' values copied once each (a compiled gather, not a COO round trip:
at N = 65536, 2416 copies of one 65536-nonzero row).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ... import config
from ...core.csr import as_csr32, stack_rows, take_rows
from ...core.kernels.dedup import Groups
from .layout import BLOCK_ROWS, PART_TRACE_COLUMNS, BlockCSC, Slab
from .shared_rows import PartRows

__all__ = ["assemble_output", "join_passes", "merge_shared", "merge_traces", "pass_ranges",
           "pass_rows_for", "stop_rows_for"]


#: Bytes a row costs a part in a pass's early layers, times ``k / N``: its own dense
#: columns, the piece cut from them for the other parts, that piece's frame, and the piece
#: and frame it receives. Measured at 65536-120 x 60000, k = 2: each worker's peak grew by
#: 11.5 N bytes a row of a pass (3.5 GB at 3814 rows a pass, 2.1 GB at 2000).
ROW_BYTES_PER_N = 24


def pass_rows_for(n_neurons: int, k: int = 2, parts_per_worker: int = 1,
                  pass_bytes: float | None = None) -> int:
    """Rows a row group's pass takes at most: ``sdnn.store.pass-bytes`` (per worker, as
    data parallelism's streamed passes) over what a row costs the parts a worker runs at
    once (:data:`ROW_BYTES_PER_N` ``* N / k`` bytes each), at least 1024."""
    budget = float(config.get("store.pass-bytes") if pass_bytes is None else pass_bytes)
    per_row = ROW_BYTES_PER_N * n_neurons / max(1, k) * max(1, parts_per_worker)
    return max(1024, int(budget // per_row))


def pass_ranges(n_rows: int, pass_rows: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` ranges of ``n_rows`` rows, ``pass_rows`` at most each,
    as equal as they can be (one range for no rows)."""
    if pass_rows < 1:
        raise ValueError(f"pass_rows must be positive, got {pass_rows}")
    n_passes = max(1, -(-n_rows // pass_rows))
    bounds = np.linspace(0, n_rows, n_passes + 1).round().astype(np.int64)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def stop_rows_for(pass_rows: int, n_passes: int, rows: int) -> int:
    """Distinct rows at most that a pass stops at, to join the others: a 16th of its rows,
    or ``pass_rows`` over the passes if fewer (the joined survivors then fit one pass)."""
    return max(1, min(pass_rows // max(2, n_passes), rows // 16))


def merge_traces(traces: list[list[tuple]]) -> list[tuple]:
    """Per-layer trace tuples (:data:`~.layout.PART_TRACE_COLUMNS`) of several passes as
    one per layer: counts and seconds summed, the first pass's mode."""
    rows = [row for trace in traces for row in trace]
    if not rows:
        return []
    frame = pd.DataFrame(rows, columns=PART_TRACE_COLUMNS)
    summed = [c for c in PART_TRACE_COLUMNS if c not in ("layer", "mode")]
    merged = frame.groupby("layer", sort=True).agg(
        {"mode": "first", **{c: "sum" for c in summed}}).reset_index()
    return [tuple(r) for r in merged[PART_TRACE_COLUMNS].itertuples(index=False)]


def merge_shared(shared: list[PartRows | None]) -> PartRows | None:
    """The identical-row groups of several passes of one row group (disjoint rows) as
    one, ready for a new look (``None`` where rows were not deduplicated)."""
    given = [s for s in shared if s is not None]
    if not given:
        return None
    merged = PartRows(given[0].n_rows)
    members: dict[int, np.ndarray] = {}
    for s in given:
        if s.n_rows != merged.n_rows:
            raise ValueError(f"passes of one row group disagree on its rows: {s.n_rows} "
                             f"against {merged.n_rows}")
        changed = s.weights != 1  # a pass leaves rows outside it at 1
        merged.weights[changed] = s.weights[changed]
        members.update(s.groups.members)
    merged.groups = Groups(members)
    return merged


def _join_slabs(slabs: list[Slab]) -> Slab:
    """The slabs of consecutive passes (rows ascending, disjoint) as one slab."""
    trace = merge_traces([s.trace for s in slabs])
    rows = np.concatenate([s.rows for s in slabs]).astype(np.int64)
    if len(rows) > 1 and not (np.diff(rows) > 0).all():
        raise ValueError("passes' rows must be ascending and disjoint to be joined")
    if all(s.tile is not None for s in slabs):
        tile = np.ascontiguousarray(np.concatenate([s.tile for s in slabs], axis=1))
        return Slab(rows, tile=tile, trace=trace)
    csr = stack_rows([as_csr32(s.to_csr()) for s in slabs])
    return Slab(rows, blocks=BlockCSC.from_csr(csr, BLOCK_ROWS), trace=trace)


def join_passes(*results: dict[str, Any]) -> dict[str, Any]:
    """Several passes' results for one part (each with its ``slab``, ``shared`` rows and
    the ``layer`` it reached, the same for all) as one, to go on from that layer."""
    layers = {r["layer"] for r in results}
    if len(layers) != 1:
        raise ValueError(f"passes to join stopped at different layers: {sorted(layers)}")
    shared = merge_shared([r["shared"] for r in results])
    return {"slab": _join_slabs([r["slab"] for r in results]), "shared": shared,
            "layer": layers.pop()}


def assemble_output(segments: list[tuple[np.ndarray, list[Slab], Groups | None]],
                    columns: list[np.ndarray], shape: tuple[int, int]) -> sp.csr_matrix:
    """The run's ``shape`` output from the parts' last slabs.

    ``segments`` holds, for every set of rows that reached the last layer together (a row
    group, or its passes joined, or a pass alone), the input row of each of its group's
    positions, every part's last slab, and the rows each computed row stands for (or
    ``None``); ``columns[p]`` are the global ids of part ``p``'s last columns.
    """
    d_rows, d_cols, d_vals, out_rows, out_src = [], [], [], [], []
    base = 0
    for group_rows, slabs, groups in segments:
        reps = np.unique(np.concatenate([s.rows for s in slabs])) if slabs else \
            np.empty(0, np.int64)
        for slab, cols in zip(slabs, columns, strict=True):
            row, col, value = slab.coo()
            d_rows.append(base + np.searchsorted(reps, slab.rows[row]))
            d_cols.append(np.asarray(cols)[col])
            d_vals.append(value)
        local, source = groups.expand(reps) if groups else (reps, np.arange(len(reps)))
        out_rows.append(np.asarray(group_rows)[local])
        out_src.append(base + source)
        base += len(reps)
    if not d_rows:
        return sp.csr_matrix(shape, dtype=np.float32)
    distinct = as_csr32(sp.csr_matrix(
        (np.concatenate(d_vals), (np.concatenate(d_rows), np.concatenate(d_cols))),
        shape=(base, shape[1])))
    rows = np.concatenate(out_rows).astype(np.int64)
    order = np.argsort(rows, kind="stable")
    rows = rows[order]
    values = take_rows(distinct, np.concatenate(out_src)[order])
    counts = np.zeros(shape[0] + 1, np.int64)
    counts[rows + 1] = np.diff(values.indptr)
    indptr = np.cumsum(counts)
    if indptr[-1] <= np.iinfo(np.int32).max:
        indptr = indptr.astype(np.int32)
    out = sp.csr_matrix((values.data, values.indices, indptr), shape=shape, copy=False)
    out.has_sorted_indices = True
    return out
