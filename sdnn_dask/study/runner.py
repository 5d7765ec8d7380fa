"""Running one :class:`~.specs.RunSpec` on a problem and a cluster: the executors and
partitions a :class:`Runner` keeps, the warm-up, the kernel settings, and the check of the
result (:func:`verify`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
import scipy.sparse as sp

from .. import records
from ..core.check import BoundedReference, check_result
from ..core.kernels import KernelSettings
from ..core.reference import check_categories
from ..core.result import RunResult
from ..data.images import generated_source
from ..registry import SERIAL_STRATEGIES
from .outcomes import Records, RunOutcome
from .problem import Problem, is_streamed
from .sampling import SAMPLE
from .specs import RunSpec, config_key, neuron_partitions_available
from .validation import StudyError, say

if TYPE_CHECKING:
    from distributed import Client

#: Rows of the untimed warm-up run of each executor.
WARM_UP_ROWS = 256


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
    forecast
        Forecast the bytes of every model and hybrid run from a sample of the inputs
        (``predicted_bytes``; once per partition, outside the timed run).
    """

    def __init__(self, problem: Problem, client: Client | None = None, *, study: str,
                 warm_up: bool = True, progress: Callable[[str], None] | None = None,
                 forecast: bool = True):
        self.problem = problem
        self.forecast = forecast
        self.client = client
        self.study = study
        self.warm_up = warm_up
        self.progress = progress
        self._executors: dict[tuple[str, int], Any] = {}
        self._partitions: dict[tuple, Any] = {}
        self._warm: set[tuple] = set()
        self._said_slices: set[Any] = set()

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
        spec.check_against(self.problem, max(1, len(self.cluster_workers)))

    def _executor(self, kind: str, workers: int):
        from ..parallel import DataParallelExecutor, ModelParallelExecutor

        key = (kind, workers)
        if key not in self._executors:
            pool = self.cluster_workers[:workers]
            cls = DataParallelExecutor if kind == "data" else ModelParallelExecutor
            how = ("opening the store on" if is_streamed(self.problem.network)
                   else "sending the weights to")
            say(self.progress, f"{how} {workers} worker(s) ({kind})")
            self._executors[key] = cls(self.client, self.problem.network, workers=pool)
            if kind == "data" and is_streamed(self.problem.network):  # resident or not
                say(self.progress, f"weights {self._executors[key].weights_reason}")
        return self._executors[key]

    def _say_part_weights(self, executor: Any) -> None:
        """Once per partition placed: how each part holds its slice of a store, and why."""
        if not is_streamed(self.problem.network) or executor.slices in self._said_slices:
            return
        self._said_slices.add(executor.slices)
        for p, (_, reason) in enumerate(executor.part_weights):
            say(self.progress, f"part {p} of {executor.slices.name}: {reason}")

    def _partition(self, spec: RunSpec, k: int):
        from ..partition import make_neuron_partition

        key = (spec.partition, k, spec.seed, spec.nbuckets, spec.epsilon, spec.objective)
        if key not in self._partitions:
            epsilon = 0.03 if spec.epsilon is None else spec.epsilon
            inputs = self.problem.inputs if spec.objective == "traffic" else None
            cached = False
            if spec.partition == "hypergraph":
                from ..partition.hypergraph import is_cached

                cached = is_cached(self.problem.network, k, epsilon=epsilon, seed=spec.seed,
                                   inputs=inputs)
            how = f" ({spec.objective})" if spec.partition == "hypergraph" else ""
            say(self.progress, f"{'reading the cached' if cached else 'computing the'} "
                               f"{spec.partition}{how} partition of the neurons into {k} "
                               "parts")
            self._partitions[key] = make_neuron_partition(
                self.problem.network, k, spec.partition, seed=spec.seed,
                nbuckets=spec.nbuckets or 1, epsilon=epsilon, cache=True, inputs=inputs,
                progress=self._partition_progress() if spec.partition == "hypergraph"
                else None)
            if spec.partition == "hypergraph" and not cached:
                made = self._partitions[key]
                where = (f"; Mt-KaHyPar on layers {made.params['partitioned']}"
                         if made.params.get("objective") == "traffic" else "")
                say(self.progress, f"hypergraph partition computed in "
                                   f"{made.seconds:.1f} s{where} (now cached)")
        return self._partitions[key]

    def _partition_progress(self):
        """A ``progress(stage, done, total)`` saying every 30 s how far a hypergraph
        partition is, with the time left at its pace so far."""
        state = {"last": time.monotonic(), "start": {}}
        names = {"sample": "sample rows through the layers",
                 "mtkahypar": "layers partitioned with Mt-KaHyPar"}

        def report(stage: str, done: int, total: int) -> None:
            now = time.monotonic()
            start = state["start"].setdefault(stage, now)
            if done < total and now - state["last"] < 30:
                return
            state["last"] = now
            left = (now - start) / done * (total - done) if done else float("nan")
            say(self.progress, f"{names.get(stage, stage)}: {done}/{total}"
                               + (f", about {left:.0f} s left" if done < total else ""))

        return report

    def execute(self, spec: RunSpec, inputs: sp.csr_matrix | None = None) -> RunResult:
        """Run ``spec`` once on the problem's inputs (or ``inputs``), untimed extras aside."""
        from ..parallel import run_serial

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
        if is_streamed(net):
            say(self.progress, "cutting (or finding) the partition's per-part slices of the "
                               "store")
        result = executor.run(inputs, partition=part, row_groups=spec.row_groups,
                              seed=spec.seed, transport=spec.transport,
                              forecast=self.forecast)
        self._say_part_weights(executor)
        return result

    def _warm_up(self, spec: RunSpec, dedup: bool) -> None:
        # once per executor and setting of dedup (its code paths compile on first use)
        key = (spec.strategy == "data", spec.workers, spec.transport, dedup)
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
            kernel = KernelSettings.resolve()  # what the tasks get: read here, on the client
            self._warm_up(spec, kernel.dedup)
            result = self.execute(spec)
        sampled = self.problem.sampled
        sample = None
        if sampled is not None:  # too large to check whole: its survivors and a sample
            sample = sampled.verify(result.output, bool(result.params.get("dedup")))
            passed, diff = sample.passed, sample.max_abs_diff
            if self.problem.truth is not None:  # the categories, every row
                passed &= check_categories(result.categories, self.problem.truth).passed
            check = "PASS" if passed else "FAIL"
            against = "truth" if self.problem.truth is not None else SAMPLE
        else:
            check, against, diff = verify(result, self.problem.reference(),
                                          self.problem.truth)
        spec_ = self.problem.spec
        source = spec_.data if spec_ and spec_.data else generated_source(
            spec_.order if spec_ else None)
        runs = records.run_records(result, study=self.study, check=check,
                                   check_against=against, max_abs_diff=diff,
                                   spec=config_key(self.problem.key(), spec),
                                   repeat=repeat,
                                   source=source, kernel=kernel,
                                   sample=None if sample is None else
                                   (sample.survivors, sample.others, sample.seed))
        layers = records.layer_records(result, study=self.study)
        return RunOutcome(spec, result, check, Records(runs, layers))


def _kernel_config(spec: RunSpec) -> dict[str, Any]:
    """The ``sdnn.kernel.*`` settings ``spec`` sets (none: the configuration's own)."""
    out: dict[str, Any] = {}
    if spec.dense_threshold is not None:
        out["sdnn.kernel.dense-threshold"] = spec.dense_threshold
    if spec.chunk_bytes is not None:
        out["sdnn.kernel.chunk-bytes"] = spec.chunk_bytes
    if spec.dedup is not None:  # model/hybrid read it on the client too (dedup=None)
        out["sdnn.kernel.dedup"] = spec.dedup
    if spec.classes is not None:
        out["sdnn.kernel.classes"] = spec.classes
    return out
