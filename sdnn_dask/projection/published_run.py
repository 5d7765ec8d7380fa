"""The published run: the paper's 65536-neuron, 1920-layer network on 896 cores, projected
with a calibrated model against its published 51 s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..core.kernels import SETUP_ROWS, KernelSettings
from .cost_model import CostModel
from .replay import run_settings, switched_on
from .survival import Survival
from .terms import KERNEL_TERMS

__all__ = ["PLACED", "PUBLISHED", "format_placement", "place_published",
           "project_published", "published_survival"]

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
                    f"{base.source}, carried over to N = {neurons}",
                    distinct=None if base.distinct is None else base.distinct.copy())


#: Strategies :func:`place_published` projects, in the order it prints them.
PLACED = ("kernel", "data", "model", "hybrid")


def published_survival(runs: pd.DataFrame, layers: pd.DataFrame,
                       model: CostModel | None = None,
                       input_density: float | None = None) -> Survival:
    """The survival profile of the published problem read off records: the aggregated
    profile (live and distinct rows per level) of the recorded N = 65536 kernel or data
    run with the most layers and rows, else of any strategy's; without an N = 65536
    run, ``model``'s profile of its largest N carried over (as :func:`project_published`
    does). ``input_density`` as :meth:`Survival.from_records`'s."""
    n = PUBLISHED["neurons"]
    first = runs.drop_duplicates("run_id")
    mine = first[(first["neurons"] == n) & first["run_id"].isin(layers["run_id"])]
    if len(mine):
        serial = mine[mine["strategy"].isin(["kernel", "data"])]
        pool = serial if len(serial) else mine
        top = pool.sort_values(["layers", "inputs"]).iloc[-1]
        return Survival.from_records(runs, layers, top["run_id"],
                                     input_density=input_density)
    if model is None or not model.profiles:
        raise ValueError(f"no N = {n} run in the records and no model profile to carry "
                         "over")
    return _carry_over(model.profiles[max(model.profiles)], n)


def _recorded_settings(runs: pd.DataFrame, strategy: str,
                       default: KernelSettings) -> tuple[KernelSettings, bool]:
    """The kernel settings and join of a strategy's recorded run on the largest problem
    (N, then layers, then rows): the projection prices the kernel the table ran."""
    first = runs.drop_duplicates("run_id")
    mine = first[first["strategy"] == strategy]
    if mine.empty:
        return default, False
    run = mine.sort_values(["neurons", "layers", "inputs"]).iloc[-1]
    return run_settings(run, default), switched_on(run, "join")


