"""The wire against strangers and broken peers (issue 34): real sockets on a real
:class:`~sdnn_dask.parallel.transport.wire.Wire`, and a model-parallel run on a real
LocalCluster while strangers knock on its workers' wires.

What is checked: nothing a connection sends is unpickled before it proves it holds the
secret (a pickle that would make a marker file never runs), announced lengths cost
nothing (a 1.5 GB header), strangers are dropped within the handshake's deadline and are
no lost peer, connections are capped, a bad frame from a peer closes its connection with
no traceback, the secret never goes on the wire, and a real run still equals the serial
reference while all that goes on.
"""

from __future__ import annotations

import os
import pickle
import queue
import shlex
import socket
import threading
import time

import numpy as np
import psutil
import pytest
from knocking import knocking

from sdnn_dask.parallel.transport import wire as wire_module
from sdnn_dask.parallel.transport.frames import ENTRY, MAGIC, PREFIX, encode_frames
from sdnn_dask.parallel.transport.wire import (
    CHALLENGE,
    DIGEST,
    MAX_CONNECTIONS,
    MAX_PENDING,
    NONCE,
    Wire,
    _proof,
    crosses_network,
    introduce,
)


class Evil:
    """Unpickling it runs a shell command that makes a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(self.marker)}",)


def _wire(**kw):
    got: queue.Queue = queue.Queue()
    lost: queue.Queue = queue.Queue()
    w = Wire("127.0.0.1", "tcp://b", deliver=got.put, lost=lost.put, **kw)
    return w, got, lost


def _connect(w: Wire) -> socket.socket:
    sock = socket.create_connection(w.address[:2], timeout=10)
    sock.settimeout(10)
    return sock


def _until_closed(sock: socket.socket, limit: float = 10.0) -> tuple[bytes, float]:
    """What the wire sent before it closed ``sock``, and how long that took (fails if it
    is still open after ``limit`` seconds)."""
    t0 = time.monotonic()
    heard = b""
    sock.settimeout(limit)
    try:
        while chunk := sock.recv(4096):
            heard += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the wire kept the connection open for {limit} s")
    return heard, time.monotonic() - t0


def _authenticated(w: Wire, sender: str = "tcp://peer") -> socket.socket:
    """A connection that proved it holds ``w``'s secret (a peer of the run)."""
    sock = _connect(w)
    introduce(sock, bytes.fromhex(w.address[2]), sender)
    sock.settimeout(10)
    return sock


def _rss() -> int:
    return psutil.Process().memory_info().rss


def _peak_rss_growth(seconds: float) -> int:
    """The most this process's RSS grew over ``seconds``, sampled."""
    base = peak = _rss()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, _rss())
        time.sleep(0.02)
    return peak - base


# -- (1) nothing is unpickled before the handshake --------------------------------------

def test_a_pickle_sent_first_never_runs(tmp_path):
    """The attack measured: a pickle whose ``__reduce__`` runs a shell command, sent as a
    connection's first frame (as the old hello was), or as raw pickle bytes."""
    marker = tmp_path / "pwned"
    w, got, lost = _wire()
    try:
        for payload in (b"".join(encode_frames({"hello": Evil(marker), "sender": "tcp://x"})),
                        pickle.dumps(Evil(marker), protocol=5),
                        b"".join(encode_frames({"hello": w.secret, "sender": Evil(marker)}))):
            with _connect(w) as sock:
                sock.sendall(payload)
                heard, _ = _until_closed(sock)
            assert len(heard) <= CHALLENGE.size  # the challenge, never the proof
        time.sleep(0.2)
        assert not marker.exists()
        assert got.empty() and lost.empty()
    finally:
        w.close()


def test_a_pickle_after_a_wrong_handshake_never_runs(tmp_path):
    """A stranger that reads the challenge and answers with a forged proof (random bytes,
    or an HMAC under another key) then sends the pickle: closed unread."""
    marker = tmp_path / "pwned"
    w, got, lost = _wire()
    try:
        for key in (None, os.urandom(32)):
            with _connect(w) as sock:
                challenge = sock.recv(CHALLENGE.size, socket.MSG_WAITALL)
                assert len(challenge) == CHALLENGE.size  # the wire speaks first
                theirs = challenge[4:]
                mine = os.urandom(NONCE)
                proof = (os.urandom(DIGEST) if key is None
                         else _proof(key, b"sdnn-wire/1 connector", theirs, mine))
                sock.sendall(mine + proof)
                try:
                    sock.sendall(b"".join(encode_frames({"op": "piece", "payload": Evil(marker)})))
                except OSError:  # already closed: as good
                    pass
                heard, took = _until_closed(sock)
                assert heard == b"" and took < 2.0  # no proof back: dropped at once
        time.sleep(0.2)
        assert not marker.exists()
        assert got.empty() and lost.empty()
    finally:
        w.close()


