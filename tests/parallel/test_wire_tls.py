"""The wire under TLS (issue 43): the cluster's own credentials on the wire's sockets, a
stranger without them parses nothing, a real TLS LocalCluster's model run goes by the
wire and equals the serial reference; the plain wire's warning said once per cluster."""

from __future__ import annotations

import os
import pickle
import queue
import shlex
import socket
import ssl
import time
import warnings

import numpy as np
import psutil
import pytest
from distributed import Security
from knocking import knocking

from sdnn_dask.parallel.transport import wire as wire_module
from sdnn_dask.parallel.transport.frames import encode_frames
from sdnn_dask.parallel.transport.wire import CHALLENGE, Wire

pytest.importorskip("cryptography", reason="TLS credentials need cryptography")


class Evil:
    """Unpickling it runs a shell command that makes a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(self.marker)}",)


def _contexts(security: Security, role: str = "worker") -> tuple[ssl.SSLContext,
                                                                  ssl.SSLContext]:
    return (security.get_listen_args(role)["ssl_context"],
            security.get_connection_args(role)["ssl_context"])


@pytest.fixture(scope="module")
def security() -> Security:
    return Security.temporary()


def _tls_pair(security, ring=0):
    got: queue.Queue = queue.Queue()
    lost: queue.Queue = queue.Queue()
    a = Wire("127.0.0.1", "tls://a", deliver=got.put, lost=lost.put, ring=ring,
             tls=_contexts(security))
    b = Wire("127.0.0.1", "tls://b", deliver=got.put, lost=lost.put, ring=ring,
             tls=_contexts(security))
    a.know({"tls://b": b.address})
    b.know({"tls://a": a.address})
    return a, b, got, lost


def _until_closed(sock: socket.socket, limit: float = 10.0) -> tuple[bytes, float]:
    """What the wire sent before it closed ``sock`` and how long that took (fails if it
    is still open after ``limit`` seconds)."""
    t0 = time.monotonic()
    heard = b""
    sock.settimeout(limit)
    try:
        while chunk := sock.recv(4096):
            heard += chunk
    except (ConnectionResetError, ssl.SSLError):
        pass
    except TimeoutError:
        pytest.fail(f"the wire kept the connection open for {limit} s")
    return heard, time.monotonic() - t0


# -- the wire on its own -----------------------------------------------------------------

@pytest.mark.parametrize("ring", [0, 1 << 20])
def test_pieces_go_encrypted_and_arrive_whole(security, ring):
    a, b, got, lost = _tls_pair(security, ring)
    try:
        arrays = [np.arange(n, dtype=np.float32) for n in (0, 5, 300_000, 100_000)]
        for i, x in enumerate(arrays):
            a.send("tls://b", {"op": "piece", "layer": i, "payload": x})
        for i, x in enumerate(arrays):
            msg = got.get(timeout=10)
            assert msg["layer"] == i
            np.testing.assert_array_equal(msg["payload"], x)
        assert a.encrypted and a.sent == len(arrays)
        sock = a._out["tls://b"][0]
        assert isinstance(sock, ssl.SSLSocket) and sock.version() in ("TLSv1.2", "TLSv1.3")
        # the ring between workers of one host stays: it never leaves the host
        assert (a.ring_bytes() > 0) is bool(ring)
        assert lost.empty()
    finally:
        a.close()
        b.close()


def test_a_broken_tls_connection_says_which_peer_is_lost(security):
    a, b, got, lost = _tls_pair(security)
    a.send("tls://b", {"op": "piece", "payload": 1})
    assert got.get(timeout=10)["payload"] == 1
    a.close()
    assert lost.get(timeout=10) == "tls://a"
    b.close()


def test_a_plain_stranger_is_closed_with_nothing_parsed(security, tmp_path):
    """No TLS at all: a pickle, a wire hello with the secret itself, are never read as
    anything; the wire does not even send its challenge (that comes inside TLS)."""
    marker = tmp_path / "pwned"
    a, b, got, lost = _tls_pair(security)
    try:
        for payload in (b"".join(encode_frames({"hello": Evil(marker), "sender": "tcp://x"})),
                        pickle.dumps(Evil(marker), protocol=5),
                        b"".join(encode_frames({"hello": b.secret, "sender": "tls://a"}))):
            with socket.create_connection(b.address[:2], timeout=10) as sock:
                try:
                    sock.sendall(payload)
                except (ConnectionResetError, BrokenPipeError):
                    pass
                heard, _ = _until_closed(sock)
            assert not heard.startswith(b"SDNA")  # no challenge in the clear
            assert len(heard) < 64  # at most a TLS alert
        time.sleep(0.2)
        assert not marker.exists()
        assert got.empty() and lost.empty()
    finally:
        a.close()
        b.close()


def test_a_stranger_with_another_clusters_certificate_cannot_connect(security, tmp_path):
    """A valid TLS client whose certificate another CA signed (another cluster's
    credentials), even holding the wire's secret, is refused in the TLS handshake;
    and a listener of another cluster is refused by our connector."""
    marker = tmp_path / "pwned"
    other = Security.temporary()
    a, b, got, lost = _tls_pair(security)
    intruder = Wire("127.0.0.1", "tls://x", deliver=got.put, lost=lost.put,
                    tls=_contexts(other))
    try:
        intruder.know({"tls://b": b.address})
        with pytest.raises(OSError):
            intruder.send("tls://b", {"op": "piece", "payload": Evil(marker)})
        # the raw way: the TLS handshake itself fails, the challenge never sent
        client = other.get_connection_args("worker")["ssl_context"]
        raw = socket.create_connection(b.address[:2], timeout=10)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with client.wrap_socket(raw) as sock:
                sock.settimeout(10)
                sock.sendall(b"".join(encode_frames({"payload": Evil(marker)})))
                assert sock.recv(CHALLENGE.size) == b""  # closed, or the alert raises
                raise ConnectionError("closed")
        a.know({"tls://x": intruder.address})
        with pytest.raises(OSError):  # ours does not talk to a listener of another CA
            a.send("tls://x", {"op": "piece", "payload": 1})
        time.sleep(0.2)
        assert not marker.exists()
        assert got.empty() and lost.empty()
    finally:
        intruder.close()
        a.close()
        b.close()


def test_a_stranger_who_never_finishes_the_tls_handshake_is_dropped(security, monkeypatch):
    """Silent, or trickling a ClientHello a byte at a time: closed by the handshake's
    deadline, not kept open, and no lost peer."""
    monkeypatch.setattr(wire_module, "AUTH_TIMEOUT", 0.5)
    a, b, got, lost = _tls_pair(security)
    try:
        with socket.create_connection(b.address[:2], timeout=10) as sock:
            heard, took = _until_closed(sock)
        assert heard == b"" and took < 3
        hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64)
        with socket.create_connection(b.address[:2], timeout=10) as sock:
            t0 = time.monotonic()
            try:
                for byte in hello:
                    sock.sendall(bytes([byte]))
                    time.sleep(0.05)
                    if time.monotonic() - t0 > 5:
                        break
            except (ConnectionResetError, BrokenPipeError):
                pass
            _, took = _until_closed(sock)
            assert time.monotonic() - t0 < 3
        assert got.empty() and lost.empty()
    finally:
        a.close()
        b.close()


def test_a_wire_refuses_contexts_that_do_not_check_the_peer(security):
    loose = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # CERT_NONE for a server
    listening, connecting = _contexts(security)
    with pytest.raises(ValueError, match="listening TLS context does not require"):
        Wire("127.0.0.1", "tls://a", deliver=print, lost=print, tls=(loose, connecting))
    with pytest.raises(TypeError, match=r"pair of ssl\.SSLContext"):
        Wire("127.0.0.1", "tls://a", deliver=print, lost=print, tls=listening)


# -- a real TLS LocalCluster ---------------------------------------------------------------

def _wire_state(dask_worker):
    from sdnn_dask.parallel.transport.exchange import EXTENSION

    wire = dask_worker.extensions[EXTENSION].wire
    if wire is None:
        return None
    return {"sent": wire.sent, "encrypted": wire.encrypted,
            "sockets": sorted({type(s).__name__ for s, _, _ in wire._out.values()})}


def _wire_address(dask_worker):
    from sdnn_dask.parallel.transport.exchange import EXTENSION

    return dask_worker.extensions[EXTENSION].wire_address()


def _knock(address, marker, stranger: ssl.SSLContext, stop, count: list) -> None:
    """Strangers, one after another until ``stop``: a pickle in the clear, a TLS client
    with another cluster's certificate sending the pickle, a connection closed at once."""
    evil = b"".join(encode_frames({"hello": Evil(marker), "sender": "tls://x"}))
    i = 0
    while not stop.is_set():
        i += 1
        try:
            with socket.create_connection(address, timeout=2) as sock:
                count[0] += 1
                if i % 3 == 0:
                    sock.sendall(evil)
                    time.sleep(0.05)
                elif i % 3 == 1:
                    with stranger.wrap_socket(sock) as tls:
                        tls.sendall(evil)
        except OSError:  # refused in the TLS handshake, as it should be
            pass
        time.sleep(0.01)  # two cores: leave the run most of them


