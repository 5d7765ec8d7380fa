"""A study: a YAML grid of problems and run specs, read and validated before anything runs,
then run on one cluster with a progress bar, every run written as it finishes, so an
interrupted study resumes where it stopped."""

from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .. import config, records
from ..parallel.allocator import trim_memory
from ..registry import SERIAL_STRATEGIES, STRATEGIES
from .comparison import RunBar, owned_client
from .outcomes import Records
from .problem import DEFAULT_ROWS, Problem, ProblemSpec, check_input_size, load_problem
from .runner import Runner
from .specs import RunSpec, run_key, serial_first
from .validation import StudyError, is_int, nearest, say, shown

if TYPE_CHECKING:
    from distributed import Client

#: Keys of a study file, of a problem and of a run entry, with their types.
STUDY_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str, "description": str, "repeats": int, "warm_up": bool, "workers": int,
    "problems": list, "runs": list,
}
PROBLEM_KEYS = {f.name: f.type for f in dataclasses.fields(ProblemSpec)}
RUN_KEYS = {f.name: f.type for f in dataclasses.fields(RunSpec)}
#: Each key's kind of value, read off the annotations (``"int | None"`` -> ``"int"``).
_KINDS = {name: str(kind).split("|")[0].strip()
          for name, kind in {**PROBLEM_KEYS, **RUN_KEYS}.items()}
#: Most runs in a study, where ``sdnn.study.max-runs`` does not say: a grid is counted
#: before its runs are made and checked, so a typo's million runs are refused at once.
MAX_RUNS = 10_000
#: A study's name, which names its results folder: a plain name, no path.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+ -]{0,99}")
#: The largest study file read (bytes): a grid of :data:`MAX_RUNS` runs is written in
#: lists of a few hundred bytes; more is refused before it is parsed.
MAX_STUDY_BYTES = 1 << 20
#: The deepest nesting of a study file's YAML (a study, its runs, an entry, a list: 4).
MAX_NESTING = 16
#: The problem keys that name files and folders (relative to the study file).
PATH_KEYS = {"data": "folder", "inputs_file": "file", "truth": "file"}
#: The report's files a study writes at its end (:func:`sdnn_dask.report.html`).
REPORT_FILES = ("summary.md", "report.html")