# -- (2) announced lengths cost nothing ---------------------------------------------------

def test_a_huge_header_from_a_stranger_costs_nothing(monkeypatch):
    """A frame prefix claiming a 1.5 GB header (and one claiming 2**32 - 1 buffers), held
    open: the old wire allocated it at once (535 MB -> 1987 MB a connection); now it is
    fixed-size handshake bytes, and the connection goes at the deadline."""
    monkeypatch.setattr(wire_module, "AUTH_TIMEOUT", 1.0)
    w, got, lost = _wire()
    socks = []
    try:
        for prefix in (PREFIX.pack(MAGIC, 1_500_000_000, 0),
                       PREFIX.pack(MAGIC, 10, 2**32 - 1)):
            sock = _connect(w)
            sock.sendall(prefix)
            socks.append(sock)
        assert _peak_rss_growth(0.8) < 100 << 20
        for sock in socks:
            _, took = _until_closed(sock, limit=5.0)
            assert took < 3.0
        assert got.empty() and lost.empty()
    finally:
        for sock in socks:
            sock.close()
        w.close()


def test_a_huge_claim_from_a_peer_is_bounded():
    """Even a peer holding the secret cannot make the wire allocate what it only
    announces: a header past MAX_HEADER or too many buffers closes the connection at
    once (the peer is lost), and a 1.5 GB buffer within the bounds costs memory only as
    its bytes arrive."""
    w, got, lost = _wire()
    try:
        for prefix in (PREFIX.pack(MAGIC, 1_500_000_000, 0),
                       PREFIX.pack(MAGIC, 10, 2**32 - 1),
                       b"JUNK" + bytes(PREFIX.size - 4)):
            with _authenticated(w) as sock:
                sock.sendall(prefix)
                _, took = _until_closed(sock)
                assert took < 2.0
            assert lost.get(timeout=5) == "tcp://peer"
        with _authenticated(w) as sock:  # a header in bounds, one 1.5 GB buffer announced
            header = pickle.dumps({"op": "piece"})
            sock.sendall(PREFIX.pack(MAGIC, len(header), 1) + ENTRY.pack(1_500_000_000, 0)
                         + header + b"x" * 1000)
            assert _peak_rss_growth(0.5) < 100 << 20
        assert lost.get(timeout=5) == "tcp://peer"
        assert got.empty()
    finally:
        w.close()


# -- (3) strangers are dropped ----------------------------------------------------------------

def test_a_stranger_is_dropped_within_the_timeout(monkeypatch):
    """A silent connection and one trickling a byte at a time are closed at the
    handshake's deadline (not reset by each byte); neither is a lost peer."""
    monkeypatch.setattr(wire_module, "AUTH_TIMEOUT", 0.5)
    w, got, lost = _wire()
    try:
        silent = _connect(w)
        heard, took = _until_closed(silent)
        assert len(heard) == CHALLENGE.size and took < 2.0
        trickle = _connect(w)
        t0 = time.monotonic()
        try:
            for _ in range(40):  # 4 s of a byte every 0.1 s, were it not dropped
                trickle.sendall(b"x")
                time.sleep(0.1)
        except OSError:
            pass
        _until_closed(trickle)
        assert time.monotonic() - t0 < 2.5
        silent.close()
        trickle.close()
        assert got.empty() and lost.empty()
    finally:
        w.close()


def test_the_shipped_handshake_deadline_is_a_few_seconds():
    assert 1.0 <= wire_module.AUTH_TIMEOUT <= 10.0


