"""A direct run's lifecycle: its tasks join, are watched, fed, aborted and gathered.

A direct run is a set of long-running tasks (an inference part,
:func:`sdnn_dask.parallel.model_direct.run_part`; a training slot,
:func:`sdnn_dask.training.slot_task.run_slot`) that exchange pieces worker to worker
through the :class:`~.exchange.PieceExchange`, the scheduler only placing them. This module
is both sides of such a run, whatever its tasks compute:

* the client's: register the exchange and open every pair's connection before the clock
  starts (:func:`ensure_exchange`, :func:`connect_peers`), feed a persistent run's tasks
  and wait for their replies (:func:`feed_run`), watch the run (:func:`check_run`: a lost
  worker, a failed or cancelled task), abort it on every worker (:func:`stop_run`) and
  gather its results (:func:`gather_direct`);
* a task's, on its worker (:func:`joined_run`):

  1. find this worker's :class:`~.exchange.PieceExchange` (a clear error when the
     executor that registers it was not used);
  2. secede from the worker's thread pool, so the run's tasks that share a worker run
     side by side instead of waiting for a thread;
  3. join run ``token`` (its mailbox on this worker, expecting ``expected`` tasks here);
  4. while it runs, check that its own task is still wanted (:meth:`JoinedRun.alive`: a
     cancelled task stops within a poll);
  5. however it ends, leave the run; if it fails, abort the run's other tasks on this
     worker first, a lost worker said as such with the task's label (:func:`part_of_run`).

Stopping: a task whose task was cancelled (``client.cancel``, the client gone) notices
within :data:`POLL_SECONDS`; a task that fails aborts its worker's share of the run; the
client aborts the run on every worker when a worker is lost, a task fails or the caller is
interrupted, so no task is left waiting for a piece.

A persistent run (a training loop: one long-running task per slot for many steps) is
started once, as ordinary tasks; from then on the client talks to its tasks on each worker
directly, not through the scheduler: :func:`feed_run` calls every worker's
:data:`~.exchange.FEED_OP` handler (on the client's own connection pool, so TLS and the
cluster's credentials apply) with the items for the tasks hosted there, and each handler
answers once those tasks have replied, while the calling thread watches the run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from distributed import Client, Future, get_worker, secede, wait
from distributed.protocol import to_serialize
from distributed.worker import thread_state

from ... import config
from ..faults import WorkerLostError, connected
from .exchange import EXTENSION, FEED_OP, PieceExchange, RunAborted, unpack
from .wire import crosses_network

#: How often a waiting part checks that its task is still wanted, and the client that
#: the run's workers are still connected.
POLL_SECONDS = 0.1

#: Seconds a part waits with no piece arriving before giving up (a last resort: lost
#: workers and cancellations are noticed within ``POLL_SECONDS``).
PIECE_TIMEOUT = 600.0



def ensure_exchange(client: Client) -> None:
    """Register :class:`~.exchange.PieceExchange` on the workers that lack it (and, with
    the scheduler, on every worker that joins later)."""
    has = client.run(lambda dask_worker: EXTENSION in dask_worker.extensions)
    if not all(has.values()):
        client.register_plugin(PieceExchange(), name=EXTENSION)


async def _connect_peers(dask_worker: Any, peers: list[str]) -> int:
    return await dask_worker.extensions[EXTENSION].connect_peers(peers)


def _wire_address(dask_worker: Any) -> Any:
    return dask_worker.extensions[EXTENSION].wire_address()


def _know_wires(dask_worker: Any, table: dict[str, Any]) -> int:
    return dask_worker.extensions[EXTENSION].know_wires(table)


#: The clusters (by scheduler id) already warned that their wire's frames cross the
#: network unencrypted: once per cluster, not once per run.
_WARNED_CLEAR: set[str] = set()
_WARNED_LOCK = threading.Lock()


def connect_peers(client: Client, workers: list[str], *, wire: bool | None = None) -> None:
    """Open every worker pair's connection before the clock starts; with ``wire``
    (default ``sdnn.transport.wire``), start the workers' :class:`~.wire.Wire` and hand
    out their addresses, so pieces between worker processes of a ``tcp://`` or
    ``tls://`` cluster go by it (under TLS, with the cluster's credentials). Warns, once
    per cluster, if a plain ``tcp://`` wire listens beyond loopback: its frames are then
    authenticated, not encrypted."""
    client.run(_connect_peers, peers=workers, workers=workers)
    if wire is None:
        wire = bool(config.get("transport.wire", True))
    if wire and len(workers) > 1:
        table = client.run(_wire_address, workers=workers)
        exposed = sorted({w[0] for a, w in table.items()
                          if w and a.startswith("tcp://") and crosses_network(w[0])})
        if exposed and _first_warning(client):
            warnings.warn(f"the workers' wire listens on {', '.join(exposed)}: its frames "
                          "cross the network authenticated (HMAC) but not encrypted, as "
                          "this tcp:// cluster's comms do; a tls:// cluster encrypts both "
                          "(said once per cluster)", UserWarning, stacklevel=2)
        client.run(_know_wires, table=table, workers=workers)


def _first_warning(client: Client) -> bool:
    """Whether this client's cluster has not been warned yet (and now is)."""
    # the scheduler's id, not its address: a later cluster may take the same port
    info = client.scheduler_info()
    key = str(info.get("id") or info.get("address") or id(client))
    with _WARNED_LOCK:
        if key in _WARNED_CLEAR:
            return False
        _WARNED_CLEAR.add(key)
        return True


