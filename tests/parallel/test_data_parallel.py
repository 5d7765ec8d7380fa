"""Data parallelism on a real LocalCluster equals the serial reference, always."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import sparse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import DataParallelExecutor, run_serial
from sdnn_dask.partition import ROW_PARTITIONS
from sdnn_dask.testing import assert_categories, assert_same_result


@pytest.fixture(scope="module")
def generated():
    net = make_network(1024, 30, seed=4)
    inputs = make_inputs(700, 1024, seed=4)
    return net, inputs, run_serial(net, inputs, "reference")


@pytest.fixture(scope="module")
def executor(client, generated):
    return DataParallelExecutor(client, generated[0])


@pytest.mark.parametrize("partition", ROW_PARTITIONS)
@pytest.mark.parametrize(("rows", "n_blocks"), [(700, 1), (700, 2), (700, 3), (700, 7),
                                                 (60, 150)])
def test_equals_reference(executor, generated, partition, rows, n_blocks):
    _, inputs, reference = generated
    result = executor.run(inputs[:rows], partition=partition, n_blocks=n_blocks, seed=11)
    assert result.n_blocks == n_blocks and result.n_workers == 2
    assert len(result.blocks) == n_blocks
    assert result.blocks["rows"].sum() == rows
    if n_blocks > rows:
        assert (result.blocks["rows"] == 0).any()  # empty blocks ran and came back
    assert_same_result(result.output, reference.output[:rows])


# Dask's own threads use the random module while examples are drawn; that is not ours.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module")
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    partition=st.sampled_from(ROW_PARTITIONS),
    n_blocks=st.integers(1, 40),
    seed=st.integers(0, 10_000),
    nbuckets=st.integers(1, 3),
    rows=st.integers(0, 700),
)
def test_property_never_changes_the_result(executor, generated, partition, n_blocks, seed,
                                           nbuckets, rows):
    _, inputs, reference = generated
    result = executor.run(inputs[:rows], partition=partition, n_blocks=n_blocks, seed=seed,
                          nbuckets=nbuckets)
    assert_same_result(result.output, reference.output[:rows])


def test_official_subset_passes(client, official_network, official_inputs, official_truth):
    executor = DataParallelExecutor(client, official_network)
    for partition in ROW_PARTITIONS:
        result = executor.run(official_inputs, partition=partition, n_blocks=4)
        assert_categories(result.categories, official_truth)
    # both workers did work, and compute was timed on them
    assert result.blocks["worker"].nunique() == 2
    assert (result.blocks["compute_s"] > 0).all()


def _sparse_dask_array(inputs, chunk_rows: int, column_chunks: int = 1) -> da.Array:
    """A dask array whose chunks are pydata/sparse COO (built per chunk: slicing a COO
    inside the graph would make every worker compile pydata/sparse's indexing)."""
    width = inputs.shape[1] // column_chunks

    def piece(r: int, c: int) -> da.Array:
        coo = sparse.COO.from_scipy_sparse(inputs[r : r + chunk_rows, c : c + width])
        return da.from_array(coo, chunks=-1, asarray=False)

    return da.block([[piece(r, c) for c in range(0, inputs.shape[1], width)]
                     for r in range(0, inputs.shape[0], chunk_rows)])


@pytest.mark.parametrize("chunk_rows", [100, 256, 700])
def test_dask_array_of_pydata_sparse_chunks(executor, generated, chunk_rows):
    _, inputs, reference = generated
    array = _sparse_dask_array(inputs, chunk_rows)
    assert isinstance(array._meta, sparse.COO)
    result = executor.run(array)
    assert result.partition == "chunks"
    assert result.n_blocks == len(array.chunks[0])
    assert_same_result(result, reference)


def test_dask_array_split_in_columns_is_rechunked(executor, generated):
    _, inputs, reference = generated
    array = _sparse_dask_array(inputs, 350, column_chunks=2)
    assert len(array.chunks[1]) == 2
    assert_same_result(executor.run(array), reference)


def test_weights_are_scattered_once(client, generated):
    net = generated[0]
    executor = DataParallelExecutor(client, net, warm_up=False)
    key = executor._weights.key
    executor.run(generated[1][:50], n_blocks=2)
    executor.run(generated[1][:50], n_blocks=3)
    assert executor._weights.key == key
    # Dask's memory manager may drop the idle replica between runs (every 2 s; see
    # sdnn_dask.parallel.placement): the executor puts it back before each run
    executor._prepare()
    who_has = client.who_has([executor._weights])
    assert len(who_has[key]) == 2  # on every worker
    assert executor._weights.key == key  # copied, never scattered again


def test_bad_inputs(executor, generated):
    with pytest.raises(ValueError, match="rows x 1024"):
        executor.run(make_inputs(5, 4096))
    array = da.zeros((10, 1024), chunks=5)
    with pytest.raises(ValueError, match="own row chunks"):
        executor.run(array, partition="hash")
    with pytest.raises(ValueError, match="unknown row partition"):
        executor.run(generated[1], partition="metis")


def test_serial_kernel_equals_reference(generated):
    net, inputs, reference = generated
    result = run_serial(net, inputs, "kernel")
    assert_same_result(result, reference)
    assert np.isfinite(result.edges_per_second)


def test_weights_stay_on_every_worker_for_the_timed_run(client, generated):
    """Dask's memory manager drops broadcast replicas no task waits for (every 2 s); the
    executor copies them back before the clock, so no run fetches weights."""
    import time

    import dask

    from sdnn_dask.parallel.transfers import transfers_of

    if not dask.config.get("distributed.scheduler.active-memory-manager.start"):
        pytest.skip("Dask's active memory manager is off here")
    net, inputs, reference = generated
    executor = DataParallelExecutor(client, net)
    weights = executor._weights
    deadline = time.time() + 20
    while len(client.who_has([weights])[weights.key]) > 1 and time.time() < deadline:
        time.sleep(0.5)
    assert len(client.who_has([weights])[weights.key]) == 1  # Dask dropped the replicas
    start = time.time()
    result = executor.run(inputs, partition="hash", n_blocks=2)
    assert_same_result(result, reference)
    assert result.blocks["worker"].nunique() == 2
    fetched = transfers_of(client, weights.key)
    assert fetched[fetched["start"] >= start].empty  # copied back before the clock
