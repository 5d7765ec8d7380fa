"""The published run: the paper's 65536-neuron, 1920-layer network on 896 cores, projected
with a calibrated model against its published 51 s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.kernels import SETUP_ROWS
from .cost_model import CostModel
from .survival import Survival

__all__ = ["PUBLISHED", "project_published"]

#: The published run projected by :func:`project_published` (Mofrad et al., HPEC 2020).
PUBLISHED = {"neurons": 65536, "layers": 1920, "edges": 4_026_531_840, "inputs": 60000,
             "nodes": 32, "cores_per_node": 28, "workers": 896, "seconds": 51.0}


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
    prediction = model.prediction("data", workers, n, n_layers, rows, 1, workers,
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
