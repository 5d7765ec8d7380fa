"""Data-parallel training on a real LocalCluster, against the serial step after k steps."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.data.radixnet import make_network
from sdnn_dask.training import SGD, init_model, train_step
from sdnn_dask.training.data_parallel import TRANSPORTS, DataParallelTrainer, gradient_bytes
from sdnn_dask.training.replicas import BUCKET_BYTES, gradient_buckets

STEPS = 4


def _pattern(rng, n: int, layers: int) -> list[sp.csr_matrix]:
    return [sp.random(n, n, density=8 / n, format="csr", dtype=np.float32, rng=rng)
            for _ in range(layers)]


def _batches(rng, n: int, rows: int, classes: int):
    for _ in range(STEPS):
        x = rng.random((rows, n), dtype=np.float32) * (rng.random((rows, n)) < 0.4)
        yield x.astype(np.float32), rng.integers(0, classes, rows)


def _close(a, b, rtol=2e-5, atol=2e-6):
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        np.testing.assert_allclose(pa, pb, rtol=rtol, atol=atol)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("backend", ["compiled", "reference"])
def test_data_parallel_steps_follow_the_serial_steps(client, backend, transport):
    """k steps with momentum and weight decay: the same weights as the serial run (the
    batch's gradient summed in another order), the same losses, identical copies on
    every worker, the pattern unchanged; on both transports (a tree of tasks, or the
    all-reduce worker to worker: 2 (P - 1) gradients either way)."""
    rng = np.random.default_rng(7)
    n, classes = 64, 5
    dtype = np.float32 if backend == "compiled" else np.float64
    model = init_model(_pattern(rng, n, 3), classes, seed=3, dtype=dtype)
    serial = model.copy()
    optimizer = SGD(serial, 0.05, momentum=0.9, weight_decay=1e-3)
    with DataParallelTrainer(client, model, lr=0.05, momentum=0.9, weight_decay=1e-3,
                             backend=backend, transport=transport) as trainer:
        for x, labels in _batches(rng, n, 37, classes):
            expected = train_step(serial, x, labels, optimizer, backend)
            step = trainer.step(x, labels)
            assert step.loss == pytest.approx(expected, rel=1e-5)
            assert step.bytes_moved == 2 * (trainer.n_workers - 1) * gradient_bytes(model)
            assert step.bytes_rows >= x.nbytes and step.seconds > 0
        first, second = trainer.model(0), trainer.model(1)
    rtol = 2e-5 if backend == "compiled" else 1e-12
    _close(first, serial, rtol=rtol, atol=rtol / 10)
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        np.testing.assert_array_equal(a, b)  # the same update on every worker
    assert first.same_pattern(model) and not np.array_equal(first.weights[0].data,
                                                           model.weights[0].data)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_batch_smaller_than_the_cluster(client, transport):
    """One row: one worker computes, every worker still updates."""
    rng = np.random.default_rng(1)
    model = init_model(_pattern(rng, 32, 2), 3, seed=0)
    serial = model.copy()
    optimizer = SGD(serial, 0.1)
    x, labels = rng.random((1, 32), dtype=np.float32), np.array([2])
    with DataParallelTrainer(client, model, lr=0.1, transport=transport) as trainer:
        step = trainer.step(x, labels)
        assert step.loss == pytest.approx(train_step(serial, x, labels, optimizer), rel=1e-6)
        if transport == "graph":  # no reduction, one broadcast
            assert step.bytes_moved == gradient_bytes(model)
        else:  # the idle worker's zeros are all-reduced like any gradient
            assert step.bytes_moved == 2 * (trainer.n_workers - 1) * gradient_bytes(model)
        _close(trainer.model(1), serial)
        with pytest.raises(ValueError, match="one label a row"):
            trainer.step(x, np.array([1, 2]))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_radixnet_network_learns_the_same(client, transport):
    """The generated 1024-neuron RadiX-Net pattern, sparse inputs, 3 steps."""
    rng = np.random.default_rng(2)
    model = init_model(make_network(1024, 4), 10, seed=1)
    serial = model.copy()
    optimizer = SGD(serial, 0.01, momentum=0.9)
    with DataParallelTrainer(client, model, lr=0.01, momentum=0.9,
                             transport=transport) as trainer:
        for _ in range(3):
            x = sp.random(96, 1024, density=0.1, format="csr", dtype=np.float32, rng=rng)
            labels = rng.integers(0, 10, 96)
            assert trainer.step(x, labels).loss == pytest.approx(
                train_step(serial, x, labels, optimizer), rel=1e-5)
        _close(trainer.model(), serial, rtol=1e-4, atol=1e-6)


def test_bad_backend(client):
    model = init_model(_pattern(np.random.default_rng(0), 16, 1), 2)
    with pytest.raises(ValueError, match="backend must be one of"):
        DataParallelTrainer(client, model, lr=0.1, backend="fast")
    with pytest.raises(ValueError, match="transport must be one of"):
        DataParallelTrainer(client, model, lr=0.1, transport="mpi")
    for bad in (0, -5, 1.5, "1MiB", True):
        with pytest.raises(ValueError, match="bucket_bytes must be a positive int"):
            DataParallelTrainer(client, model, lr=0.1, bucket_bytes=bad)


def test_both_transports_take_the_same_steps(client):
    """On two workers the all-reduce adds the two halves in the tree's order: the same
    bits as the graph transport, step after step."""
    rng = np.random.default_rng(4)
    model = init_model(_pattern(rng, 48, 3), 4, seed=2)
    with DataParallelTrainer(client, model, lr=0.05, momentum=0.9,
                             transport="graph") as graph, \
         DataParallelTrainer(client, model, lr=0.05, momentum=0.9,
                             transport="direct") as direct:
        assert graph.n_workers == direct.n_workers == 2
        for x, labels in _batches(rng, 48, 29, 4):
            assert graph.step(x, labels).loss == direct.step(x, labels).loss
        for a, b in zip(graph.model().parameters(), direct.model().parameters(), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bucket_bytes", [1, 700, 5000, BUCKET_BYTES, 1 << 40])
def test_gradient_buckets_cover_the_gradient_once(bucket_bytes):
    """Layers of uneven sizes: the pieces cut the flat gradient into disjoint runs that
    cover it; the early ones go from the top layer down, each of at least
    ``bucket_bytes`` (layer 0's weights, the biases and the readout go last)."""
    rng = np.random.default_rng(1)
    sizes = [(40, 60), (60, 30), (30, 80), (80, 50)]
    pattern = [sp.random(a, b, density=0.2, format="csr", dtype=np.float32, rng=rng)
               for a, b in sizes]
    model = init_model(pattern, 3, seed=0)
    total = sum(p.size for p in model.parameters())
    pieces = gradient_buckets(model, bucket_bytes)
    covered = np.zeros(total, np.int64)
    for _, lo, hi in pieces:
        assert 0 <= lo < hi <= total
        covered[lo:hi] += 1
    assert (covered == 1).all()
    early = [layer for layer, _, _ in pieces if layer >= 0]
    assert early == sorted(early, reverse=True) and 0 not in early
    assert all(layer == -1 for layer, _, _ in pieces[len(early):])
    for _, lo, hi in pieces[:len(early)]:
        assert (hi - lo) * 4 >= bucket_bytes
    if bucket_bytes == 1:  # every layer above the first as soon as it is done
        assert early == [3, 2, 1]
    if bucket_bytes >= total * 4:  # all of it in one message, after the backward
        assert pieces == [(-1, 0, total)]


def test_any_bucket_size_takes_the_same_steps(client):
    """A bucket's size decides when its part of the gradient goes, not its sum: a
    layer per message, a few layers per message and one message take the same steps
    bit for bit (a one-row batch too: one worker sends zeros), and follow the serial
    steps."""
    rng = np.random.default_rng(6)
    model = init_model(_pattern(rng, 48, 4), 4, seed=3)
    sizes = [1, 3000, BUCKET_BYTES]
    assert [len(gradient_buckets(model, b)) for b in sizes] == [5, 3, 1]
    trainers = [DataParallelTrainer(client, model, lr=0.05, momentum=0.9, bucket_bytes=b)
                for b in sizes]
    serial = model.copy()
    optimizer = SGD(serial, 0.05, momentum=0.9)
    try:
        for x, labels in [*_batches(rng, 48, 29, 4), (np.ones((1, 48), np.float32), [2])]:
            losses = [t.step(x, labels).loss for t in trainers]
            assert losses[1:] == losses[:-1]
            assert losses[0] == pytest.approx(train_step(serial, x, np.asarray(labels),
                                                         optimizer), rel=1e-5)
        for other in trainers[1:]:
            for a, b in zip(trainers[0].model().parameters(), other.model().parameters(),
                            strict=True):
                np.testing.assert_array_equal(a, b)
        _close(trainers[0].model(), serial, rtol=1e-4, atol=1e-6)
    finally:
        for t in trainers:
            t.close()