def _outside_address() -> str | None:
    """An address of this machine beyond loopback, if it has one."""
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


def _wire_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "the workers' wire listens" in str(w.message)]


def test_a_model_run_on_a_tls_cluster_goes_by_the_encrypted_wire(tmp_path):
    """The run equals the serial reference, its pieces went by the wire (each worker's
    wire wrote messages, over TLS sockets), and no unencrypted-frames warning is given,
    even where the cluster listens beyond loopback; all while strangers (no certificate,
    or another cluster's) knock on every worker's wire, never getting a pickle read."""
    from sdnn_dask.cluster import cluster_client
    from sdnn_dask.data.radixnet import make_inputs, make_network
    from sdnn_dask.parallel import ModelParallelExecutor, run_serial
    from sdnn_dask.parallel.transport.run import ensure_exchange
    from sdnn_dask.testing import assert_same_result

    marker = tmp_path / "pwned"
    net = make_network(1024, 12, seed=5)
    inputs = make_inputs(600, 1024, seed=5)
    reference = run_serial(net, inputs, "kernel")
    host = _outside_address() or "127.0.0.1"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cluster_client("local", n_workers=2, security=True, host=host) as client:
            assert all(w.startswith("tls://") for w in client.nthreads())
            executor = ModelParallelExecutor(client, net)
            ensure_exchange(client)
            addresses = client.run(_wire_address)
            stranger = Security.temporary().get_connection_args("worker")["ssl_context"]
            with knocking(addresses, _knock, marker, stranger) as counts:
                for _ in range(2):
                    result = executor.run(inputs, partition="hash", k=2)
                    assert_same_result(result, reference)
                    assert result.transport == "direct"
            state = client.run(_wire_state)
            assert client.run(_wire_address) == addresses  # the same wires throughout
    assert all(c[0] > 4 for c in counts)  # they did knock, on every worker
    assert not marker.exists()
    assert all(s is not None and s["encrypted"] and s["sent"] > 0 for s in state.values())
    assert all(s["sockets"] == ["SSLSocket"] for s in state.values())
    assert _wire_warnings(caught) == []


