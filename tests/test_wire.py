"""The exchange's wire on its own: frames, the secret, a broken connection (no Dask)."""

from __future__ import annotations

import queue
import socket
import threading

import numpy as np
import pytest

from sdnn_dask.parallel.transport.exchange import pack, unpack
from sdnn_dask.parallel.transport.wire import Wire, _frames


def _pair():
    got: queue.Queue = queue.Queue()
    lost: queue.Queue = queue.Queue()
    a = Wire("127.0.0.1", "tcp://a", deliver=got.put, lost=lost.put)
    b = Wire("127.0.0.1", "tcp://b", deliver=got.put, lost=lost.put)
    a.know({"tcp://b": b.address})
    b.know({"tcp://a": a.address})
    return a, b, got, lost


def test_pieces_arrive_whole_in_order_packed_or_not():
    a, b, got, _ = _pair()
    try:
        arrays = [np.arange(n, dtype=np.float32).reshape(-1, 1) for n in (0, 1, 7, 300_000)]
        for i, x in enumerate(arrays):
            payload = pack(x)[0] if i % 2 else x  # a Serialized payload, or the array
            written = a.send("tcp://b", {"op": "piece", "layer": i, "payload": payload})
            assert written >= x.nbytes
        for i, x in enumerate(arrays):
            msg = got.get(timeout=10)
            assert msg["layer"] == i
            y = unpack(msg["payload"])
            np.testing.assert_array_equal(y, x)
            assert y.dtype == x.dtype and y.shape == x.shape
        assert not a.reaches("tcp://c") and a.reaches("tcp://b")
    finally:
        a.close()
        b.close()


def test_a_connection_without_the_secret_is_closed_unread():
    a, b, got, lost = _pair()
    try:
        host, port, _ = b.address
        with socket.create_connection((host, port)) as sock:
            sock.sendall(b"".join(_frames({"hello": "not the secret", "sender": "tcp://x"})))
            sock.sendall(b"".join(_frames({"op": "piece", "payload": 1})))
            sock.settimeout(10)
            try:  # closed by the wire: an end of file, or a reset (data left unread)
                assert sock.recv(1) == b""
            except ConnectionResetError:
                pass
        with pytest.raises(queue.Empty):
            got.get(timeout=0.2)
        assert lost.empty()  # a stranger is not a lost peer
    finally:
        a.close()
        b.close()


def test_a_broken_connection_says_which_peer_is_lost():
    a, b, got, lost = _pair()
    a.send("tcp://b", {"op": "piece", "payload": 1})
    assert got.get(timeout=10)["payload"] == 1
    a.close()  # as a killed worker's sockets close
    assert lost.get(timeout=10) == "tcp://a"
    with pytest.raises(OSError):  # and a send to it fails: its listener is gone
        b.send("tcp://a", {"op": "piece", "payload": 2})
    b.close()


def test_frames_keep_arrays_out_of_band():
    x = np.ones(1000, np.float32)
    frames = _frames({"payload": x})
    assert len(frames) == 2 and frames[1].nbytes == x.nbytes  # the array, not a copy
    assert len(frames[0]) < 1000


def _first_send(wire, start, i):
    start.wait()
    wire.send("tcp://b", {"op": "piece", "payload": i})


def test_first_sends_from_two_threads_at_once_lose_no_peer():
    """Two parts on one worker may open the connection to a peer at the same moment; a
    second connection opened and closed again would read as a lost peer at the other end."""
    for _ in range(5):
        a, b, got, lost = _pair()
        try:
            start = threading.Barrier(4)

            threads = [threading.Thread(target=_first_send, args=(a, start, i))
                       for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(got.get(timeout=10)["payload"] for _ in threads) == [0, 1, 2, 3]
            with pytest.raises(queue.Empty):
                lost.get(timeout=0.2)
        finally:
            a.close()
            b.close()