def _abort(dask_worker: Any, token: str, strategy: str, lost: list[str], reason: str) -> bool:
    exchange = dask_worker.extensions.get(EXTENSION)
    if exchange is None:
        return False
    error: BaseException = (WorkerLostError(strategy, lost) if lost
                            else RunAborted(f"{strategy} run {token} aborted: {reason}"))
    return exchange.abort(token, error)


def abort_run(client: Client, token: str, *, strategy: str, lost: list[str] = (),
              reason: str = "") -> None:
    """Stop run ``token`` on every connected worker and drop its state there."""
    try:
        client.run(_abort, token=token, strategy=strategy, lost=list(lost), reason=reason,
                   workers=sorted(connected(client)), on_error="ignore")
    except Exception:  # best effort: the tasks' own checks still stop them
        pass


def _active(dask_worker: Any) -> list[str]:
    exchange = dask_worker.extensions.get(EXTENSION)
    return exchange.active() if exchange is not None else []


def active_runs(client: Client) -> dict[str, list[str]]:
    """Worker -> tokens of the direct runs with state there (empty when all is clean)."""
    return client.run(_active)


def check_run(client: Client, futures: list[Future], workers: set[str], *, token: str,
              strategy: str, poll: float = POLL_SECONDS) -> bool:
    """Raise if direct run ``token`` cannot finish; else whether its tasks are all done.

    A worker of the run gone raises :exc:`WorkerLostError` naming it; a task that failed,
    its own error; the run's tasks cancelled with no worker lost,
    :exc:`~.exchange.RunAborted`.
    """
    lost = workers - connected(client)
    if not lost and any(f.cancelled() for f in futures):
        time.sleep(poll)  # a worker's loss may cancel first and report after
        lost = workers - connected(client)
        if not lost:
            raise RunAborted(f"{strategy} run {token} was cancelled: its part tasks "
                             "were cancelled with no worker lost")
    if lost:
        raise WorkerLostError(strategy, lost)
    failed = [f for f in futures if f.status == "error"]
    if failed:
        failed[0].result()  # raises the part's own error
    return all(f.done() for f in futures)


