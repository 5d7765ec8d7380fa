"""The parallel trainers on a real LocalCluster, against the serial step after k steps:
data parallelism (both transports), model parallelism and the hybrid (the direct
transport)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.core.network import Network
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.partition import make_neuron_partition
from sdnn_dask.training import MAX_EPOCHS, MAX_LR, SGD, compiled, fit, init_model, train_step
from sdnn_dask.training.data_parallel import TRANSPORTS, DataParallelTrainer, gradient_bytes
from sdnn_dask.training.digits import main as digits_main
from sdnn_dask.training.model_parallel import ModelParallelTrainer
from sdnn_dask.training.replicas import BUCKET_BYTES, gradient_buckets

STEPS = 4
METHODS = ["block", "hash", "random", "hypergraph"]


def _pattern(rng, n: int, layers: int) -> list[sp.csr_matrix]:
    return [sp.random(n, n, density=8 / n, format="csr", dtype=np.float32, rng=rng)
            for _ in range(layers)]


def _network(model) -> Network:
    return Network([sp.csr_matrix((np.ones(w.nnz, np.float32), w.indices, w.indptr),
                                  shape=w.shape) for w in model.weights], bias=0.0)


def _partition(model, k: int, method: str):
    try:
        return make_neuron_partition(_network(model), k, method, seed=1)
    except Exception as exc:  # hypergraph needs the partition extra (mtkahypar)
        if method != "hypergraph":
            raise
        pytest.skip(f"make_neuron_partition(..., 'hypergraph') raised: {exc!r}")


def _batch(rng, n: int, rows: int, classes: int):
    x = rng.random((rows, n), dtype=np.float32) * (rng.random((rows, n)) < 0.4)
    return x.astype(np.float32), rng.integers(0, classes, rows)


def _close(a, b, rtol=2e-5, atol=2e-6):
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        np.testing.assert_allclose(pa, pb, rtol=rtol, atol=atol)


def _independent_volume(model, parts: np.ndarray) -> list[int]:
    """Per layer l >= 2, the (column, part) pairs where a part reads a level l-1 column it
    does not own: from dense boolean patterns, not from the trainer or the partition."""
    k = int(parts.max()) + 1
    out = []
    for layer in range(2, model.n_layers + 1):
        dense = model.weights[layer - 1].toarray() != 0  # stored zeros: none here (random)
        count = 0
        for p in range(k):
            reads = dense[:, parts[layer] == p].any(axis=1)  # level l-1 rows p reads
            count += int(np.sum(reads & (parts[layer - 1] != p)))
        out.append(count)
    return out


@pytest.mark.parametrize("transport", ["direct"])  # the graph one is retired for training
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [2, 3])
def test_model_parallel_steps_follow_the_serial_steps(client, method, k, transport):
    """4 steps with momentum and weight decay: the assembled model equals the serial run's
    (the readout and the partial errors summed in another order); the same losses; the
    pattern unchanged; bytes as the partition predicts, the same both ways."""
    rng = np.random.default_rng(7)
    n, classes, rows = 64, 5, 37
    model = init_model(_pattern(rng, n, 3), classes, seed=3)
    partition = _partition(model, k, method)
    serial = model.copy()
    optimizer = SGD(serial, 0.05, momentum=0.9, weight_decay=1e-3)
    volume = _independent_volume(model, partition.parts)
    assert volume == partition.volume(_network(model))["volume"].tolist()[1:]
    with ModelParallelTrainer(client, model, partition, lr=0.05, momentum=0.9,
                              weight_decay=1e-3, transport=transport) as trainer:
        assert trainer.volume()[1:] == volume
        for _ in range(STEPS):
            x, labels = _batch(rng, n, rows, classes)
            expected = train_step(serial, x, labels, optimizer)
            step = trainer.step(x, labels)
            assert step.loss == pytest.approx(expected, rel=1e-5)
            # dense float32 pieces, no overhead counted: columns x rows x 4
            assert step.predicted_bytes == sum(volume) * rows * 4
            assert step.bytes_forward == step.bytes_backward
            assert step.bytes_forward_local == step.bytes_backward_local
            assert step.bytes_forward + step.bytes_forward_local == step.predicted_bytes
            if k == 2:  # one part per worker: everything read is moved
                assert step.bytes_forward_local == 0
            assert step.bytes_inputs == sum(
                len(np.flatnonzero(model.weights[0][:, partition.parts[1] == p].getnnz(1)))
                for p in range(k)) * rows * 4
            assert step.seconds > 0
        trained = trainer.model()
    _close(trained, serial)
    assert trained.same_pattern(model)
    assert not np.array_equal(trained.weights[0].data, model.weights[0].data)


@pytest.mark.parametrize("transport", ["direct"])  # the graph one is retired for training
def test_a_radixnet_network_learns_the_same_by_model_parallelism(client, transport):
    """The generated 1024-neuron RadiX-Net pattern, 4 layers, sparse inputs, 3 steps, hash
    and block partitions; the cross-worker bytes are what its km1 says."""
    rng = np.random.default_rng(2)
    model = init_model(make_network(1024, 4), 10, seed=1)
    network = _network(model)
    for method in ("block", "hash"):
        serial = model.copy()
        optimizer = SGD(serial, 0.01, momentum=0.9)
        partition = make_neuron_partition(network, 2, method)
        km1 = partition.volume(network)["km1"].tolist()[1:]
        with ModelParallelTrainer(client, model, partition, lr=0.01, momentum=0.9,
                                  transport=transport) as trainer:
            for _ in range(3):
                x = sp.random(96, 1024, density=0.1, format="csr", dtype=np.float32, rng=rng)
                labels = rng.integers(0, 10, 96)
                step = trainer.step(x, labels)
                assert step.loss == pytest.approx(train_step(serial, x, labels, optimizer),
                                                  rel=1e-5)
                assert step.bytes_forward == step.bytes_backward == sum(km1) * 96 * 4
            _close(trainer.model(), serial, rtol=1e-4, atol=1e-6)


def test_partial_errors_are_summed(client):
    """A layer whose inputs are each read by both parts: the gradient of the layer below
    depends on the partial errors of both. The trainer's matches the serial one, while
    the gradient from the owner's partial alone is far from it (so the check can tell)."""
    rng = np.random.default_rng(5)
    n, classes, rows, lr = 8, 3, 16, 0.1
    dense2 = np.ones((n, n), np.float32)  # every input feeds every output: both parts read
    pattern = [sp.csr_matrix(rng.random((n, n)) < 0.5), sp.csr_matrix(dense2)]
    model = init_model([p.astype(np.float32) for p in pattern], classes, seed=0)
    partition = _partition(model, 2, "block")
    x, labels = rng.random((rows, n), dtype=np.float32), rng.integers(0, classes, rows)
    cache = compiled.forward(model, x)
    _, grads = compiled.backward(model, cache, labels)
    # the gradient of W_1 if each level-1 neuron only got the partial errors of its owner
    y1, y2 = cache.activations[1].T, cache.activations[2].T
    dlogits = cache.logits - cache.logits.max(1, keepdims=True)
    prob = np.exp(dlogits) / np.exp(dlogits).sum(1, keepdims=True)
    prob[np.arange(rows), labels] -= 1
    delta2 = (prob / rows) @ model.readout.T * ((y2 > 0) & (y2 < model.ymax))
    w2 = model.weights[1].toarray()
    owner = partition.parts[1]
    same = owner[:, None] == partition.parts[2][None, :]
    dy1_alone = delta2 @ (w2 * same).T
    delta1 = dy1_alone * ((y1 > 0) & (y1 < model.ymax))
    w1 = model.weights[0]
    coo = w1.tocoo()
    alone = np.einsum("ri,ri->i", x[:, coo.row], delta1[:, coo.col])
    assert np.max(np.abs(alone - grads.weights[0])) > 1e-3 * np.max(np.abs(grads.weights[0]))
    serial = model.copy()
    optimizer = SGD(serial, lr)
    with ModelParallelTrainer(client, model, partition, lr=lr, transport="direct") as trainer:
        assert trainer.volume()[1] == n  # each input of layer 2 goes to the other part
        trainer.step(x, labels)
        train_step(serial, x, labels, optimizer)
        got = (model.weights[0].data - trainer.model().weights[0].data) / lr
    np.testing.assert_allclose(got, grads.weights[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("groups, k, method", [(2, 2, "block"), (2, 3, "hash"),
                                               (3, 2, "random"), (2, 1, "block")])
def test_hybrid_steps_follow_the_serial_steps(client, groups, k, method):
    """R row groups x C parts: every group's copy of the parts ends with the same weights
    (bit for bit: each gradient chunk is summed once), equal to the serial run's; each
    part's gradient crosses groups ``2 (R - 1) / R`` times its size per copy."""
    rng = np.random.default_rng(3)
    n, classes, rows = 64, 5, 41
    model = init_model(_pattern(rng, n, 3), classes, seed=5)
    partition = _partition(model, k, method)
    serial = model.copy()
    optimizer = SGD(serial, 0.05, momentum=0.9, weight_decay=1e-3)
    with ModelParallelTrainer(client, model, partition, lr=0.05, momentum=0.9,
                              weight_decay=1e-3, row_groups=groups) as trainer:
        for _ in range(STEPS):
            x, labels = _batch(rng, n, rows, classes)
            expected = train_step(serial, x, labels, optimizer)
            step = trainer.step(x, labels)
            assert step.loss == pytest.approx(expected, rel=1e-5)
            assert step.row_groups == groups
            assert step.bytes_forward == step.bytes_backward
            assert step.bytes_forward + step.bytes_forward_local == step.predicted_bytes
            # every part's gradient: 2 (R - 1) copies' worth in all (the readout bias
            # once, on part 0), wherever the slots sit
            assert step.bytes_gradient + step.bytes_gradient_local == (
                2 * (groups - 1) * gradient_bytes(model))
        trained = trainer.model()
        for g in range(1, groups):
            for a, b in zip(trained.parameters(), trainer.model(g).parameters(),
                            strict=True):
                np.testing.assert_array_equal(a, b)
    _close(trained, serial)


def test_hybrid_on_four_workers_moves_gradients_and_activations():
    """2 x 2 on four workers: each part's two copies sit on different workers, so the
    gradients cross workers, and so do the activations within each group."""
    from sdnn_dask.cluster import local_client

    rng = np.random.default_rng(8)
    model = init_model(_pattern(rng, 48, 2), 3, seed=1)
    serial = model.copy()
    optimizer = SGD(serial, 0.05)
    with local_client(4) as client, ModelParallelTrainer(
            client, model, _partition(model, 2, "block"), lr=0.05, row_groups=2) as trainer:
        x, labels = _batch(rng, 48, 20, 3)
        step = trainer.step(x, labels)
        assert step.loss == pytest.approx(train_step(serial, x, labels, optimizer), rel=1e-5)
        assert step.bytes_gradient == 2 * gradient_bytes(model)
        assert step.bytes_gradient_local == 0 and step.bytes_forward_local == 0
        assert step.bytes_forward == step.predicted_bytes > 0
        _close(trainer.model(1), serial)


def test_bad_arguments(client):
    model = init_model(_pattern(np.random.default_rng(0), 16, 2), 2)
    with pytest.raises(ValueError, match="needs k"):
        ModelParallelTrainer(client, model, "block", lr=0.1)
    with pytest.raises(TypeError, match="float32"):
        ModelParallelTrainer(client, model.astype(np.float64), "block", k=2, lr=0.1)
    with pytest.raises(ValueError, match="direct transport only"):
        ModelParallelTrainer(client, model, "block", k=2, lr=0.1, row_groups=2,
                             transport="graph")
    with pytest.raises(ValueError, match="row_groups must be a positive integer"):
        ModelParallelTrainer(client, model, "block", k=2, lr=0.1, row_groups=0)
    with pytest.raises(ValueError, match="transport must be one of"):
        ModelParallelTrainer(client, model, "block", k=2, lr=0.1, transport="mpi")
    with ModelParallelTrainer(client, model, "block", k=2, lr=0.1, row_groups=3) as trainer:
        with pytest.raises(ValueError, match="at least one row per row group"):
            trainer.step(np.zeros((2, 16), np.float32), np.zeros(2, int))
    with ModelParallelTrainer(client, model, "hash", k=2, lr=0.1) as trainer:
        with pytest.raises(ValueError, match="rows x 16"):
            trainer.step(np.zeros((3, 15), np.float32), np.zeros(3, int))
        with pytest.raises(ValueError, match="labels must have shape"):
            trainer.step(np.zeros((3, 16), np.float32), np.zeros(2, int))


def test_every_trainer_on_a_threaded_cluster():
    """Workers as threads of one process share the trainers' modules and get the very
    objects scattered: each worker, and each row group, must still keep its own copy, and
    the pieces handed over in memory must give the serial run's weights."""
    from sdnn_dask.cluster import local_client
    from sdnn_dask.training.data_parallel import DataParallelTrainer

    rng = np.random.default_rng(9)
    model = init_model(_pattern(rng, 48, 3), 4, seed=2)
    batches = [_batch(rng, 48, 23, 4) for _ in range(3)]
    serial = model.copy()
    optimizer = SGD(serial, 0.05, momentum=0.9)
    for x, labels in batches:
        train_step(serial, x, labels, optimizer)
    with local_client(2, processes=False) as client:
        assert all(w.startswith("inproc://") for w in client.nthreads())
        trainers = [DataParallelTrainer(client, model, lr=0.05, momentum=0.9),
                    ModelParallelTrainer(client, model, _partition(model, 2, "block"),
                                         lr=0.05, momentum=0.9),
                    ModelParallelTrainer(client, model, _partition(model, 2, "hash"),
                                         lr=0.05, momentum=0.9, row_groups=2)]
        try:
            for trainer in trainers:
                for x, labels in batches:
                    trainer.step(x, labels)
                _close(trainer.model(), serial)
            _close(trainers[0].model(1), serial)  # the other worker's copy
            _close(trainers[2].model(1), serial)  # the other row group's parts
        finally:
            for trainer in trainers:
                trainer.close()


@pytest.mark.parametrize("k, method", [(2, "block"), (3, "random"), (4, "hash")])
def test_the_direct_tiles_hold_every_input_where_the_slice_reads_it(k, method):
    """The own-output layout (direct transport): layer l-1 writes its outputs into the
    head of layer l's tile (the same memory: nothing is gathered), each peer's piece goes
    whole into its block, and then every column id of ``W^T`` and row of ``W`` points at
    the tile row holding the neuron it names. Checked with neuron ids as the values."""
    from sdnn_dask.training.model_parts import slice_model
    from sdnn_dask.training.slot_task import _PartWorkspace

    rng = np.random.default_rng(5)
    model = init_model(_pattern(rng, 48, 4), 3, seed=2)
    parts = slice_model(_partition(model, k, method), model, 0.1, 0.0, 0.0)
    rows = 3
    spaces = [_PartWorkspace(state, state.part, rows) for state in parts]
    for layer in range(2, model.n_layers + 1):
        for p, (state, ws) in enumerate(zip(parts, spaces, strict=True)):
            sl = state.layers[layer - 1]
            tile, head = ws.inputs[layer - 1], ws.outputs[layer - 2]
            assert np.shares_memory(tile, head) and head.shape[0] == len(
                state.layers[layer - 2].own)
            head[...] = state.layers[layer - 2].own[:, None]  # what layer l-1 writes
            for q, block in ws.blocks[layer - 1].items():
                below_q = parts[q].layers[layer - 2]
                tile[block] = below_q.own[below_q.send[p]][:, None]  # q's piece
            np.testing.assert_array_equal(tile[ws.tile_rows[layer - 1], 0], sl.needed)
            np.testing.assert_array_equal(tile[ws.wt_indices[layer - 1], 1],
                                          sl.needed[sl.wt.indices])
            # backward: a peer's partial errors are its block, in its fetch order
            for q, block in ws.blocks[layer - 1].items():
                np.testing.assert_array_equal(
                    ws.tile_rows[layer - 1][sl.fetch[q]], np.arange(block.start, block.stop))


# ----------------------------------------------------------------- data parallelism


def _batches(rng, n: int, rows: int, classes: int):
    for _ in range(STEPS):
        x = rng.random((rows, n), dtype=np.float32) * (rng.random((rows, n)) < 0.4)
        yield x.astype(np.float32), rng.integers(0, classes, rows)


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
def test_a_radixnet_network_learns_the_same_by_data_parallelism(client, transport):
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


# --------------------------------------------------------------------------- settings' bounds


@pytest.mark.parametrize("lr", [1e300, MAX_LR * 1.001, float("inf"), float("nan"), 0.0, -1.0,
                                True, "0.1"])
def test_a_rate_past_what_training_can_represent_is_refused_by_every_trainer(client, lr):
    """``lr 1e300`` is inf in float32: every weight NaN at the first step, and every check,
    the serial run's against itself included, FAILED. Refused by the optimizer and by the
    trainers, before a task is sent."""
    model = init_model(_pattern(np.random.default_rng(0), 64, 2), classes=4, seed=0)
    makers = [lambda: SGD(model, lr),
              lambda: DataParallelTrainer(client, model, lr=lr),
              lambda: ModelParallelTrainer(client, model, _partition(model, 2, "block"), lr=lr)]
    for make in makers:
        with pytest.raises(ValueError, match=r"lr must be a number in \(0, 1000\]"):
            make()


@pytest.mark.parametrize("epochs", [1e20, 2.0, MAX_EPOCHS + 1, -1, True, None])
def test_epochs_past_what_finishes_are_refused(epochs):
    model = init_model(_pattern(np.random.default_rng(0), 64, 2), classes=4, seed=0)
    x, y = np.ones((8, 64), np.float32), np.zeros(8, np.int64)
    with pytest.raises(ValueError, match=r"epochs must be an integer in \[0, 10000\]"):
        fit(model, x, y, x, y, epochs=epochs, batch=4, optimizer=SGD(model, 0.1))


def test_the_largest_rate_keeps_the_weights_finite():
    """:data:`MAX_LR` is far below where float32 overflows: two epochs of a RadiX-Net
    network at that rate (the loss diverges, the weights stay numbers), so a run at the
    bound is checked against a serial run of numbers, not NaN against NaN."""
    model = init_model(make_network(1024, 4, seed=0), classes=10, seed=0)
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0, 1, (256, 1024)).astype(np.float32), rng.integers(0, 10, 256)
    history = fit(model, x, y, x, y, epochs=2, batch=32,
                  optimizer=SGD(model, MAX_LR, momentum=0.9))
    assert np.isfinite(history["loss"]).all()
    assert all(np.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("argv, message", [
    (["--lr", "1e300"], "lr must be a number in (0, 1000] (past it training diverges"),
    (["--epochs", "100000"], "epochs must be an integer in [1, 10000], got 100000"),
    (["--epochs", "0"], "epochs must be an integer in [1, 10000], got 0"),
    (["--batch", "0"], "--batch must be >= 1, got 0"),
])
def test_the_digits_command_refuses_what_training_cannot_do(argv, message, capsys):
    """``python -m sdnn_dask.training``: an ``error:`` at exit 2, before the digits load
    (the old code trained to NaN, or raised a traceback from the first step)."""
    with pytest.raises(SystemExit) as exit_:
        digits_main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