@dataclass
class Study:
    """A grid of problems and run specs, run on one cluster, recorded run by run.

    A study file (YAML)::

        name: quick                    # the records' study column, and the default folder
        repeats: 2                     # runs of each configuration (default 1)
        warm_up: true                  # an untimed run of each executor first (default)
        workers: 2                     # the cluster's workers (default: cores)
        problems:                      # each key may be a list: every combination is run
          - {neurons: 1024, layers: [24, 120], inputs: 6000}
        runs:                          # each entry a grid as well
          - {strategy: [reference, kernel]}
          - {strategy: data, partition: [block, hash, random], workers: [1, 2]}
          - {strategy: model, partition: [block, hypergraph], transport: [direct, graph]}
          - {strategy: hybrid, partition: block, row_groups: 2, parts: 2}
          - {strategy: [kernel, data], dedup: [true, false]}   # identical rows once, or not

    Relative ``data``, ``inputs_file`` and ``truth`` paths are relative to the study file.
    Every combination of a problem with a run entry's values is a :class:`RunSpec`;
    ``repeats`` of each are run. Validation (:meth:`from_yaml`) happens before anything
    runs: unknown keys (with the nearest valid one), wrong types and impossible
    combinations are errors naming the file and the entry. So are a grid of more than
    ``sdnn.study.max-runs`` runs (:data:`MAX_RUNS`, counted before any is made), an empty
    ``problems`` list, and a ``name`` that is not plain (it names the results folder);
    :meth:`check_files` checks the paths before a cluster starts.
    """

    name: str
    problems: list[ProblemSpec]
    specs: list[RunSpec]
    repeats: int = 1
    warm_up: bool = True
    workers: int | None = None
    description: str = ""
    path: Path | None = None
    #: The study file's ``problems`` entries as written (for :meth:`check_files`).
    problem_entries: list = dataclasses.field(default_factory=list, repr=False)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> Study:
        """Read and validate a study file.

        Raises
        ------
        StudyError
            Naming the file and what is wrong: not YAML, not a mapping, an unknown key (and
            the nearest valid one), a value of the wrong type, an impossible combination.
        """
        path = Path(path)
        data = _read_yaml(path)
        try:
            study = cls.from_dict(data, default_name=path.stem)
        except StudyError as error:
            raise StudyError(f"{path}: {error}") from None
        # relative paths of files are relative to the study file, wherever it is run from
        study.problems = [dataclasses.replace(p, **{
            name: str((path.parent / value).resolve())
            for name in PATH_KEYS
            if (value := getattr(p, name)) is not None and not Path(value).is_absolute()})
            for p in study.problems]
        study.path = path
        study.problem_entries = list(data.get("problems") or [])
        return study

    @classmethod
    def from_dict(cls, data: Any, *, default_name: str = "study") -> Study:
        """A study from the mapping a study file holds (validated, see :meth:`from_yaml`)."""
        if not isinstance(data, dict):
            raise StudyError("a study is a mapping with keys "
                             f"{', '.join(STUDY_KEYS)}; got {type(data).__name__}")
        _check_keys(data, STUDY_KEYS, "the study")
        for key, kind in STUDY_KEYS.items():
            if key in data and not _is_type(data[key], kind):
                raise StudyError(f"{key}: expected {_type_name(kind)}, got "
                                 f"{shown(data[key])}")
        for key in ("repeats", "workers"):
            if key in data and data[key] < 1:
                raise StudyError(f"{key}: must be >= 1, got {data[key]}")
        if not data.get("runs"):
            raise StudyError("runs: give at least one run entry, e.g. "
                             "{strategy: [reference, kernel]}")
        if "problems" in data and not data["problems"]:
            raise StudyError("problems: an empty list; give at least one problem, e.g. "
                             "{neurons: 1024, layers: 24, inputs: 6000} (without the key, "
                             f"the challenge's 1024-120 x {DEFAULT_ROWS} is run)")
        name = _plain_name(data["name"] if "name" in data else default_name,
                           given="name" in data)
        entries = data.get("problems") or [{}]
        _check_size(entries, data["runs"], data.get("repeats", 1))
        problems = [p for i, entry in enumerate(entries)
                    for p in _expand(entry, PROBLEM_KEYS, f"problems[{i}]", ProblemSpec)]
        specs = [s for i, entry in enumerate(data["runs"])
                 for s in _expand(entry, RUN_KEYS, f"runs[{i}]", RunSpec)]
        study = cls(name=name, problems=problems,
                    specs=list(dict.fromkeys(specs)), repeats=data.get("repeats", 1),
                    warm_up=data.get("warm_up", True), workers=data.get("workers"),
                    description=data.get("description", ""))
        for spec in study.specs:
            if study.workers is not None and spec.workers and spec.workers > study.workers:
                raise StudyError(f"{spec.label}: workers {spec.workers}, but the study's "
                                 f"cluster has {study.workers} (workers: {study.workers})")
        for problem in study.problems:
            if problem.data is None:  # generated inputs: sized before any is made
                check_input_size(problem.inputs or DEFAULT_ROWS, problem.tile,
                                 problem.neurons / 10, f"problem {problem.label}")
            for spec in study.specs:
                if spec.parts is not None and spec.parts > problem.neurons:
                    raise StudyError(f"{spec.label}: at most one part per neuron "
                                     f"(N = {problem.neurons})")
                rows = (problem.inputs or DEFAULT_ROWS) * problem.tile
                if spec.row_groups and spec.row_groups > rows:
                    raise StudyError(f"{spec.label}: more row groups than the {rows} "
                                     f"input rows of {problem.label}")
        return study

    def check_files(self) -> None:
        """Raise :exc:`StudyError` unless every problem's ``data`` folder, ``inputs_file``
        and ``truth`` exist: before a cluster starts or a run is made, rather than when
        that problem's turn comes. The message names the study file, the entry and the key
        (a path relative to the study file is shown resolved as well)."""
        if self.path is None:  # a study made from a mapping: its problems are checked
            entries = [dataclasses.asdict(p) for p in self.problems]
            base, name = Path.cwd(), "the study"
        else:
            entries, base, name = self.problem_entries, self.path.parent, str(self.path)
        for i, entry in enumerate(entries):
            for key, kind in PATH_KEYS.items():
                values = entry.get(key)
                for value in values if isinstance(values, list) else [values]:
                    if value is None:
                        continue
                    where = (base / value).resolve()
                    if not (where.is_dir() if kind == "folder" else where.is_file()):
                        shown = ("" if Path(value).is_absolute()
                                 else f" (relative to the study file: {where})")
                        entry_name = (f"problems[{i}]" if self.path is not None
                                      else f"problem {i + 1} of the grid")
                        raise StudyError(f"{name}: {entry_name}: {key} {value}: no such "
                                         f"{kind}{shown}")

    @property
    def total(self) -> int:
        """Runs in the study: problems x specs x repeats."""
        return len(self.problems) * len(self.specs) * self.repeats

    def plan(self) -> Iterator[tuple[ProblemSpec, int, RunSpec]]:
        """Every run, in the order :meth:`run` runs them (by problem, repeat, spec)."""
        for problem in self.problems:
            for repeat in range(self.repeats):
                for spec in serial_first(self.specs):
                    yield problem, repeat, spec

    def run(self, client: Client | None, results: str | os.PathLike, *, resume: bool = False,
            progress: Callable[[str], None] | Literal[False] | None = None, bar: bool = True,
            report: bool = True) -> Records:
        """Run every configuration not yet recorded in ``results``, writing each run there
        as soon as it finishes.

        Parameters
        ----------
        client
            A ``distributed.Client`` (``None``: a loopback LocalCluster of
            ``self.workers`` workers, started here if a run needs one, closed at the end).
        results
            The study's folder: ``runs/`` and ``layers/`` (one parquet file per run), then
            ``records.csv``, ``layers.csv`` and the report.
        resume
            Skip the runs already recorded there. Without it, a folder that holds runs is
            an error (a study is not mixed with an older one by accident).
        progress
            Called with a message for each step; ``False``: silent, no bar either.
        bar
            A progress bar over the runs, the current one's spec in its description (on
            stderr; a widget in a notebook with ipywidgets): :class:`~.comparison.RunBar`.
            A Ctrl-C stops the study after the cluster started here (if any) is closed,
            quietly; the runs recorded so far stay, for ``resume``.
        report
            Write the CSV export and the report at the end.

        Returns
        -------
        Records
            Every run recorded in ``results`` (earlier ones included).
        """
        if progress is False:
            progress, bar = None, False
        results = Path(results)
        check_results_folder(results)
        done = records.recorded_keys(results)
        if done and not resume:
            raise StudyError(f"{results} already holds {len(done)} recorded run(s); resume "
                             "them (--resume) or choose another folder")
        keys = {(p, r, s): run_key(p.key(), s, r) for p, r, s in self.plan()}
        pending = [t for t, key in keys.items() if key not in done]
        say(progress, f"study {self.name}: {self.total} run(s), {self.total - len(pending)} "
                      f"already recorded, {len(pending)} to run")
        own = client is None and any(s.strategy not in SERIAL_STRATEGIES
                                     for _, _, s in pending)
        if own:
            from ..cluster import local_client

            client = local_client(self.workers)
        with owned_client(client if own else None):
            if client is not None:
                have = len(client.nthreads())
                for spec in self.specs:
                    if spec.workers and spec.workers > have:
                        raise StudyError(f"{spec.label}: workers {spec.workers}, but the "
                                         f"cluster has {have}")
            self._run_pending(client, results, pending, keys, progress, bar)
        everything = Records(records.read_records(results, "runs"),
                             records.read_records(results, "layers"))
        if report:
            records.export_csv(results)
            from ..report.outputs import write_report_files

            write_report_files(results, everything.runs, everything.layers,
                               say=progress or (lambda message: None))
        return everything

    def _run_pending(self, client: Client | None, results: Path,
                     pending: list[tuple[ProblemSpec, int, RunSpec]], keys: dict,
                     progress: Callable[[str], None] | None, bar: bool) -> None:
        """Run ``pending`` (:meth:`run`'s runs not yet recorded), each written to
        ``results`` as it finishes, under a :class:`~.comparison.RunBar`."""
        results.mkdir(parents=True, exist_ok=True)
        for sub in (records.RUNS_DIR, records.LAYERS_DIR):  # a write cut short by a kill
            for stale in (results / sub).glob(".*.tmp"):
                stale.unlink(missing_ok=True)
        loaded: dict[ProblemSpec, Problem] = {}
        with RunBar(len(pending), bar, self.name) as runs:
            progress = runs.around(progress)
            runner = None
            for problem_spec, repeat, spec in pending:
                if problem_spec not in loaded:
                    # one problem in memory at a time: the last one's runner (its executors
                    # hold weights on the workers) goes before the next loads
                    loaded.clear()
                    runner = outcome = None
                    gc.collect()
                    trim_memory()
                    runs.start(f"loading {problem_spec.label}")
                    loaded[problem_spec] = load_problem(problem_spec, progress=progress)
                    runner = Runner(loaded[problem_spec], client, study=self.name,
                                    warm_up=self.warm_up, progress=progress)
                runs.start(spec.label)
                outcome = runner.run(spec, repeat=repeat)
                records.write_run(results, keys[problem_spec, repeat, spec],
                                  outcome.records.runs, outcome.records.layers)
                runs.done(f"{outcome.result.wall_seconds:.3f} s {outcome.check}")
                trim_memory()  # a serial run's freed tiles, before the next run


