"""The projection a report shows: which runs calibrate and which are held out, and the
measured-against-projected table, one row per configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from .backtest import projection_table
from .cost_model import CostModel
from .replay import generated_profiles
from .survival import Survival
from .terms import PARALLEL, SERIAL

__all__ = ["backtest_line", "configurations", "held_out_split", "leave_one_out",
           "report_projection"]


def held_out_split(runs: pd.DataFrame) -> tuple[dict[str, Any], str]:
    """Which runs a report calibrates on, as a :meth:`CostModel.calibrate` selection, and
    the rule in words.

    With several N: the smallest N calibrates, every other N is held out. With one N and
    several problems: all but the largest (layers x rows) calibrate. With one problem:
    an empty selection; :func:`report_projection` then holds out one configuration at a
    time (:func:`leave_one_out`).
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
    return {}, ("one problem: each configuration but the serial kernel's held out in "
                "turn, projected by a model calibrated on every other run")


#: What makes a configuration: its runs are repeats of one another.
CONFIGURATION = ["network", "inputs", "strategy", "partition", "workers", "blocks", "parts",
                 "row_groups", "transport", "dense_threshold", "dedup", "classes", "join"]


def configurations(runs: pd.DataFrame) -> pd.Series:
    """Each run's configuration (a string key, by ``run_id``): runs sharing one are
    repeats."""
    first = runs.drop_duplicates("run_id").set_index("run_id")
    keys = [c for c in CONFIGURATION if c in first]
    return first[keys].astype(str).agg("|".join, axis=1)


def leave_one_out(runs: pd.DataFrame, layers: pd.DataFrame,
                  profiles: Mapping[tuple[int, int, int], Survival] | None = None
                  ) -> pd.DataFrame:
    """The held-out backtest of one problem: every configuration but the serial
    kernel's (which anchors the kernel's terms) projected by a model calibrated on every
    other run, never its own repeats; the kernel's runs by the model of all runs (not
    held out: the fit). Columns as :func:`~sdnn_dask.projection.projection_table`'s.

    Raises
    ------
    ValueError
        When there is no kernel run, nothing but kernel runs (nothing to hold out), or
        too few kinds of runs to calibrate on.
    """
    config = configurations(runs)
    first = runs.drop_duplicates("run_id").set_index("run_id")
    kernel = first.index[first["strategy"] == "kernel"]
    if not len(kernel):
        raise ValueError("a projection of one problem needs serial kernel runs: their "
                         "layers calibrate the kernel's terms")
    if set(config.drop(kernel)) == set():
        raise ValueError("one problem with serial kernel runs only: nothing to hold out "
                         "(a projection needs data, model or hybrid runs beside them)")
    every = CostModel.calibrate(runs, layers, profiles=profiles)
    tables = [projection_table(every, runs[runs["run_id"].isin(kernel)], layers,
                               profiles=profiles)]
    for key in sorted(set(config.drop(kernel))):
        mine = config.index[config == key]
        others = runs[~runs["run_id"].isin(mine)]
        model = CostModel.calibrate(others, layers, profiles=profiles)
        tables.append(projection_table(model, runs[runs["run_id"].isin(mine)], layers,
                                       profiles=profiles))
    return pd.concat(tables, ignore_index=True)


def report_projection(runs: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Measured against projected for a report: calibrated and held out by
    :func:`held_out_split` (one problem: :func:`leave_one_out`), each run projected from
    its own configuration (graph-transport runs left out: not modelled), one row per
    configuration (medians over its repeats; ``runs`` counts them; the rule in
    ``attrs["rule"]``, and ``attrs["backtest"]`` the held-out configurations within 20%
    in words). Runs with identical rows or neurons computed once (``dedup``,
    ``classes`` on) are priced by the rows and classes they compute.

    Raises
    ------
    ValueError
        When the calibration runs cannot determine the model (too few kinds of runs).
    """
    # the graph transport is not modelled (its per-layer scheduling is another latency)
    runs = runs[runs["strategy"].isin([*SERIAL, *PARALLEL]) & (runs["transport"] != "graph")]
    if runs.empty:
        raise ValueError("no kernel, data, model or hybrid runs (direct transport) to "
                         "calibrate on")
    selection, rule = held_out_split(runs)
    profiles = generated_profiles(runs)
    if selection:
        calibrating = runs
        for column, value in selection.items():
            calibrating = calibrating[calibrating[column].isin(np.atleast_1d(value))]
        sizes = calibrating.drop_duplicates(["neurons", "layers", "inputs"])
        if len(sizes) < 2:
            raise ValueError("calibrating the cost model needs runs of at least two "
                             "problem sizes (layers x rows) at one N, or of one problem; "
                             "studies/quick.yaml has five")
        model = CostModel.calibrate(runs, layers, profiles=profiles, **selection)
        table = projection_table(model, runs, layers, profiles=profiles)
    else:
        table = leave_one_out(runs, layers, profiles)
    # one row per configuration: the medians of its repeats
    settings = runs.drop_duplicates("run_id").set_index("run_id")["dense_threshold"]
    sparse_only = (table["strategy"] == "kernel") & (
        table["run_id"].map(settings).astype(float) > 1)
    table = table.assign(partition=table["partition"].where(~sparse_only,
                                                            "none (no dense step)"))
    # runs with a switch on beside runs with it off are other configurations: said in
    # the partition column, which the report shows
    first = runs.drop_duplicates("run_id").set_index("run_id")
    for switch in ("dedup", "classes", "join"):
        if switch not in first:
            continue
        values = first[switch].astype(str).map(lambda v: v if v in ("on", "off") else "off")
        if values.nunique() > 1:
            table["partition"] = (table["partition"].astype(str) + f", {switch} "
                                  + table["run_id"].map(values).to_numpy())
    keys = ["network", "rows", "strategy", "partition", "workers", "parts", "row_groups",
            "held_out"]
    out = (table.groupby(keys, sort=False, dropna=False)
           .agg(runs=("run_id", "count"), measured_s=("measured_s", "median"),
                projected_s=("projected_s", "median")).reset_index())
    out["error_pct"] = 100.0 * (out["projected_s"] / out["measured_s"] - 1.0)
    out.attrs["rule"] = rule
    out.attrs["backtest"] = backtest_line(out)
    return out


def backtest_line(table: pd.DataFrame, within: float = 20.0,
                  what: str = "held-out configurations") -> str:
    """The held-out backtest of a projection table in words: how many of its held-out
    rows (``what`` they are) are within ``within`` percent, the median and worst
    error."""
    held = table[table["held_out"].astype(bool)]
    if held.empty:
        return "no held-out configuration (the fit only)"
    error = held["error_pct"].astype(float)
    hit = int((error.abs() <= within).sum())
    return (f"{hit} of {len(held)} {what} within {within:g}% "
            f"({100.0 * hit / len(held):.0f}%; median |error| {error.abs().median():.1f}%, "
            f"worst {float(error.loc[error.abs().idxmax()]):+.1f}%)")
