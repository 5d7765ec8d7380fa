"""The direct transport: pieces matched to their run, layer and part; concurrent runs that
never mix; TLS with the cluster's own credentials; a part that waits is never stuck."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from sdnn_dask.cluster import cluster_client
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import ModelParallelExecutor, RunAborted, run_serial
from sdnn_dask.parallel.transport.exchange import EXTENSION, PieceExchange, _Run, wait_pieces
from sdnn_dask.parallel.transport.run import active_runs
from sdnn_dask.testing import assert_same_result


def _exchange() -> PieceExchange:
    """The plugin set up on a stand-in worker (its run bookkeeping needs no Dask)."""
    worker = SimpleNamespace(handlers={}, extensions={}, address="tcp://127.0.0.1:1")
    exchange = PieceExchange()
    exchange.setup(worker)
    assert worker.extensions[EXTENSION] is exchange and worker.handlers
    return exchange


def test_pieces_are_filed_by_run_group_layer_and_part():
    exchange = _exchange()
    run = exchange.join("a", expected=2, peers=["tcp://127.0.0.1:2"])
    other = exchange.join("b", expected=1, peers=[])
    run.put(0, 1, [0, 1], 3, "from 3")  # a piece for two parts on this worker
    other.put(0, 1, [0], 3, "b's piece")
    run.put(1, 1, [0], 2, "group 1")
    ok = lambda: None  # noqa: E731
    assert wait_pieces(run, (0, 1, 0), [3], alive=ok, poll=0.01, timeout=1) == {3: "from 3"}
    assert wait_pieces(run, (0, 1, 1), [3], alive=ok, poll=0.01, timeout=1) == {3: "from 3"}
    assert wait_pieces(run, (1, 1, 0), [2], alive=ok, poll=0.01, timeout=1) == {2: "group 1"}
    assert wait_pieces(other, (0, 1, 0), [3], alive=ok, poll=0.01, timeout=1) == {
        3: "b's piece"}
    assert wait_pieces(run, (0, 2, 0), [], alive=ok, poll=0.01, timeout=1) == {}
    assert exchange.active() == ["a", "b"]
    exchange.leave("a")
    assert exchange.active() == ["a", "b"]  # one of its two parts here is still running
    exchange.leave("a")
    exchange.leave("b")
    assert exchange.active() == []
    # a piece arriving for a run that ended here is dropped, not kept for ever
    assert exchange._run("a") is None and exchange.active() == []
    with pytest.raises(RunAborted, match="aborted before this part started"):
        exchange.join("a", expected=1, peers=[])


def test_a_waiting_part_is_never_stuck():
    exchange = _exchange()
    run = exchange.join("t", expected=1, peers=["tcp://127.0.0.1:2"])
    ok = lambda: None  # noqa: E731
    run.put(0, 4, [1], 0, "x")  # one source of two sent its piece
    with pytest.raises(TimeoutError, match=r"layer 4, part 1 waited 0 s for pieces from "
                                           r"parts \[2\]"):
        wait_pieces(run, (0, 4, 1), [0, 2], alive=ok, poll=0.01, timeout=0.2)

    def cancelled():
        raise RunAborted("cancelled")

    with pytest.raises(RunAborted, match="cancelled"):
        wait_pieces(run, (0, 5, 1), [0], alive=cancelled, poll=0.01, timeout=60)
    # an abort (by the client, or a peer's connection breaking) wakes the waiting part
    started = time.monotonic()
    threading.Timer(0.1, exchange.abort, ("t", RuntimeError("peer gone"))).start()
    with pytest.raises(RuntimeError, match="peer gone"):
        wait_pieces(run, (0, 6, 1), [0], alive=ok, poll=5.0, timeout=60)
    assert time.monotonic() - started < 2
    assert exchange.active() == []
    exchange._peer_lost("tcp://127.0.0.1:2")  # nothing left to fail: no error
    fresh = _Run("u")
    fresh.peers.add("tcp://127.0.0.1:9")
    exchange._runs["u"] = fresh
    exchange._peer_lost("tcp://127.0.0.1:9")
    assert "was lost mid-run (died or unreachable)" in str(fresh.error)  # a peer: unknown


def test_concurrent_runs_of_two_executors_never_mix(client):
    """Two executors on one cluster, each running from its own thread at the same time:
    every piece reaches its own run."""
    problems = []
    for seed, layers in ((1, 12), (2, 16)):
        net = make_network(1024, layers, seed=seed)
        inputs = make_inputs(800, 1024, seed=seed)
        problems.append((ModelParallelExecutor(client, net), inputs,
                         run_serial(net, inputs, "kernel")))
    results: dict[int, object] = {}
    errors: list[BaseException] = []

    def go(i: int, k: int) -> None:
        executor, inputs, _ = problems[i]
        try:
            for _ in range(3):
                results[i] = executor.run(inputs, partition="hash", k=k, row_groups=1 + i)
                assert_same_result(results[i], problems[i][2])
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=go, args=(i, k)) for i, k in ((0, 2), (1, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert {r.transport for r in results.values()} == {"direct"}
    assert all(not tokens for tokens in active_runs(client).values())


def _peer_comms(dask_worker) -> dict[str, str]:
    exchange = dask_worker.extensions[EXTENSION]
    return {a: type(p.comm).__name__ for a, p in exchange._peers.items()}


def test_direct_transport_under_tls_uses_the_cluster_credentials():
    pytest.importorskip("cryptography", reason="TLS credentials need cryptography")
    net = make_network(1024, 8, seed=3)
    inputs = make_inputs(500, 1024, seed=3)
    reference = run_serial(net, inputs, "kernel")
    with cluster_client("local", n_workers=2, security=True) as client:
        assert all(w.startswith("tls://") for w in client.nthreads())
        result = ModelParallelExecutor(client, net).run(inputs, partition="hash", k=2)
        assert_same_result(result, reference)
        assert result.bytes_moved > 0 and (result.messages["wire_bytes"] > 0).all()
        comms = client.run(_peer_comms)
        assert all(kind == "TLS" for peers in comms.values() for kind in peers.values())
        assert all(len(peers) == 1 for peers in comms.values())
