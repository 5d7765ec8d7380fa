"""The resident/streamed rule counts every process of a run that holds the weights on a
host (its workers, and the client if it keeps a copy), not one copy per process."""

from __future__ import annotations

import dask
import psutil
import pytest

from sdnn_dask.cluster import local_client
from sdnn_dask.data import store
from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.data.streaming import StreamedNetwork
from sdnn_dask.parallel import DataParallelExecutor, run_serial
from sdnn_dask.parallel.weights import Host, choose_weights, run_hosts
from sdnn_dask.testing import assert_same_result


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    net = make_network(1024, 12, seed=5)
    folder = tmp_path_factory.mktemp("weights") / "small.store"
    store.write_network(folder, net)
    return StreamedNetwork(folder), net


def test_copies_on_a_host_must_fit_it_together(small_store):
    held, _ = small_store
    need = held.resident_bytes()
    limit = 100 * need  # each worker's copy fits its own limit easily
    alone = [Host("a", workers=1, client=False, memory=4 * need)]
    assert choose_weights(held, "auto", limit, alone)[0] == "resident"
    crowded = [Host("a", workers=1, client=True, memory=4 * need),
               Host("b", workers=2, client=False, memory=4 * need)]
    assert choose_weights(held, "auto", limit, crowded)[0] == "resident"  # 2 x need each
    crowded[1] = Host("b", workers=3, client=False, memory=4 * need)
    mode, why = choose_weights(held, "auto", limit, crowded)
    assert mode == "streamed" and "3 worker(s) on b" in why and "3 copies" in why
    with_client = [Host("a", workers=2, client=True, memory=4 * need)]
    mode, why = choose_weights(held, "auto", limit, with_client)
    assert mode == "streamed" and "and the client" in why
    assert choose_weights(held, "resident", limit, with_client)[0] == "resident"  # as asked


def test_a_local_cluster_counts_both_workers_on_its_host(small_store):
    """Two workers whose limits each leave room for a copy, on a host whose memory (at
    the fraction set here) holds one copy and not two: streamed with both, resident with
    one; either way the run equals the serial kernel."""
    held, net = small_store
    memory = psutil.virtual_memory().total
    need = held.resident_bytes()
    fraction = 1.5 * need / memory  # the host: 1.5 copies; each worker's limit: 1.1 copies
    inputs = make_inputs(300, 1024, seed=5)
    expected = run_serial(net, inputs, "kernel").output
    with dask.config.set({"sdnn.data-parallel.resident-fraction": fraction}), \
            local_client(2, memory_limit=int(1.1 / 1.5 * memory)) as client:
        workers = sorted(client.nthreads())
        hosts = run_hosts(client, workers, client_copy=True)
        assert len(hosts) == 1 and hosts[0].workers == 2 and hosts[0].client
        assert hosts[0].memory == memory and hosts[0].copies == 3
        both = DataParallelExecutor(client, held, warm_up=False)
        assert both.weights == "streamed", both.weights_reason
        assert "2 worker(s)" in both.weights_reason
        assert_same_result(both.run(inputs), expected)
        one = DataParallelExecutor(client, held, workers=workers[:1], warm_up=False)
        assert one.weights == "resident", one.weights_reason
        assert isinstance(one.network, StreamedNetwork)  # the client holds no copy
        result = one.run(inputs)
        assert result.params["weights"] == "resident"
        assert_same_result(result, expected)
