"""The researcher's workflow as a library: a problem, run specs, ``compare``, studies.

``load_problem`` makes or reads a network with its inputs and truth; a :class:`RunSpec`
names one configuration (strategy, partition, parts, row groups, blocks, transport, workers,
seed) and has a deterministic key; :func:`compare` runs a list of specs on one problem and
returns its records; a :class:`Study` is a YAML grid of problems and specs, run on one
cluster with a warm-up, a progress bar, and every run's records written as soon as it
finishes (:func:`sdnn_dask.records.write_run`), so an interrupted study resumes where it
stopped. The CLI (``sdnn-dask compare``, ``sdnn-dask study``) only parses arguments and
calls these.

Examples
--------
>>> from sdnn_dask.study import RunSpec
>>> RunSpec("data", "hash", workers=2).key() == RunSpec("data", "hash", workers=2).key()
True
>>> RunSpec("model", "hypergraph").label
'model hypergraph direct'
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import itertools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import config, records
from .core.check import BoundedReference, bounded_reference, check_result
from .core.kernels import KernelSettings
from .core.network import Network
from .core.reference import check_categories
from .core.result import RunResult
from .data import io, store
from .data.images import generated_source
from .data.streaming import StreamedNetwork, resident_bytes
from .registry import (
    NEURON_PARTITIONS,
    ORDERS,
    PLACEMENTS,
    ROW_PARTITIONS,
    SERIAL_STRATEGIES,
    STRATEGIES,
    TRANSPORTS,
    partitions_of,
)

if TYPE_CHECKING:
    from distributed import Client

#: Rows of a generated problem when not given (the challenge's 60000).
DEFAULT_ROWS = 60000
#: Rows of the untimed warm-up run of each executor.
WARM_UP_ROWS = 256


class StudyError(ValueError):
    """A study, a spec or a problem that cannot be run as given (the message says why)."""


def _say(progress: Callable[[str], None] | None, message: str) -> None:
    if progress is not None:
        progress(message)


# --------------------------------------------------------------------------- the problem


@dataclass(frozen=True)
class ProblemSpec:
    """Which network and inputs: generated (``data=None``) or challenge files.

    Parameters
    ----------
    neurons, layers
        The network ``N`` and ``L``.
    inputs
        Input rows: generated count (default 60000), or the first rows of ``data``'s file.
    seed
        Seed of what is generated.
    data
        Challenge folder with ``neuron{N}/n{N}-l{k}.tsv[.gz]`` and the inputs.
    inputs_file, truth
        Override the inputs file and truth file found in ``data``.
    tile
        Repeat the inputs this many times (e.g. the official 1200 rows x 50).
    order
        Row order of generated inputs (:func:`sdnn_dask.data.images.make_inputs`):
        ``official-like`` (the default: survivors cluster along the rows as in the
        official inputs) or ``iid`` (every row drawn independently).
    """

    neurons: int = 1024
    layers: int = 120
    inputs: int | None = None
    seed: int = 0
    data: str | None = None
    inputs_file: str | None = None
    truth: str | None = None
    tile: int = 1
    order: str = "official-like"

    def __post_init__(self) -> None:
        _choice("order", self.order, ORDERS)

        sizes = sorted(int(k) for k in config.get("bias"))
        if not _is_int(self.neurons) or self.neurons not in sizes:
            raise StudyError(f"neurons must be one of {', '.join(map(str, sizes))} (the "
                             f"challenge's sizes), got {self.neurons!r}")
        for name in ("layers", "inputs", "tile"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                raise StudyError(f"{name} must be a positive integer, got {value!r}")
        if not _is_int(self.seed) or self.seed < 0:
            raise StudyError(f"seed must be an integer >= 0, got {self.seed!r}")

    def key(self) -> str:
        """A short stable id of the problem (its fields, hashed)."""
        return _digest(dataclasses.asdict(self))

    @property
    def label(self) -> str:
        rows = self.inputs or DEFAULT_ROWS
        where = f" from {self.data}" if self.data else ""
        tile = f" x{self.tile}" if self.tile > 1 else ""
        order = f" ({self.order})" if self.order != ORDERS[0] and not self.data else ""
        return f"{self.neurons}-{self.layers}, {rows} rows{order}{tile}{where}"


@dataclass
class Problem:
    """A network, its inputs, and the truth categories when known.

    Attributes
    ----------
    network, inputs
        The network and the ``rows x N`` float32 CSR inputs.
    truth
        0-based ids of the rows that survive every layer, or ``None``.
    source
        Where it came from, in words.
    spec
        What :func:`load_problem` was asked for (``None`` for a problem built by hand).
    """

    network: Network
    inputs: sp.csr_matrix
    truth: np.ndarray | None
    source: str
    spec: ProblemSpec | None = None
    _reference: BoundedReference | None = field(default=None, repr=False)

    def key(self) -> str:
        """The spec's key; for a problem built by hand, a hash of the network's name and
        the inputs' pattern and values (two orderings of the same rows differ)."""
        if self.spec is not None:
            return self.spec.key()
        digest = hashlib.sha1(self.network.name.encode())
        y = self.inputs
        for array in (np.asarray(y.shape), y.indptr, y.indices, y.data):
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()[:12]

    def reference(self) -> BoundedReference:
        """The float64 reference with float32 rounding bounds (computed once)."""
        if self._reference is None:
            self._reference = bounded_reference(self.network, self.inputs)
        return self._reference


