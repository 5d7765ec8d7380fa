"""What every ``sdnn-dask`` command shares: progress messages, user errors and the exit
codes, the problem and the cluster the options describe, and the tables and checks that end
a run.

A mistake in what the user asked is a :class:`UsageError` (``error: <message>``, exit code
2); :func:`exit_code_after_checks` is the one place the commands that check their results
say how many FAILED and choose the exit code (1).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .. import study
from ..core.network import Network
from ..registry import TRANSPORTS
from ..study import Problem, ProblemSpec, StudyError
from ..study.comparison import owned_client

#: Where ``compare`` writes and ``report`` reads by default: a folder git ignores, so the
#: quick start leaves a checkout clean (the repository's curated study is in results/).
DEFAULT_RESULTS = Path("sdnn-results")


# --------------------------------------------------------------------------- progress


class Progress:
    """Step messages on stderr; a live counter for long loops when stderr is a terminal."""

    def __init__(self, quiet: bool = False, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()

    def say(self, message: str) -> None:
        if not self.quiet:
            print(message, file=self.stream, flush=True)

    def counter(self, label: str):
        """A ``callback(done, total)`` that reports progress of a loop, with the time
        left at the loop's pace so far."""
        state = {"last": 0.0, "start": time.monotonic()}

        def report_progress(done: int, total: int) -> None:
            if self.quiet:
                return
            now = time.monotonic()
            if done == total or now - state["last"] > (0.2 if self.live else 5.0):
                state["last"] = now
                end = "\n" if done == total or not self.live else ""
                prefix = "\r" if self.live else ""
                elapsed = now - state["start"]
                pace = (f", {elapsed:.0f} s" if done == total else
                        f", about {elapsed / done * (total - done):.0f} s left" if done else "")
                print(f"{prefix}{label}: {done}/{total}{pace}", end=end, file=self.stream,
                      flush=True)

        return report_progress

    def stages(self, labels: dict[str, str]):
        """A ``callback(stage, done, total)``: one :meth:`counter` per stage, labelled by
        ``labels[stage]``."""
        counters: dict[str, Any] = {}

        def report_stage(stage: str, done: int, total: int) -> None:
            if stage not in counters:
                counters[stage] = self.counter(labels.get(stage, stage))
            counters[stage](done, total)

        return report_stage

    @contextlib.contextmanager
    def step(self, message: str) -> Iterator[None]:
        self.say(f"{message} ...")
        start = time.perf_counter()
        yield
        self.say(f"{message}: done in {time.perf_counter() - start:.1f} s")


# --------------------------------------------------------------------------- user errors


class UsageError(SystemExit):
    """A mistake in what the user asked: ``main`` prints ``error: <message>``, exits 2.

    A :class:`SystemExit` whose ``code`` is 2 (argparse's own code for a bad command line),
    and whose ``str`` is the message: uncaught, it still ends the program with status 2.
    """

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 2


