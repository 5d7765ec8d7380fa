"""Validation: every recorded run projected from its own configuration, against its
measured seconds (held-out runs marked).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from .cost_model import CostModel
from .replay import matching_profile, merged, run_settings, switched_on
from .survival import Survival
from .terms import PARALLEL, SERIAL

__all__ = ["projection_table"]


def projection_table(model: CostModel, runs: pd.DataFrame, layers: pd.DataFrame, *,
                     profiles: Mapping[tuple[int, int, int], Survival] | None = None,
                     input_density: float | Mapping[int, float] | None = None
                     ) -> pd.DataFrame:
    """Measured against projected seconds for every run in the records.

    Each run is projected with the model from its own configuration and a survival
    profile of its own inputs: the per-row one in ``profiles`` (by ``(neurons, layers,
    inputs)``, or one with more layers and rows, cut down) when given and the run stepped
    every live row and neuron, else the aggregated profile read off the run's own layer
    records (:meth:`Survival.from_records`, with its distinct rows). So the
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
        settings = run_settings(run, model.settings)
        profile = matching_profile(profiles, n, n_layers, inputs)
        if profile is None or settings.dedup or settings.classes:
            # (identical rows or neurons computed once: the run's own distinct rows)
            profile = Survival.from_records(runs, layers, rid, input_density=input_density)
        kwargs: dict[str, Any] = {"workers": int(run["workers"]), "neurons": n,
                                  "layers": n_layers, "rows": inputs, "survival": profile,
                                  "settings": settings}
        if strategy == "data":
            kwargs["blocks"] = int(run["blocks"])
            kwargs["merge"] = merged(run)
            kwargs["join"] = switched_on(run, "join")
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