def test_a_connector_does_not_talk_to_an_impostor():
    """Mutual: a listener that does not hold the secret (a process that took the port of
    a dead worker) gets the connector's nonce and HMAC, never its hello or a frame."""
    server = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []

    def impostor():
        conn, _ = server.accept()
        with conn:
            conn.sendall(CHALLENGE.pack(b"SDNA", os.urandom(NONCE)))
            conn.recv(NONCE + DIGEST, socket.MSG_WAITALL)
            conn.sendall(os.urandom(DIGEST))  # a proof it cannot make
            conn.settimeout(5)
            try:
                while chunk := conn.recv(4096):
                    heard.append(chunk)
            except OSError:
                pass

    t = threading.Thread(target=impostor, daemon=True)
    t.start()
    a = Wire("127.0.0.1", "tcp://a", deliver=lambda m: None, lost=lambda a: None)
    try:
        a.know({"tcp://b": ("127.0.0.1", server.getsockname()[1], os.urandom(32).hex())})
        with pytest.raises(ConnectionError, match="does not hold"):
            a.send("tcp://b", {"op": "piece", "payload": 1})
        t.join(timeout=10)
        assert heard == []
    finally:
        a.close()
        server.close()


def test_the_secret_never_goes_on_the_wire(monkeypatch):
    """Everything either end sends, handshake, hello and frames, holds neither the
    secret nor its bytes."""
    w, got, _ = _wire()
    seen = bytearray()
    real = socket.socket.sendall

    def spy(sock, data, *args):
        seen.extend(bytes(data))
        return real(sock, data, *args)

    a = Wire("127.0.0.1", "tcp://a", deliver=lambda m: None, lost=lambda a: None)
    try:
        a.know({"tcp://b": w.address})
        with monkeypatch.context() as m:
            m.setattr(socket.socket, "sendall", spy)
            a.send("tcp://b", {"op": "piece", "payload": np.arange(10)})
        assert got.get(timeout=10)["op"] == "piece"
        assert w.secret.encode() not in seen and bytes.fromhex(w.secret) not in seen
        assert len(seen) > NONCE + DIGEST
    finally:
        a.close()
        w.close()


# -- (4) connections are capped -------------------------------------------------------------

def test_strangers_beyond_the_pending_cap_close_the_oldest():
    """300 idle connections (309 threads on the old wire): at most MAX_PENDING wait at
    once, each with its thread; the rest are closed, oldest first. A peer still gets
    through after them."""
    w, got, lost = _wire()
    a = Wire("127.0.0.1", "tcp://a", deliver=lambda m: None, lost=lambda a: None)
    a.know({"tcp://b": w.address})
    threads = threading.active_count()
    socks = []
    try:
        for _ in range(300):
            socks.append(_connect(w))
        time.sleep(0.5)
        assert threading.active_count() - threads <= MAX_PENDING + 2
        closed = 0
        for sock in socks[:-MAX_PENDING]:
            _until_closed(sock, limit=5.0)
            closed += 1
        assert closed == 300 - MAX_PENDING
        a.send("tcp://b", {"op": "piece", "payload": 7})
        assert got.get(timeout=10)["payload"] == 7
        assert lost.empty()
    finally:
        for sock in socks:
            sock.close()
        a.close()
        w.close()


def test_connections_beyond_the_cap_are_closed_at_once():
    """Peers holding the secret, past MAX_CONNECTIONS (plus one per known peer): the next
    connection is closed before its handshake."""
    w, _, lost = _wire()
    socks = []
    try:
        for i in range(MAX_CONNECTIONS):
            socks.append(_authenticated(w, f"tcp://peer-{i}"))
        time.sleep(0.2)
        extra = _connect(w)
        heard, took = _until_closed(extra)
        assert heard == b"" and took < 2.0
        extra.close()
        assert lost.empty()
        socks.pop().close()  # one goes: room for one more
        assert lost.get(timeout=5) == f"tcp://peer-{MAX_CONNECTIONS - 1}"
        time.sleep(0.2)
        socks.append(_authenticated(w, "tcp://late"))
    finally:
        for sock in socks:
            sock.close()
        w.close()


# -- (5) bad frames: closed quietly ------------------------------------------------------------

@pytest.mark.parametrize("body", [
    pytest.param(b"garbage, not a pickle", id="not-a-pickle"),
    pytest.param(b"\x80\x05\x95", id="truncated"),
    pytest.param(b"\x80\x04\x8c\x0cno_such_mod_\x8c\x01x\x93.", id="no-such-module"),
    pytest.param(pickle.dumps(42), id="not-a-dict"),
])
def test_a_bad_frame_closes_its_connection_without_a_traceback(body, capfd, monkeypatch):
    """A peer's frame that cannot be read closes that connection and reports the peer
    lost, with one log line and no thread traceback (the old wire printed one for
    anything but an UnpicklingError or a broken socket)."""
    hooked: list = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)
    w, got, lost = _wire()
    try:
        with _authenticated(w) as sock:
            sock.sendall(PREFIX.pack(MAGIC, len(body), 0) + body)
            _until_closed(sock)
        assert lost.get(timeout=5) == "tcp://peer"
        assert got.empty()
    finally:
        w.close()
    time.sleep(0.1)
    assert hooked == []
    assert "Traceback" not in capfd.readouterr().err


