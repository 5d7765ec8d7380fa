"""The notebook's one call: :func:`compare` runs a list of run specs on one problem and
returns their records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from .. import records
from ..registry import SERIAL_STRATEGIES
from .outcomes import Records, RunOutcome
from .problem import Problem
from .runner import Runner
from .specs import RunSpec, default_specs, serial_first
from .validation import say

if TYPE_CHECKING:
    from distributed import Client


def compare(problem: Problem, client: Client | None = None, *, cluster: Any = None,
            specs: Sequence[RunSpec] | None = None, repeat: int = 1, study: str | None = None,
            warm_up: bool = True, progress: Callable[[str], None] | None = None,
            on_run: Callable[[RunOutcome, int, int], None] | None = None) -> Records:
    """Run every spec ``repeat`` times on ``problem`` and return the records.

    Parameters
    ----------
    problem
        From :func:`load_problem`.
    client
        A ``distributed.Client`` for the parallel specs.
    cluster
        Instead of ``client``: where to start one (anything
        :func:`sdnn_dask.cluster.cluster_client` takes: ``"local"``, ``"slurm"``, a profile,
        a scheduler address, a ``Cluster``), closed at the end. With neither, a loopback
        LocalCluster is started if a spec needs one.
    specs
        What to run (default :func:`default_specs`).
    repeat
        Runs of each spec; the serial reference runs once per repeat like the others.
    study
        The records' ``study`` (default: a new id, the time to the second).
    warm_up
        An untimed run of each executor before its first timed one.
    progress
        Called with a message for each set-up step.
    on_run
        Called as ``(outcome, done, total)`` after each run.

    Returns
    -------
    Records
        Every run's records, in the order run; a failed check is recorded as FAIL.
    """
    specs = list(default_specs() if specs is None else specs)
    study = study or records.new_study_id()
    needs_cluster = any(s.strategy not in SERIAL_STRATEGIES for s in specs)
    if client is not None and cluster is not None:
        raise ValueError("give client or cluster, not both")
    own = client is None and needs_cluster
    if own:
        from ..cluster import cluster_client

        client = cluster_client(cluster)
    try:
        runner = Runner(problem, client, study=study, warm_up=warm_up, progress=progress)
        for spec in specs:
            runner.check(spec)
        undecided = 0
        if problem.sampled is None:  # else each run checks a sample of its rows
            say(progress, "the float64 reference with float32 rounding bounds (the check)")
            undecided = len(problem.reference().undecided)
        if undecided:
            say(progress, f"{undecided} ill-conditioned row(s): their ReLU's bias rule lies "
                          "within float32 rounding, so they are checked against the truth "
                          "only (if any)")
        outcomes = []
        total = len(specs) * repeat
        order = [(r, s) for r in range(repeat) for s in serial_first(specs)]
        for done, (r, spec) in enumerate(order, start=1):
            outcome = runner.run(spec, repeat=r)
            outcomes.append(outcome)
            if on_run is not None:
                on_run(outcome, done, total)
    finally:
        if own:
            client.close()
    return Records(records.records_frame([o.records.runs for o in outcomes]),
                   _concat([o.records.layers for o in outcomes], records.LAYER_DTYPES))


def _concat(frames: list[pd.DataFrame], dtypes: dict[str, str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if not frames:
        return records.typed(pd.DataFrame(columns=list(dtypes)), dtypes)
    return pd.concat(frames, ignore_index=True)