def stop_run(client: Client, futures: list[Future], token: str, strategy: str,
             error: BaseException) -> None:
    """Abort run ``token`` on every worker (``error``'s lost workers named) and cancel
    its tasks."""
    lost = list(getattr(error, "lost", []))
    abort_run(client, token, strategy=strategy, lost=lost, reason=repr(error))
    client.cancel(futures)


def gather_direct(client: Client, futures: list[Future], workers: set[str], *, token: str,
                  strategy: str, poll: float = POLL_SECONDS, gather: bool = True
                  ) -> list[Any]:
    """Wait for a direct run's part tasks, stopping the whole run on any trouble.

    A worker of the run leaving, a part failing, the run's tasks being cancelled, or the
    caller being interrupted (``KeyboardInterrupt``) aborts the run on every worker and
    cancels its tasks; then :exc:`WorkerLostError` (naming the lost workers), the part's
    own error, :exc:`~.exchange.RunAborted` or the interruption is raised
    (:func:`check_run`). With ``gather=False`` the futures, done, stay where they are
    (a row pass's slabs, for the next pass on the same workers).
    """
    try:
        while True:
            try:
                with client.as_current():
                    wait(futures, timeout=poll)
            except (TimeoutError, CancelledError):
                pass
            if check_run(client, futures, workers, token=token, strategy=strategy,
                         poll=poll):
                return client.gather(futures) if gather else futures
    except BaseException as error:
        stop_run(client, futures, token, strategy, error)
        raise


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


#: Seconds :func:`feed_run` keeps watching after a worker said the run failed there,
#: for ``watch`` to name the cause (a lost worker, the task's own error).
SETTLE_SECONDS = 5.0


class FeedFailed(RuntimeError):
    """A worker answered a feed with a failed or ended run, and ``watch`` found no cause."""


def feed_run(client: Client, token: str,
             by_worker: dict[str, tuple[list[tuple[int, int, int, Any]],
                                        list[tuple[int, int, int]]]],
             *, watch: Callable[[], None], poll: float) -> dict[str, list[Any]]:
    """File items in run ``token``'s boxes on each worker and wait for the replies.

    Parameters
    ----------
    by_worker
        Worker address -> (items ``(group, layer, part, payload)`` to file there, reply
        boxes ``(group, layer, part)`` to wait for there).
    watch
        Called every ``poll`` seconds while waiting; raises when the run cannot answer
        (a worker of the run lost, a task failed or was cancelled).
    poll
        Seconds between calls of ``watch``.

    Returns
    -------
    dict
        Worker address -> the replies there, in the order asked.
    """
    async def call(address: str, items: list, replies: list) -> Any:
        wrapped = [(g, layer, p, to_serialize(payload)) for g, layer, p, payload in items]
        handler = getattr(client.rpc(address), FEED_OP)
        return await handler(token=token, items=wrapped, replies=[list(r) for r in replies])

    async def every() -> list[Any]:
        return await asyncio.gather(*(call(a, *job) for a, job in by_worker.items()),
                                    return_exceptions=True)

    pending = asyncio.run_coroutine_threadsafe(every(), client.loop.asyncio_loop)
    try:
        while True:
            try:
                answers = pending.result(timeout=poll)
                break
            except concurrent.futures.TimeoutError:
                watch()
    except BaseException:
        pending.cancel()
        raise
    out: dict[str, list[Any]] = {}
    trouble: list[str] = []
    for address, answer in zip(by_worker, answers, strict=True):
        if isinstance(answer, BaseException):
            trouble.append(f"{address}: {answer!r}")
        elif answer.get("status") != "ok":
            trouble.append(f"{address}: {answer.get('error')}")
        else:
            out[address] = [unpack(r) for r in answer["replies"]]
    if trouble:
        # the cause (a worker gone, a task's error) reaches the scheduler a moment later
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            watch()
            time.sleep(poll)
        raise FeedFailed(f"run {token} could not take its feed: " + "; ".join(trouble))
    return out