def _read_yaml(path: Path) -> Any:
    """The YAML a study file holds, read by the loader :func:`_study_loader` makes: at most
    :data:`MAX_STUDY_BYTES` of UTF-8, no anchors or aliases, nested at most
    :data:`MAX_NESTING` deep; anything else is a :exc:`StudyError` naming the file."""
    import yaml

    try:
        with path.open("rb") as file:
            raw = file.read(MAX_STUDY_BYTES + 1)  # bounded: /dev/zero is refused too
    except OSError as error:
        raise StudyError(f"{path}: cannot read the study ({error.strerror or error})"
                         ) from error
    if len(raw) > MAX_STUDY_BYTES:
        raise StudyError(f"{path}: over {MAX_STUDY_BYTES:,} bytes; a study file is a "
                         "short grid (its runs are counted in lists, not written out)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[:error.start].count(b"\n") + 1
        raise StudyError(f"{path}, line {line}: not UTF-8 text") from None
    try:
        return yaml.load(text, Loader=_study_loader())  # a SafeLoader, stricter
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        raise StudyError(f"{path}{where}: not valid YAML "
                         f"({getattr(error, 'problem', None) or error})") from error
    except _Refused as refused:
        raise StudyError(f"{path}, line {refused.line}: {refused.reason}") from None


class _Refused(Exception):
    """What the loader of :func:`_study_loader` will not compose, and the line (1-based)
    where it is."""

    def __init__(self, line: int, reason: str):
        super().__init__(reason)
        self.line, self.reason = line, reason


@functools.cache
def _study_loader() -> type:
    """A ``yaml.SafeLoader`` that refuses anchors and aliases and deep nesting, made on
    first use (``yaml`` is imported only when a study file is read).

    Aliases are refused outright rather than expanded within a budget: a study needs none
    (its lists are grids already), and a chain of them ("billion laughs") turns a
    375-byte file into a structure whose every message or copy is gigabytes. The check is
    made as each node is composed, so a refused file is never built.
    """
    import yaml

    class _StudyLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            line = event.start_mark.line + 1
            anchor = getattr(event, "anchor", None)
            if anchor is not None:
                sign = "*" if isinstance(event, yaml.AliasEvent) else "&"
                raise _Refused(line, f"a YAML anchor or alias ({sign}{anchor[:40]}); "
                                     "a study file writes each value out (an alias chain "
                                     "can expand a few bytes past memory)")
            if self.depth >= MAX_NESTING:
                raise _Refused(line, f"nested over {MAX_NESTING} deep; a study file nests "
                                     "a few levels (study, runs, entry, list)")
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return _StudyLoader


def max_runs() -> int:
    """The most runs a study may have: ``sdnn.study.max-runs`` (default :data:`MAX_RUNS`)."""
    value = config.get("study.max-runs", MAX_RUNS)
    if not is_int(value) or value < 1:
        raise StudyError(f"sdnn.study.max-runs: expected a positive integer, got {shown(value)}")
    return int(value)


def _combinations(entry: Any) -> int:
    """How many combinations an entry's lists make (1 for what is not an entry yet: the
    expansion then says what is wrong with it)."""
    if not isinstance(entry, dict):
        return 1
    return math.prod(len(v) if isinstance(v, list) else 1 for v in entry.values())


def _check_size(problems: list, runs: list, repeats: int) -> None:
    """Refuse a grid of more than :func:`max_runs` runs, counted from its lists before a
    single run is made or checked (a million took 45 s to refuse otherwise)."""
    n_problems = sum(_combinations(e) for e in problems)
    n_specs = sum(_combinations(e) for e in runs)
    total = n_problems * n_specs * repeats
    limit = max_runs()
    if total > limit:
        raise StudyError(f"the grid has {total:,} runs ({n_problems:,} problem(s) x "
                         f"{n_specs:,} run configuration(s) x {repeats:,} repeat(s)); a "
                         f"study runs at most {limit:,} (sdnn.study.max-runs): split it, or "
                         "shorten its lists")


def _plain_name(name: Any, *, given: bool) -> str:
    """A study's name, which names its folder under the results: refused unless plain
    (letters, digits, ``_ . + -`` and spaces; no ``/``, no leading dot)."""
    text = str(name)
    if not PLAIN_NAME.fullmatch(text):
        where = "name" if given else "the study file's name (give a name: key)"
        raise StudyError(f"{where}: {shown(text)} is not a plain name; expected letters, digits, "
                         "'_', '.', '+', '-' or spaces, starting with a letter, digit or "
                         "'_', at most 100 characters (it names the results folder)")
    return text


def check_results_folder(results: Path) -> None:
    """Refuse a results folder whose parts are of the wrong kind, before any run: ``runs``
    and ``layers`` must be folders, the CSV and report files not folders.

    Raises
    ------
    StudyError
        Naming the path that is in the way and what it should be.
    """
    if results.exists() and not results.is_dir():
        raise StudyError(f"{results}: not a folder; the study's results go in a folder")
    for name in (records.RUNS_DIR, records.LAYERS_DIR):
        part = results / name
        if part.exists() and not part.is_dir():
            raise StudyError(f"{part}: not a folder; a study records each run in it (move "
                             "it away, or choose another --results)")
    for name in (records.RECORDS_FILE, records.LAYERS_FILE, *REPORT_FILES):
        part = results / name
        if part.is_dir():
            raise StudyError(f"{part}: a folder where the study writes a file (move it "
                             "away, or choose another --results)")


def _is_type(value: Any, kind: type | tuple[type, ...]) -> bool:
    if kind is int:
        return is_int(value)
    return isinstance(value, kind)


def _type_name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "text", bool: "true or false", list: "a list",
             float: "a number"}
    return names.get(kind, str(kind))


