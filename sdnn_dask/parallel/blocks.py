"""The tasks data parallelism runs on a worker: blocks of rows through every layer.

Executed on the workers by :class:`~.data_executor.DataParallelExecutor` (module-level functions, so
Dask sends them by reference): one block alone (:func:`run_block`); a worker's pinned blocks
merged (:func:`run_blocks`, from :func:`start_one` and :func:`finish_here`); dynamic
placement's loop over a scheduler queue (:func:`drain_queue`); a streamed network's blocks
layer by layer (:func:`stream_here`). Each returns :func:`block_result` dicts.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import scipy.sparse as sp
from distributed import Queue, get_worker

from ..core.kernels import (
    BlockOutput,
    BlockState,
    EarlyPasses,
    KernelSettings,
    finish_blocks,
    forward_block,
    start_block,
    stream_blocks,
    stream_early,
    stream_finish,
)
from ..core.network import Network, as_csr32
from ..data.streaming import StreamedNetwork


def where() -> str:
    """This worker's address (``"local"`` outside a worker)."""
    try:
        return get_worker().address
    except ValueError:  # called outside a worker (e.g. in a test)
        return "local"


def block_result(out: BlockOutput, block_id: int, compute: float,
                 worker: str | None = None) -> dict[str, Any]:
    """What a block's task returns: its survivors, their values, its seconds, its trace,
    and the worker that ran it (default: this one)."""
    return {"block": block_id, "worker": worker or where(), "n_rows": out.n_rows,
            "rows": out.rows, "values": out.values, "source": out.source,
            "compute_s": compute, "trace": out.trace}


def run_block(network: Network, block: Any, block_id: int,
              kernel: KernelSettings | None = None) -> dict[str, Any]:
    """Run one block of rows through the network (executed on a worker).

    ``block`` is a scipy sparse matrix or a pydata/sparse array; ``kernel`` the settings
    resolved on the client (default: this process's ``sdnn.kernel.*``). Returns the
    surviving rows (block-local ids), their activations, the compute time measured here
    and the trace.
    """
    csr = as_block_csr(block)
    kernel = kernel or KernelSettings.resolve()
    start = time.perf_counter()
    out = forward_block(network, csr, settings=kernel)
    return block_result(out, block_id, time.perf_counter() - start)


def as_block_csr(block: Any) -> sp.csr_matrix:
    """A block of rows (scipy or pydata/sparse) as canonical float32 CSR."""
    return as_csr32(block.tocsr() if hasattr(block, "tocsr") else block)


def start_one(network: Network, block: Any, kernel: KernelSettings) -> tuple[BlockState, float]:
    """Phase 1 of one block (:func:`~sdnn_dask.core.kernels.start_block`), on a worker: the
    state stays there for :func:`finish_here`. Returns it and its seconds."""
    csr = as_block_csr(block)
    start = time.perf_counter()
    state = start_block(network, csr, kernel)
    return state, time.perf_counter() - start


def finish_here(network: Network, block_ids: list[int], kernel: KernelSettings,
                *started: tuple[BlockState, float]) -> list[dict[str, Any]]:
    """The rest of the layers of the blocks this worker started, their survivors merged
    into full tiles (:func:`~sdnn_dask.core.kernels.finish_blocks`).

    A block's ``compute_s`` is its phase 1 plus its share of the merged phase 2: the
    phase's seconds split by the blocks' own layer seconds in it.
    """
    states = [s for s, _ in started]
    start = time.perf_counter()
    outs = finish_blocks(network, states, kernel)
    merged = time.perf_counter() - start
    late = np.array([max(0.0, o.trace["seconds"].sum() - s.seconds)
                     for o, s in zip(outs, states, strict=True)])
    share = late / late.sum() if late.sum() > 0 else np.full(len(late), 1 / max(1, len(late)))
    return [block_result(out, b, first + merged * part)
            for out, b, (_, first), part in zip(outs, block_ids, started, share, strict=True)]