def place_published(runs: pd.DataFrame, layers: pd.DataFrame, *,
                    nodes: int = PUBLISHED["nodes"],
                    cores_per_node: int = PUBLISHED["cores_per_node"],
                    bandwidth_gbit_s: float = 100.0,
                    survival: Survival | None = None) -> pd.DataFrame:
    """Each recorded strategy projected onto ``nodes x cores_per_node`` single-threaded
    workers for the published problem (65536-1920 x 60000), beside the published 51 s.

    The cost model is calibrated on every kernel, data, model and hybrid (direct) run of
    the records (a twelve-size table's, e.g. ``results/challenge/``), deduplication and
    classes priced as each strategy's runs recorded them; the survival profile is
    :func:`published_survival`'s. Per strategy: ``kernel`` one core (the serial
    reference); ``data`` one block of rows per worker (joined after the early layers
    where its runs joined); ``model`` one neuron part per worker; ``hybrid`` a row group
    per node, a neuron part per core. Bytes between workers are priced at
    ``bandwidth_gbit_s`` (the records' loopback figure does not carry over to a
    network), each part reading at most ``32 x`` its own neurons' worth of inputs
    (RadiX-Net's weights per column); per-layer latency, overheads and per-core speed
    are this machine's.

    Returns
    -------
    pandas.DataFrame
        One row per strategy: ``strategy, workers, parts, row_groups, seconds,
        compute_s, latency_s, communication_s, overhead_s, bytes_moved, edges_per_s,
        published_s, ratio`` (projected / published); ``attrs["assumptions"]`` (list of
        str), ``attrs["backtest"]`` (the calibration's fit on its own runs, in words),
        ``attrs["survival"]``.

    Raises
    ------
    ValueError
        When the records cannot calibrate the model (no serial kernel or alone-run
        layers).
    """
    from .backtest import projection_table
    from .report import backtest_line

    runs = runs[runs["strategy"].isin(PLACED) & (runs["transport"] != "graph")]
    if runs.empty or layers.empty:
        raise ValueError("no kernel, data, model or hybrid runs with layer records "
                         "(layers.csv) to calibrate on")
    model = CostModel.calibrate(runs, layers)
    if not any(getattr(model, term) for term in KERNEL_TERMS):
        raise ValueError("the records do not determine the kernel's terms: they need "
                         "serial kernel (or one-worker data) runs with layer records")
    p = PUBLISHED
    n, n_layers, rows = p["neurons"], p["layers"], p["inputs"]
    workers = int(nodes) * int(cores_per_node)
    if survival is None:
        survival = published_survival(runs, layers, model)
    profile = survival.extended(n_layers).resized(rows)
    on_network = model.with_coefficients(byte=8.0 / (bandwidth_gbit_s * 1e9),
                                         shared_byte=8.0 / (bandwidth_gbit_s * 1e9))
    present = set(runs["strategy"])
    out = []
    for strategy in PLACED:
        if strategy not in present:
            continue
        settings, join = _recorded_settings(runs, strategy, model.settings)
        kwargs: dict[str, Any] = {"neurons": n, "layers": n_layers, "rows": rows,
                                  "survival": profile, "settings": settings}
        if strategy == "kernel":
            shape = {"workers": 1}
        elif strategy == "data":
            shape = {"workers": workers, "join": join}
        elif strategy == "model":
            shape = {"workers": workers, "parts": workers}
        else:
            shape = {"workers": workers, "parts": int(cores_per_node),
                     "row_groups": int(nodes)}
        if strategy in ("model", "hybrid"):
            n_out = n / shape["parts"]
            shape["cross_fraction"] = float(min(1.0, model.weights_per_row * n_out
                                                / max(1.0, n - n_out)))
        pred = on_network.predict(strategy, **kwargs, **shape)
        out.append({"strategy": strategy, "workers": pred.workers, "parts": pred.parts,
                    "row_groups": pred.row_groups, "seconds": pred.seconds,
                    "compute_s": pred.compute_s, "latency_s": pred.latency_s,
                    "communication_s": pred.communication_s,
                    "overhead_s": pred.overhead_s, "bytes_moved": pred.bytes_moved,
                    "edges_per_s": rows * p["edges"] / pred.seconds,
                    "published_s": p["seconds"], "ratio": pred.seconds / p["seconds"]})
    table = pd.DataFrame(out)
    fit = projection_table(model, runs, layers).assign(held_out=True)
    table.attrs["backtest"] = backtest_line(fit, what="recorded runs (the fit)")
    table.attrs["survival"] = profile.source
    table.attrs["assumptions"] = [
        f"{nodes} nodes x {cores_per_node} cores = {workers} single-threaded workers, "
        "each core as fast as this machine's and slowed by the busy factor measured here "
        f"({model.busy:.2f})",
        f"bytes between workers at {bandwidth_gbit_s:g} Gb/s (also within a node); "
        f"per-layer latency as measured here ({1e3 * model.latency:.2f} ms, "
        f"{1e3 * model.shared_latency:.2f} ms with parts sharing a core)",
        "a part reads at most 32 inputs per own neuron (RadiX-Net), all other parts' "
        "columns when that is more",
        f"survival: {profile.source}",
        "identical rows and neurons computed once as each strategy's run on the largest "
        "recorded problem was (dedup, classes, join)",
    ]
    return table


def format_placement(table: pd.DataFrame) -> str:
    """:func:`place_published`'s table as text: one line per strategy, then the
    assumptions."""
    lines = [f"Projected onto a cluster: {PUBLISHED['neurons']}-{PUBLISHED['layers']} x "
             f"{PUBLISHED['inputs']} on {PUBLISHED['nodes']} nodes "
             f"(published: {PUBLISHED['seconds']:g} s on {PUBLISHED['workers']} cores)"]
    for row in table.itertuples(index=False):
        shape = (f"{row.workers} workers" if row.strategy in ("kernel", "data") else
                 f"{row.row_groups} x {row.parts} parts" if row.strategy == "hybrid"
                 else f"{row.parts} parts")
        lines.append(f"  {row.strategy:<7} {shape:<18} {row.seconds:9.2f} s  "
                     f"({row.ratio:.2f}x published; compute {row.compute_s:.2f} s, "
                     f"latency {row.latency_s:.2f} s, communication "
                     f"{row.communication_s:.2f} s, {row.bytes_moved / 1e9:.2f} GB moved)")
    lines.append(f"  calibration: {table.attrs.get('backtest', '')}")
    lines += [f"  assumes: {a}" for a in table.attrs.get("assumptions", [])]
    return "\n".join(lines)
