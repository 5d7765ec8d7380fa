"""The projection a report shows: which runs calibrate and which are held out, and the
measured-against-projected table, one row per configuration.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .backtest import projection_table
from .cost_model import CostModel
from .replay import generated_profiles
from .terms import PARALLEL, SERIAL

__all__ = ["held_out_split", "report_projection"]


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
    runs and runs with identical rows computed once left out: not modelled), one row per
    configuration (medians over its repeats; ``runs`` counts them; the rule in
    ``attrs["rule"]``).

    Raises
    ------
    ValueError
        When the calibration runs cannot determine the model (too few kinds of runs).
    """
    # the graph transport is not modelled (its per-layer scheduling is another latency),
    # nor are identical rows computed once: the model steps every live row
    every_row = (runs["dedup"].astype(str) != "on") if "dedup" in runs else True
    runs = runs[runs["strategy"].isin([*SERIAL, *PARALLEL]) & (runs["transport"] != "graph")
                & every_row]
    if runs.empty:
        raise ValueError("no kernel, data, model or hybrid runs without deduplication "
                         "(dedup off) to calibrate on: the cost model steps every live row")
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
