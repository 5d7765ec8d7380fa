"""Calibration: the coefficients of the cost model fitted on the run records, stage by stage,
by robust non-negative least squares on the work the records show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from ..core.kernels import KernelSettings
from .kernel_work import kernel_estimate, kernel_schedule
from .part_work import part_work, parts_per_core
from .replay import block_profiles, merged, run_settings, switched_on
from .survival import Survival, mean_input_density
from .terms import BLOCK_TERMS, KERNEL_TERMS, PARALLEL, PART_TERMS, SERIAL, class_share

__all__ = ["fitted_coefficients"]


def fitted_coefficients(runs: pd.DataFrame, layers: pd.DataFrame, *,
                        profiles: Mapping[tuple[int, int, int], Survival] | None = None,
                        input_density: float | Mapping[int, float] | None = None,
                        settings: KernelSettings | None = None,
                        selection: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of the :class:`~sdnn_dask.projection.cost_model.CostModel` that
    :meth:`~sdnn_dask.projection.cost_model.CostModel.calibrate` fits on records, by name
    (parameters and stages: see there)."""
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
        if merged(run):  # its blocks' seconds are shares of merged tiles' time
            continue
        n, n_layers = int(run["neurons"]), int(run["layers"])
        kernel_settings = run_settings(run, settings)
        per_block = block_profiles(run, profiles)
        alone = run["strategy"] == "kernel" or min(int(run["workers"]),
                                                   int(run["blocks"])) == 1
        if not alone and switched_on(run, "join"):  # block seconds hold joined shares
            continue
        block_rows = blocks_of[rid].set_index("block")
        for b, trace in traces[rid].groupby("block"):
            work, block, usable = _block_work_from_records(
                trace, n, n_layers, kernel_settings, weights, input_density,
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
        if run["strategy"] == "data" and not switched_on(run, "join"):
            # a worker's blocks' compute_s add up to its task's (merged or not); joined
            # runs' blocks hold shares of the joined deep layers, not a critical path
            per_worker = blocks.groupby("worker")["compute_s"].sum()
            data_x.append([1.0, _output_nnz(trace, int(run["layers"]))])
            data_y.append(float(run["wall_s"]) - float(per_worker.max()))
        if run["strategy"] not in ("model", "hybrid") or trace is None:
            continue
        if trace["wait_s"].isna().all():
            continue
        n, k, n_layers = int(run["neurons"]), int(run["parts"]), int(run["layers"])
        share = parts_per_core(int(run["row_groups"]), k, int(run["workers"]))
        for kw, pw, seconds in _part_work_from_records(
                trace, n, k, weights, input_density, run_settings(run, settings)):
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
    return {**kernel_coef, **part_coef, "busy": busy,
            "shared_step": shared_step, **exchange_coef, **data_coef, **model_coef,
            "weights_per_row": weights, "settings": settings,
            "calibrated_on": frozenset(first.index),
            "profiles": _family_profiles(runs, layers, input_density, profiles),
            "residuals": residuals}


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


def _rel_rms(x: np.ndarray, y: np.ndarray, coef: Mapping[str, float],
             total: Sequence[float] | np.ndarray | None = None) -> float:
    if not len(y):
        return float("nan")
    fit = np.asarray(x, float) @ np.array(list(coef.values()))
    denom = np.asarray(total if total is not None else y, float)
    return float(np.sqrt(np.mean((fit - y) ** 2)) / max(np.mean(np.abs(denom)), 1e-12))


# --------------------------------------------------------------------------------------
# The work the records show


def _select(runs: pd.DataFrame, selection: Mapping[str, Any]) -> pd.DataFrame:
    for column, value in selection.items():
        if column not in runs:
            raise ValueError(f"cannot select on {column!r}: no such column in the records")
        if isinstance(value, (list, tuple, set, frozenset, np.ndarray, pd.Series)):
            runs = runs[runs[column].isin(list(value))]
        else:
            runs = runs[runs[column] == value]
    return runs


def _output_nnz(trace: pd.DataFrame | None, n_layers: int) -> float:
    if trace is None or trace.empty:
        return 0.0
    return float(trace.loc[trace["layer"] == n_layers, "nnz_out"].sum())


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
    distinct = _distinct(trace, settings)
    if settings.classes or distinct is not None:
        # identical rows or neurons computed once: the exact replay steps every live
        # row, one value per neuron, so the work is estimated from the recorded levels
        profile = None
    if profile is not None and profile.layers >= n_layers:
        share = profile.extended(n_layers)
        counts, levels = share.row_counts()
        work, block, names = kernel_schedule(counts, levels, n, settings, weights)
        if (names == modes and np.array_equal(share.live[1:], rows_out)
                and np.array_equal(share.nnz[1:], nnz_out)):
            return work, block, np.ones(n_layers, bool)
    live = np.concatenate([[rows_in[0] if len(rows_in) else 0.0], rows_out])
    nnz0 = live[0] * n * mean_input_density(n, input_density)
    nnz = np.concatenate([[nnz0], nnz_out])
    work, block, _, usable = kernel_estimate(
        live, nnz, n, settings, weights, modes,
        distinct=None if distinct is None else np.concatenate([live[:1], distinct]),
        class_share=class_share(settings.classes))
    return work, block, usable


def _distinct(trace: pd.DataFrame, settings: KernelSettings) -> np.ndarray | None:
    """Distinct rows out of each layer of one block or part, where identical rows were
    computed once and the records count them (``distinct_out``), else ``None``."""
    if not settings.dedup or "distinct_out" not in trace:
        return None
    distinct = pd.to_numeric(trace["distinct_out"], errors="coerce").to_numpy(float)
    if not len(distinct) or np.isnan(distinct).any():
        return None
    return np.minimum(distinct, trace["rows_out"].to_numpy(float))


def _part_work_from_records(trace: pd.DataFrame, n: int, k: int, weights: float,
                            input_density: float | Mapping[int, float] | None,
                            settings: KernelSettings
                            ) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Per (part, layer) of a model/hybrid run: kernel regressors (weighed), part
    regressors, and the step's seconds."""
    out = []
    n_out = n / k
    share = class_share(settings.classes)
    own, computed = {}, {}
    dedup = settings.dedup and "distinct_out" in trace
    for row in trace.itertuples(index=False):
        key = (int(row.block), int(row.layer))
        own[key] = float(row.nnz_out)
        live = float(row.rows_out)
        distinct = float(row.distinct_out) if dedup and pd.notna(row.distinct_out) else live
        computed[key] = (min(distinct, live), live)
    for row in trace.itertuples(index=False):
        mode = str(row.mode)
        if mode not in ("dense", "sparse"):
            continue
        foreign = float(row.nnz_in) if pd.notna(row.nnz_in) else 0.0
        columns = float(row.columns_in) if pd.notna(row.columns_in) else 0.0
        n_in = columns + n_out
        layer, block = int(row.layer), int(row.block)
        rows, kept = float(row.rows_in), 1.0  # rows computed; their share of the live
        if layer == 1:
            mine = foreign * n_out / columns if columns else (
                float(row.rows_in) * n_out * mean_input_density(n, input_density))
        else:
            mine = own.get((block, layer - 1), 0.0)
            distinct, live = computed.get((block, layer - 1), (rows, rows))
            if live > 0 and distinct < live:  # identical rows computed (and sent) once
                kept, rows = distinct / live, distinct
                mine *= kept
        read = mine + foreign
        kw, pw, _ = part_work(rows, read, float(row.nnz_out) * kept, n_in, n_out,
                              weights * n_out / n_in, settings, mode, class_share=share)
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