def available_layers(data: str | os.PathLike, neurons: int) -> int:
    """How many consecutive layer files ``1, 2, ...`` of ``neurons`` ``data`` holds."""
    count = 0
    while io.layer_path(data, neurons, count + 1).is_file():
        count += 1
    return count


def load_network(spec: ProblemSpec, *, cache: bool = True,
                 progress: Callable[[str], None] | None = None,
                 layer_progress: Callable[[int, int], None] | None = None
                 ) -> tuple[Network, ProblemSpec]:
    """The problem's network alone: generated, or read from ``spec.data`` with ``layers``
    capped at the layers the folder holds (said through ``progress``).

    Returns
    -------
    Network, ProblemSpec
        The network, and ``spec`` with the layers it has.

    Raises
    ------
    StudyError
        A ``data`` folder that is missing or holds no layer of that ``N``.
    """
    from .data.radixnet import make_network

    n, layers = spec.neurons, spec.layers
    if spec.data is None:
        _say(progress, f"generating RadiX-Net {n}-{layers} (seed {spec.seed})")
        return make_network(n, layers, seed=spec.seed), spec
    data = Path(spec.data)
    if not data.is_dir():
        raise StudyError(f"data {data}: no such folder")
    if (data / store.MANIFEST).is_file():  # a network store (sdnn-dask convert/generate)
        return _store_network(data, spec, progress)
    held = available_layers(data, n)
    if held == 0:
        raise StudyError(f"data {data}: no layer file of N = {n} "
                         f"(looked for {io.layer_path(data, n, 1)})")
    if held < layers:
        _say(progress, f"{data} holds layers 1-{held} of N = {n}, not {layers}: "
                       f"running {held} layers")
        spec = dataclasses.replace(spec, layers=held)
    _say(progress, f"reading {n}-{spec.layers} weights from {data}")
    network = io.read_network(data, n, spec.layers, cache=cache, progress=layer_progress)
    return network, spec


def _store_network(folder: Path, spec: ProblemSpec,
                   progress: Callable[[str], None] | None) -> tuple[Network, ProblemSpec]:
    """The first ``spec.layers`` layers of the network store ``folder`` (capped at what it
    holds, said through ``progress``)."""
    held = store.open_store(folder)
    if held.n_neurons != spec.neurons:
        raise StudyError(f"data {folder}: a store of N = {held.n_neurons}, not "
                         f"{spec.neurons}")
    if held.n_layers < spec.layers:
        _say(progress, f"{folder} holds layers 1-{held.n_layers}, not {spec.layers}: "
                       f"running {held.n_layers} layers")
        spec = dataclasses.replace(spec, layers=held.n_layers)
    if store_weights(held, spec.layers) == "streamed":
        _say(progress, f"streaming {spec.neurons}-{spec.layers} weights from the store "
                       f"{folder}, layer by layer (in memory with their transpose they "
                       f"would take {resident_bytes(held, spec.layers) / 1e9:.1f} GB)")
        return StreamedNetwork(held, spec.layers), spec
    _say(progress, f"reading {spec.neurons}-{spec.layers} weights from the store {folder}")
    return held.to_network(spec.layers), spec


