"""The notebook's one call: :func:`compare` runs a list of run specs on one problem and
returns their records; :class:`RunBar`, the progress bar over the runs it and
:meth:`~.study.Study.run` show; :func:`owned_client`, how both close a cluster they
started."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

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
            warm_up: bool = True, progress: Callable[[str], None] | Literal[False] | None = None,
            on_run: Callable[[RunOutcome, int, int], None] | None = None,
            bar: bool = True) -> Records:
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
        Runs of each spec; the serial reference runs once per repeat like the others. A
        headline can call a configuration fastest only where the repeats' spreads show
        it (:func:`sdnn_dask.report.verdict`): one repeat shows none (the ``compare``
        command runs 3 by default). With several, ``progress`` is told after the first
        how long the others will take (:func:`estimate_text`).
    study
        The records' ``study`` (default: a new id, the time to the second).
    warm_up
        An untimed run of each executor before its first timed one.
    progress
        Called with a message for each set-up step; ``False``: silent, no bar either.
    on_run
        Called as ``(outcome, done, total)`` after each run.
    bar
        A progress bar over the runs, the current one's spec in its description (on
        stderr; a widget in a notebook with ipywidgets): :class:`RunBar`.

    Returns
    -------
    Records
        Every run's records, in the order run; a failed check is recorded as FAIL.
    """
    if progress is False:
        progress, bar = None, False
    specs = list(default_specs() if specs is None else specs)
    study = study or records.new_study_id()
    needs_cluster = any(s.strategy not in SERIAL_STRATEGIES for s in specs)
    if client is not None and cluster is not None:
        raise ValueError("give client or cluster, not both")
    own = client is None and needs_cluster
    if own:
        from ..cluster import cluster_client

        client = cluster_client(cluster)
    total = len(specs) * repeat
    with owned_client(client if own else None):
        runner = Runner(problem, client, study=study, warm_up=warm_up)
        for spec in specs:  # every spec checked before the bar, and any run, starts
            runner.check(spec)
        with RunBar(total, bar) as runs:
            runner.progress = progress = runs.around(progress)
            outcomes = _run_all(runner, problem, specs, repeat, runs, progress,
                                runs.around(on_run))
    return Records(records.records_frame([o.records.runs for o in outcomes]),
                   _concat([o.records.layers for o in outcomes], records.LAYER_DTYPES))


def _run_all(runner: Runner, problem: Problem, specs: Sequence[RunSpec], repeat: int,
             runs: RunBar, progress: Callable[[str], None] | None,
             on_run: Callable[[RunOutcome, int, int], None] | None) -> list[RunOutcome]:
    """Compute the check's reference, then every run in :func:`compare`'s order."""
    undecided = 0
    if problem.sampled is None:  # else each run checks a sample of its rows
        runs.start("the float64 reference (the check)")
        say(progress, "the float64 reference with float32 rounding bounds (the check)")
        undecided = len(problem.reference().undecided)
    if undecided:
        say(progress, f"{undecided} ill-conditioned row(s): their ReLU's bias rule lies "
                      "within float32 rounding, so they are checked against the truth only "
                      "(if any)")
    outcomes = []
    order = [(r, s) for r in range(repeat) for s in serial_first(specs)]
    if repeat > 1:
        say(progress, f"{repeat} repeats of {len(specs)} configuration(s), {len(order)} runs: "
                      "how long they take is estimated after the first repeat")
    start = time.perf_counter()
    for done, (r, spec) in enumerate(order, start=1):
        runs.start(spec.label)
        outcome = runner.run(spec, repeat=r)
        outcomes.append(outcome)
        runs.done(f"{outcome.result.wall_seconds:.3f} s {outcome.check}")
        if on_run is not None:
            on_run(outcome, done, len(order))
        if repeat > 1 and done == len(specs):
            say(progress, estimate_text(time.perf_counter() - start, repeat - 1))
    return outcomes


