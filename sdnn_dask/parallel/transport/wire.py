"""The exchange's short way between worker processes: plain sockets, no event loop.

A piece sent over a worker's comm goes from the sending thread to its event loop, through
``distributed``'s framing, to the receiver's event loop and on to the waiting thread:
about 1 ms one way here for a few bytes (2.1 ms a round trip, 3.5 ms for 600 kB), when a
blocking socket written by the sending thread and read by a thread of the receiver's
takes 0.09 ms a round trip (1.0 ms for 600 kB). Training steps exchange hundreds of
pieces in sequence, so :class:`Wire` gives each worker process:

* a listening socket on the worker's own host (port chosen by the system), with a thread
  that accepts connections and one reader thread per connection, which files every piece
  in the exchange's mailbox as it arrives;
* one outgoing socket per peer, written by the sending thread itself (``sendall``, under
  a lock per peer; the reader at the other end always drains it, so a send never waits
  on the receiver's compute);
* between workers of one host, a shared-memory :class:`~.ring.Ring` per connection for
  the large buffers (at least :data:`RING_MIN` bytes): the socket carries their place
  in it, not their bytes, which saves the kernel's copies and the TCP stack's work on
  both ends (offered in the hello, taken if the reader can map it, else the socket
  carries everything).

Only for plain ``tcp://`` clusters (a TLS cluster's pieces keep to its comms, which carry
its credentials), and only between workers whose wire addresses the client has handed
out (:func:`~.direct.connect_peers`): anything else goes the comm's way. A connection
opens with the listener's secret (random per worker, handed out with its address); a
connection that does not is closed unread. A connection that breaks tells the exchange
its peer is lost, as a broken comm does.

Frames: a fixed prefix (magic, header length, buffer count), per buffer its length and
where it is (0: on the socket, after the header; else its ring position + 1), the header
(the message pickled, its payload's frames left out of band) and the socket's buffers.
"""

from __future__ import annotations

import hmac
import pickle
import secrets
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from distributed.protocol import Serialized

from .ring import Ring

#: A frame's prefix: magic, header bytes, buffers.
PREFIX = struct.Struct("!4sQI")
MAGIC = b"SDNW"
ENTRY = struct.Struct("!QQ")  # a buffer's length, and where it is

#: Buffers from this size on go by the ring where there is one: below it the socket's
#: cost is the call's, not the bytes'.
RING_MIN = 16 << 10

#: How long a new connection waits for the reader's answer to the ring it offers.
HANDSHAKE_TIMEOUT = 30.0

#: Where a wire listens and the secret it wants: (host, port, secret as hex).
WireAddress = tuple[str, int, str]

#: Socket buffers asked for, each way: a layer's piece (about 1 MB at 512 rows) fits, so
#: the sender does not wait for a busy receiver to drain the one before.
SOCKET_BUFFER = 8 << 20


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
        except OSError:  # capped by the system: what it allows
            pass


def _recv_exactly(sock: socket.socket, n: int) -> bytearray:
    """``n`` bytes from ``sock`` into a buffer of their own (``ConnectionError`` at EOF)."""
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("the connection closed")
        got += k
    return out


def _frames(msg: dict[str, Any],
            place: Callable[[list[memoryview]], list[int]] | None = None) -> list[Any]:
    """A message as the buffers of one frame: a Serialized payload's frames travel as
    they are (not copied); everything else is pickled, arrays out of band.
    ``place(buffers)``, if given, puts some elsewhere (a ring) and says where each is
    (0: it stays in the frame)."""
    payload = msg.get("payload")
    buffers: list[Any] = []
    if isinstance(payload, Serialized):
        head = dict(msg, payload=None, serialized=payload.header)
        buffers = [memoryview(f).cast("B") for f in payload.frames]
        header = pickle.dumps(head, protocol=5)
    else:
        header = pickle.dumps(msg, protocol=5,
                              buffer_callback=lambda b: buffers.append(b.raw()))
    where = place(buffers) if place is not None else [0] * len(buffers)
    entries = b"".join(ENTRY.pack(b.nbytes, w) for b, w in zip(buffers, where, strict=True))
    inline = [b for b, w in zip(buffers, where, strict=True) if w == 0]
    return [PREFIX.pack(MAGIC, len(header), len(buffers)) + entries + header, *inline]