def store_weights(held: store.NetworkStore, n_layers: int | None = None) -> str:
    """``"resident"`` or ``"streamed"``: how a run here holds a store's weights.

    ``sdnn.data-parallel.weights`` if it is not ``auto``; with ``auto``, streamed when the
    weights and their transpose (:func:`~sdnn_dask.data.streaming.resident_bytes`) exceed
    ``sdnn.data-parallel.resident-fraction`` of this machine's memory.
    """
    from .parallel.data import choose_weights

    try:  # no memory limit given: this machine's memory
        mode, _ = choose_weights(StreamedNetwork(held, n_layers),
                                 config.get("data-parallel.weights"), None)
    except ValueError as error:
        raise StudyError(f"sdnn.data-parallel.{error}") from None
    return mode


def is_streamed(network: Any) -> bool:
    """Whether ``network`` is streamed from a store (no layers in memory)."""
    return isinstance(network, StreamedNetwork)


def load_problem(spec: ProblemSpec | None = None, *, cache: bool = True,
                 progress: Callable[[str], None] | None = None,
                 layer_progress: Callable[[int, int], None] | None = None,
                 **fields: Any) -> Problem:
    """Generate, or read from challenge files, a network with its inputs and truth.

    Parameters
    ----------
    spec
        The problem; or give its fields as keywords (``neurons=1024, layers=24, ...``).
    cache
        Keep a binary cache of parsed challenge files (:func:`sdnn_dask.data.io.read_network`).
    progress
        Called with a message for each step (e.g. ``print``).
    layer_progress
        Called as ``(done, total)`` while layer files are parsed.

    Returns
    -------
    Problem
        With the truth restricted to the rows kept (and tiled with them). When ``data``
        holds fewer layers than asked, the problem has the layers it holds (said through
        ``progress``).

    Raises
    ------
    StudyError
        A ``data`` folder that is missing or holds no layer of that ``N``, a missing
        inputs or truth file.
    FileNotFoundError, sdnn_dask.data.io.ChallengeFormatError
        From reading the files.
    """
    from .data.images import make_inputs

    spec = spec or ProblemSpec(**fields)
    network, spec = load_network(spec, cache=cache, progress=progress,
                                 layer_progress=layer_progress)
    n, layers = spec.neurons, spec.layers
    # a network store holds weights only: without an inputs file, the inputs are generated
    store_only = (spec.data is not None and not spec.inputs_file
                  and (Path(spec.data) / store.MANIFEST).is_file())
    if spec.data is None or store_only:
        if store_only and spec.truth:
            raise StudyError("truth goes with an inputs file: a network store holds the "
                             "weights only")
        if spec.data is None and (spec.inputs_file or spec.truth):
            raise StudyError("inputs_file and truth go with data (a challenge folder)")
        rows = DEFAULT_ROWS if spec.inputs is None else spec.inputs
        _say(progress, f"generating {rows} synthetic inputs")
        inputs = make_inputs(rows, n, seed=spec.seed, order=spec.order)
        truth = None
        source = (f"generated RadiX-Net {n}-{layers}, seed {spec.seed}" if spec.data is None
                  else f"the network store {spec.data}, layers 1-{layers}")
        source += f", {spec.order} row order"
    else:
        data = Path(spec.data)
        path = Path(spec.inputs_file) if spec.inputs_file else io.inputs_path(data, n)
        if not path.is_file():
            raise StudyError(f"inputs file {path}: no such file")
        _say(progress, f"reading inputs {path}")
        inputs = io.read_inputs(path, n)
        if spec.inputs is not None:
            inputs = inputs[: spec.inputs]
        truth_path = Path(spec.truth) if spec.truth else io.categories_path(data, n, layers)
        truth = None
        if spec.truth and not truth_path.is_file():
            raise StudyError(f"truth file {truth_path}: no such file")
        if truth_path.is_file():
            truth = io.read_categories(truth_path)
            truth = truth[truth < inputs.shape[0]]
            _say(progress, f"truth: {truth_path} ({len(truth)} categories among "
                           f"{inputs.shape[0]} rows)")
        source = f"challenge files in {data}"
    if spec.tile > 1:
        rows = inputs.shape[0]
        inputs = sp.vstack([inputs] * spec.tile, format="csr")
        if truth is not None:
            truth = np.concatenate([truth + k * rows for k in range(spec.tile)])
        source += f", inputs tiled x{spec.tile}"
    return Problem(network, inputs, truth, source, spec)