def drain_queue(network: Network, queue: str, kernel: KernelSettings, first: int,
                *blocks: Any) -> list[dict[str, Any]]:
    """Dynamic placement's worker loop (executed on every worker of the run): run block
    ``first``'s early layers, then take the next block id from the scheduler's queue
    ``queue``, and so on until a stop (``-1``); then finish the blocks taken here, their
    survivors merged (:func:`finish_here`). Every worker holds every block, so nothing
    moves but ids.

    The next id is asked for while the current block runs, so a worker never waits for
    the scheduler: it has claimed one block ahead of the one it runs. The first block is
    given, not taken, so that no worker claims a second before the others have a first
    (with as many blocks as workers, one would otherwise run two while another idles).
    """
    ids = Queue(queue)
    taken: list[int] = []
    started: list[tuple[BlockState, float]] = []
    with ThreadPoolExecutor(1, thread_name_prefix="sdnn-next-block") as asker:
        b = first
        while b >= 0:
            ahead = asker.submit(ids.get)  # while block b runs
            taken.append(b)
            started.append(start_one(network, blocks[b], kernel))
            b = int(ahead.result())
    return finish_here(network, taken, kernel, *started) if taken else []


def run_blocks(network: Network, block_ids: list[int], kernel: KernelSettings,
               *blocks: Any) -> list[dict[str, Any]]:
    """Run the blocks one worker holds (executed there): each alone through its early
    layers, then their survivors merged into full tiles (as :func:`finish_here`)."""
    return finish_here(network, block_ids, kernel,
                       *(start_one(network, block, kernel) for block in blocks))


def stream_early_here(network: StreamedNetwork, block_ids: list[int], kernel: KernelSettings,
                      *blocks: Any) -> tuple[list[int], EarlyPasses, str]:
    """The early layers of the blocks one worker holds through a streamed network
    (executed there; :func:`~sdnn_dask.core.kernels.stream_early`): their ids, their
    survivors, for :func:`stream_join_here` to take on with every worker's together, and
    this worker."""
    return block_ids, stream_early(network, [as_block_csr(b) for b in blocks], kernel), \
        where()


def stream_join_here(network: StreamedNetwork, kernel: KernelSettings,
                     *earlies: tuple[list[int], EarlyPasses, str]) -> list[dict[str, Any]]:
    """Every worker's survivors through the rest of a streamed network together, on this
    worker (:func:`~sdnn_dask.core.kernels.stream_finish`): the deep layers, where one or
    a few distinct rows are left, read and stepped once instead of once a worker. A
    block's ``compute_s`` is its worker's early seconds split by the blocks' own early
    layer seconds, plus its share of the joined seconds, split by its own; its worker is
    the one that ran its early layers."""
    start = time.perf_counter()
    # identical rows' values sent once: the client expands them (at 65536-1920 x 60000,
    # 2416 copies of one 65536-nonzero row: 1.3 GB to send otherwise)
    outs = stream_finish(network, [early for _, early, _ in earlies], kernel, expand=False)
    joined = time.perf_counter() - start
    everyone = [o for per_worker in outs for o in per_worker]
    late = np.array([o.trace["seconds"].sum() for o in everyone])
    results, at, total = [], 0, float(late.sum())
    for (block_ids, early, worker), per_worker in zip(earlies, outs, strict=True):
        own = late[at : at + len(per_worker)]
        share = own / own.sum() if own.sum() > 0 else np.full(len(own), 1 / max(1, len(own)))
        for out, b, part, mine in zip(per_worker, block_ids, share, own, strict=True):
            late_part = joined * mine / total if total > 0 else joined / max(1, len(late))
            results.append(block_result(out, b, early.seconds * part + late_part, worker))
        at += len(per_worker)
    return results


def stream_here(network: StreamedNetwork, block_ids: list[int], kernel: KernelSettings,
                *blocks: Any) -> list[dict[str, Any]]:
    """Run the blocks one worker holds through a streamed network (executed there): all
    their rows through a layer, then the next (:func:`~sdnn_dask.core.kernels.stream_blocks`),
    so the worker reads each layer once. A block's ``compute_s`` is its share of the whole,
    split by its own layer seconds."""
    csrs = [as_block_csr(block) for block in blocks]
    start = time.perf_counter()
    outs = stream_blocks(network, csrs, kernel)
    total = time.perf_counter() - start
    own = np.array([o.trace["seconds"].sum() for o in outs])
    share = own / own.sum() if own.sum() > 0 else np.full(len(own), 1 / max(1, len(own)))
    return [block_result(out, b, total * part)
            for out, b, part in zip(outs, block_ids, share, strict=True)]
