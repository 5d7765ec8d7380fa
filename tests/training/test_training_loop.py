"""The persistent training loop on a real LocalCluster: one task per slot for a whole fit.

Every strategy on both transports: ``trainer.steps`` (an epoch's batches as row ids into
rows held on the workers, one feed of the loop) takes bit for bit the steps that
``trainer.step`` takes one at a time, and both follow the serial steps; a whole
``fit_trainer`` starts exactly one task per slot; each step's record says where its time
went. Faults and interruptions of a loop are in ``test_faults.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from distributed import get_task_stream

from sdnn_dask.parallel.transport.collectives import TIMING_KEYS
from sdnn_dask.parallel.transport.run import active_runs
from sdnn_dask.study.training_comparison import make_trainer
from sdnn_dask.training import SGD, fit, fit_trainer, init_model, train_step
from sdnn_dask.training.data_parallel import DataParallelTrainer
from sdnn_dask.training.loop import batches
from sdnn_dask.training.model_parallel import ModelParallelTrainer
from sdnn_dask.training.trainer import slot_compute, step_seconds

CONFIGS = [("data", 1), ("model", 1), ("hybrid", 2)]


def _problem(n: int = 64, layers: int = 3, rows: int = 96, classes: int = 4):
    rng = np.random.default_rng(3)
    pattern = [sp.random(n, n, density=10 / n, format="csr", dtype=np.float32, rng=rng)
               for _ in range(layers)]
    model = init_model(pattern, classes, seed=5)
    x = (rng.random((rows, n), dtype=np.float32) * (rng.random((rows, n)) < 0.5))
    return model, x.astype(np.float32), rng.integers(0, classes, rows)


def _trainer(client, strategy, row_groups, model, transport="direct"):
    if transport == "direct":
        return make_trainer(client, strategy, "block", model, k=2, row_groups=row_groups,
                            lr=0.05, momentum=0.9)
    if strategy == "data":
        return DataParallelTrainer(client, model, lr=0.05, momentum=0.9, transport=transport)
    return ModelParallelTrainer(client, model, "block", k=2, lr=0.05, momentum=0.9,
                                row_groups=row_groups, transport=transport)


def _same_weights(a, b):
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        np.testing.assert_array_equal(pa, pb)


@pytest.mark.parametrize(("strategy", "row_groups", "transport"),
                         [(s, r, "direct") for s, r in CONFIGS]
                         + [("data", 1, "graph")])
def test_steps_take_the_same_steps_as_step(client, strategy, row_groups, transport):
    """An epoch fed at once (row ids into held rows) and the same batches one step at a
    time end bit for bit equal, with the same losses and bytes; both follow the serial
    steps (float32 sums in another order: to 1e-5)."""
    model, x, y = _problem()
    ids = list(batches(x.shape[0], 20, np.random.default_rng(0)))  # 20, ..., 16: short last
    fed, stepped = (_trainer(client, strategy, row_groups, model, transport)
                    for _ in range(2))
    serial = model.copy()
    optimizer = SGD(serial, 0.05, momentum=0.9)
    try:
        fed.hold(x, y)
        together = fed.steps(ids)
        alone = [stepped.step(x[i], y[i]) for i in ids]
        expected = [train_step(serial, x[i], y[i], optimizer) for i in ids]
        assert [s.loss for s in together] == [s.loss for s in alone]
        np.testing.assert_allclose([s.loss for s in together], expected, rtol=1e-5)
        if transport == "direct":
            assert [s.slots[0]["rows"] for s in together] == [
                len(i) // (2 if strategy != "model" else 1) for i in ids]
        _same_weights(fed.model(), stepped.model())
        for a, b in zip(fed.model().parameters(), serial.parameters(), strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    finally:
        fed.close()
        stepped.close()


def _slot_tasks(stream: list[dict], trainer_id: str) -> set[str]:
    return {t["key"] for t in stream if str(t["key"]).startswith(trainer_id + "-loop-")}


@pytest.mark.parametrize(("strategy", "row_groups"), CONFIGS)
def test_a_fit_is_one_task_per_slot(client, strategy, row_groups):
    """Two epochs of 5 steps each through fit_trainer: the scheduler runs one task per
    slot for all of them (R x C: 2 for data and model, 4 for the hybrid), the loop ran
    every step, and the history equals the serial fit's."""
    model, x, y = _problem()
    trainer = _trainer(client, strategy, row_groups, model)
    try:
        with get_task_stream(client) as stream:
            history = fit_trainer(trainer, x, y, x[:30], y[:30], epochs=2, batch=20, seed=1)
            loop = trainer._loop
            trainer.close()
        assert loop.steps == 2 * 5 and loop.feeds == 2 and loop.closed
        slots = 4 if strategy == "hybrid" else 2
        assert len(_slot_tasks(stream.data, trainer.id)) == slots
        assert len(loop.futures) == slots
    finally:
        trainer.close()
    serial = model.copy()
    expected = fit(serial, x, y, x[:30], y[:30], epochs=2, batch=20, seed=1,
                   optimizer=SGD(serial, 0.05, momentum=0.9))
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-5)
    np.testing.assert_array_equal(history["test_accuracy"], expected["test_accuracy"])
    assert not any(active_runs(client).values())