def test_a_frame_pointing_outside_its_ring_is_refused():
    """A ring position before the last one taken, across the end or past the released
    space is a bad frame, not a read of whatever lies there."""
    from sdnn_dask.parallel.transport.ring import Ring

    ring = Ring.create(1 << 20)
    assert ring is not None
    try:
        for position, nbytes in ((0, 0), ((1 << 20) - 10, 100), (3 << 20, 100),
                                 (0, (1 << 19) + 1)):
            with pytest.raises(ValueError, match="not in this ring"):
                ring.take(position, nbytes)
        ring.take(0, 100)
        with pytest.raises(ValueError):
            ring.take(50, 10)  # behind the last one taken
    finally:
        ring.close()


def test_a_ring_offer_outside_the_wire_directory_is_not_opened(tmp_path):
    """The hello's ring path is opened only if it is one of the wire's own rings in
    /dev/shm (no other file, no link followed)."""
    from sdnn_dask.parallel.transport.wire import _attach

    target = tmp_path / "not-a-ring"
    target.write_bytes(b"\0" * 8192)
    assert _attach(str(target), bytes(16)) is None
    assert _attach("/dev/shm/../etc/passwd", bytes(16)) is None
    link = f"/dev/shm/sdnn-wire-link-{os.getpid()}"
    try:
        os.symlink(target, link)
        assert _attach(link, bytes(16)) is None
    finally:
        os.unlink(link)


# -- (6) where the frames cross a network ------------------------------------------------------

@pytest.mark.parametrize(("host", "crosses"), [
    ("127.0.0.1", False), ("127.0.0.2", False), ("::1", False), ("[::1]", False),
    ("localhost", False), ("10.0.0.5", True), ("192.168.1.2", True), ("node17", True)])
def test_crosses_network(host, crosses):
    assert crosses_network(host) is crosses


# -- (7) a real run while strangers knock --------------------------------------------------------

def _wire_address(dask_worker):
    from sdnn_dask.parallel.transport.exchange import EXTENSION

    return dask_worker.extensions[EXTENSION].wire_address()


def _knock(address, marker, stop: threading.Event, count: list) -> None:
    """Strangers, one after another until ``stop``: the pickle first, a 1.5 GB header,
    a forged proof, a connection closed at once."""
    attacks = [b"".join(encode_frames({"hello": Evil(marker), "sender": "tcp://x"})),
               PREFIX.pack(MAGIC, 1_500_000_000, 0), None, b""]
    i = 0
    while not stop.is_set():
        attack = attacks[i % len(attacks)]
        i += 1
        try:
            with socket.create_connection(address, timeout=2) as sock:
                if attack is None:
                    challenge = sock.recv(CHALLENGE.size, socket.MSG_WAITALL)
                    sock.sendall(os.urandom(NONCE + DIGEST))
                    sock.sendall(b"".join(encode_frames({"payload": Evil(marker)})))
                    del challenge
                elif attack:
                    sock.sendall(attack)
                    time.sleep(0.05)
            count[0] += 1
        except OSError:
            pass
        time.sleep(0.01)  # two cores: leave the run most of them


@pytest.fixture
def tcp_client():
    """A plain tcp:// LocalCluster (TLS is the default): its wire's only guard is the
    HMAC handshake; the TLS wire's knocks are in test_wire_tls.py."""
    from sdnn_dask.cluster import local_client

    with local_client(2, security=False) as c:
        yield c


