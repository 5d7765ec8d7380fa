"""Keeping the data a run relies on where its tasks run, before the clock starts.

Dask's active memory manager (on by default) drops the extra replicas of any key no task
is waiting for, every 2 seconds: weights broadcast to every worker at set-up are down to
one copy by the next run, and the first task on every other worker would then fetch them
inside the timed run (measured: 0.16-0.37 s of 0.5-0.9 s data-parallel runs). Executors
call :func:`keep_on` before each run; during the run the waiting tasks keep the replicas
(the manager never drops a copy a processing task needs).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future as ConcurrentFuture
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from dask.sizeof import sizeof
from distributed import Client, Future
from distributed.comm.core import CommClosedError

from ..core.kernels import BlockState
from ..core.network import Network
from .faults import connected


@sizeof.register(Network)
def _sizeof_network(network: Network) -> int:  # Dask's memory accounting (was ~56 bytes)
    matrices = list(network.layers) + list(network._transposed or [])
    total = sum(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes for m in matrices)
    total += sum(o.nbytes for o in network._output_order or [])
    return int(total + network.bias.nbytes)


@sizeof.register(BlockState)
def _sizeof_block_state(state: BlockState) -> int:  # a started block kept on its worker
    total = 0
    for chunk in state.chunks:
        total += sum(b.nbytes for b in chunk._buffers or [])
        if chunk.csr is not None:
            total += chunk.csr.data.nbytes + chunk.csr.indices.nbytes + chunk.csr.indptr.nbytes
    return int(total + state.stats.nbytes)


def keep_on(client: Client, future: Future, workers: Iterable[str], *,
            poll: float = 0.1) -> int:
    """Copy ``future``'s data to those of ``workers`` that lack it; returns how many did.

    The copy is ``client.replicate``'s (a worker-to-worker gather, outside the workers'
    transfer logs, so a run's own fetches stay apart), in a thread the client watches:
    the scheduler's side of a replicate keeps the workers it started with, so one killed
    just before (not yet noticed) is retried in a loop that never ends (seen in CI: 4
    minutes of "failed during replication" until the test's timeout). Every ``poll``
    seconds the client checks that the workers are still connected.

    Raises
    ------
    CommClosedError
        If one of ``workers`` left meanwhile, or before the scheduler took the copy (its
        replicate then names the worker it no longer knows): an executor's
        :func:`~.faults.place_retrying` then places its data again on the workers left;
        the abandoned replicate ends with the cluster.
    RuntimeError
        If a worker still lacks it afterwards.
    """
    workers = sorted(set(workers))
    held = set(client.who_has([future]).get(future.key, ()))
    missing = [w for w in workers if w not in held]
    if missing:
        done: ConcurrentFuture = ConcurrentFuture()

        def copy() -> None:
            try:
                client.replicate([future], n=len(workers), workers=workers)
                done.set_result(None)
            except BaseException as error:  # handed to the caller's thread
                done.set_exception(error)

        # a daemon thread: one stuck in an abandoned replicate must not hold the exit
        threading.Thread(target=copy, name="sdnn-keep-on", daemon=True).start()
        while True:
            try:
                done.result(timeout=poll)
                break
            except KeyError as error:  # the scheduler already removed a worker named
                if error.args and error.args[0] in missing:
                    raise CommClosedError(f"worker {error.args[0]} left before "
                                          f"{future.key} was copied to it") from None
                raise
            except FutureTimeout:
                lost = sorted(set(missing) - connected(client))
                if lost:
                    raise CommClosedError(f"workers {lost} left while {future.key} was "
                                          "copied to them") from None
        held = set(client.who_has([future]).get(future.key, ()))
        still = [w for w in workers if w not in held]
        if still:
            raise RuntimeError(f"could not copy {future.key} to workers {still}")
    return len(missing)


def slot_index(group: Any, part: Any, parts: int, workers: int) -> Any:
    """Which of ``workers`` runs part ``part`` of row group ``group`` (of ``parts`` parts):
    ``(group * parts + part) % workers``, the one rule of model-parallel inference, the
    hybrid, their trainers and the projection. Groups fill the workers part by part, so
    with ``workers == parts`` every group's parts are spread alike. Works elementwise on
    arrays."""
    return (group * parts + part) % workers


def slot_routes(workers: Sequence[str], groups: int, parts: int) -> list[list[str]]:
    """``route[g][p]``: the worker of part ``p`` of row group ``g`` (:func:`slot_index`)."""
    return [[workers[slot_index(g, p, parts, len(workers))] for p in range(parts)]
            for g in range(groups)]
