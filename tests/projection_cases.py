"""Synthetic records for the projection tests: a known cost model, the kernel and part
records it would make, shared by tests/projection/test_projection.py and
test_dedup_projection.py."""


from __future__ import annotations

import numpy as np
import pandas as pd

from sdnn_dask.core.kernels import KernelSettings
from sdnn_dask.projection import (
    BLOCK_TERMS,
    KERNEL_TERMS,
    PART_TERMS,
    CostModel,
)
from sdnn_dask.projection.kernel_work import kernel_estimate as _kernel_estimate
from sdnn_dask.projection.part_work import part_work as _part_work

DENSITY = 0.1
SETTINGS = KernelSettings(0.05, 1 << 20)

TRUE = CostModel(
    dense_fma=1.0e-10, dense_tile=5.0e-9, dense_call=2.0e-5, sparse_edge=1.1e-9,
    sparse_scan=1.3e-9, sparse_call=3.0e-5, to_dense=3.0e-10, to_sparse=6.0e-9,
    to_sparse_nnz=2.0e-9, to_sparse_call=1.0e-4, block=4.0e-4, block_row=2.0e-7,
    repack=5.0e-10, part_entry=1.5e-9, part_nnz=4.0e-9, part_step=5.0e-5,
    part_foreign=4.5e-9, busy=1.3,
    shared_step=0.7, imbalance=0.05, latency=4.0e-4, byte=1.0e-9, shared_imbalance=0.12,
    shared_latency=2.0e-4, shared_byte=5.0e-10, data_run=0.012, data_gather=2.0e-8,
    model_run=0.015, model_gather=1.0e-8, settings=SETTINGS,
)


# --------------------------------------------------------------------------------------
# Synthetic records from known coefficients