# --------------------------------------------------------------------------- run specs


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
    dense_threshold, chunk_bytes
        Kernel settings of this run (default: ``sdnn.kernel.*`` when it runs), e.g.
        ``dense_threshold=2`` for a kernel that never takes the dense step.
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

    def __post_init__(self) -> None:
        # Defaults filled in, fields that do not apply cleared: equal runs, equal keys.
        s = self.strategy
        _choice("strategy", s, STRATEGIES)
        fix = object.__setattr__
        allowed = partitions_of(s)
        partition = self.partition or allowed[0]
        if partition not in allowed:
            raise StudyError(f"strategy {s} takes partition {' | '.join(allowed)}, not "
                             f"{partition!r}{_nearest(partition, allowed)}")
        fix(self, "partition", partition)
        for name in ("parts", "row_groups", "blocks", "workers", "nbuckets"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                raise StudyError(f"{name} must be a positive integer, got {value!r}")
        if not _is_int(self.seed) or self.seed < 0:
            raise StudyError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.chunk_bytes is not None and (not _is_int(self.chunk_bytes)
                                             or self.chunk_bytes < 1):
            raise StudyError(f"chunk_bytes must be a positive integer, got "
                             f"{self.chunk_bytes!r}")
        if self.dense_threshold is not None:
            if isinstance(self.dense_threshold, bool) or not isinstance(
                    self.dense_threshold, int | float) or self.dense_threshold < 0:
                raise StudyError(f"dense_threshold must be a number >= 0, got "
                                 f"{self.dense_threshold!r}")
            fix(self, "dense_threshold", float(self.dense_threshold))
        if s == "reference" and (self.dense_threshold is not None
                                 or self.chunk_bytes is not None):
            raise StudyError("dense_threshold and chunk_bytes are the compiled kernel's; "
                             "the reference recurrence has none")
        if self.epsilon is not None and not (isinstance(self.epsilon, int | float)
                                             and 0 <= self.epsilon < float("inf")):
            raise StudyError(f"epsilon must be a number >= 0, got {self.epsilon!r}")
        if s in SERIAL_STRATEGIES:
            for name in ("parts", "row_groups", "blocks", "transport", "nbuckets",
                         "epsilon"):
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
            raise StudyError(f"merge must be true or false, got {self.merge!r}")
        if s == "data":
            fix(self, "merge", True if self.merge is None else self.merge)
            fix(self, "placement", _choice("placement", self.placement or PLACEMENTS[0],
                                           PLACEMENTS))
            for name in ("parts", "row_groups", "transport", "epsilon"):
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
        fix(self, "transport", _choice("transport", self.transport or TRANSPORTS[0],
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
        if partition != "hypergraph" and self.epsilon is not None:
            raise StudyError("epsilon applies to the hypergraph partition only")
        if partition == "hypergraph":
            fix(self, "epsilon", 0.03 if self.epsilon is None else float(self.epsilon))
        if partition not in ("random", "hypergraph") and s == "model":
            fix(self, "seed", 0)

    def key(self) -> str:
        """A short stable id of the configuration (its normalised fields, hashed)."""
        return _digest(dataclasses.asdict(self))

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
        extra = [f"{name}={getattr(self, name)}" for name in ("workers", "parts", "blocks")
                 if getattr(self, name) is not None and self.strategy not in
                 SERIAL_STRATEGIES]
        extra += [f"{name}={getattr(self, name)}" for name in ("dense_threshold",
                                                               "chunk_bytes")
                  if getattr(self, name) is not None]
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


# --------------------------------------------------------------------------- verification


def verify(result: RunResult, reference: BoundedReference, truth: np.ndarray | None
           ) -> tuple[str, str, float]:
    """``(check, check_against, max_abs_diff)`` of a run.

    PASS iff the result is within float32 rounding of the float64 reference on every row
    where that is decidable (:mod:`sdnn_dask.core.check`) and, with a truth, its categories are
    the truth.
    """
    verdict = check_result(result.output, reference)
    if truth is not None:
        passed = check_categories(result.categories, truth).passed and verdict.passed
        return ("PASS" if passed else "FAIL"), "truth", verdict.max_abs_diff
    return ("PASS" if verdict.passed else "FAIL"), "reference", verdict.max_abs_diff


# --------------------------------------------------------------------------- running


@dataclass
class Records:
    """The run and layer records of a set of runs (:mod:`sdnn_dask.records`' schema)."""

    runs: pd.DataFrame
    layers: pd.DataFrame

    @property
    def failed(self) -> pd.DataFrame:
        """One row per run whose check is not PASS."""
        per_run = self.runs.drop_duplicates("run_id")
        return per_run[per_run["check"] != "PASS"]

    def comparison(self) -> pd.DataFrame:
        """Median over repeats of each configuration
        (:func:`sdnn_dask.report.tables.comparison`)."""
        from .report.tables import comparison

        return comparison(self.runs)


@dataclass
class RunOutcome:
    """One finished run: its result, verdict and records."""

    spec: RunSpec
    result: RunResult
    check: str
    records: Records


class Runner:
    """Runs specs on one problem and one cluster, keeping executors and partitions.

    Executors are made once per (kind, worker count) and neuron partitions once per
    (method, k, seed, epsilon); each executor's first run is preceded by an untimed
    warm-up on a few rows (compiled kernels, connections, allocator: the first run is
    otherwise slower than the rest).

    Parameters
    ----------
    problem
        What to run.
    client
        A ``distributed.Client``; ``None`` if only serial specs are run.
    study
        Written into every record's ``study`` column.
    warm_up
        Do the untimed warm-up runs.
    progress
        Called with a message for each step (partitioning, sending the weights).
    """

    def __init__(self, problem: Problem, client: Client | None = None, *, study: str,
                 warm_up: bool = True, progress: Callable[[str], None] | None = None):
        self.problem = problem
        self.client = client
        self.study = study
        self.warm_up = warm_up
        self.progress = progress
        self._executors: dict[tuple[str, int], Any] = {}
        self._partitions: dict[tuple, Any] = {}
        self._warm: set[tuple] = set()

    @property
    def cluster_workers(self) -> list[str]:
        return sorted(self.client.nthreads()) if self.client is not None else []

    def check(self, spec: RunSpec) -> None:
        """Raise :exc:`StudyError` if ``spec`` cannot run here."""
        if spec.strategy not in SERIAL_STRATEGIES and self.client is None:
            raise StudyError(f"{spec.label}: needs a cluster")
        if spec.partition == "hypergraph" and "hypergraph" not in neuron_partitions_available():
            raise StudyError(f"{spec.label}: the hypergraph partition needs Mt-KaHyPar: "
                             "pip install 'sdnn_dask[partition]'")
        if is_streamed(self.problem.network) and spec.strategy not in (*SERIAL_STRATEGIES,
                                                                       "data"):
            raise StudyError(f"{spec.label}: the weights are streamed from a store, layer by "
                             "layer, which only the serial strategies and data parallelism "
                             "do; model parallelism needs them in memory "
                             "(sdnn.data-parallel.weights: resident, or fewer layers)")
        spec.check_against(self.problem, max(1, len(self.cluster_workers)))

    def _executor(self, kind: str, workers: int):
        from .parallel import DataParallelExecutor, ModelParallelExecutor

        key = (kind, workers)
        if key not in self._executors:
            pool = self.cluster_workers[:workers]
            cls = DataParallelExecutor if kind == "data" else ModelParallelExecutor
            how = ("opening the store on" if is_streamed(self.problem.network)
                   else "sending the weights to")
            _say(self.progress, f"{how} {workers} worker(s) ({kind})")
            self._executors[key] = cls(self.client, self.problem.network, workers=pool)
            if kind == "data" and is_streamed(self.problem.network):  # resident or not
                _say(self.progress, f"weights {self._executors[key].weights_reason}")
        return self._executors[key]

    def _partition(self, spec: RunSpec, k: int):
        from .partition import make_neuron_partition

        key = (spec.partition, k, spec.seed, spec.nbuckets, spec.epsilon)
        if key not in self._partitions:
            epsilon = 0.03 if spec.epsilon is None else spec.epsilon
            cached = False
            if spec.partition == "hypergraph":
                from .partition.hypergraph import is_cached

                cached = is_cached(self.problem.network, k, epsilon=epsilon, seed=spec.seed)
            _say(self.progress, f"{'reading the cached' if cached else 'computing the'} "
                                f"{spec.partition} partition of the neurons into {k} parts")
            self._partitions[key] = make_neuron_partition(
                self.problem.network, k, spec.partition, seed=spec.seed,
                nbuckets=spec.nbuckets or 1, epsilon=epsilon, cache=True)
            if spec.partition == "hypergraph" and not cached:
                _say(self.progress, f"hypergraph partition computed in "
                                    f"{self._partitions[key].seconds:.1f} s (now cached)")
        return self._partitions[key]

    def execute(self, spec: RunSpec, inputs: sp.csr_matrix | None = None) -> RunResult:
        """Run ``spec`` once on the problem's inputs (or ``inputs``), untimed extras aside."""
        from .parallel import run_serial

        inputs = self.problem.inputs if inputs is None else inputs
        net = self.problem.network
        if spec.strategy in SERIAL_STRATEGIES:
            return run_serial(net, inputs, spec.strategy)
        workers = spec.workers or len(self.cluster_workers)
        if spec.strategy == "data":
            return self._executor("data", workers).run(
                inputs, partition=spec.partition, n_blocks=spec.blocks, seed=spec.seed,
                nbuckets=spec.nbuckets, placement=spec.placement, merge=spec.merge)
        executor = self._executor("model", workers)
        part = self._partition(spec, spec.parts or workers)
        return executor.run(inputs, partition=part, row_groups=spec.row_groups,
                            seed=spec.seed, transport=spec.transport)

    def _warm_up(self, spec: RunSpec) -> None:
        key = (spec.strategy == "data", spec.workers, spec.transport)
        if not self.warm_up or spec.strategy in SERIAL_STRATEGIES or key in self._warm:
            return
        if is_streamed(self.problem.network):  # a warm-up would read the store once more
            return
        rows = min(WARM_UP_ROWS, self.problem.inputs.shape[0])
        groups = spec.row_groups or 1
        self.execute(spec, self.problem.inputs[: max(rows, groups)])
        self._warm.add(key)

    def run(self, spec: RunSpec, *, repeat: int = 0) -> RunOutcome:
        """Run ``spec`` (after its executor's warm-up), check it, make its records."""
        self.check(spec)
        with dask.config.set(_kernel_config(spec)):  # read on the client by every executor
            self._warm_up(spec)
            kernel = KernelSettings.resolve()  # what the tasks get: read here, on the client
            result = self.execute(spec)
        check, against, diff = verify(result, self.problem.reference(), self.problem.truth)
        spec_ = self.problem.spec
        source = spec_.data if spec_ and spec_.data else generated_source(
            spec_.order if spec_ else None)
        runs = records.run_records(result, study=self.study, check=check,
                                   check_against=against, max_abs_diff=diff,
                                   spec=config_key(self.problem.key(), spec),
                                   repeat=repeat,
                                   source=source, kernel=kernel)
        layers = records.layer_records(result, study=self.study)
        return RunOutcome(spec, result, check, Records(runs, layers))


def _kernel_config(spec: RunSpec) -> dict[str, Any]:
    """The ``sdnn.kernel.*`` settings ``spec`` sets (none: the configuration's own)."""
    out: dict[str, Any] = {}
    if spec.dense_threshold is not None:
        out["sdnn.kernel.dense-threshold"] = spec.dense_threshold
    if spec.chunk_bytes is not None:
        out["sdnn.kernel.chunk-bytes"] = spec.chunk_bytes
    return out


def config_key(problem_key: str, spec: RunSpec) -> str:
    """A configuration on a problem: ``<problem>-<spec>`` (the records' ``spec``)."""
    return f"{problem_key}-{spec.key()}"


def run_key(problem_key: str, spec: RunSpec, repeat: int) -> str:
    """The file name of a run in a study's dataset: ``<problem>-<spec>-r<repeat>``."""
    return f"{config_key(problem_key, spec)}-r{repeat}"


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
        from .cluster import cluster_client

        client = cluster_client(cluster)
    try:
        runner = Runner(problem, client, study=study, warm_up=warm_up, progress=progress)
        for spec in specs:
            runner.check(spec)
        _say(progress, "the float64 reference with float32 rounding bounds (the check)")
        undecided = len(problem.reference().undecided)
        if undecided:
            _say(progress, f"{undecided} ill-conditioned row(s): their ReLU's bias rule lies "
                           "within float32 rounding, so they are checked against the truth "
                           "only (if any)")
        outcomes = []
        total = len(specs) * repeat
        order = [(r, s) for r in range(repeat) for s in _serial_first(specs)]
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


def _serial_first(specs: Sequence[RunSpec]) -> list[RunSpec]:
    return ([s for s in specs if s.strategy in SERIAL_STRATEGIES]
            + [s for s in specs if s.strategy not in SERIAL_STRATEGIES])


def _concat(frames: list[pd.DataFrame], dtypes: dict[str, str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if not frames:
        return records.typed(pd.DataFrame(columns=list(dtypes)), dtypes)
    return pd.concat(frames, ignore_index=True)


# --------------------------------------------------------------------------- studies

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

    Relative ``data``, ``inputs_file`` and ``truth`` paths are relative to the study file.
    Every combination of a problem with a run entry's values is a :class:`RunSpec`;
    ``repeats`` of each are run. Validation (:meth:`from_yaml`) happens before anything
    runs: unknown keys (with the nearest valid one), wrong types and impossible
    combinations are errors naming the file and the entry.
    """

    name: str
    problems: list[ProblemSpec]
    specs: list[RunSpec]
    repeats: int = 1
    warm_up: bool = True
    workers: int | None = None
    description: str = ""
    path: Path | None = None

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> Study:
        """Read and validate a study file.

        Raises
        ------
        StudyError
            Naming the file and what is wrong: not YAML, not a mapping, an unknown key (and
            the nearest valid one), a value of the wrong type, an impossible combination.
        """
        import yaml

        path = Path(path)
        try:
            text = path.read_text()
        except OSError as error:
            raise StudyError(f"{path}: cannot read the study ({error.strerror or error})"
                             ) from error
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f", line {mark.line + 1}" if mark is not None else ""
            raise StudyError(f"{path}{where}: not valid YAML "
                             f"({getattr(error, 'problem', None) or error})") from error
        try:
            study = cls.from_dict(data, default_name=path.stem)
        except StudyError as error:
            raise StudyError(f"{path}: {error}") from None
        # relative paths of files are relative to the study file, wherever it is run from
        study.problems = [dataclasses.replace(p, **{
            name: str((path.parent / value).resolve())
            for name in ("data", "inputs_file", "truth")
            if (value := getattr(p, name)) is not None and not Path(value).is_absolute()})
            for p in study.problems]
        study.path = path
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
                                 f"{data[key]!r}")
        for key in ("repeats", "workers"):
            if key in data and data[key] < 1:
                raise StudyError(f"{key}: must be >= 1, got {data[key]}")
        if not data.get("runs"):
            raise StudyError("runs: give at least one run entry, e.g. "
                             "{strategy: [reference, kernel]}")
        problems = [p for i, entry in enumerate(data.get("problems") or [{}])
                    for p in _expand(entry, PROBLEM_KEYS, f"problems[{i}]", ProblemSpec)]
        specs = [s for i, entry in enumerate(data["runs"])
                 for s in _expand(entry, RUN_KEYS, f"runs[{i}]", RunSpec)]
        study = cls(name=str(data.get("name", default_name)), problems=problems,
                    specs=list(dict.fromkeys(specs)), repeats=data.get("repeats", 1),
                    warm_up=data.get("warm_up", True), workers=data.get("workers"),
                    description=data.get("description", ""))
        for spec in study.specs:
            if study.workers is not None and spec.workers and spec.workers > study.workers:
                raise StudyError(f"{spec.label}: workers {spec.workers}, but the study's "
                                 f"cluster has {study.workers} (workers: {study.workers})")
        for problem in study.problems:
            for spec in study.specs:
                if spec.parts is not None and spec.parts > problem.neurons:
                    raise StudyError(f"{spec.label}: at most one part per neuron "
                                     f"(N = {problem.neurons})")
                rows = (problem.inputs or DEFAULT_ROWS) * problem.tile
                if spec.row_groups and spec.row_groups > rows:
                    raise StudyError(f"{spec.label}: more row groups than the {rows} "
                                     f"input rows of {problem.label}")
        return study

    @property
    def total(self) -> int:
        """Runs in the study: problems x specs x repeats."""
        return len(self.problems) * len(self.specs) * self.repeats

    def plan(self) -> Iterator[tuple[ProblemSpec, int, RunSpec]]:
        """Every run, in the order :meth:`run` runs them (by problem, repeat, spec)."""
        for problem in self.problems:
            for repeat in range(self.repeats):
                for spec in _serial_first(self.specs):
                    yield problem, repeat, spec

    def run(self, client: Client | None, results: str | os.PathLike, *, resume: bool = False,
            progress: Callable[[str], None] | None = None, bar: bool = True,
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
            Called with a message for each step.
        bar
            A tqdm progress bar over the runs (on stderr; a widget in a notebook).
        report
            Write the CSV export and the report at the end.

        Returns
        -------
        Records
            Every run recorded in ``results`` (earlier ones included).
        """
        results = Path(results)
        done = records.recorded_keys(results)
        if done and not resume:
            raise StudyError(f"{results} already holds {len(done)} recorded run(s); resume "
                             "them (--resume) or choose another folder")
        keys = {(p, r, s): run_key(p.key(), s, r) for p, r, s in self.plan()}
        pending = [t for t, key in keys.items() if key not in done]
        loaded: dict[ProblemSpec, Problem] = {}
        _say(progress, f"study {self.name}: {self.total} run(s), {self.total - len(pending)} "
                       f"already recorded, {len(pending)} to run")
        own = client is None and any(s.strategy not in SERIAL_STRATEGIES
                                     for _, _, s in pending)
        if own:
            from .cluster import local_client

            client = local_client(self.workers)
        if client is not None:
            have = len(client.nthreads())
            for spec in self.specs:
                if spec.workers and spec.workers > have:
                    raise StudyError(f"{spec.label}: workers {spec.workers}, but the cluster "
                                     f"has {have}")
        results.mkdir(parents=True, exist_ok=True)
        for sub in (records.RUNS_DIR, records.LAYERS_DIR):  # a write cut short by a kill
            for stale in (results / sub).glob(".*.tmp"):
                stale.unlink(missing_ok=True)
        try:
            with _bar(len(pending), bar, self.name) as tick:
                runner = None
                for problem_spec, repeat, spec in pending:
                    if problem_spec not in loaded:
                        loaded.clear()  # one problem in memory at a time
                        loaded[problem_spec] = load_problem(problem_spec, progress=progress)
                        runner = Runner(loaded[problem_spec], client, study=self.name,
                                        warm_up=self.warm_up, progress=progress)
                    outcome = runner.run(spec, repeat=repeat)
                    records.write_run(results, keys[problem_spec, repeat, spec],
                                      outcome.records.runs, outcome.records.layers)
                    tick(f"{spec.label}: {outcome.result.wall_seconds:.3f} s "
                         f"{outcome.check}")
        finally:
            if own:
                client.close()
        everything = Records(records.read_records(results, "runs"),
                             records.read_records(results, "layers"))
        if report:
            records.export_csv(results)
            from .report.outputs import write_report_files

            write_report_files(results, everything.runs, everything.layers,
                               say=progress or (lambda message: None))
        return everything


@contextlib.contextmanager
def _bar(total: int, enabled: bool, name: str) -> Iterator[Callable[[str], None]]:
    """A ``tick(message)`` that advances a tqdm bar (auto: a widget in a notebook)."""
    if not enabled or total == 0:
        yield lambda message: None
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=name, unit="run", file=sys.stderr, dynamic_ncols=True) as bar:
        def tick(message: str) -> None:
            bar.set_postfix_str(message, refresh=False)
            bar.update(1)

        yield tick


# --------------------------------------------------------------------------- validation


def _digest(fields: dict[str, Any]) -> str:
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _choice(what: str, value: str, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else :exc:`StudyError` naming the nearest."""
    if value not in choices:
        raise StudyError(f"{what} {value!r}: unknown{_nearest(value, choices)}; choose from "
                         f"{', '.join(choices)}")
    return value


def _nearest(word: Any, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _is_type(value: Any, kind: type | tuple[type, ...]) -> bool:
    if kind is int:
        return _is_int(value)
    return isinstance(value, kind)


def _type_name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "text", bool: "true or false", list: "a list",
             float: "a number"}
    return names.get(kind, str(kind))


def _check_keys(entry: dict, allowed: Iterable[str], where: str) -> None:
    allowed = list(allowed)
    for key in entry:
        if key not in allowed:
            raise StudyError(f"{where}: unknown key {key!r}{_nearest(key, allowed)}; valid "
                             f"keys: {', '.join(allowed)}")


def _check_value(key: str, value: Any, where: str) -> None:
    kind = _KINDS.get(key)
    if kind == "int" and not _is_int(value):
        raise StudyError(f"{where}: {key} must be an integer, got {value!r}")
    if kind == "str" and not isinstance(value, str):
        raise StudyError(f"{where}: {key} must be text, got {value!r}")
    if kind == "float" and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise StudyError(f"{where}: {key} must be a number, got {value!r}")
    if kind == "bool" and not isinstance(value, bool):
        raise StudyError(f"{where}: {key} must be true or false, got {value!r}")


def _expand(entry: Any, allowed: dict[str, Any], where: str, make: Callable[..., Any]
            ) -> list[Any]:
    """Every combination of an entry's values (a list is a choice, a scalar one value)."""
    if not isinstance(entry, dict):
        raise StudyError(f"{where}: expected a mapping like {{strategy: data}}, got "
                         f"{entry!r}")
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
