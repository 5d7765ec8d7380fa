"""Workers lost mid-run: a clear error instead of Dask's cancellations, or a hang.

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
from distributed.comm import get_address_host
from distributed.comm.core import CommClosedError

T = TypeVar("T")

#: Times an executor places its data again when a worker died while it was doing so.
PLACEMENT_RETRIES = 3

#: Seconds between checks that the workers a pinned run is placed on are still connected.
POLL_SECONDS = 1.0


class WorkerLostError(RuntimeError):
    """A worker was lost during a run, which was cancelled: nothing of it was returned.

    The message says the worker *died* only when that is known (its process is gone:
    :func:`lost_reasons`), that it *stopped answering* when the scheduler removed it for
    missed heartbeats, and otherwise that it was *lost (died or unreachable)*: a worker cut
    off by a network partition is alive, and looks the same from here as a dead one.

    Attributes
    ----------
    strategy
        ``"data"``, ``"model"`` or ``"hybrid"``.
    lost
        Addresses of the run's workers no longer connected (may be empty when the worker
        came back under the same address: then only the lost data tells).
    reasons
        What is known of each lost worker: ``"died"``, ``"unanswering"`` or ``"lost"``
        (unknown), see :func:`lost_reasons`.
    """

    def __init__(self, strategy: str, lost: Iterable[str], detail: str = "", *,
                 reasons: dict[str, str] | None = None):
        self.strategy = strategy
        self.lost = sorted(lost)
        if reasons is None:  # what the worker processes seen on this machine tell
            reasons = lost_reasons(None, self.lost)
        self.reasons = {w: reasons.get(w, "lost") for w in self.lost}
        known = set(self.reasons.values())
        who = (f"worker {', '.join(self.lost)}" if self.lost
               else "a worker holding part of its data")
        if known == {"died"}:
            what = "died mid-run"
        elif "unanswering" in known:
            what = ("stopped answering mid-run (the scheduler missed its heartbeats: hung "
                    "or cut off from the network)")
        else:
            what = "was lost mid-run (died or unreachable)"
        super().__init__(
            f"{strategy} run aborted: {who} {what}{detail}. Its tasks were cancelled and "
            "nothing was returned or recorded; run it again (the executor places its data on "
            "the workers connected then)"
        )


#: A worker's host and process id, as the scheduler knew them while it was connected.
Identity = tuple[str, int]


#: Identities seen, by worker address: asked of the scheduler once a worker, not each run
#: (a run's gather is timed, and a training step can take milliseconds).
_SEEN: dict[str, Identity] = {}


def identities(client: Client, workers: Iterable[str]) -> dict[str, Identity]:
    """The host and pid of each of ``workers`` (asked of the scheduler the first time an
    address is seen; :func:`connected` does so as well): recorded before a run, so that
    :func:`lost_reasons` can tell afterwards whether a lost worker died."""
    workers = list(workers)
    if any(w not in _SEEN for w in workers):
        try:  # the scheduler's record of each worker (its info has no pid)
            seen = client.run_on_scheduler(_worker_identities)
        except Exception:  # a scheduler gone, or without sdnn_dask: "lost" then
            seen = {}
        if not _is_this_machine(get_address_host(client.scheduler.address)):
            # hosts as another machine sees them ("127.0.0.1" is the scheduler's): the
            # processes cannot be looked at from here
            seen = {w: ("", pid) for w, (_, pid) in seen.items()}
        _SEEN.update(seen)
    return {w: _SEEN[w] for w in workers if w in _SEEN}


def _worker_identities(dask_scheduler: Any) -> dict[str, Identity]:
    """On the scheduler: each connected worker's host and pid."""
    return {address: (str(ws.host), int(ws.pid))
            for address, ws in dask_scheduler.workers.items() if ws.pid}


def lost_reasons(client: Client | None, lost: Iterable[str],
                 known: dict[str, Identity] | None = None) -> dict[str, str]:
    """What is known of why each ``lost`` worker left, for :exc:`WorkerLostError`.

    ``"unanswering"`` when the scheduler removed it for missed heartbeats (its
    ``worker-ttl-timed-out`` event, asked of ``client``: alive but hung or cut off);
    ``"died"`` when its process (``known``, default: the identities :func:`identities`
    recorded), on this machine, no longer runs (a nanny's restart makes a new one);
    ``"lost"`` otherwise: a closed connection alone does not say whether the process died
    or the network failed, and a process on another machine cannot be looked at.
    """
    known = _SEEN if known is None else known
    timed_out: set[str] = set()
    if client is not None:
        try:
            for _, event in client.get_events("scheduler"):
                if isinstance(event, dict) and event.get("action") == "worker-ttl-timed-out":
                    timed_out.update(event.get("workers", ()))
        except (OSError, TimeoutError, asyncio.TimeoutError):  # the scheduler is gone too
            pass
    reasons = {}
    for worker in lost:
        host, pid = known.get(worker, ("", 0))
        if worker in timed_out:
            reasons[worker] = "unanswering"
        elif pid and _is_this_machine(host) and _gone(pid):
            reasons[worker] = "died"
        else:
            reasons[worker] = "lost"
    return reasons


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie its nanny has not reaped yet has)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _is_this_machine(host: str) -> bool:
    """Whether ``host`` (an address the scheduler saw a worker at) is this machine."""
    import socket

    import psutil

    if not host:
        return False
    if host in ("127.0.0.1", "::1", "localhost", socket.gethostname()):
        return True
    return any(a.address == host for addrs in psutil.net_if_addrs().values() for a in addrs)


def connected(client: Client) -> set[str]:
    """Addresses of the workers connected now (a new one's host and pid recorded, for
    :func:`lost_reasons`)."""
    now = set(client.nthreads())
    if not now <= _SEEN.keys():
        identities(client, now)
    return now


def gather_pinned(client: Client, futures: list[Future], workers: Iterable[str], *,
                  strategy: str, poll: float = POLL_SECONDS, gather: bool = True
                  ) -> list[Any]:
    """Gather the results of a run whose tasks are pinned to ``workers``.

    Waits for the futures, checking every ``poll`` seconds that each of ``workers`` is
    still connected: if one left, or a future was cancelled because data it needs died
    with a worker, the run's futures are cancelled and :exc:`WorkerLostError` is raised.
    Errors raised by the tasks themselves propagate unchanged. With ``gather=False`` the
    futures, done, are returned as they are.
    """
    workers = set(workers)
    identities(client, workers)  # before any is lost
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
            raise WorkerLostError(strategy, lost, reasons=lost_reasons(client, lost))
        if all(f.done() for f in futures):
            if not gather:
                failed = [f for f in futures if f.status == "error"]
                if failed:
                    failed[0].result()  # the task's own error
                return futures
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
                    raise WorkerLostError(strategy, lost,
                                          reasons=lost_reasons(client, lost)) from None
            except CancelledError as error:  # a worker was lost after its results were done
                lost = workers - connected(client)
                raise WorkerLostError(strategy, lost,
                                      reasons=lost_reasons(client, lost)) from error


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
