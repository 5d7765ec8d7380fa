"""Workers that die mid-run: a clear error instead of Dask's cancellations, or a hang.

Data a client *scatters* has no recipe, so Dask cannot recompute it: when the only worker
holding a scattered input block, weight slice or slab dies, the scheduler forgets it and
cancels every task that depends on it (:class:`distributed.client.FutureCancelledError`,
"already forgotten"). And a task pinned to a worker (``allow_other_workers=False``) can
never run once that worker's address is gone; a nanny restarts a killed worker under a new
address. :func:`gather_pinned` turns both into a :exc:`WorkerLostError` within a bounded
time; the data-parallel executor instead sends lost blocks again and retries (its tasks are
not pinned).

:func:`prepare_workers` readies workers the executors have not seen yet, such as a worker
its nanny restarted blank, before anything is timed on them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from distributed import Client, Future, wait
from distributed.comm.core import CommClosedError

T = TypeVar("T")

#: Times an executor places its data again when a worker died while it was doing so.
PLACEMENT_RETRIES = 3

#: Seconds between checks that the workers a pinned run is placed on are still connected.
POLL_SECONDS = 1.0


class WorkerLostError(RuntimeError):
    """A worker died during a run, which was cancelled: nothing of it was returned.

    Attributes
    ----------
    strategy
        ``"data"``, ``"model"`` or ``"hybrid"``.
    lost
        Addresses of the run's workers no longer connected (may be empty when the worker
        came back under the same address: then only the lost data tells).
    """

    def __init__(self, strategy: str, lost: Iterable[str], detail: str = ""):
        self.strategy = strategy
        self.lost = sorted(lost)
        who = (f"worker {', '.join(self.lost)}" if self.lost
               else "a worker holding part of its data")
        super().__init__(
            f"{strategy} run aborted: {who} died mid-run{detail}. Its tasks were cancelled and "
            "nothing was returned or recorded; run it again (the executor places its data on "
            "the workers connected then)"
        )


def connected(client: Client) -> set[str]:
    """Addresses of the workers connected now."""
    return set(client.nthreads())


def gather_pinned(client: Client, futures: list[Future], workers: Iterable[str], *,
                  strategy: str, poll: float = POLL_SECONDS) -> list[Any]:
    """Gather the results of a run whose tasks are pinned to ``workers``.

    Waits for the futures, checking every ``poll`` seconds that each of ``workers`` is
    still connected: if one left, or a future was cancelled because data it needs died
    with a worker, the run's futures are cancelled and :exc:`WorkerLostError` is raised.
    Errors raised by the tasks themselves propagate unchanged.
    """
    workers = set(workers)
    while True:
        try:
            with client.as_current():  # wait() looks up the current client
                wait(futures, timeout=poll)
        except (TimeoutError, asyncio.TimeoutError):
            pass
        except CancelledError:  # every future is done, some were cancelled
            pass
        lost = workers - connected(client)
        if lost or any(f.cancelled() for f in futures):
            client.cancel(futures)
            raise WorkerLostError(strategy, lost)
        if all(f.done() for f in futures):
            return _gather_watching(client, futures, workers, strategy=strategy, poll=poll)


def _gather_watching(client: Client, futures: list[Future], workers: set[str], *,
                     strategy: str, poll: float) -> list[Any]:
    """``client.gather(futures)``, checking every ``poll`` seconds that ``workers`` are
    connected: a worker that dies holding a done result would leave a plain gather
    waiting for it for ever (pinned tasks are never recomputed elsewhere)."""
    with ThreadPoolExecutor(1, thread_name_prefix="sdnn-gather") as pool:
        gathering = pool.submit(client.gather, futures)
        while True:
            try:
                return gathering.result(timeout=poll)
            except FutureTimeout:
                lost = workers - connected(client)
                if lost:
                    client.cancel(futures)  # the gather then ends, cancelled
                    raise WorkerLostError(strategy, lost) from None
            except CancelledError as error:  # a worker died after its results were done
                raise WorkerLostError(strategy, workers - connected(client)) from error


def prepare_workers(client: Client, ready: set[str], setup: list[Callable[[], Any]]) -> None:
    """Run every function of ``setup`` on the connected workers not in ``ready`` (and add
    them): a worker restarted by its nanny comes back with none of it done."""
    new = sorted(connected(client) - ready)
    if new:
        for function in setup:
            client.run(function, workers=new)
        ready.update(new)


def place_retrying(client: Client, strategy: str, place: Callable[[], T],
                   reset: Callable[[], None] = lambda: None, *,
                   retries: int = PLACEMENT_RETRIES, pause: float = 0.5) -> T:
    """Run ``place`` (an executor's set-up before the clock: scattering weights, plans and
    blocks), again if a worker died under it.

    A worker killed just before a run leaves the scheduler listing it for a moment:
    scattering to it fails with ``CommClosedError`` (or ``KeyError``, or its data comes
    back cancelled). Then ``reset`` drops what the executor placed, and after ``pause``
    seconds ``place`` runs again on the workers connected then, up to ``retries`` times;
    if it still fails, :exc:`WorkerLostError` names the workers that left. An ``OSError``
    that names a file (a place that cannot be written) while no worker left is raised as
    it is: running again would not help.
    """
    before = connected(client)
    for attempt in range(retries + 1):
        try:
            return place()
        except (CommClosedError, OSError, KeyError, CancelledError) as error:
            left = before - connected(client)
            if isinstance(error, KeyError) and not left:
                raise  # not a lost worker: a real bug
            if _file_error(error) and not left:
                raise  # a file that cannot be read or written (the place, not a worker)
            if attempt == retries:
                raise WorkerLostError(strategy, left, f" (while placing its data before the "
                                      f"run, {retries} retries: {error!r})") from error
            time.sleep(pause)
            reset()
    raise AssertionError("unreachable")


def _file_error(error: BaseException) -> bool:
    """An ``OSError`` about a file (it names one: a read-only folder, a full disk), not
    about a connection to a worker."""
    return (isinstance(error, OSError) and not isinstance(error, CommClosedError)
            and getattr(error, "filename", None) is not None)
