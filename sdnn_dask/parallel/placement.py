"""Keeping the data a run relies on where its tasks run, before the clock starts.

Dask's active memory manager (on by default) drops the extra replicas of any key no task
is waiting for, every 2 seconds: weights broadcast to every worker at set-up are down to
one copy by the next run, and the first task on every other worker would then fetch them
inside the timed run (measured: 0.16-0.37 s of 0.5-0.9 s data-parallel runs). Executors
call :func:`keep_on` before each run; during the run the waiting tasks keep the replicas
(the manager never drops a copy a processing task needs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from dask.sizeof import sizeof
from distributed import Client, Future

from ..core.kernels import BlockState
from ..core.network import Network


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


def keep_on(client: Client, future: Future, workers: Iterable[str]) -> int:
    """Copy ``future``'s data to those of ``workers`` that lack it; returns how many did.

    Raises
    ------
    RuntimeError
        If a worker still lacks it afterwards.
    """
    workers = sorted(set(workers))
    held = set(client.who_has([future]).get(future.key, ()))
    missing = [w for w in workers if w not in held]
    if missing:
        client.replicate([future], n=len(workers), workers=workers)
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
