"""The bytes forecast before a model-parallel run against the bytes the run then moves, on
a real LocalCluster: with every row sampled, the forecast is the pieces' own size up to
the block bookkeeping of dense steps; with a sample, within its sampling error."""

from __future__ import annotations

import numpy as np
import pytest

from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import ModelParallelExecutor, run_serial
from sdnn_dask.parallel.exchange_forecast import FORECAST_COLUMNS, forecast_exchange
from sdnn_dask.partition import make_neuron_partition
from sdnn_dask.records import layer_records, run_records
from sdnn_dask.testing import assert_same_result


@pytest.fixture(scope="module")
def problem():
    return make_network(1024, 24, seed=7), make_inputs(1200, 1024, seed=7)


@pytest.fixture(scope="module")
def executor(client, problem):
    return ModelParallelExecutor(client, problem[0])


def _per_layer(result):
    comm = result.communication.set_index("layer")
    return comm["bytes_moved"].to_numpy(float), comm["predicted_bytes"].to_numpy(float)


@pytest.mark.parametrize(("method", "k", "row_groups"),
                         [("hash", 2, 1), ("block", 3, 1), ("hash", 2, 2)])
def test_every_row_sampled_forecasts_the_bytes_moved(executor, problem, method, k, row_groups):
    net, x = problem
    result = executor.run(x, partition=method, k=k, row_groups=row_groups, forecast=True)
    assert_same_result(result, run_serial(net, x, "kernel"))
    measured, predicted = _per_layer(result)
    assert result.predicted_bytes == pytest.approx(predicted.sum())
    # the pieces' rows, values and columns exactly; a dense step's blocks (one per chunk
    # of rows, not per 256 rows) are the only bookkeeping the forecast approximates
    assert predicted.sum() == pytest.approx(measured.sum(), rel=0.02)
    np.testing.assert_allclose(predicted, measured, rtol=0.05, atol=30_000)
    per_part = result.layers.groupby(["group", "part"])["predicted_bytes_in"].sum()
    moved = result.layers.groupby(["group", "part"])["bytes_in"].sum()
    np.testing.assert_allclose(per_part.to_numpy(), moved.to_numpy(), rtol=0.05, atol=1e5)


def test_a_sample_forecasts_within_its_error(executor, problem):
    net, x = problem
    part = make_neuron_partition(net, 2, "hash")
    measured = executor.run(x, partition=part).bytes_moved
    forecast = forecast_exchange(net, part, x, sample=600, seed=1)
    assert forecast.columns.tolist() == FORECAST_COLUMNS
    assert forecast["predicted_bytes_in"].sum() == pytest.approx(measured, rel=0.10)
    # identical rows merged or not: the forecast follows the run
    plain = executor.run(x, partition=part, dedup=False, forecast=True)
    assert plain.predicted_bytes == pytest.approx(plain.bytes_moved, rel=0.02)
    assert plain.bytes_moved > measured


def test_records_carry_the_forecast(executor, problem):
    x = problem[1]
    result = executor.run(x, partition="hash", k=2, forecast=True)
    runs, layers = run_records(result, study="t"), layer_records(result, study="t")
    assert runs["predicted_bytes"].iloc[0] == pytest.approx(result.predicted_bytes)
    assert layers["predicted_bytes_in"].sum() == pytest.approx(result.predicted_bytes)
    unasked = executor.run(x, partition="hash", k=2)
    assert unasked.predicted_bytes is None
    assert "predicted_bytes" not in unasked.communication


def test_route_names_one_worker_per_part(problem):
    net, x = problem
    part = make_neuron_partition(net, 2, "block")
    with pytest.raises(ValueError, match="one worker per part"):
        forecast_exchange(net, part, x, route=["a"])
    # two parts on one worker send each other nothing
    alone = forecast_exchange(net, part, x, route=["a", "a"])
    assert alone["predicted_bytes_in"].sum() == 0