def _check_keys(entry: dict, allowed: Iterable[str], where: str) -> None:
    allowed = list(allowed)
    for key in entry:
        if key not in allowed:
            raise StudyError(f"{where}: unknown key {shown(key)}{nearest(key, allowed)}; valid "
                             f"keys: {', '.join(allowed)}")


def _check_value(key: str, value: Any, where: str) -> None:
    kind = _KINDS.get(key)
    if kind == "int" and not is_int(value):
        raise StudyError(f"{where}: {key} must be an integer, got {shown(value)}")
    if kind == "str" and not isinstance(value, str):
        raise StudyError(f"{where}: {key} must be text, got {shown(value)}")
    if kind == "float" and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise StudyError(f"{where}: {key} must be a number, got {shown(value)}")
    if kind == "bool" and not isinstance(value, bool):
        raise StudyError(f"{where}: {key} must be true or false, got {shown(value)}")


def _expand(entry: Any, allowed: dict[str, Any], where: str, make: Callable[..., Any]
            ) -> list[Any]:
    """Every combination of an entry's values (a list is a choice, a scalar one value)."""
    if not isinstance(entry, dict):
        raise StudyError(f"{where}: expected a mapping like {{strategy: data}}, got "
                         f"{shown(entry)}")
    _check_keys(entry, allowed, where)
    if make is RunSpec and "strategy" not in entry:
        raise StudyError(f"{where}: every run entry names a strategy "
                         f"({', '.join(STRATEGIES)})")
    choices = {}
    for key, value in entry.items():
        values = value if isinstance(value, list) else [value]
        if not values:
            raise StudyError(f"{where}: {key} is an empty list")
        for v in values:
            _check_value(key, v, where)
        choices[key] = values
    out = []
    for combination in itertools.product(*choices.values()):
        fields = dict(zip(choices, combination, strict=True))
        try:
            out.append(make(**fields))
        except StudyError as error:
            raise StudyError(f"{where}: {error}") from None
    return out
