"""The embedded LocalCluster listens on loopback only."""

from __future__ import annotations

from urllib.parse import urlparse


def test_local_cluster_is_loopback_only(client):
    info = client.scheduler_info()
    assert urlparse(info["address"]).hostname == "127.0.0.1"
    workers = client.nthreads()
    assert len(workers) == 2 and set(workers.values()) == {1}
    assert {urlparse(w).hostname for w in workers} == {"127.0.0.1"}
    dashboard = client.cluster.scheduler.http_server
    hosts = {sock.getsockname()[0] for sock in dashboard._sockets.values()}
    assert hosts == {"127.0.0.1"}
