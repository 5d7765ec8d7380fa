"""Every run records the peak resident memory of each process that ran it, during the run:
reset just before, read just after (not the process's lifetime peak)."""

from __future__ import annotations

import mmap

import numpy as np
import pandas as pd
import pytest

from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import DataParallelExecutor, peak_memory, run_serial
from sdnn_dask.parallel.data_executor import block_cutter
from sdnn_dask.partition import make_row_partition
from sdnn_dask.testing import assert_same_result

#: Bytes of the allocation that must not show in a later run's peak.
BIG = 512 << 20


def _touch_and_free(size: int = BIG, dask_worker=None) -> int:
    """Map ``size`` bytes, write every page (resident), unmap them; the peak since the
    last reset, which now includes them (run here or on a worker by ``client.run``)."""
    with mmap.mmap(-1, size) as area:
        np.frombuffer(area, dtype=np.uint8)[::4096] = 1
    return peak_memory.read_peak().bytes


@pytest.fixture(scope="module")
def problem():
    net = make_network(1024, 24, seed=3)
    inputs = make_inputs(600, 1024, seed=3)
    return net, inputs, run_serial(net, inputs, "reference")


def test_reset_forgets_an_earlier_peak_in_this_process():
    assert peak_memory.reset_peak()  # Linux here: the reset must work
    before = peak_memory.read_peak()
    assert before.since == peak_memory.SINCE_RUN and before.bytes > 0
    # the allocation raised the peak (by about its size: other pages come and go)
    assert _touch_and_free() >= before.bytes + BIG * 9 // 10
    assert peak_memory.reset_peak()
    after = peak_memory.read_peak()
    assert after.since == peak_memory.SINCE_RUN
    assert after.bytes < before.bytes + BIG // 2  # ... and the reset forgot it


def test_no_reset_says_since_start(monkeypatch, tmp_path):
    # where clear_refs cannot be written, the peak is the lifetime one and says so
    monkeypatch.setattr(peak_memory, "_CLEAR_REFS", tmp_path / "missing" / "clear_refs")
    assert not peak_memory.reset_peak()
    peak = peak_memory.read_peak()
    assert peak.since == peak_memory.SINCE_START and peak.bytes > 0
    monkeypatch.undo()
    assert peak_memory.reset_peak() and peak_memory.read_peak().since == "run"


@pytest.mark.parametrize("method", ["kernel", "reference"])
def test_serial_runs_record_their_process_peak(problem, method):
    net, inputs, reference = problem
    result = run_serial(net, inputs, method)
    assert_same_result(result.output, reference.output)
    block = result.blocks.iloc[0]
    assert block["peak_since"] == "run" and block["peak_rss_bytes"] > 0


@pytest.mark.parametrize("placement", ["static", "dynamic"])
def test_every_data_run_records_each_workers_peak(client, problem, placement):
    net, inputs, reference = problem
    executor = DataParallelExecutor(client, net)  # in memory: no store, peaks still
    result = executor.run(inputs, partition="hash", n_blocks=4, placement=placement)
    assert_same_result(result.output, reference.output)
    blocks = result.blocks
    assert set(blocks["worker"]) == set(executor.workers)
    assert (blocks["peak_rss_bytes"] > 0).all() and (blocks["peak_since"] == "run").all()
    # a worker's peak repeats on each of its blocks
    assert (blocks.groupby("worker")["peak_rss_bytes"].nunique() == 1).all()


def test_a_workers_earlier_allocation_is_not_the_runs_peak(client, problem):
    net, inputs, reference = problem
    executor = DataParallelExecutor(client, net)
    executor.run(inputs[:50])  # warm: what a run holds is allocated once before
    client.run(peak_memory.reset_peak, workers=executor.workers)  # the peak: now + BIG
    peaks = client.run(_touch_and_free, workers=executor.workers)
    assert all(p >= BIG for p in peaks.values())  # the allocation showed in the peak
    result = executor.run(inputs, partition="block")
    assert_same_result(result.output, reference.output)
    ran = result.blocks.groupby("worker")["peak_rss_bytes"].max()
    assert len(ran) == 2 and (ran > 0).all()
    # the run's peak, not the allocation before it (on a worker that earlier tests left
    # holding more than BIG, the run's peak is that, still BIG under the allocation's)
    touched = pd.Series(peaks)
    assert (ran < touched[ran.index] - BIG // 2).all(), (ran, touched)


def test_blocks_are_views_where_rows_are_contiguous(problem):
    _, inputs, _ = problem
    block = make_row_partition("block", inputs.shape[0], 3).blocks()
    cut = block_cutter(inputs, block)
    for b, ids in enumerate(block):
        piece = cut(b)
        assert np.shares_memory(piece.data, inputs.data)  # no copy of the nonzeros
        assert (piece != inputs[ids]).nnz == 0 and piece.shape == (len(ids), 1024)
    hashed = make_row_partition("hash", inputs.shape[0], 3).blocks()
    cut = block_cutter(inputs, hashed)
    for b, ids in enumerate(hashed):
        piece = cut(b)
        assert not np.shares_memory(piece.data, inputs.data)
        assert (piece != inputs[ids]).nnz == 0
    empty = block_cutter(inputs, [np.arange(0, dtype=np.int64)])(0)
    assert empty.shape == (0, 1024)
