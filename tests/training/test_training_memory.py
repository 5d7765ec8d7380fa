"""What the training comparison holds, and where: one strategy's copies at a time on the
workers, no model left on the client, and a model-parallel worker about ``1/k`` of the
model (issue 45: the comparison at 65536-120 ran out of memory placing every strategy's
copies at once)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from sdnn_dask.data.radixnet import make_network
from sdnn_dask.partition import make_neuron_partition
from sdnn_dask.study.training_comparison import compare_training
from sdnn_dask.training import compiled, init_model
from sdnn_dask.training.model import SparseModel
from sdnn_dask.training.model_parallel import ModelParallelTrainer
from sdnn_dask.training.model_parts import held_state, slice_bytes, slice_model


def _models_alive() -> int:
    gc.collect()
    # type(), not isinstance(): a dead weak proxy among the objects raises on isinstance
    return sum(issubclass(type(o), SparseModel) for o in gc.get_objects())


def test_each_strategy_is_placed_alone_and_the_client_keeps_no_model(client):
    network = make_network(1024, 4)
    seen = []

    def progress(message: str) -> None:  # called at every phase of the comparison
        seen.append((message, client.run(held_state), _models_alive()))

    steps = compare_training(client, network, batches=(16,), steps=2,
                             strategies=("data", "model", "hybrid"), partitions=("hash",),
                             progress=progress)
    assert (steps["check"] == "PASS").all()
    # per step, every run in turn, as before the runs were placed one after another
    assert list(steps["strategy"]) == ["serial", "data", "model", "hybrid"] * 2
    assert list(steps["step"]) == [1] * 4 + [2] * 4
    placing = [(m, held, alive) for m, held, alive in seen if "placing" in m]
    assert len(placing) == 3
    for message, held, alive in placing:  # the previous run's copies are gone
        for where, state in held.items():
            assert state == {"replicas": [], "rows": [], "parts": []}, (message, where)
        assert alive == 0, message  # the serial model and the last start released
    done = [(m, held, alive) for m, held, alive in seen if "steps done" in m]
    assert [m.split(":")[1].split(",")[0].strip() for m, _, _ in done] == [
        "data (block)", "model (hash)", "hybrid (hash)"]
    for message, held, alive in done:  # running: its own copies only, none here
        kinds = {kind for state in held.values() for kind, keys in state.items() if keys}
        assert kinds == ({"replicas"} if message.split(":")[1].startswith(" data")
                         else {"parts"}), message
        assert alive == 0, message
    after = client.run(held_state)
    assert all(state == {"replicas": [], "rows": [], "parts": []} for state in after.values())


@pytest.mark.parametrize("k", [2, 3])
def test_a_model_parallel_worker_holds_about_a_kth_of_the_model(client, k):
    model = init_model(make_network(1024, 6), classes=10, seed=0)
    network = make_network(1024, 6)
    whole = sum(slice_bytes(sl) for part in slice_model(
        make_neuron_partition(network, 1, "block"), model, 0.01, 0.9, 0.0)
        for sl in part.layers)
    with ModelParallelTrainer(client, model, "hash", k=k, lr=0.01, momentum=0.9) as trainer:
        held = trainer.held_bytes()
        assert sorted(held) == [(0, c) for c in range(k)]
        for (_, c), nbytes in held.items():
            # each part's slices and readout: a k-th of the whole model's, give or take
            # the inputs that several parts read
            assert 0.7 / k < nbytes / whole < 1.3 / k, (c, nbytes, whole)
        # and on its worker, nothing else
        states = client.run(held_state)
        assert all(not s["replicas"] for s in states.values())
        assert sorted(p for s in states.values() for _, p in s["parts"]) == list(range(k))

def test_copies_share_the_pattern_only_when_asked():
    model = init_model(make_network(1024, 2), classes=10, seed=0)
    shared, own = model.copy(share_pattern=True), model.copy()
    for w, s, o in zip(model.weights, shared.weights, own.weights, strict=True):
        assert np.shares_memory(s.indices, w.indices) and np.shares_memory(s.indptr, w.indptr)
        assert not np.shares_memory(s.data, w.data)
        assert not np.shares_memory(o.indices, w.indices)
        assert not np.shares_memory(o.data, w.data)
    # the network's own pattern, not a copy of it
    network = make_network(1024, 2)
    fresh = init_model(network, classes=10, seed=0)
    assert all(np.shares_memory(w.indices, n.indices)
               for w, n in zip(fresh.weights, network.layers, strict=True))
    assert model.pattern_bytes == sum(w.indices.nbytes + w.indptr.nbytes
                                      for w in model.weights)


def test_the_layout_maps_values_in_four_bytes_an_edge():
    model = init_model(make_network(1024, 2), classes=10, seed=0)
    x = np.random.default_rng(0).random((4, 1024), dtype=np.float32)
    compiled.forward(model, x)
    layout = model._layout
    assert all(t.dtype == np.int32 for t in layout.to_t)
    # W^T's values are gathered per layer into one buffer, not kept per layer
    assert layout._values.nbytes == max(w.data.nbytes for w in model.weights)
    for k, (w, to_t) in enumerate(zip(model.weights, layout.to_t, strict=True)):
        np.testing.assert_array_equal(layout.values(model, k), w.data[to_t])
        np.testing.assert_array_equal(layout.wt(model, k).toarray(), w.toarray().T)
