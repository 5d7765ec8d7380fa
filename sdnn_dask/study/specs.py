"""What one run is: a :class:`RunSpec` (one configuration of one strategy), its keys in the
records, and ``compare``'s default grid of them.

Examples
--------
>>> RunSpec("data", "hash", workers=2).key() == RunSpec("data", "hash", workers=2).key()
True
>>> RunSpec("model", "hypergraph").label
'model hypergraph direct'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ..registry import (
    NEURON_PARTITIONS,
    OBJECTIVES,
    PLACEMENTS,
    ROW_PARTITIONS,
    SERIAL_STRATEGIES,
    STRATEGIES,
    TRANSPORTS,
    partitions_of,
)
from .problem import Problem
from .validation import StudyError, choice, digest, is_int, nearest, shown


@dataclass(frozen=True)
class RunSpec:
    """One configuration of one strategy.

    Parameters
    ----------
    strategy
        ``reference``, ``kernel``, ``data``, ``model`` or ``hybrid``.
    partition
        Row partition of ``data`` (``block``, ``hash``, ``random``); neuron partition of
        ``model`` and ``hybrid`` (``block``, ``hash``, ``random``, ``hypergraph``);
        ``none`` for the serial ones (the default: ``block``, or ``none``).
    parts
        Neuron parts ``k`` (model, hybrid; default one per worker).
    row_groups
        Row groups ``R`` of the hybrid (default 2; 1 for the others).
    blocks
        Row blocks of data parallelism (default ``sdnn.data-parallel.blocks-per-worker``
        per worker).
    transport
        ``direct`` or ``graph`` (model, hybrid; default ``direct``).
    workers
        Workers the run uses, the first of the cluster's (default: all; 1 when serial).
    seed
        Seed of the random partitions.
    nbuckets, epsilon
        Buckets of a hash partition; imbalance bound of a hypergraph one.
    objective
        What a hypergraph partition minimises: ``traffic`` (default: the bytes a sample of
        the problem's inputs sends; Mt-KaHyPar on the layers that carry them) or ``km1``
        (the activation columns sent, every layer partitioned).
    dense_threshold, chunk_bytes
        Kernel settings of this run (default: ``sdnn.kernel.*`` when it runs), e.g.
        ``dense_threshold=2`` for a kernel that never takes the dense step.
    dedup
        Compute identical live rows once (``sdnn.kernel.dedup`` for this run; default:
        the configuration's own when it runs). Every strategy but ``reference`` takes it;
        ``dedup=[true, false]`` in a study runs both side by side.
    classes
        Compute identical output neurons once (``sdnn.kernel.classes`` for this run;
        default: the configuration's own). Every strategy but ``reference`` takes it.
    placement
        Data parallelism: ``static`` (default; block b pinned to worker b mod P, one block
        per worker by default) or ``dynamic`` (blocks handed to workers as they free up).
    merge
        Data parallelism: run a worker's blocks merged (default ``True``; see
        :class:`~sdnn_dask.parallel.DataParallelExecutor`), or each alone (``False``: the
        per-block seconds are then those of a block run alone, what P = blocks static
        workers would take).
    """

    strategy: str
    partition: str | None = None
    parts: int | None = None
    row_groups: int | None = None
    blocks: int | None = None
    transport: str | None = None
    workers: int | None = None
    seed: int = 0
    nbuckets: int | None = None
    epsilon: float | None = None
    dense_threshold: float | None = None
    chunk_bytes: int | None = None
    placement: str | None = None
    merge: bool | None = None
    dedup: bool | None = None
    objective: str | None = None
    classes: bool | None = None

    def __post_init__(self) -> None:
        # Defaults filled in, fields that do not apply cleared: equal runs, equal keys.
        s = self.strategy
        choice("strategy", s, STRATEGIES)
        fix = object.__setattr__
        allowed = partitions_of(s)
        partition = self.partition or allowed[0]
        if partition not in allowed:
            raise StudyError(f"strategy {s} takes partition {' | '.join(allowed)}, not "
                             f"{shown(partition)}{nearest(partition, allowed)}")
        fix(self, "partition", partition)
        for name in ("parts", "row_groups", "blocks", "workers", "nbuckets"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or value < 1):
                raise StudyError(f"{name} must be a positive integer, got {shown(value)}")
        if not is_int(self.seed) or self.seed < 0:
            raise StudyError(f"seed must be an integer >= 0, got {shown(self.seed)}")
        if self.chunk_bytes is not None and (not is_int(self.chunk_bytes)
                                             or self.chunk_bytes < 1):
            raise StudyError(f"chunk_bytes must be a positive integer, got "
                             f"{shown(self.chunk_bytes)}")
        if self.dense_threshold is not None:
            if isinstance(self.dense_threshold, bool) or not isinstance(
                    self.dense_threshold, int | float) or self.dense_threshold < 0:
                raise StudyError(f"dense_threshold must be a number >= 0, got "
                                 f"{shown(self.dense_threshold)}")
            fix(self, "dense_threshold", float(self.dense_threshold))
        if s == "reference" and (self.dense_threshold is not None
                                 or self.chunk_bytes is not None):
            raise StudyError("dense_threshold and chunk_bytes are the compiled kernel's; "
                             "the reference recurrence has none")
        if self.dedup is not None and not isinstance(self.dedup, bool):
            raise StudyError(f"dedup must be true or false, got {shown(self.dedup)}")
        if s == "reference" and self.dedup is not None:
            raise StudyError("dedup is the compiled kernel's (identical rows computed "
                             "once); the reference recurrence computes every row")
        if self.classes is not None and not isinstance(self.classes, bool):
            raise StudyError(f"classes must be true or false, got {shown(self.classes)}")
        if s == "reference" and self.classes is not None:
            raise StudyError("classes is the compiled kernel's (identical output neurons "
                             "computed once); the reference recurrence computes every one")
        if self.epsilon is not None and not (isinstance(self.epsilon, int | float)
                                             and 0 <= self.epsilon < float("inf")):
            raise StudyError(f"epsilon must be a number >= 0, got {shown(self.epsilon)}")
        if s in SERIAL_STRATEGIES:
            for name in ("parts", "row_groups", "blocks", "transport", "nbuckets",
                         "epsilon", "objective"):
                if getattr(self, name) is not None:
                    raise StudyError(f"{name} does not apply to the serial {s} run")
            if self.workers not in (None, 1):
                raise StudyError(f"a serial {s} run uses one worker, not {self.workers}")
            fix(self, "workers", 1)
            fix(self, "seed", 0)
            return
        if s != "data" and self.placement is not None:
            raise StudyError("placement applies to data parallelism (static or dynamic)")
        if s != "data" and self.merge is not None:
            raise StudyError("merge applies to data parallelism (true or false)")
        if self.merge is not None and not isinstance(self.merge, bool):
            raise StudyError(f"merge must be true or false, got {shown(self.merge)}")
        if s == "data":
            fix(self, "merge", True if self.merge is None else self.merge)
            fix(self, "placement", choice("placement", self.placement or PLACEMENTS[0],
                                          PLACEMENTS))
            for name in ("parts", "row_groups", "transport", "epsilon", "objective"):
                if getattr(self, name) is not None:
                    raise StudyError(f"{name} does not apply to data parallelism "
                                     "(model and hybrid runs take it)")
            if partition != "hash" and self.nbuckets is not None:
                raise StudyError("nbuckets applies to the hash partition only")
            if partition != "random":
                fix(self, "seed", 0)
            return
        if self.blocks is not None:
            raise StudyError(f"blocks does not apply to {s} runs (they have parts x "
                             "row_groups blocks)")
        fix(self, "transport", choice("transport", self.transport or TRANSPORTS[0],
                                      TRANSPORTS))
        if s == "model":
            if self.row_groups not in (None, 1):
                raise StudyError("model parallelism has one row group; use strategy "
                                 "hybrid for row_groups > 1")
            fix(self, "row_groups", 1)
        else:
            fix(self, "row_groups", 2 if self.row_groups is None else self.row_groups)
        if partition != "hash" and self.nbuckets is not None:
            raise StudyError("nbuckets applies to the hash partition only")
        for name in ("epsilon", "objective"):
            if partition != "hypergraph" and getattr(self, name) is not None:
                raise StudyError(f"{name} applies to the hypergraph partition only")
        if partition == "hypergraph":
            fix(self, "epsilon", 0.03 if self.epsilon is None else float(self.epsilon))
            fix(self, "objective", choice("objective", self.objective or OBJECTIVES[0],
                                          OBJECTIVES))
        if partition not in ("random", "hypergraph") and s == "model":
            fix(self, "seed", 0)

    def key(self) -> str:
        """A short stable id of the configuration (its normalised fields, hashed).

        ``dedup``, ``objective`` and ``classes`` unset are left out, so the keys of runs
        recorded before
        they existed stay what they were (a study from then resumes); set, they are part of
        the key (a hypergraph run always sets ``objective``: its partition changed).
        """
        fields = dataclasses.asdict(self)
        for name in ("dedup", "objective", "classes"):
            if fields[name] is None:
                del fields[name]
        return digest(fields)

    @property
    def label(self) -> str:
        """The configuration in a few words (for progress lines)."""
        words = [self.strategy]
        if self.strategy not in SERIAL_STRATEGIES:
            words.append(self.partition or "")
        if self.transport:
            words.append(self.transport)
        if self.placement == "dynamic":
            words.append("dynamic")
        if self.merge is False:
            words.append("alone")
        if self.objective == "km1":
            words.append("km1")
        extra = [f"{name}={getattr(self, name)}" for name in ("workers", "parts", "blocks")
                 if getattr(self, name) is not None and self.strategy not in
                 SERIAL_STRATEGIES]
        extra += [f"{name}={getattr(self, name)}" for name in ("dense_threshold",
                                                               "chunk_bytes")
                  if getattr(self, name) is not None]
        if self.dedup is not None:
            extra.append(f"dedup={'on' if self.dedup else 'off'}")
        if self.strategy == "hybrid":
            extra.append(f"R={self.row_groups}")
        return " ".join(words + extra)

    def check_against(self, problem: Problem, n_workers: int) -> None:
        """Raise :exc:`StudyError` if this spec cannot run on ``problem`` with a cluster
        of ``n_workers`` (before anything runs)."""
        rows, n = problem.inputs.shape
        if self.workers is not None and self.workers > n_workers:
            raise StudyError(f"{self.label}: workers {self.workers}, but the cluster has "
                             f"{n_workers}")
        if self.parts is not None and self.parts > n:
            raise StudyError(f"{self.label}: at most one part per neuron (N = {n})")
        if self.row_groups is not None and self.row_groups > rows:
            raise StudyError(f"{self.label}: more row groups than the {rows} input rows")


def default_specs(*, partitions: Sequence[str] = ROW_PARTITIONS,
                  model: Sequence[str] | None = None, hybrid: Sequence[str] | None = None,
                  transports: Sequence[str] = ("direct",), parts: int | None = None,
                  row_groups: int = 2, blocks: int | None = None, seed: int = 0,
                  epsilon: float = 0.03) -> list[RunSpec]:
    """``compare``'s grid: both serial runs, data parallelism per row partition, model
    parallelism and the hybrid per neuron partition and transport.

    ``model`` and ``hybrid`` default to every neuron partition, less ``hypergraph`` when
    Mt-KaHyPar is not installed.
    """
    default = neuron_partitions_available()
    model = default if model is None else model
    hybrid = default if hybrid is None else hybrid
    specs = [RunSpec("reference"), RunSpec("kernel")]
    specs += [RunSpec("data", p, blocks=blocks, seed=seed) for p in partitions]
    for transport in transports:
        for strategy, methods in (("model", model), ("hybrid", hybrid)):
            specs += [RunSpec(strategy, m, parts=parts, transport=transport, seed=seed,
                              row_groups=row_groups if strategy == "hybrid" else None,
                              epsilon=epsilon if m == "hypergraph" else None)
                      for m in methods]
    return specs


def neuron_partitions_available() -> tuple[str, ...]:
    """Every neuron partition, less ``hypergraph`` when Mt-KaHyPar is not installed."""
    import importlib.util

    if importlib.util.find_spec("mtkahypar") is not None:
        return NEURON_PARTITIONS
    return tuple(m for m in NEURON_PARTITIONS if m != "hypergraph")


def config_key(problem_key: str, spec: RunSpec) -> str:
    """A configuration on a problem: ``<problem>-<spec>`` (the records' ``spec``)."""
    return f"{problem_key}-{spec.key()}"


def run_key(problem_key: str, spec: RunSpec, repeat: int) -> str:
    """The file name of a run in a study's dataset: ``<problem>-<spec>-r<repeat>``."""
    return f"{config_key(problem_key, spec)}-r{repeat}"


def serial_first(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """``specs`` in the order they are run: the serial ones first, each group as given."""
    return ([s for s in specs if s.strategy in SERIAL_STRATEGIES]
            + [s for s in specs if s.strategy not in SERIAL_STRATEGIES])
