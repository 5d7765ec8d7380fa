"""The kernel's schedule: how a block's chunks walk the layers, apart from the maths.

Which rows go in which chunk, how far chunks run alone (depth first) before their
survivors are repacked into full ones, when chunks are repacked as rows die, and whether
a chunk's step is dense or sparse. :mod:`.forward` drives real chunks (:class:`~.chunks.Chunk`)
with it, and the projection (:mod:`sdnn_dask.projection.kernel_work`) drives chunks of
row ids and counts with it, to count the kernel's work without running it: both follow
one schedule, so the work counted cannot drift from the work done.

The schedule decides; a :class:`ChunkActions` acts (steps a chunk, repacks chunks, lets
one go), on whatever a chunk is, as long as it has ``live``, its row ids in order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from .steps import SETUP_ROWS


class RowChunk(Protocol):
    """Anything the schedule can walk: a chunk with its live row ids."""

    live: np.ndarray


C = TypeVar("C", bound=RowChunk)

#: What a chunk list's caller may do between a layer's steps and its repack: given the
#: layer (0-based), the live rows it took and the live chunks it left, the chunks to go on
#: with (the kernel merges identical rows there: :mod:`.dedup`).
Between = Callable[[int, int, list], list]


class ChunkActions(Protocol[C]):
    """What the schedule asks of the chunks it walks."""

    def advance(self, chunk: C, k: int) -> None:
        """Run layer ``k`` (0-based) on ``chunk``, dropping the rows that die."""

    def repack(self, chunks: list[C]) -> list[C]:
        """The rows of ``chunks`` as full chunks (:attr:`ChunkSchedule.chunk_rows`, the
        last may be short), in order of their ids."""

    def drop(self, chunk: C) -> None:
        """``chunk`` lost all its rows in its depth-first run; it is not used again."""

    def set_aside(self, chunk: C) -> None:
        """``chunk`` is a part-empty tile left at the end of the depth-first runs: it
        waits, compact (the kernel makes it sparse), until the blocks join."""


def live_rows(chunks: Sequence[RowChunk]) -> int:
    """Live rows of ``chunks`` together."""
    return sum(len(c.live) for c in chunks)


@dataclass(frozen=True)
class ChunkSchedule:
    """The kernel's chunk schedule for one network and one set of kernel settings.

    Parameters
    ----------
    n_layers
        Layers of the network.
    chunk_rows
        Rows of a full chunk (:meth:`~.forward.KernelSettings.chunk_rows`).
    n_neurons
        Neurons per layer, N.
    dense_threshold
        Live-row density above which a chunk's step runs on a dense tile
        (:attr:`~.forward.KernelSettings.dense_threshold`).
    """

    n_layers: int
    chunk_rows: int
    n_neurons: int
    dense_threshold: float

    def starts(self, n_live: int) -> range:
        """Where each first chunk starts among a block's ``n_live`` nonempty input rows
        (full chunks, the last may be short)."""
        return range(0, n_live, self.chunk_rows)

    def dense_due(self, nnz: float, rows: float, per_chunk: float | None = None) -> bool:
        """Whether a chunk of ``rows`` live rows holding ``nnz`` nonzeros steps dense.

        ``per_chunk`` (default ``rows``) are the rows of each chunk when ``rows`` and
        ``nnz`` are the totals of several equal chunks (the projection's estimate).
        """
        # A dense layer costs ~n_out * 32 loop set-ups whatever the row count, so few rows
        # need a higher density to pay for it (measured crossover: ~5 rows when full).
        per = rows if per_chunk is None else per_chunk
        return nnz >= self.dense_threshold * (1.0 + SETUP_ROWS / per) * self.n_neurons * rows

    def keeps_alone(self, rows: float) -> bool:
        """Whether the first chunk, with ``rows`` live rows, runs another layer alone
        (depth first): until at most a quarter of its tile is live."""
        return 4 * rows > self.chunk_rows

    def needed(self, rows: float) -> int:
        """Full chunks that ``rows`` live rows need."""
        return math.ceil(rows / self.chunk_rows)

    def repack_due(self, n_chunks: int, rows: float) -> bool:
        """Whether ``n_chunks`` chunks holding ``rows`` live rows are repacked: when they
        fill half their tiles or less."""
        return n_chunks > 1 and n_chunks >= 2 * self.needed(rows)

    def depth_first(self, chunks: list[C], actions: ChunkActions[C]) -> tuple[int, list[C]]:
        """A block's early layers: each of its first ``chunks`` alone, depth first.

        The first chunk runs while :meth:`keeps_alone` says so; every other chunk runs
        the same layers. Survivors are repacked into full chunks as they come; the
        part-empty tiles left over are set aside. Returns the layers run (the next one,
        0-based) and the chunks left, full ones first.
        """
        early = 0
        packed: list[C] = []
        pending: list[C] = []
        for i, chunk in enumerate(chunks):
            k = 0
            while k < self.n_layers and (k < early if i else self.keeps_alone(len(chunk.live))):
                actions.advance(chunk, k)
                k += 1
            if i == 0:
                early = k
            if len(chunk.live):
                pending.append(chunk)
            else:
                actions.drop(chunk)
            if live_rows(pending) >= self.chunk_rows:
                *full, last = actions.repack(pending)
                packed += full
                pending = [last] if len(last.live) < self.chunk_rows else []
                if not pending:
                    packed.append(last)
        for chunk in pending:
            actions.set_aside(chunk)
        return early, packed + pending

    def layer(self, chunks: list[C], k: int, actions: ChunkActions[C],
              joining: Sequence[C] = (), between: Between | None = None) -> list[C]:
        """Layer ``k`` (0-based) on every chunk, after their depth-first runs.

        ``joining`` are the chunks of blocks whose depth-first runs stopped at ``k``:
        their part-empty tiles are repacked into full ones and they join ``chunks``.
        Chunks left empty go; ``between`` may change the rest (see :data:`Between`);
        then the chunks are repacked if half empty. Returns the chunks left.
        """
        if joining:
            partial = [c for c in joining if len(c.live) < self.chunk_rows]
            if len(partial) > 1:  # set aside by each block (one or two each, sparse)
                joining = ([c for c in joining if len(c.live) == self.chunk_rows]
                           + actions.repack(partial))
            chunks = chunks + list(joining)
        rows_in = live_rows(chunks)
        for chunk in chunks:
            actions.advance(chunk, k)
        chunks = [c for c in chunks if len(c.live)]
        if between is not None:
            chunks = between(k, rows_in, chunks)
        if self.repack_due(len(chunks), live_rows(chunks)):
            chunks = actions.repack(chunks)
        return chunks