def test_the_plain_wire_warns_once_per_cluster():
    """Two model runs on a tcp:// cluster beyond loopback: the warning that the wire's
    frames cross the network unencrypted is given once, on the first."""
    host = _outside_address()
    if host is None:
        pytest.skip("this machine has no address beyond loopback")
    from sdnn_dask.cluster import cluster_client
    from sdnn_dask.data.radixnet import make_inputs, make_network
    from sdnn_dask.parallel import ModelParallelExecutor, run_serial
    from sdnn_dask.testing import assert_same_result

    net = make_network(1024, 6, seed=6)
    inputs = make_inputs(300, 1024, seed=6)
    reference = run_serial(net, inputs, "kernel")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cluster_client("local", n_workers=2, security=False, host=host) as client:
            assert all(w.startswith("tcp://") for w in client.nthreads())
            executor = ModelParallelExecutor(client, net)
            result = executor.run(inputs, partition="hash", k=2)
            assert_same_result(result, reference)
            assert len(_wire_warnings(caught)) == 1
            assert host in _wire_warnings(caught)[0]
            assert_same_result(executor.run(inputs, partition="block", k=2), reference)
            state = client.run(_wire_state)
    assert len(_wire_warnings(caught)) == 1
    assert all(s is not None and not s["encrypted"] and s["sent"] > 0
               for s in state.values())