def test_a_model_parallel_run_passes_while_strangers_knock(tcp_client, tmp_path):
    client = tcp_client
    from sdnn_dask.data.radixnet import make_inputs, make_network
    from sdnn_dask.parallel import ModelParallelExecutor, run_serial
    from sdnn_dask.parallel.transport.run import ensure_exchange
    from sdnn_dask.testing import assert_same_result

    marker = tmp_path / "pwned"
    net = make_network(1024, 12, seed=11)
    inputs = make_inputs(400, 1024, seed=11)
    reference = run_serial(net, inputs, "kernel")
    executor = ModelParallelExecutor(client, net)
    ensure_exchange(client)
    addresses = client.run(_wire_address)
    assert all(a is not None for a in addresses.values())
    with knocking(addresses, _knock, marker) as counts:
        for _ in range(2):
            result = executor.run(inputs, partition="hash", k=2)
            assert_same_result(result, reference)
            assert result.transport == "direct"
    assert all(c[0] > 4 for c in counts)  # they did knock, on every worker
    assert client.run(_wire_address) == addresses  # the wires are the same ones
    assert not marker.exists()


# -- (8) every byte of a proof counts ----------------------------------------------------------

def _flipped(proof: bytes, where: str) -> bytes:
    """``proof`` with its first byte kept and later bytes wrong: a check that compares a
    prefix only (the review's mutant compared ``[:1]``) would take it."""
    out = bytearray(proof)
    if where == "last":
        out[-1] ^= 0xFF
    elif where == "second":
        out[1] ^= 0x01
    else:  # every byte but the first
        out[1:] = bytes(b ^ 0xFF for b in out[1:])
    assert out[0] == proof[0] and bytes(out) != proof
    return bytes(out)


@pytest.mark.parametrize("where", ["last", "second", "all-but-first"])
def test_a_proof_right_in_its_first_byte_only_is_refused(tmp_path, where):
    """A connector whose HMAC is the real one (made with the wire's secret) but for a
    byte after the first: dropped before anything is parsed, its pickle never runs. The
    same connection with the proof unchanged gets the listener's proof back, so the
    harness makes the real proof and only the flipped bytes are refused."""
    marker = tmp_path / "pwned"
    w, got, lost = _wire()
    key = bytes.fromhex(w.address[2])
    try:
        for flip in (True, False):
            with _connect(w) as sock:
                challenge = sock.recv(CHALLENGE.size, socket.MSG_WAITALL)
                theirs = challenge[4:]
                mine = os.urandom(NONCE)
                proof = _proof(key, wire_module._CONNECTOR, theirs, mine)
                sock.sendall(mine + (_flipped(proof, where) if flip else proof))
                if flip:
                    try:
                        sock.sendall(b"".join(encode_frames({"op": "piece",
                                                       "payload": Evil(marker)})))
                    except OSError:  # already closed: as good
                        pass
                    heard, took = _until_closed(sock)
                    assert heard == b"" and took < 2.0  # no proof back: dropped at once
                else:
                    answer = sock.recv(DIGEST, socket.MSG_WAITALL)
                    assert answer == _proof(key, wire_module._LISTENER, mine, theirs)
        time.sleep(0.2)
        assert not marker.exists()
        assert got.empty() and lost.empty()
    finally:
        w.close()


@pytest.mark.parametrize("where", ["last", "second", "all-but-first"])
def test_a_listener_proof_right_in_its_first_byte_only_is_refused(where):
    """The connector's side: a listener whose answer is the real proof but for a byte
    after the first is an impostor; the connector sends it no hello. With the answer
    unchanged the same harness completes the handshake (the hello arrives)."""
    key = os.urandom(32)
    for flip in (True, False):
        ours, theirs_sock = socket.socketpair()
        heard: list[bytes] = []

        def listener(sock=theirs_sock, flip=flip, heard=heard):
            with sock:
                sock.settimeout(10)
                nonce = os.urandom(NONCE)
                sock.sendall(CHALLENGE.pack(b"SDNA", nonce))
                answer = sock.recv(NONCE + DIGEST, socket.MSG_WAITALL)
                connector_nonce = answer[:NONCE]
                proof = _proof(key, wire_module._LISTENER, connector_nonce, nonce)
                sock.sendall(_flipped(proof, where) if flip else proof)
                try:
                    while chunk := sock.recv(4096):
                        heard.append(chunk)
                except OSError:
                    pass

        t = threading.Thread(target=listener, daemon=True)
        t.start()
        try:
            ours.settimeout(10)
            if flip:
                with pytest.raises(ConnectionError, match="does not hold"):
                    introduce(ours, key, "tcp://me")
            else:
                introduce(ours, key, "tcp://me")
        finally:
            ours.close()
        t.join(timeout=10)
        assert not t.is_alive()
        assert (heard == []) if flip else b"tcp://me" in b"".join(heard)
