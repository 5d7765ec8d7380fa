"""The projection's count of the kernel's work against the kernel itself (issue 36).

The real kernel runs a small generated network with its chunk operations watched
(:class:`~sdnn_dask.core.kernels.chunks.Chunk`'s ``step``, ``repack`` and ``to_csr``):
every step, its rows, nonzeros, form before and path taken, every repack and every tile
made sparse outside a step are counted in the projection's units
(:data:`~sdnn_dask.projection.KERNEL_TERMS`, :data:`~sdnn_dask.projection.BLOCK_TERMS`).
:func:`~sdnn_dask.projection.kernel_work.kernel_schedule`, replaying the same rows'
counts, must count exactly the same, for several settings: if the kernel's schedule
(depth-first chunks, repacks, dense or sparse steps) changes and the replay does not
follow, these fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from sdnn_dask.core.kernels import ROW_TILE, KernelSettings, forward_block
from sdnn_dask.core.kernels.chunks import Chunk
from sdnn_dask.core.kernels.schedule import ChunkSchedule
from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.projection import BLOCK_TERMS, KERNEL_TERMS, Survival
from sdnn_dask.projection.kernel_work import kernel_schedule

K = len(KERNEL_TERMS)
WEIGHTS = 32.0  # weights per row of a RadiX-Net layer


@pytest.fixture(scope="module")
def network():
    return make_network(1024, 16, seed=0)


@pytest.fixture(scope="module")
def inputs():
    return make_inputs(1500, 1024, seed=0)


@pytest.fixture(scope="module")
def profile(network, inputs):
    return Survival.measure(network, inputs)


def watched_kernel(monkeypatch, network, inputs, settings: KernelSettings
                   ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The kernel's work on ``inputs`` as it did it, in :func:`kernel_schedule`'s units:
    per-layer regressors, block regressors and the trace's modes."""
    n, n_layers = network.n_neurons, network.n_layers
    layer_of = {id(w): k for k, w in enumerate(network.layers)}
    work = np.zeros((n_layers, K))
    block = np.zeros(K + len(BLOCK_TERMS))
    stepping = [False]  # a step's own conversions are the layer's, not the block's
    step, repack, to_csr = Chunk.step, Chunk.repack, Chunk.to_csr

    def watched_step(self, w, *args):
        k, rows, nnz = layer_of[id(w)], len(self.live), self.nnz
        was_dense = self.dense_t is not None
        stepping[0] = True
        try:
            mode = step(self, w, *args)
        finally:
            stepping[0] = False
        row = work[k]
        if mode == "dense":
            row[6] += 0 if was_dense else n * rows
            row[0] += WEIGHTS * n * rows
            row[1] += WEIGHTS * n * -(-rows // ROW_TILE)
            row[2] += 1
        else:
            if was_dense:
                row[7:10] += (n * rows, nnz, 1)
            row[3:6] += (WEIGHTS * nnz, n * rows, 1)
        return mode

    def watched_repack(chunks, chunk_rows, n_, pool):
        if any(c.dense_t is not None for c in chunks):  # a copy of tiles, not a vstack
            block[K + 2] += n * sum(len(c.live) for c in chunks)
        return repack(chunks, chunk_rows, n_, pool)

    def watched_to_csr(self, pool=None):
        if not stepping[0] and self.dense_t is not None and len(self.live):
            block[7:10] += (n * len(self.live), self.nnz, 1)
        return to_csr(self, pool)

    monkeypatch.setattr(Chunk, "step", watched_step)
    monkeypatch.setattr(Chunk, "repack", staticmethod(watched_repack))
    monkeypatch.setattr(Chunk, "to_csr", watched_to_csr)
    try:
        out = forward_block(network, inputs, settings=settings)
    finally:
        monkeypatch.undo()
    block[K:K + 2] += (1.0, inputs.shape[0])
    return work, block, out.trace["mode"].tolist()


# chunk_bytes 1 << 16 and 1 << 14 make 16- and 4-row chunks: many depth-first chunks,
# part-empty tiles set aside, joined and repacked; thresholds from all dense to all sparse
SETTINGS = [(0.05, 1 << 20), (0.05, 1 << 16), (0.0, 1 << 16), (2.0, 1 << 20),
            (0.0, 1 << 20), (0.3, 1 << 18), (0.15, 1 << 14), (0.02, 1 << 17)]


@pytest.mark.parametrize("threshold,chunk_bytes", SETTINGS)
def test_counted_work_is_the_kernels(monkeypatch, network, inputs, profile, threshold,
                                     chunk_bytes):
    # the projection prices every live row stepped: the kernel with identical rows apart
    settings = KernelSettings(threshold, chunk_bytes, dedup=False)
    kernel_work, kernel_block, kernel_modes = watched_kernel(monkeypatch, network, inputs,
                                                             settings)
    counts, levels = profile.row_counts()
    work, block, modes = kernel_schedule(counts, levels, network.n_neurons, settings,
                                         WEIGHTS)
    assert modes == kernel_modes
    for k in range(network.n_layers):
        assert work[k].tolist() == kernel_work[k].tolist(), f"layer {k + 1}"
    assert block.tolist() == kernel_block.tolist()


def test_min_chunk_rows_is_followed(monkeypatch, network, inputs, profile):
    # tiny chunk_bytes, but at least 64 rows a chunk (as sdnn.kernel.chunk-min-rows says)
    settings = KernelSettings(0.05, 1 << 12, min_chunk_rows=64, dedup=False)
    kernel_work, kernel_block, _ = watched_kernel(monkeypatch, network, inputs, settings)
    counts, levels = profile.row_counts()
    work, block, _ = kernel_schedule(counts, levels, 1024, settings, WEIGHTS)
    assert np.array_equal(work, kernel_work) and np.array_equal(block, kernel_block)


def test_the_schedule_walks_generic_chunks():
    # the decisions alone, on chunks that are only row ids: a quarter of a tile left
    # ends the first chunk's depth-first run, the others stop at the same layer, the
    # part-empty tiles wait and are repacked when they join
    class Rows:
        def __init__(self, live):
            self.live = live

    class Halve:
        def __init__(self):
            self.set_aside_rows = []

        def advance(self, chunk, k):
            chunk.live = chunk.live[: len(chunk.live) // 2]

        def repack(self, chunks):
            live = np.concatenate([c.live for c in chunks])
            return [Rows(live[s : s + 8]) for s in range(0, len(live), 8)]

        def drop(self, chunk):
            pass

        def set_aside(self, chunk):
            self.set_aside_rows.append(chunk.live.tolist())

    schedule = ChunkSchedule(n_layers=5, chunk_rows=8, n_neurons=1024, dense_threshold=0.05)
    actions = Halve()
    chunks = [Rows(np.arange(s, min(s + 8, 20))) for s in schedule.starts(20)]
    early, left = schedule.depth_first(chunks, actions)
    assert early == 2  # 8 -> 4 -> 2 rows: 2 is a quarter of 8
    assert actions.set_aside_rows == [[0, 1], [8, 9], [16]]
    joined = schedule.layer([], early, actions, left)
    assert [c.live.tolist() for c in joined] == [[0, 1]]  # 5 rows repacked, then halved
    assert not schedule.repack_due(1, 5) and schedule.repack_due(2, 5)
    assert not schedule.repack_due(3, 17) and schedule.repack_due(4, 16)
    assert schedule.dense_due(1024 * 8 * 0.05 * (1 + 100 / 8), 8)
    assert not schedule.dense_due(1024 * 8 * 0.05 * (1 + 100 / 8) - 1, 8)