def duration_text(seconds: float) -> str:
    """``45 s``, ``2 min 5 s``, ``1 h 3 min``: a duration as a person reads it."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def estimate_text(first: float, left: int) -> str:
    """What :func:`compare` says after its first repeat: how long that took and, from it,
    how long the ``left`` repeats still to run will take (an estimate: the first repeat's
    seconds times the repeats left; the first has the warm-ups and any partition
    computed, so it is more likely high than low)."""
    return (f"the first repeat took {duration_text(first)}; the {left} left will take about "
            f"{duration_text(first * left)} more (an estimate: the first repeat's time x "
            f"{left}, its warm-ups and partitions included)")


def _concat(frames: list[pd.DataFrame], dtypes: dict[str, str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if not frames:
        return records.typed(pd.DataFrame(columns=list(dtypes)), dtypes)
    return pd.concat(frames, ignore_index=True)


@contextlib.contextmanager
def owned_client(client: Client | None) -> Iterator[None]:
    """Close ``client`` (one started for the caller; ``None``: nothing to close) on the way
    out. After an error or a Ctrl-C its workers may be mid-task, and closing them makes the
    nannies log that they had to kill them: those logs are silenced then, so the error (or
    the interrupt) is all that is said."""
    if client is None:
        yield
        return
    try:
        yield
    except BaseException:
        logging.disable(logging.CRITICAL)
        try:
            client.close()
        finally:
            logging.disable(logging.NOTSET)
        raise
    client.close()


class RunBar:
    """A tqdm bar over a list of runs, on stderr (a widget in a notebook).

    ``tqdm.auto`` picks the notebook widget in a Jupyter kernel; without ipywidgets it falls
    back to the text bar, here without its warning (the text bar is a fine bar). Messages
    said while the bar is drawn go through :meth:`around`, so they print above it rather
    than through it.

    Parameters
    ----------
    total
        Runs the bar counts.
    enabled
        ``False`` (or no runs): no bar, every method a no-op.
    name
        What runs (a study's name): the description is ``name: <the run>`` (default: the
        run alone, ``runs`` before the first).

    Examples
    --------
    >>> with RunBar(2, enabled=False) as runs:
    ...     runs.start("kernel")
    ...     runs.done("0.1 s PASS")
    """

    def __init__(self, total: int, enabled: bool = True, name: str | None = None):
        self.total = total
        self.enabled = enabled and total > 0
        self.name = name
        self.bar: Any = None

    def __enter__(self) -> RunBar:
        if self.enabled:
            with warnings.catch_warnings():  # "IProgress not found": the text bar then
                warnings.filterwarnings("ignore", message="IProgress not found")
                from tqdm.auto import tqdm
            self.bar = tqdm(total=self.total, desc=self.name or "runs", unit="run",
                            file=sys.stderr, dynamic_ncols=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            if self.bar.n == self.total:  # the last line names what ran, not its last run
                self.bar.set_description_str(self.name or "runs", refresh=False)
            self.bar.close()
            self.bar = None

    def start(self, label: str) -> None:
        """Name the run (or step) under way in the bar's description."""
        if self.bar is not None:
            self.bar.set_description_str(f"{self.name}: {label}" if self.name else label)

    def done(self, message: str = "") -> None:
        """Count a run as done; ``message`` (its time and check) shown after the bar."""
        if self.bar is not None:
            self.bar.set_postfix_str(message, refresh=False)
            self.bar.update(1)

    def around(self, say: Callable[..., None] | None) -> Callable[..., None] | None:
        """``say``, printing above the bar: the bar is cleared while it prints, then redrawn
        (``None`` stays ``None``)."""
        if say is None or self.bar is None:
            return say
        write_mode = type(self.bar).external_write_mode

        def above_the_bar(*args: Any) -> None:
            with write_mode(file=sys.stderr):
                say(*args)

        return above_the_bar
