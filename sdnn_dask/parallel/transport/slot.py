"""A task's share of a direct run on its worker: find the exchange, secede, join, watch, leave.

Every long-running task of the direct transport (an inference part, :func:`~.direct.run_part`;
a training slot, :func:`sdnn_dask.training.direct.run_slot`) starts and ends the same way:

1. find this worker's :class:`~.exchange.PieceExchange` (a clear error when the executor
   that registers it was not used);
2. secede from the worker's thread pool, so the run's tasks that share a worker run side by
   side instead of waiting for a thread;
3. join run ``token`` (its mailbox on this worker, expecting ``expected`` tasks here);
4. while it runs, check that its own task is still wanted (:meth:`JoinedRun.alive`: a
   cancelled task stops within a poll);
5. however it ends, leave the run; if it fails, abort the run's other tasks on this worker
   first, a lost worker said as such with the task's label (:func:`part_of_run`).

:func:`joined_run` does all five; the tasks only add what they exchange.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from distributed import get_worker, secede
from distributed.worker import thread_state

from ..faults import WorkerLostError
from .exchange import EXTENSION, PieceExchange, RunAborted


@dataclass
class JoinedRun:
    """What a task holds while it takes part in a direct run."""

    #: This worker's exchange.
    exchange: PieceExchange
    #: The run's mailbox on this worker (``exchange.join``'s result).
    run: Any
    #: This worker's address.
    here: str
    #: The worker's record of this task (to notice a cancellation).
    _worker: Any
    _task: Any
    _cancelled: str

    def alive(self) -> None:
        """Raise :exc:`~.exchange.RunAborted` when this task was cancelled or released."""
        ts = self._worker.state.tasks.get(self._task)
        if ts is None or ts.state in ("cancelled", "released", "forgotten"):
            raise RunAborted(self._cancelled)


@contextmanager
def part_of_run(exchange: PieceExchange, token: str, strategy: str, label: str
                ) -> Iterator[None]:
    """Run one task's share of direct run ``token``: whatever goes wrong stops the run's
    other tasks on this worker (a lost worker said as such, with ``label`` saying who saw
    it), and the task leaves the run however it ends."""
    try:
        yield
    except WorkerLostError as error:
        error = WorkerLostError(strategy, error.lost, f" ({label} saw it)")
        exchange.abort(token, error)
        raise error from None
    except BaseException as error:
        exchange.abort(token, error)  # the other parts here stop too
        raise
    finally:
        exchange.leave(token)


@contextmanager
def joined_run(token: str, *, expected: int, peers: list[str], strategy: str,
               label: str, cancelled: str, registered_by: str) -> Iterator[JoinedRun]:
    """Take part in direct run ``token`` from inside a task on a worker.

    Parameters
    ----------
    token
        The run's token.
    expected
        Tasks of this run hosted on this worker.
    peers
        The run's workers (their connections are opened once per pair).
    strategy
        Names the run in errors (``"model"``, ``"hybrid"``, ``"training"``).
    label
        Who this task is, ``{label} on {address}`` saying who saw a worker leave.
    cancelled
        The :exc:`~.exchange.RunAborted` message when this task is cancelled.
    registered_by
        What registers the exchange, for the error when this worker has none.

    Yields
    ------
    JoinedRun
        The exchange, the run's mailbox, this worker's address and the cancellation check.
    """
    worker = get_worker()
    exchange: PieceExchange | None = worker.extensions.get(EXTENSION)
    if exchange is None:
        raise RuntimeError(f"this worker has no sdnn exchange plugin; {registered_by}")
    task = thread_state.key
    secede()  # the run's tasks sharing this worker must run at the same time
    run = exchange.join(token, expected=expected, peers=peers, strategy=strategy)
    here = worker.address
    joined = JoinedRun(exchange, run, here, worker, task, cancelled)
    with part_of_run(exchange, token, strategy, f"{label} on {here}"):
        yield joined
