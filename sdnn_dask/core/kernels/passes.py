"""Rows in passes through a network streamed from a store, the deep layers read once.

A streamed network (:class:`~sdnn_dask.data.streaming.StreamedNetwork`) yields its layers
once, in order, so its rows go through it together, layer by layer; all of them through
the early layers, where they are many and dense, would not fit in memory, so they go in
passes of at most ``pass_rows`` rows (:func:`default_pass_rows`). Each pass runs its rows
only until few are left (:func:`~.forward.run_early_layers`: at most ``pass_rows`` over
the number of passes); then the survivors of every pass go on together, and the deep
layers, where identical survivors are computed once and a layer costs little more than
reading it, are read once instead of once a pass. The passes joined hold at most
``pass_rows`` rows together; a pass that would take them past it runs to the end alone,
as every pass did before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ... import config
from ..csr import as_csr32, row_slice, stack_rows
from ..network import Network
from .forward import (
    TRACE_COLUMNS,
    BlockOutput,
    BlockState,
    KernelSettings,
    begin_block,
    finish_blocks,
    run_early_layers,
)


def stream_blocks(network: Network, blocks: list[sp.csr_matrix | sp.sparray],
                  settings: KernelSettings | None = None, *,
                  pass_rows: int | None = None) -> list[BlockOutput]:
    """Run blocks through ``network`` layer by layer: every block's rows through layer 1,
    then all through layer 2, and so on, so each layer is read once.

    The way to run a network streamed from a store
    (:class:`~sdnn_dask.data.streaming.StreamedNetwork`), which yields its layers once, in
    order; on a network in memory it equals :func:`forward_block` on each block row for
    row (to float rounding: a chunk may take the other path), and is slower, since early
    layers then hold every chunk's tile at once instead of one chunk's at a time.

    Every row's activations are held through a layer, so a streamed network runs the rows
    in passes of at most ``pass_rows`` (default :func:`default_pass_rows`: about
    ``sdnn.store.pass-bytes`` of activations), each only until at most ``pass_rows`` over
    the number of passes of its rows are left (:func:`~.forward.run_early_layers`); then
    the passes' survivors go on together, as long as they hold at most ``pass_rows`` rows
    together (a pass whose rows stopped falling earlier joins too); a pass that would
    take them past it runs to the end alone. The outputs are the same as in one pass.
    :func:`stream_early` and :func:`stream_finish` are its two halves, for survivors of
    several processes to go on together.
    """
    settings = settings or KernelSettings.resolve()
    if pass_rows is None:
        pass_rows = default_pass_rows(network)
    passes = _passes([int(b.shape[0]) for b in blocks], pass_rows)
    if len(passes) <= 1:
        return finish_blocks(network, [begin_block(network, b, settings) for b in blocks],
                             settings)
    early = stream_early(network, blocks, settings, pass_rows=pass_rows)
    return stream_finish(network, [early], settings)[0]


@dataclass
class EarlyPasses:
    """Blocks part way through a streamed network (:func:`stream_early`).

    Attributes
    ----------
    sizes
        Rows of each block.
    together
        The passes' survivors to go on together (:func:`stream_finish`), one state per
        block's range of rows in a pass.
    ranges
        ``(block, start, stop)``: the rows of each of ``together``.
    alone
        ``(block, start, output)`` of the passes that ran to the end alone.
    seconds
        Seconds :func:`stream_early` took.
    """

    sizes: list[int]
    together: list[BlockState]
    ranges: list[tuple[int, int, int]]
    alone: list[tuple[int, int, BlockOutput]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        """Live rows of :attr:`together`."""
        return sum(len(c.live) for s in self.together for c in s.chunks)


def stream_early(network: Network, blocks: list[sp.csr_matrix | sp.sparray],
                 settings: KernelSettings | None = None, *,
                 pass_rows: int | None = None) -> EarlyPasses:
    """The first half of :func:`stream_blocks`: each pass of rows through its early
    layers, the survivors kept for :func:`stream_finish` (a pass that would take them past
    ``pass_rows`` rows runs to the end here, alone). Each pass runs until at most a 16th
    of its rows are left (or ``pass_rows`` over the number of passes, if fewer), or its
    rows stop falling."""
    start_time = time.perf_counter()
    settings = settings or KernelSettings.resolve()
    if pass_rows is None:
        pass_rows = default_pass_rows(network)
    blocks = [as_csr32(b) for b in blocks]  # sliced into passes without copies
    sizes = [int(b.shape[0]) for b in blocks]
    passes = _passes(sizes, pass_rows)
    limit = pass_rows if pass_rows is not None else sum(sizes)
    early = EarlyPasses(sizes, [], [])
    held = 0
    for one_pass in passes:  # each pass streams its early layers again (page cache)
        cut = [row_slice(blocks[b], start, stop) for b, start, stop in one_pass]
        # until a 16th of the pass is left at most (or pass_rows over the passes, if
        # fewer): the rest, where rows repeat, is what the survivors share
        stop_rows = max(1, min(limit // max(2, len(passes)),
                               sum(stop - start for _, start, stop in one_pass) // 16))
        states = run_early_layers(network, cut, settings, stop_rows)
        left = sum(len(c.live) for s in states for c in s.chunks)
        # joined while the survivors held together stay within one pass's rows (a pass
        # whose rows stopped falling above stop_rows joins too: run alone, it would read
        # every deep layer again; at 65536-1920 x 60000 one in 16 did, doubling them)
        if held + left <= limit:
            early.together += states
            early.ranges += one_pass
            held += left
            continue
        outs = finish_blocks(network, states, settings)  # many rows left: alone
        early.alone += [(b, start, out) for (b, start, _), out in
                        zip(one_pass, outs, strict=True)]
    early.seconds = time.perf_counter() - start_time
    return early


def stream_finish(network: Network, earlies: list[EarlyPasses],
                  settings: KernelSettings | None = None, *, expand: bool = True
                  ) -> list[list[BlockOutput]]:
    """The second half of :func:`stream_blocks`: the survivors of every
    :class:`EarlyPasses` (of one process or several) through the rest of the layers
    together, reading each deep layer once; each one's blocks' outputs, in its order
    (with ``expand=False``, identical rows' values kept once:
    :attr:`~.forward.BlockOutput.source`)."""
    settings = settings or KernelSettings.resolve()
    together = [s for e in earlies for s in e.together]
    outs = iter(finish_blocks(network, together, settings, expand=expand)
                if together else [])
    results = []
    for early in earlies:
        pieces: list[list[tuple[int, BlockOutput]]] = [[] for _ in early.sizes]
        for (b, start, _), out in zip(early.ranges, outs, strict=False):
            pieces[b].append((start, out))
        for b, start, out in early.alone:
            pieces[b].append((start, out))
        for parts in pieces:
            parts.sort(key=lambda part: part[0])
        results.append([_joined(parts, size, network.n_neurons)
                        for parts, size in zip(pieces, early.sizes, strict=True)])
    return results


def default_pass_rows(network: Any) -> int | None:
    """Rows a pass over a streamed network takes at most: ``sdnn.store.pass-bytes`` over
    ``8 N`` bytes a row (its activations and the next layer's, half dense), at least
    1024; ``None`` (one pass) for a network in memory."""
    if not hasattr(network, "kernel_layers"):
        return None
    return max(1024, int(float(config.get("store.pass-bytes")) // (8 * network.n_neurons)))


def _passes(sizes: list[int], pass_rows: int | None) -> list[list[tuple[int, int, int]]]:
    """Consecutive ``(block, start, stop)`` row ranges of the blocks, ``pass_rows`` rows
    a pass at most (one pass if ``None``)."""
    if pass_rows is None or sum(sizes) <= pass_rows:
        return [[(b, 0, n) for b, n in enumerate(sizes)]]
    passes, current, room = [], [], pass_rows
    for b, n in enumerate(sizes):
        start = 0
        while start < n or (n == 0 and start == 0):
            take = min(room, n - start)
            current.append((b, start, start + take))
            start += take
            room -= take
            if room == 0:
                passes.append(current)
                current, room = [], pass_rows
            if n == 0:
                break
    if current:
        passes.append(current)
    return passes


def _joined(parts: list[tuple[int, BlockOutput]], n_rows: int, n: int) -> BlockOutput:
    """One block's output from the outputs of its row ranges (each starting at a row)."""
    if len(parts) == 1 and parts[0][0] == 0:
        return parts[0][1]
    rows = np.concatenate([start + out.rows for start, out in parts]).astype(np.int64)
    source = None
    if any(out.source is not None for _, out in parts):  # distinct rows kept once
        kept, source, at, seen = [], [], 0, {}
        for _, out in parts:
            if out.source is None:
                kept.append(out.values)
                source.append(at + np.arange(len(out.rows)))
                at += out.values.shape[0]
            elif id(out.values) in seen:  # parts of one finish share its distinct rows
                source.append(seen[id(out.values)] + out.source)
            else:
                seen[id(out.values)] = at
                kept.append(out.values)
                source.append(at + out.source)
                at += out.values.shape[0]
        values = as_csr32(stack_rows(kept))
        source = np.concatenate(source).astype(np.int64)
    elif rows.size:
        values = as_csr32(stack_rows([out.values for _, out in parts]))
    else:
        values = sp.csr_matrix((0, n), dtype=np.float32)
    traces = pd.concat([out.trace for _, out in parts], ignore_index=True)
    trace = traces.groupby("layer", sort=True).agg(
        mode=("mode", "first"), rows_in=("rows_in", "sum"), rows_out=("rows_out", "sum"),
        nnz_out=("nnz_out", "sum"), seconds=("seconds", "sum"),
        distinct_out=("distinct_out", "sum")).reset_index()
    return BlockOutput(rows, values, n_rows, trace[TRACE_COLUMNS], source)


