"""The client's side of a persistent direct run: feed its tasks, wait for their replies.

A persistent run (a training loop: one long-running task per slot for many steps) is
started once, as ordinary tasks. From then on the client talks to the run's tasks on each
worker directly, not through the scheduler: :func:`feed_run` calls every worker's
:data:`~.exchange.FEED_OP` handler (on the client's own connection pool, so TLS and the
cluster's credentials apply) with the items for the tasks hosted there, and each handler
answers once those tasks have replied. The calls to the workers run side by side on the
client's event loop, while the calling thread watches the run (``watch``, every ``poll``
seconds: a lost worker, a failed or cancelled task), so a run that cannot answer raises
promptly instead of leaving the caller waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

from distributed import Client
from distributed.protocol import to_serialize

from .exchange import FEED_OP, unpack

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