def read_frame(sock: socket.socket, ring: Ring | None = None) -> dict[str, Any]:
    """One message from ``sock`` and its ``ring`` (the inverse of :func:`_frames`)."""
    magic, header_bytes, n = PREFIX.unpack(_recv_exactly(sock, PREFIX.size))
    if magic != MAGIC:
        raise ConnectionError("not an sdnn wire frame")
    raw = _recv_exactly(sock, ENTRY.size * n)
    entries = [ENTRY.unpack_from(raw, ENTRY.size * i) for i in range(n)]
    header = _recv_exactly(sock, header_bytes)
    buffers = []
    for nbytes, where in entries:
        if where == 0:
            buffers.append(_recv_exactly(sock, nbytes))
        elif ring is None:
            raise ConnectionError("a frame points into a ring this connection has not")
        else:
            buffers.append(ring.take(where - 1, nbytes))
    msg = pickle.loads(header, buffers=buffers)
    if "serialized" in msg:  # a Serialized payload: its frames were the buffers
        msg["payload"] = Serialized(msg.pop("serialized"), buffers)
    return msg


class Wire:
    """One worker process's wire (see the module docstring).

    Parameters
    ----------
    host
        The host to listen on (the worker's own).
    here
        The worker's address (it says who it is on the connections it opens).
    deliver
        ``deliver(msg)``: file a message that arrived.
    lost
        ``lost(address)``: the connection from that worker broke.
    ring
        Data bytes of the shared-memory ring offered to each peer on this host (0: none,
        the socket carries everything).
    """

    def __init__(self, host: str, here: str, deliver: Callable[[dict[str, Any]], None],
                 lost: Callable[[str], None], *, ring: int = 0):
        self.here, self._deliver, self._lost = here, deliver, lost
        self._ring_size = ring
        self.secret = secrets.token_hex(16)
        self._listener = socket.create_server((host, 0))
        self.address: WireAddress = (host, self._listener.getsockname()[1], self.secret)
        self._peers: dict[str, WireAddress] = {}
        self._out: dict[str, tuple[socket.socket, threading.Lock, Ring | None]] = {}
        self._lock = threading.Lock()
        self._connecting = threading.Lock()
        self._closing = False
        self._accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, name="sdnn-wire-accept", daemon=True).start()

    def know(self, peers: dict[str, WireAddress]) -> None:
        """Learn the peers' wire addresses (worker address -> (host, port, secret))."""
        with self._lock:
            self._peers.update({a: tuple(w) for a, w in peers.items() if a != self.here})

    def reaches(self, address: str) -> bool:
        """Whether pieces for ``address`` can go this way."""
        return address in self._peers and not self._closing

    # -- sending ----------------------------------------------------------------------

    def ring_bytes(self) -> int:
        """Bytes sent so far by the rings of this wire's connections (open ones)."""
        with self._lock:
            return sum(r.bytes for _, _, r in self._out.values() if r is not None)

    def _connection(self, address: str) -> tuple[socket.socket, threading.Lock, Ring | None]:
        with self._lock:
            found = self._out.get(address)
            if found is not None:
                return found
        # one thread connects at a time: a second connection, opened and closed again,
        # would read as a lost peer at the other end
        with self._connecting:
            with self._lock:
                found = self._out.get(address)
                if found is not None:
                    return found
                host, port, secret = self._peers[address]
            sock = socket.create_connection((host, port))
            _tune(sock)
            ring = (Ring.create(self._ring_size)
                    if self._ring_size and host == self.address[0] else None)
            hello = {"hello": secret, "sender": self.here}
            if ring is not None:
                hello.update(ring=ring.path, ring_token=ring.token.hex())
            try:
                sock.sendall(b"".join(_frames(hello)))
                if ring is not None:
                    ring = _ring_answer(sock, ring)
            except OSError:
                sock.close()
                if ring is not None:
                    ring.close()
                raise
            with self._lock:
                self._out[address] = (sock, threading.Lock(), ring)
                return self._out[address]

    def send(self, address: str, msg: dict[str, Any]) -> int:
        """Write ``msg`` to ``address`` from this thread; the bytes written. Raises
        ``OSError`` if the connection fails (then it is dropped)."""
        sock, lock, ring = self._connection(address)
        with lock:
            before = ring.bytes if ring is not None else 0
            try:
                frames = _frames(msg, _placer(ring, sock) if ring is not None else None)
                for frame in frames:
                    sock.sendall(frame)
            except (OSError, ValueError) as error:  # ValueError: the ring closed under it
                with self._lock:
                    self._out.pop(address, None)
                sock.close()
                if ring is not None:
                    ring.close()
                if isinstance(error, OSError):
                    raise
                raise ConnectionError(f"the connection closed: {error}") from error
            ringed = ring.bytes - before if ring is not None else 0
        return sum(memoryview(f).nbytes for f in frames) + ringed

    # -- receiving --------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closing:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            _tune(sock)
            self._accepted.append(sock)
            threading.Thread(target=self._read, args=(sock,), name="sdnn-wire-read",
                             daemon=True).start()

    def _read(self, sock: socket.socket) -> None:
        sender, ring = None, None
        try:
            hello = read_frame(sock)
            if not hmac.compare_digest(str(hello.get("hello", "")), self.secret):
                return  # not one of ours: closed unread
            sender = hello.get("sender")
            if hello.get("ring"):
                ring = _attach(hello)
                sock.sendall(b"\x01" if ring is not None else b"\x00")
            while True:
                self._deliver(read_frame(sock, ring))
        except (OSError, ConnectionError, EOFError, pickle.UnpicklingError):
            if sender is not None and not self._closing:
                self._lost(sender)
        finally:
            sock.close()
            if ring is not None:
                ring.close()

    def close(self) -> None:
        """Stop listening and close every connection."""
        self._closing = True
        try:  # wakes the thread blocked in accept(); close() alone would leave it there
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            out, self._out = list(self._out.values()), {}
        for sock, lock, ring in out:
            sock.close()  # a send waiting for ring space sees it closed and stops
            if ring is not None and lock.acquire(timeout=2.0):
                ring.close()
                lock.release()
        for sock in self._accepted:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def _placer(ring: Ring, sock: socket.socket) -> Callable[[list[memoryview]], list[int]]:
    def place(buffers: list[memoryview]) -> list[int]:
        """The message's large buffers, in order, while they fit in one ring span; the
        rest stay in the frame."""
        where = [0] * len(buffers)
        chosen, room = [], ring.limit()
        for i, b in enumerate(buffers):
            if RING_MIN <= b.nbytes <= room:
                chosen.append(i)
                room -= b.nbytes
        if chosen:
            positions = ring.write([buffers[i] for i in chosen], sock)
            for i, position in zip(chosen, positions, strict=True):
                where[i] = position + 1
        return where
    return place


def _ring_answer(sock: socket.socket, ring: Ring) -> Ring | None:
    """The reader's answer to the ring offered: the ring if it mapped it, None (and the
    ring closed) if it could not; an end of file is a failed connection."""
    sock.settimeout(HANDSHAKE_TIMEOUT)
    try:
        answer = sock.recv(1)
    except TimeoutError as error:
        raise ConnectionError("the peer did not answer the ring it was offered") from error
    finally:
        sock.settimeout(None)
    if answer == b"\x01":
        return ring
    ring.close()
    if answer == b"":
        raise ConnectionError("the connection closed during its hello")
    return None


def _attach(hello: dict[str, Any]) -> Ring | None:
    try:
        token = bytes.fromhex(str(hello.get("ring_token", "")))
    except ValueError:
        return None
    return Ring.attach(str(hello["ring"]), token)