def is_interrupt(error: BaseException) -> bool:
    """Whether ``error`` comes of a Ctrl-C: a ``KeyboardInterrupt`` in its chain. Numba's
    compiled functions, interrupted while they call back into Python, raise a
    ``SystemError`` from it rather than the interrupt itself."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def check_arguments(args: argparse.Namespace) -> None:
    """What argparse cannot check one option at a time, before any work starts.

    Raises
    ------
    UsageError
        For parts outside ``1..N``, a missing ``--data`` folder, ``--inputs-file`` or
        ``--truth`` file, these two without ``--data``, or more ``--workers`` than the
        cluster to be started can host (:func:`check_workers`).
    """
    parts = getattr(args, "parts", None) if args.command != "partition" else args.k
    neurons = getattr(args, "neurons", None)
    if parts is not None and neurons is not None and parts > neurons:
        raise UsageError(f"-k/--parts {parts}: at most one part per neuron (N = {neurons})")
    data = getattr(args, "data", None)
    if data is not None and not data.is_dir():
        raise UsageError(f"--data {data}: no such folder")
    if getattr(args, "workers", None) is not None:
        check_workers(args.workers, getattr(args, "cluster", None), "--workers")
    generated = (data is None and neurons is not None and hasattr(args, "inputs")
                 and not getattr(args, "store_only", False))
    if generated:  # inputs this command makes: refused before, not a MemoryError after
        from ..study.problem import DEFAULT_ROWS, check_input_size

        rows, tile = args.inputs or DEFAULT_ROWS, getattr(args, "tile", 1)
        try:
            check_input_size(rows, tile, neurons / 10, f"--inputs {rows}"
                             + (f" x --tile {tile}" if tile > 1 else ""))
        except StudyError as error:
            raise UsageError(str(error)) from error
    for option in ("inputs_file", "truth"):
        path = getattr(args, option, None)
        if path is None:
            continue
        name = "--" + option.replace("_", "-")
        if data is None:
            raise UsageError("--inputs-file and --truth go with --data")
        if not path.is_file():
            raise UsageError(f"{name} {path}: no such file")


def check_workers(n_workers: int, where: str | None, what: str) -> None:
    """Refuse more workers than the ``--cluster`` to be started can host, before any work.

    A LocalCluster takes at most ``sdnn.local.max-workers-per-core`` workers per core and
    one per ``sdnn.local.min-worker-memory`` of memory; a SLURM cluster at most
    ``sdnn.slurm.max-workers`` (:mod:`sdnn_dask.cluster.limits`). A running scheduler's
    workers, and slurm-batch's srun tasks, are not started here: other checks refuse
    ``--workers`` with those.

    Raises
    ------
    UsageError
        Naming ``what`` (``--workers``, a study file's ``workers``), the number and the
        limit.
    """
    from ..cluster import ClusterError, cluster_profile, is_address
    from ..cluster.limits import check_workers as check

    if (where is not None and not isinstance(where, str)) or is_address(where):
        return  # main's slurm-batch runner, or a running scheduler
    try:
        kind, options = cluster_profile(where)
        check(kind, n_workers, options, what=what)
    except ClusterError as error:
        raise UsageError(str(error)) from error


def check_row_groups(row_groups: int, rows: int) -> None:
    """Each row group needs a row: more groups than rows is a mistake, not a slow run."""
    if row_groups > rows:
        raise UsageError(f"--row-groups {row_groups}: more row groups than the {rows} input "
                         "rows")


def check_writable_folder(folder: Path, option: str) -> None:
    """Make ``folder`` if missing and make sure a file can be created in it, before any run.

    Parameters
    ----------
    folder
        ``compare``'s results folder, or ``generate``'s output folder.
    option
        How the message names it (``--results``, ``generate OUT``).

    Raises
    ------
    UsageError
        If it is a file, cannot be made, or is not writable (tried, not guessed from the
        mode bits: root passes ``os.access`` everywhere).
    """
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {folder}: not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise UsageError(f"{option} {folder}: not writable ({error.strerror or error})"
                         ) from error


# --------------------------------------------------------------------------- the problem


def _problem_spec(args: argparse.Namespace) -> ProblemSpec:
    """The problem options as a spec (``partition`` has the network's options only)."""
    def text(option: str) -> str | None:
        value = getattr(args, option, None)
        return None if value is None else str(value)

    return ProblemSpec(neurons=args.neurons, layers=args.layers,
                       inputs=getattr(args, "inputs", None), seed=args.seed,
                       data=text("data"), inputs_file=text("inputs_file"),
                       truth=text("truth"), tile=getattr(args, "tile", 1),
                       order=getattr(args, "order", "official-like"))


def load_network(args: argparse.Namespace, progress: Progress) -> Network:
    """The network the options describe (:func:`sdnn_dask.study.load_network`: ``-L`` is
    capped at the layers a ``--data`` folder holds, with a message)."""
    try:
        network, spec = study.load_network(_problem_spec(args), cache=not args.no_cache,
                                           progress=progress.say,
                                           layer_progress=progress.counter("layers"))
    except StudyError as error:
        raise UsageError(str(error)) from error
    args.layers = spec.layers
    return network


def load_problem(args: argparse.Namespace, progress: Progress) -> Problem:
    """The problem the options describe (:func:`sdnn_dask.study.load_problem`)."""
    try:
        return study.load_problem(_problem_spec(args), cache=not args.no_cache,
                                  progress=progress.say,
                                  layer_progress=progress.counter("layers"))
    except StudyError as error:
        raise UsageError(str(error)) from error


# --------------------------------------------------------------------------- the cluster


def say_dashboard(client: Any, progress: Progress) -> None:
    """Say where the dashboard of a cluster started for this command is (one line; not
    for a running scheduler's, which whoever started it knows, nor under ``--quiet``).

    Parameters
    ----------
    client
        The command's client (``None``: no cluster, nothing said).
    progress
        Says the line, unless quiet.
    """
    if client is None or progress.quiet or client.cluster is None:
        return
    from ..cluster.client import dashboard_line

    progress.say(dashboard_line(client))


@contextlib.contextmanager
def open_client(args: argparse.Namespace, progress: Progress) -> Iterator[Any]:
    """A client on the ``--cluster`` (started here, or ``main``'s slurm-batch runner),
    closed on the way out, with the cluster it started.

    After an error or Ctrl-C the workers may be mid-task, and closing them makes the
    nannies log that they had to kill them: those logs are silenced then, so the one line
    ``main`` prints is all that is said.
    """
    client = _client(args, progress)
    say_dashboard(client, progress)
    with owned_client(client):
        yield client


def _client(args: argparse.Namespace, progress: Progress) -> Any:
    """A connected client on the ``--cluster`` (see :func:`open_client`)."""
    from ..cluster import ClusterError, cluster_client, cluster_profile, is_address
    from ..cluster.security import truthy

    where = getattr(args, "cluster", None)
    try:
        if where is not None and not isinstance(where, str):  # main() started the runner
            tls = ", TLS" if getattr(where.security, "require_encryption", False) else ""
            with progress.step(f"waiting for the {where.n_workers} workers of this "
                               f"allocation (slurm-batch{tls})"):
                return cluster_client(where)
        if is_address(where):
            if args.workers:
                raise ClusterError(f"--workers starts workers (local, slurm): {where} is a "
                                   "running scheduler")
            with progress.step(f"connecting to the scheduler at {where}"):
                return cluster_client(where)
        kind, options = cluster_profile(where)
        if kind == "local":
            workers = args.workers or options.get("n_workers") or os.cpu_count() or 1
            # TLS unless turned off, or worker threads (which listen on nothing)
            secured = (truthy(options.get("security")) is not False
                       and options.get("processes", True) is not False)
            message = (f"starting a LocalCluster with {workers} workers (loopback, TLS: "
                       f"{'on' if secured else 'off'})")
        else:
            workers = args.workers or options.get("n_workers")
            message = (f"starting {workers} Dask workers as SLURM jobs "
                       f"({where or kind}; scheduler here, TLS: "
                       f"{'on' if options.get('security') is not False else 'OFF'})")
        with progress.step(message):
            return cluster_client(where, n_workers=workers)
    except (ClusterError, ImportError) as error:
        raise UsageError(str(error)) from error


@contextlib.contextmanager
def batch_runner(args: argparse.Namespace) -> Iterator[None]:
    """Under ``--cluster slurm-batch``, make this srun's tasks a Dask cluster first.

    Tasks other than the client become the scheduler or a worker and exit in here, before
    any problem is loaded; the client task goes on with ``args.cluster`` set to the runner,
    and stops the scheduler and workers on the way out, whatever happens.
    """
    if args.command not in ("infer", "compare", "study", "convert"):
        yield
        return
    from ..cluster import ClusterError, cluster_profile, is_address, start_slurm_runner

    try:
        kind, options = ("address", {}) if is_address(args.cluster) else cluster_profile(
            args.cluster)
        if kind == "address" and args.workers:  # checked here: compare connects late
            raise ClusterError(f"--workers starts workers (local, slurm): {args.cluster} is "
                               "a running scheduler")
        if kind != "slurm-batch":
            runner = None
        elif args.workers:
            raise ClusterError("--workers does not apply to slurm-batch: the workers are the "
                               "srun tasks after the first two")
        else:
            runner = start_slurm_runner(**options)
    except (ClusterError, ImportError) as error:
        raise UsageError(str(error)) from error
    if runner is None:
        yield
        return
    args.cluster = runner
    try:
        yield
    finally:
        runner.close()


# --------------------------------------------------------------------------- lists of names


def parse_names(value: str, allowed: Sequence[str], option: str,
                what: str = "partition(s)") -> list[str]:
    """A comma-separated list of names (``none`` or empty: no names)."""
    names = [v.strip() for v in value.split(",") if v.strip() and v.strip() != "none"]
    unknown = sorted(set(names) - set(allowed))
    if unknown:
        raise UsageError(f"{option}: unknown {what} {unknown}; choose from "
                         f"{', '.join(allowed)} (or none)")
    return names


def parse_transports(value: str) -> list[str]:
    """``--transport``'s comma-separated transports, at least one, each once."""
    names = parse_names(value, TRANSPORTS, "--transport", "transport(s)")
    if not names:
        raise UsageError(f"--transport: name one of {', '.join(TRANSPORTS)}")
    return list(dict.fromkeys(names))


# --------------------------------------------------------------------------- tables and exit codes


COMPARE_COLUMNS = ["strategy", "partition", "transport", "workers", "blocks", "parts",
                   "seconds", "edges_per_s", "speedup", "vs_kernel", "imbalance", "mb_moved",
                   "predicted_volume", "check", "checked"]
#: Columns left out of the terminal table when they are empty in every row (no model or
#: hybrid run: no transport, nothing moved).
_DROPPED_WHEN_EMPTY = ("transport", "mb_moved", "predicted_volume", "checked")

#: The legend under the terminal table: one short line per column that is not obvious
#: (what :func:`sdnn_dask.report.tables.comparison` computes, in its units).
COMPARE_NOTES = {
    "transport": "direct (worker to worker) or graph (a Dask task per part and layer)",
    "row_partition": "how the hybrid split its rows into row groups",
    "seed": "seed of the random partitions",
    "nbuckets": "buckets of the hash partition",
    "epsilon": "imbalance bound of the hypergraph partition",
    "dense_threshold": "the kernel's dense-step threshold (above 1: never dense)",
    "chunk_bytes": "the kernel's dense tile size, bytes",
    "dedup": "on: identical live rows computed once; off: every row computed",
    "classes": "on: identical output neurons computed once; off: every neuron computed",
    "checked": "sampled check (check_rows): every survivor + other rows drawn afresh per run "
               "(empty: every row checked)",
    "placement": "data: static (block b on worker b mod P) or dynamic (a queue)",
    "merge_blocks": "data: merged (a worker's blocks share tiles) or alone",
    "join": "data, streamed weights: on (the workers' survivors on together on one "
            "worker after the early layers) or off",
    "weights": "resident (every worker holds the weights) or streamed from a store",
    "blocks": "row blocks (data), or parts x row groups (model, hybrid)",
    "parts": "neuron parts k (model, hybrid)",
    "seconds": "median inference wall time of the repeats (fastest-slowest)",
    "edges_per_s": "inputs x edges / seconds (median over the repeats)",
    "speedup": "x the scipy serial reference: its fastest median seconds / these",
    "vs_kernel": "x the serial compiled kernel: its fastest median seconds / these",
    "imbalance": "max/mean of the blocks' compute seconds (1: even)",
    "mb_moved": "MB (1e6 bytes) of activations moved between workers (median)",
    "predicted_volume": "km1: activation columns (not bytes) sent between parts, summed "
                        "over layers",
    "check": "PASS: every repeat within float32 rounding of a float64 reference (or the "
             "truth)",
}


def compare_columns(table: Any, first: Sequence[str] = ()) -> list[str]:
    """The terminal table's columns: ``first``, then :data:`COMPARE_COLUMNS` with every
    run setting in which the rows differ after ``transport``
    (:func:`sdnn_dask.report.tables.varying`: e.g. ``dense_threshold`` or ``dedup`` in a
    study running two values side by side), less ``transport``, ``mb_moved`` and
    ``predicted_volume`` where every row leaves them empty."""
    from ..report.tables import varying

    columns = [*first, *COMPARE_COLUMNS]
    at = columns.index("transport") + 1
    columns[at:at] = [c for c in varying(table) if c not in columns]
    return [c for c in columns if c not in _DROPPED_WHEN_EMPTY or c not in table
            or not _empty(table[c])]


def _empty(values: Any) -> bool:
    """Whether a column holds nothing but blanks and NaN."""
    return all(str(v) in ("", "nan", "<NA>", "None") for v in values)


def compare_legend(columns: Sequence[str]) -> str:
    """One line per column of ``columns`` that :data:`COMPARE_NOTES` explains, names
    aligned: the legend under the terminal table."""
    notes = [(c, COMPARE_NOTES[c]) for c in columns if c in COMPARE_NOTES]
    width = max((len(c) for c, _ in notes), default=0)
    return "\n".join(f"{c.ljust(width)}  {note}" for c, note in notes)


def comparison_text(table: Any, first: Sequence[str] = ()) -> str:
    """The terminal table of ``compare`` and ``study``, its legend under it.

    Parameters
    ----------
    table
        A :func:`sdnn_dask.report.tables.comparison`.
    first
        Columns before the configuration's (``study``: ``network, inputs``).

    Returns
    -------
    str
        The aligned table (:func:`compare_columns`; ``seconds`` with its fastest and
        slowest repeat, :func:`sdnn_dask.report.tables.with_spread`), an empty line, the
        legend (:func:`compare_legend`).
    """
    from ..formatting import to_text
    from ..report.tables import with_spread

    columns = compare_columns(table, first)
    return to_text(with_spread(table), columns) + "\n\n" + compare_legend(columns)


def all_or_nothing(what: str, folder: Path, write: Callable[[], object]) -> int | None:
    """Run a staged write of ``folder``; on Ctrl-C or a failed write, say the folder was
    left as it was and return the exit code (130 or 2); ``None`` when it succeeded."""
    try:
        write()
    except KeyboardInterrupt:
        print(f"interrupted while writing {what}; {folder}/ left as it was", file=sys.stderr)
        return 130
    except OSError as error:
        print(f"error: writing {what} failed ({error}); {folder}/ left as it was",
              file=sys.stderr)
        return 2
    return None


def exit_code_after_checks(n_failed: int, what: str, check: str = "the check", *,
                           blank_line: bool = False) -> int:
    """The exit code once a command's results are checked: 0 when none failed; else 1, after
    ``<n_failed> <what> FAILED <check>`` on stderr (after an empty line if ``blank_line``).

    Parameters
    ----------
    n_failed
        How many runs (steps, epochs) failed their check.
    what
        What failed, as the message counts it: ``run(s)``, ``step(s)``, ``epoch(s)``.
    check
        The check they failed (``the check``, ``their check against the serial step``).
    blank_line
        Start the message with an empty line (after a table).
    """
    if not n_failed:
        return 0
    gap = "\n" if blank_line else ""
    print(f"{gap}{n_failed} {what} FAILED {check}", file=sys.stderr)
    return 1
