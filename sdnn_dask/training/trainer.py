"""What the parallel trainers share: a pool of workers, a persistent loop, steps and close.

:class:`Trainer` is the base of :class:`~.data_parallel.DataParallelTrainer` and
:class:`~.model_parallel.ModelParallelTrainer` (as :class:`~sdnn_dask.parallel.base.WorkerPool`
is of the executors): its slots' routes, the loop started on the first step, a feed of
held rows' ids per epoch (:meth:`Trainer.steps`), closing, and the timing fields of a
step's result (:class:`StepTiming`).

Instead of a task per slot and step, a trainer on the direct transport starts one
long-running task per slot (:func:`~.slot_task.run_slot`) the first time it steps, and from
then on feeds it steps through the workers' exchanges (:func:`~sdnn_dask.parallel.
transport.run.feed_run`): one call per worker per feed, answered when the slots there
have run every step of it, with each step's record. A feed may hold one step (the
trainers' ``step``) or many (``steps``: an epoch's batches as row ids into rows held on
the workers), so the scheduler takes no part after the start, and a feed of many steps
costs one round trip for all of them.

The client only starts, watches and stops the loop. While a feed is answered it checks
every :data:`~sdnn_dask.parallel.transport.run.POLL_SECONDS` that the loop's workers
are connected and its tasks alive: a lost worker raises
:exc:`~sdnn_dask.parallel.faults.WorkerLostError` naming it, a slot's error is raised as
itself, and an interruption of the caller (``KeyboardInterrupt``) stops the loop on every
worker (no run state is left) before it propagates. A loop that failed is gone; the
trainer starts a new one on its next step.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed import Client

from ..dask_workers import worker_info
from ..parallel.allocator import tune_allocator
from ..parallel.base import WorkerPool
from ..parallel.faults import connected
from ..parallel.transport.collectives import FEED, REPLY
from ..parallel.transport.run import (
    POLL_SECONDS,
    check_run,
    connect_peers,
    ensure_exchange,
    feed_run,
    gather_direct,
    stop_run,
)
from .replicas import BUCKET_BYTES
from .slot_task import run_slot

__all__ = ["PersistentLoop", "StepTiming", "Trainer", "slot_compute", "step_seconds",
           "timing_fields"]


@dataclass(frozen=True, kw_only=True)
class StepTiming:
    """Where a trainer's step went, on the direct transport (the base of step results).

    Attributes
    ----------
    transport
        ``"direct"`` or (data parallelism only) ``"graph"``.
    wait_seconds
        The longest a slot waited for pieces.
    compute_seconds
        The slowest slot's compute: forward, backward and update.
    slots
        Per slot, what its step measured (:func:`~.slot_task.run_slot`'s records).
    """

    transport: str = "direct"
    wait_seconds: float = 0.0
    compute_seconds: float = 0.0
    slots: tuple = ()

    @property
    def overhead_seconds(self) -> float:
        """The step's seconds beyond the slowest slot's compute."""
        return self.seconds - self.compute_seconds  # type: ignore[attr-defined]


class Trainer(WorkerPool):
    """The base of the parallel trainers: its workers, slots, loop, held rows and close.

    A subclass sets :attr:`route` (``route[g][c]``: the worker of slot ``(g, c)``) and
    :attr:`strategy`, places its state on the workers, and gives :meth:`_loop_keys`,
    :meth:`_loop_options`, :meth:`_feed_items`, :meth:`_result` and :attr:`_drop`.

    Parameters
    ----------
    client
        Any ``distributed.Client``.
    workers
        Addresses of the workers to use (default: every worker connected now). Fixed for
        the trainer's life: its state lives there.
    prefix
        Starts the trainer's id (its state's key on the workers).
    """

    strategy = "training"
    route: list[list[str]]
    #: Run on every worker of the trainer when it closes, with the trainer's id.
    _drop: Callable[[str], Any]

    def __init__(self, client: Client, workers: Sequence[str] | None, *, prefix: str):
        workers = sorted(workers or worker_info(client))
        if not workers:
            raise ValueError("the cluster has no workers")
        super().__init__(client, workers)
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self._loop: PersistentLoop | None = None
        self._held: tuple[Any, np.ndarray] | None = None

    @property
    def workers(self) -> list[str]:
        """The trainer's workers (fixed when it was made)."""
        return list(self._pool or [])

    @property
    def n_workers(self) -> int:
        return len(self.workers)

    def _hosts(self) -> list[str]:
        return sorted({w for row in self.route for w in row})

    def _connect(self, direct: bool = True) -> None:
        """Register the exchange and connect the slots' workers (direct transport), and
        tune their allocator (:mod:`sdnn_dask.parallel.allocator`: the pieces and tiles
        of every step without page faults)."""
        if direct:
            ensure_exchange(self.client)
            connect_peers(self.client, self._hosts())
        self.client.run(tune_allocator, workers=self._hosts())

    def _loop_keys(self) -> list[str]:
        """Per row group, the state key its slots use on their workers."""
        raise NotImplementedError

    def _loop_options(self) -> dict[str, Any]:
        """:class:`PersistentLoop`'s ``whole``, ``backend`` and ``bucket_bytes``."""
        return {}

    def _feed_items(self, idx: np.ndarray) -> list[list[dict[str, Any]]]:
        """One step's items (``[g][c]``) for the row ids ``idx`` into the held rows."""
        raise NotImplementedError

    def _result(self, records: list[list[dict]], rows: int, seconds: float,
                sent: int) -> Any:
        """A step's result from its slots' records."""
        raise NotImplementedError

    def _persistent(self) -> PersistentLoop:
        """The slots' loop, started on the first step (again after a failure)."""
        if self._loop is None or self._loop.closed:
            self._loop = PersistentLoop(self.client, name=self.id, keys=self._loop_keys(),
                                        route=self.route, strategy=self.strategy,
                                        **self._loop_options())
        return self._loop

    def steps(self, batches: list[np.ndarray]) -> list[Any]:
        """One step per array of row ids into the rows ``hold`` placed, in order, all of
        them in one feed of the slots' loop."""
        if self._held is None:
            raise RuntimeError("hold() the training rows before steps()")
        ids = [np.asarray(idx, np.int64) for idx in batches]
        records = self._persistent().run([self._feed_items(idx) for idx in ids])
        return [self._result(step, len(idx), step_seconds(step), int(idx.nbytes))
                for step, idx in zip(records, ids, strict=True)]

    def close(self) -> None:
        """Stop the slots' loop and drop the trainer's state from its workers."""
        try:
            if self._loop is not None:
                loop, self._loop = self._loop, None
                loop.close()
        finally:  # a worker lost mid-fit holds nothing any more: not waited for
            live = connected(self.client)
            drop = type(self)._drop
            self.client.gather([self.client.submit(drop, self.id, workers=[w],
                                                   allow_other_workers=False, pure=False)
                                for w in self._hosts() if w in live])

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PersistentLoop:
    """One trainer's slot tasks, running until :meth:`close`.

    Parameters
    ----------
    client
        The trainer's client.
    name
        The trainer's id (the loop's token starts with it).
    keys
        Per row group, the state key its slots use on their workers.
    route
        ``route[g][c]``: the worker of slot ``(g, c)``.
    strategy
        Names the loop in errors: ``"data"``, ``"model"`` or ``"hybrid"``.
    whole, backend, bucket_bytes
        As :func:`~.slot_task.run_slot` takes them.
    """

    def __init__(self, client: Client, *, name: str, keys: list[str],
                 route: list[list[str]], strategy: str, whole: bool = False,
                 backend: str = "compiled", bucket_bytes: int = BUCKET_BYTES,
                 poll: float = POLL_SECONDS):
        self.client, self.route, self.strategy, self.poll = client, route, strategy, poll
        self.token = f"{name}-loop-{uuid.uuid4().hex[:12]}"
        groups, parts = len(route), len(route[0])
        hosted = Counter(w for row in route for w in row)
        self.workers = set(hosted)
        self.futures = [
            client.submit(run_slot, keys[g], self.token, g, c, groups, parts, route,
                          hosted[route[g][c]], whole=whole, backend=backend,
                          strategy=strategy, bucket_bytes=bucket_bytes, poll=poll,
                          key=f"{self.token}-g{g}-p{c}", workers=[route[g][c]],
                          allow_other_workers=False, pure=False)
            for g in range(groups) for c in range(parts)]
        self.feeds = 0
        self.steps = 0
        self.closed = False

    def run(self, steps: list[list[list[dict[str, Any]]]]) -> list[list[list[dict]]]:
        """Run ``steps`` (``steps[s][g][c]``: slot ``(g, c)``'s item of step ``s``, see
        :func:`~.slot_task.run_slot`) as one feed; their records, indexed the same way."""
        if self.closed:
            raise RuntimeError(f"training loop {self.token} is closed")
        number = self.feeds
        by_worker: dict[str, tuple[list, list]] = {}
        slots = [(g, c) for g in range(len(self.route)) for c in range(len(self.route[0]))]
        for g, c in slots:
            items, replies = by_worker.setdefault(self.route[g][c], ([], []))
            items.append((8 * g + FEED, number, c, [step[g][c] for step in steps]))
            replies.append((8 * g + REPLY, number, c))
        got = self._feed(by_worker)
        self.feeds += 1
        self.steps += len(steps)
        records: dict[tuple[int, int], list[dict]] = {}
        for address, (_, replies) in by_worker.items():
            for (group, _, c), reply in zip(replies, got[address], strict=True):
                records[(group // 8, c)] = reply
        return [[[records[(g, c)][s] for c in range(len(self.route[0]))]
                 for g in range(len(self.route))] for s in range(len(steps))]

    def _feed(self, by_worker: dict[str, tuple[list, list]]) -> dict[str, list[Any]]:
        try:
            return feed_run(self.client, self.token, by_worker, watch=self._watch,
                            poll=self.poll)
        except BaseException as error:
            self.closed = True
            stop_run(self.client, self.futures, self.token, self.strategy, error)
            raise

    def _watch(self) -> None:
        if check_run(self.client, self.futures, self.workers, token=self.token,
                     strategy=self.strategy, poll=self.poll):
            raise RuntimeError(f"training loop {self.token}: its slot tasks ended before "
                               "their feed was answered")

    def close(self) -> int:
        """Stop the slots (a feed of ``None``) and wait for their tasks to end; the
        steps the loop ran. A loop that failed is already stopped."""
        if self.closed:
            return self.steps
        by_worker: dict[str, tuple[list, list]] = {}
        for g, row in enumerate(self.route):
            for c, where in enumerate(row):
                by_worker.setdefault(where, ([], []))[0].append(
                    (8 * g + FEED, self.feeds, c, None))
        self._feed(by_worker)
        self.closed = True
        gather_direct(self.client, self.futures, self.workers, token=self.token,
                      strategy=self.strategy, poll=self.poll)
        return self.steps


def slot_compute(record: dict[str, Any]) -> float:
    """A slot's compute in one step: forward, backward and update."""
    return record["forward_s"] + record["backward_s"] + record["update_s"]


def step_seconds(records: list[list[dict[str, Any]]]) -> float:
    """A step's wall time from its slots' records (``records[g][c]``): the first slot's
    start to the last one's end."""
    flat = [r for row in records for r in row]
    return (max(r["started"] + r["seconds"] for r in flat)
            - min(r["started"] for r in flat))


def timing_fields(done: list[dict[str, Any]]) -> dict[str, Any]:
    """A step result's timing fields from its slots' records: the longest wait, the
    slowest slot's compute, and the records themselves."""
    return {"wait_seconds": float(max(d["wait_s"] for d in done)),
            "compute_seconds": float(max(slot_compute(d) for d in done)),
            "slots": tuple(done)}
