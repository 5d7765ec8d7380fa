"""A recorded run read back: the kernel settings it ran with, whether its blocks ran merged,
and the survival profiles of its inputs and of its blocks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..core.kernels import KernelSettings
from .survival import Survival

__all__ = ["PROFILE_EDGES", "block_profiles", "generated_profiles", "matching_profile",
           "merged", "run_settings", "switched_on"]


def run_settings(run: pd.Series, default: KernelSettings) -> KernelSettings:
    """The kernel settings of a recorded run: its ``dense_threshold``, ``chunk_bytes`` and
    ``chunk_min_rows`` columns where the records have them, else ``default``'s; ``dedup``
    and ``classes`` as recorded (off in records made before they existed). A record
    with ``chunk_bytes`` but no ``chunk_min_rows`` was made before the minimum existed:
    its chunks were ``chunk_bytes`` alone (at N = 4096, 64 rows where now 256)."""
    threshold, chunk = run.get("dense_threshold"), run.get("chunk_bytes")
    min_rows = run.get("chunk_min_rows")
    has_chunk = chunk is not None and pd.notna(chunk)
    if min_rows is not None and pd.notna(min_rows):
        min_rows = int(min_rows)
    else:
        min_rows = 1 if has_chunk else default.min_chunk_rows
    return KernelSettings(
        float(threshold) if threshold is not None and pd.notna(threshold)
        else default.dense_threshold,
        int(chunk) if has_chunk else default.chunk_bytes, max(1, min_rows),
        switched_on(run, "dedup"), switched_on(run, "classes"))


def switched_on(run: pd.Series, column: str) -> bool:
    """Whether a recorded run had ``column`` (``dedup``, ``classes``, ``join``) on: an
    empty or missing column is a record made before the switch existed, so off."""
    value = run.get(column)
    return value is not None and not pd.isna(value) and str(value) == "on"


def merged(run: pd.Series) -> bool:
    """A data run whose workers ran several blocks each, merged into shared tiles (records
    made before merging existed have no ``merge_blocks``: their blocks ran alone)."""
    return (run["strategy"] == "data" and int(run["blocks"]) > int(run["workers"])
            and str(run.get("merge_blocks", "")) == "merged")


def matching_profile(profiles: Mapping[tuple[int, int, int], Survival], n: int,
                     n_layers: int, inputs: int) -> Survival | None:
    """The profile of ``(n, n_layers, inputs)`` in ``profiles``, or a per-row one with
    more layers and rows cut down to them (``None`` if there is none)."""
    exact = profiles.get((n, n_layers, inputs))
    if exact is not None:
        return exact
    for (pn, pl, pr), profile in profiles.items():
        if pn == n and pl >= n_layers and pr >= inputs and profile.counts is not None:
            return profile.extended(n_layers).resized(inputs)
    return None


def block_profiles(run: pd.Series,
                   profiles: Mapping[tuple[int, int, int], Survival]) -> dict[int, Survival]:
    """Per-row profiles of a run's blocks, when a profile of its inputs is given."""
    key = (int(run["neurons"]), int(run["layers"]), int(run["inputs"]))
    profile = matching_profile(profiles, *key)
    if profile is None or profile.counts is None:
        return {}
    n_blocks = int(run["blocks"])
    partition = run["partition"] if run["partition"] in ("block", "hash") else None
    if n_blocks == 1:
        return {0: profile}
    if partition is None:
        return {}
    shares = profile.extended(key[1]).split(n_blocks, partition)
    return dict(enumerate(shares))


#: Generated networks are named ``radixnet-{N}-{L}-s{seed}`` (:func:`sdnn_dask.data.radixnet.
#: make_network`): enough, with the rows, to make their inputs again.
_GENERATED = re.compile(r"^radixnet-(\d+)-(\d+)-s(\d+)$")


#: Largest network (edges) whose runs' profiles :func:`generated_profiles` makes again:
#: 4096-480's (63 M edges, about 1 GB with its transposes); a larger one would be
#: generated and held for a profile its runs' own layer records give as well.
PROFILE_EDGES = 32 * 4096 * 480


def generated_profiles(runs: pd.DataFrame) -> dict[tuple[int, int, int], Survival]:
    """Per-row survival profiles of the generated problems of ``runs``, made again.

    A problem whose ``source`` is ``generated`` is fully named by its records (network
    ``radixnet-{N}-{L}-s{seed}`` and the inputs' row count): its inputs are generated
    again and run once through the network (:meth:`Survival.measure`; no timing used).
    Problems read from challenge files are left out (their profile is then estimated from
    their own layer records), and so are problems none of whose runs stepped every live
    row and neuron (``dedup`` or ``classes`` on: the exact replay a per-row profile
    serves does not price them) and networks over :data:`PROFILE_EDGES` edges.
    """
    from ..data.images import generated_source, make_inputs
    from ..data.radixnet import make_network

    profiles: dict[tuple[int, int, int], Survival] = {}
    first = runs.drop_duplicates("run_id")
    plain = [not switched_on(run, "dedup") and not switched_on(run, "classes")
             for _, run in first.iterrows()]
    first = first[np.array(plain, bool)] if len(first) else first
    first = first[pd.to_numeric(first["edges"], errors="coerce") <= PROFILE_EDGES]
    first = first.drop_duplicates(["network", "inputs"])
    for _, run in first.iterrows():
        match = _GENERATED.match(str(run["network"]))
        source = str(run.get("source", "generated"))
        # "generated" alone: records made while iid was the generator's default
        orders = {"generated": "iid", "": "iid", generated_source("iid"): "iid",
                  generated_source("official-like"): "official-like"}
        if match is None or source not in orders:
            continue
        n, n_layers, seed = (int(g) for g in match.groups())
        rows = int(run["inputs"])
        network = make_network(n, n_layers, seed=seed)
        inputs = make_inputs(rows, n, seed=seed, order=orders[source])
        profiles[n, n_layers, rows] = Survival.measure(network, inputs, dedup=False)
    return profiles