def _levels(rng, rows: int, n: int, n_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Decreasing live rows, with a density per level between 2% and 100%."""
    live = [rows]
    for _ in range(n_layers):
        live.append(max(1, int(live[-1] * rng.uniform(0.35, 1.0))))
    live = np.array(live, np.int64)
    density = np.concatenate([[DENSITY], rng.uniform(0.02, 1.0, n_layers)])
    nnz = np.maximum(live, np.round(live * n * density)).astype(np.int64)
    nnz[0] = round(live[0] * n * DENSITY)
    return live, nnz


def _run_row(run_id: str, strategy: str, n: int, n_layers: int, inputs: int, **extra):
    row = {"run_id": run_id, "study": "synthetic", "strategy": strategy,
           "partition": "block", "network": f"synthetic-{n}-{n_layers}", "neurons": n,
           "layers": n_layers, "edges": 32 * n * n_layers, "inputs": inputs, "workers": 1,
           "blocks": 1, "parts": 1, "row_groups": 1, "transport": np.nan, "block": 0,
           "worker": "w0", "rows": inputs, "survivors": 0, "compute_s": 0.0, "wall_s": 0.0}
    row.update(extra)
    return row


def _block(model: CostModel, rng, n: int, n_layers: int, rows: int, settings):
    """One synthetic block: its layer rows and its compute seconds (alone)."""
    live, nnz = _levels(rng, rows, n, n_layers)
    modes = [str(m) for m in rng.choice(["dense", "sparse"], n_layers)]
    work, block, _, _ = _kernel_estimate(live, nnz, n, settings, 32.0, modes)
    kvec = np.array([getattr(model, t) for t in KERNEL_TERMS])
    full = np.concatenate([kvec, [getattr(model, t) for t in BLOCK_TERMS]])
    seconds = work @ kvec
    layer_rows = [{"layer": k + 1, "mode": modes[k], "rows_in": live[k],
                   "rows_out": live[k + 1], "nnz_out": nnz[k + 1], "seconds": seconds[k]}
                  for k in range(n_layers)]
    return layer_rows, float(seconds.sum() + block @ full), live, nnz


def synthetic_kernel_records(model: CostModel, seed: int = 0, runs: int = 40):
    """Serial runs, and data-parallel runs on 2 workers, made from ``model``'s equations."""
    rng = np.random.default_rng(seed)
    run_rows, layer_rows = [], []
    for i in range(runs):
        n = int(rng.choice([256, 1024]))
        chunk = int(rng.choice([1 << 18, 1 << 20, 1 << 22]))
        settings = KernelSettings(0.05, chunk)
        n_layers, rows = int(rng.integers(3, 9)), int(rng.integers(40, 3000))
        layers, compute, *_ = _block(model, rng, n, n_layers, rows, settings)
        rid = f"k{i}"
        run_rows.append(_run_row(rid, "kernel", n, n_layers, rows, compute_s=compute,
                                 wall_s=compute, chunk_bytes=chunk, dense_threshold=0.05))
        layer_rows += [dict(r, run_id=rid, block=0) for r in layers]
    for i in range(runs // 2):
        n, n_layers = 1024, int(rng.integers(3, 9))
        n_blocks = 2  # one per worker (more would be merged: not a block run alone)
        rid, blocks, out_nnz = f"d{i}", [], 0
        for b in range(n_blocks):
            rows = int(rng.integers(200, 3000))
            layers, compute, _, nnz = _block(model, rng, n, n_layers, rows, SETTINGS)
            blocks.append((b, rows, model.busy * compute))
            layer_rows += [dict(r, run_id=rid, block=b) for r in layers]
            out_nnz += nnz[-1]
        per_worker = [sum(c for b, _, c in blocks if b % 2 == w) for w in (0, 1)]
        wall = max(per_worker) + model.data_run + model.data_gather * out_nnz
        for b, rows, compute in blocks:
            run_rows.append(_run_row(rid, "data", n, n_layers, sum(r for _, r, _ in blocks),
                                     workers=2, blocks=n_blocks, row_groups=n_blocks,
                                     block=b, worker=f"w{b % 2}", rows=rows,
                                     compute_s=compute, wall_s=wall))
    return pd.DataFrame(run_rows), pd.DataFrame(layer_rows)


def synthetic_model_records(model: CostModel, seed: int = 1, runs: int = 16):
    """Model (k = 2 on 2 workers) and hybrid (2 x 2 on 2 workers) runs."""
    rng = np.random.default_rng(seed)
    kvec = np.array([getattr(model, t) for t in KERNEL_TERMS])
    pvec = np.array([getattr(model, t) for t in PART_TERMS])
    run_rows, layer_rows = [], []
    for i in range(runs):
        hybrid = i % 2 == 1
        groups, k, n = (2 if hybrid else 1), 2, 1024
        n_layers = int(rng.integers(4, 10))
        per_core = 2 if hybrid else 1
        latency = model.shared_latency if hybrid else model.latency
        per_byte = model.shared_byte if hybrid else model.byte
        imbalance = model.shared_imbalance if hybrid else model.imbalance
        rid = f"{'h' if hybrid else 'm'}{i}"
        n_out = n / k
        # some runs read only a share of the other part's columns (as a hypergraph
        # partition's parts do), so the own and the other parts' entries can be told apart
        share = 1.0 if i % 4 < 2 else float(rng.uniform(0.1, 0.9))
        parts = {}
        for g in range(groups):
            live, nnz = _levels(rng, int(rng.integers(300, 4000)), n, n_layers)
            for p in range(k):
                parts[g * k + p] = (live, nnz)
        steps = np.zeros((groups * k, n_layers))
        rows_of = {}
        for block, (live, nnz) in parts.items():
            for layer in range(1, n_layers + 1):
                # the share of the other part's half of the level it reads
                foreign = share * float(nnz[layer - 1]) / 2
                mine = float(nnz[layer - 1]) / 2
                out = float(nnz[layer]) / 2
                mode = str(rng.choice(["dense", "sparse"]))
                n_in = n_out + share * n_out
                kw, pw, _ = _part_work(float(live[layer - 1]), mine + foreign, out,
                                       n_in, n_out, 32.0 * n_out / n_in, SETTINGS, mode)
                alone = model.busy * float(kw @ kvec) + float(pw @ pvec)
                steps[block, layer - 1] = alone * (1 + (per_core - 1) * model.shared_step)
                rows_of[block, layer] = {
                    "run_id": rid, "block": block, "layer": layer, "mode": mode,
                    "rows_in": live[layer - 1], "rows_out": live[layer], "nnz_out": out,
                    "columns_in": share * n_out, "nnz_in": foreign,
                    "bytes_in": float(rng.integers(10_000, 5_000_000)),
                    "send_s": 0.0, "deserialise_s": 0.0,
                }
        per_layer = []
        for layer in range(1, n_layers + 1):
            moved = sum(rows_of[b, layer]["bytes_in"] for b in parts)
            mean = steps[:, layer - 1].mean()
            per_layer.append((1 + imbalance) * mean + latency + per_byte * moved)
            for b in parts:
                r = rows_of[b, layer]
                r["seconds"] = steps[b, layer - 1]
                r["wait_s"] = per_layer[-1] - steps[b, layer - 1]  # all end the layer together
                layer_rows.append(r)
        loop = sum(per_layer)
        out_nnz = sum(rows_of[b, n_layers]["nnz_out"] for b in parts)
        wall = loop + model.model_run + model.model_gather * out_nnz
        for b in parts:
            run_rows.append(_run_row(rid, "hybrid" if hybrid else "model", n, n_layers,
                                     int(sum(parts[g * k][0][0] for g in range(groups))),
                                     workers=2, blocks=groups * k, parts=k,
                                     row_groups=groups, transport="direct", block=b,
                                     worker=f"w{b % 2}", compute_s=steps[b].sum(),
                                     wall_s=wall))
    return pd.DataFrame(run_rows), pd.DataFrame(layer_rows)


def _synthetic():
    kr, kl = synthetic_kernel_records(TRUE)
    mr, ml = synthetic_model_records(TRUE)
    return pd.concat([kr, mr], ignore_index=True), pd.concat([kl, ml], ignore_index=True)