@pytest.mark.parametrize(("strategy", "row_groups"), CONFIGS)
def test_each_step_says_where_its_time_went(client, strategy, row_groups):
    model, x, y = _problem()
    trainer = _trainer(client, strategy, row_groups, model)
    try:
        trainer.hold(x, y)
        results = trainer.steps([np.arange(0, 40), np.arange(40, 96)])
    finally:
        trainer.close()
    for result in results:
        assert len(result.slots) == (4 if strategy == "hybrid" else 2)
        for record in result.slots:
            assert all(record[key] >= 0.0 for key in TIMING_KEYS)
            # the parts of its time are within the slot's step
            spent = slot_compute(record) + record["wait_s"] + record["send_s"]
            assert spent + record["allreduce_s"] <= record["seconds"] * 1.001 + 1e-4
            assert record["forward_s"] > 0 and record["backward_s"] > 0
        if strategy != "model":  # the gradient is summed across row groups
            assert all(r["allreduce_s"] > 0 for r in result.slots)
        else:
            assert all(r["allreduce_s"] == 0 for r in result.slots)
            assert any(r["wait_s"] > 0 for r in result.slots)
        assert result.compute_seconds == max(slot_compute(r) for r in result.slots)
        grouped = [list(result.slots[i:i + 2]) for i in range(0, len(result.slots), 2)]
        assert result.seconds == pytest.approx(step_seconds(grouped))
        assert result.overhead_seconds == pytest.approx(result.seconds
                                                        - result.compute_seconds)


def test_steps_need_held_rows_and_enough_rows(client):
    model, x, y = _problem()
    data = _trainer(client, "data", 1, model)
    hybrid = _trainer(client, "hybrid", 2, model)
    try:
        with pytest.raises(RuntimeError, match=r"hold\(\) the training rows"):
            data.steps([np.arange(4)])
        hybrid.hold(x, y)
        with pytest.raises(ValueError, match="at least one row per row group"):
            hybrid.steps([np.arange(1)])
        with pytest.raises(ValueError, match="inputs must be rows x 64"):
            hybrid.hold(x[:, :10], y)
        # a batch smaller than the cluster still runs on data parallelism: one worker idle
        data.hold(x, y)
        [one] = data.steps([np.arange(1)])
        serial = model.copy()
        assert one.loss == pytest.approx(train_step(serial, x[:1], y[:1],
                                                    SGD(serial, 0.05, momentum=0.9)),
                                         rel=1e-6)
    finally:
        data.close()
        hybrid.close()
