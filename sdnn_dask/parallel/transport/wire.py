"""The exchange's short way between worker processes: blocking sockets, no event loop.

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
  the large buffers (at least :data:`RING_MIN` bytes; one larger than the ring's span
  goes through it in chunks): the socket carries their place in it, not their bytes,
  which saves the kernel's copies and the TCP stack's work (and TLS's encryption) on
  both ends (offered in the hello, taken if the reader can map it, else the socket
  carries everything).

On ``tcp://`` clusters the sockets are plain; on ``tls://`` clusters they run TLS with
the cluster's own credentials (the worker's :class:`distributed.Security`: its listening
context for the listener, its connecting one for the connector, mutual authentication
with the cluster's CA, as the cluster's comms do), so a peer without the cluster's
certificate cannot complete a connection, and the frames are encrypted. Only between
workers whose wire addresses the client has handed out (:func:`~.run.connect_peers`):
anything else goes the comm's way. A connection that breaks tells the exchange its peer
is lost, as a broken comm does.

Who may talk: each wire has a random secret, handed out with its address (through the
cluster's comms) and never sent on the wire itself. A new connection proves it holds it
before any of its bytes is parsed as anything but fixed-size handshake bytes, as
:mod:`multiprocessing.connection` does: the listener sends a random nonce, the connector
answers with its own nonce and an HMAC-SHA256 of both under the secret, and the listener
answers with its HMAC of them (so the connector knows it reached the right process
before it says anything). Under TLS this handshake runs inside the TLS session, after it:
defence in depth, the secret naming one wire of the cluster where the certificate only
names the cluster. A connection that fails (its TLS handshake or the HMAC's), or takes
more than :data:`AUTH_TIMEOUT` seconds for both, is closed unread and is no lost peer. At most
:data:`MAX_PENDING` connections wait to prove themselves at once (a new one closes the
oldest), and at most :data:`MAX_CONNECTIONS` (plus one per known peer) are open at once
(more are closed as they come). Without TLS the frames are authenticated, not
encrypted: on a network, anyone who can watch it can read them (:func:`crosses_network`;
:func:`~.run.connect_peers` warns once per cluster). The shared-memory ring stays under
TLS: it never leaves the host, its file is the user's alone (mode 0600), and its path and
token go inside the TLS session.

After the handshake the hello (a fixed struct: the sender's address and the ring it
offers, by length) and then frames (:mod:`.frames`: a fixed prefix, per buffer its length
and where it is, on the socket, in the ring or streamed through it in chunks, the pickled
header and the socket's buffers). Every length is checked against its bound
(:data:`~.frames.MAX_HEADER`, :data:`~.frames.MAX_BUFFERS`,
:data:`~.frames.MAX_FRAME_BYTES`, the ring's size) before anything is allocated for it;
a frame that breaks one closes the connection (the peer is lost, one line in the log, no
traceback). Headers are pickled, as ``multiprocessing`` pickles what authenticated peers
send: only a process given the secret by the run's client can get one read.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from .frames import (
    STREAMED,
    FrameError,
    FrameTooLarge,
    Streamed,
    encode_frames,
    read_frame,
    stream_through,
)
from .ring import DIRECTORY, Ring

logger = logging.getLogger(__name__)

#: Buffers from this size on go by the ring where there is one: below it the socket's
#: cost is the call's, not the bytes'.
RING_MIN = 16 << 10

#: How long a new connection waits for the reader's answer to the ring it offers (and,
#: connecting, for the listener's side of the handshake).
HANDSHAKE_TIMEOUT = 30.0

#: Seconds a new connection has to prove it holds the secret and say hello (a peer does
#: it in well under a millisecond); then it is closed unread.
AUTH_TIMEOUT = 5.0

#: Connections waiting to prove themselves at once; one more closes the oldest.
MAX_PENDING = 8

#: Connections open at once, beyond one per known peer; more are closed as they come.
MAX_CONNECTIONS = 64

#: The handshake: the listener's challenge (magic, nonce), the connector's answer (its
#: nonce, its HMAC), the listener's HMAC; then the hello (magic, sender and ring path
#: lengths, ring token) and its two strings.
NONCE = 32
AUTH_MAGIC = b"SDNA"
CHALLENGE = struct.Struct(f"!4s{NONCE}s")
DIGEST = hashlib.sha256().digest_size
HELLO = struct.Struct("!4sHH16s")
HELLO_MAGIC = b"SDNH"
MAX_NAME = 4096
_CONNECTOR, _LISTENER = b"sdnn-wire/1 connector", b"sdnn-wire/1 listener"

#: Where a wire listens and the secret it wants: (host, port, secret as hex).
WireAddress = tuple[str, int, str]

#: Socket buffers asked for, each way: a layer's piece (about 1 MB at 512 rows) fits, so
#: the sender does not wait for a busy receiver to drain the one before.
SOCKET_BUFFER = 8 << 20

#: accept() errors that pass (out of descriptors or memory for a moment, a connection
#: reset before it was taken): the listener waits a little and goes on.
_PASSING = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED,
            errno.EPROTO, errno.EPERM, errno.EINTR}


def crosses_network(host: str) -> bool:
    """Whether a wire listening on ``host`` is reachable beyond this machine (its frames
    then cross a network, authenticated but not encrypted). Names other than
    ``localhost`` count as a network: they are not looked up."""
    if host.strip("[]").lower() in ("localhost", "localhost.localdomain"):
        return False
    try:
        return not ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return True


def _tune(sock: socket.socket) -> None:
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
        except OSError:  # capped by the system: what it allows
            pass


def _recv_by(sock: socket.socket, n: int, deadline: float) -> bytearray:
    """``n`` bytes (a handshake's, so few) by ``deadline`` (``time.monotonic``): a peer
    trickling a byte at a time gets no longer than one that says nothing."""
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the handshake took too long")
        sock.settimeout(left)
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("the connection closed during its handshake")
        got += k
    return out


def _proof(key: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(key, role + first + second, hashlib.sha256).digest()


def _key(secret: str) -> bytes:
    try:
        return bytes.fromhex(secret)
    except (TypeError, ValueError) as error:
        raise ValueError("a wire secret is hex") from error


def introduce(sock: socket.socket, key: bytes, sender: str, ring: Ring | None = None,
              timeout: float = HANDSHAKE_TIMEOUT) -> Ring | None:
    """The connector's side of the handshake and hello on a new connection ``sock`` to
    a wire holding ``key``; the ring if the reader took it.

    Raises ``ConnectionError`` if the listener does not prove it holds the key (or the
    connection fails), ``TimeoutError`` if it is silent for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    magic, theirs = CHALLENGE.unpack(_recv_by(sock, CHALLENGE.size, deadline))
    if magic != AUTH_MAGIC:
        raise ConnectionError("not an sdnn wire")
    mine = secrets.token_bytes(NONCE)
    sock.sendall(mine + _proof(key, _CONNECTOR, theirs, mine))
    answer = bytes(_recv_by(sock, DIGEST, deadline))
    if not hmac.compare_digest(answer, _proof(key, _LISTENER, mine, theirs)):
        raise ConnectionError("the listener does not hold its wire's secret")
    name = sender.encode()
    path = ring.path.encode() if ring is not None else b""
    token = ring.token if ring is not None else bytes(16)
    sock.sendall(HELLO.pack(HELLO_MAGIC, len(name), len(path), token) + name + path)
    if ring is not None:
        ring = _ring_answer(sock, ring, deadline)
    sock.settimeout(None)
    return ring


def _authenticate(sock: socket.socket, key: bytes,
                  timeout: float | None = None) -> tuple[str, str, bytes] | None:
    """The listener's side: the connector's (sender, ring path, ring token) once it has
    proved it holds ``key``; None if it did not (nothing of it parsed but fixed-size
    handshake bytes). Raises ``OSError`` if the connection fails or takes longer than
    ``timeout`` (default :data:`AUTH_TIMEOUT`)."""
    deadline = time.monotonic() + (AUTH_TIMEOUT if timeout is None else timeout)
    mine = secrets.token_bytes(NONCE)
    sock.sendall(CHALLENGE.pack(AUTH_MAGIC, mine))
    answer = bytes(_recv_by(sock, NONCE + DIGEST, deadline))
    theirs, proof = answer[:NONCE], answer[NONCE:]
    if not hmac.compare_digest(proof, _proof(key, _CONNECTOR, mine, theirs)):
        return None
    sock.sendall(_proof(key, _LISTENER, theirs, mine))
    # from here on the peer holds the secret; still, every length is bounded
    magic, n_name, n_path, token = HELLO.unpack(_recv_by(sock, HELLO.size, deadline))
    if magic != HELLO_MAGIC or n_name > MAX_NAME or n_path > MAX_NAME:
        raise FrameError("not a wire hello")
    names = bytes(_recv_by(sock, n_name + n_path, deadline))
    sock.settimeout(None)
    try:
        return names[:n_name].decode(), names[n_name:].decode(), token
    except UnicodeDecodeError as error:
        raise FrameError("a hello's names are not text") from error


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
    tls
        ``(listening, connecting)`` SSL contexts (a cluster's
        ``Security.get_listen_args(role)["ssl_context"]`` and
        ``get_connection_args(role)["ssl_context"]``): every connection runs TLS with
        them, the peer's certificate required both ways. None: plain sockets.
    """

    def __init__(self, host: str, here: str, deliver: Callable[[dict[str, Any]], None],
                 lost: Callable[[str], None], *, ring: int = 0,
                 tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None):
        self.here, self._deliver, self._lost = here, deliver, lost
        self._ring_size = ring
        self._tls = _tls_contexts(tls)
        self.secret = secrets.token_hex(32)
        self._key = _key(self.secret)
        self._listener = socket.create_server((host, 0))
        self.address: WireAddress = (host, self._listener.getsockname()[1], self.secret)
        self._peers: dict[str, tuple[str, int, bytes]] = {}
        self._out: dict[str, tuple[socket.socket, threading.Lock, Ring | None]] = {}
        self._lock = threading.Lock()
        self._connecting = threading.Lock()
        self._closing = False
        self._accepted: set[socket.socket] = set()  # open, proved or not
        self._pending: dict[socket.socket, None] = {}  # not proved yet, oldest first
        self.sent = 0  # messages written, for a caller to see the wire was used
        # the client warns once per cluster when frames cross a network in the clear
        # (connect_peers); every worker saying it again would only repeat it
        if crosses_network(host) and self._tls is None:
            logger.debug("the sdnn wire listens on %s without TLS", host)
        threading.Thread(target=self._accept, name="sdnn-wire-accept", daemon=True).start()

    def know(self, peers: dict[str, WireAddress]) -> None:
        """Learn the peers' wire addresses (worker address -> (host, port, secret))."""
        table = {a: (str(w[0]), int(w[1]), _key(w[2])) for a, w in peers.items()
                 if a != self.here}
        with self._lock:
            self._peers.update(table)

    @property
    def encrypted(self) -> bool:
        """Whether its connections run TLS."""
        return self._tls is not None

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
                host, port, key = self._peers[address]
            sock = socket.create_connection((host, port), timeout=HANDSHAKE_TIMEOUT)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _tune(sock)
            if self._tls is not None:
                try:  # the handshake under the timeout set above (a deadline for it all)
                    sock = self._tls[1].wrap_socket(sock, server_side=False)
                except OSError:
                    sock.close()
                    raise
            ring = (Ring.create(self._ring_size)
                    if self._ring_size and host == self.address[0] else None)
            try:
                ring = introduce(sock, key, self.here, ring)
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
        ``OSError`` if the connection fails (then it is dropped), :exc:`~.frames.FrameTooLarge`
        (nothing sent) for a message past a frame's bounds."""
        sock, lock, ring = self._connection(address)
        with lock:
            before = ring.bytes if ring is not None else 0
            notices = 0
            try:
                frames = encode_frames(msg, _placer(ring, sock) if ring is not None else None)
                for frame in frames:
                    if isinstance(frame, Streamed):
                        notices += stream_through(sock, ring, frame.buffer)
                    else:
                        sock.sendall(frame)
            except FrameTooLarge:
                raise
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
            self.sent += 1
        return sum(memoryview(f).nbytes for f in frames
                   if not isinstance(f, Streamed)) + ringed + notices

    # -- receiving --------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closing:
            try:
                sock, _ = self._listener.accept()
            except OSError as error:
                if self._closing or error.errno not in _PASSING:
                    return
                time.sleep(0.05)  # out of descriptors: some close soon
                continue
            oldest = None
            if self._tls is not None:
                try:  # no I/O here: the reader's thread does the handshake
                    sock = self._tls[0].wrap_socket(sock, server_side=True,
                                                    do_handshake_on_connect=False)
                except OSError:
                    sock.close()
                    continue
            with self._lock:
                if len(self._accepted) >= MAX_CONNECTIONS + len(self._peers):
                    sock.close()  # over the cap: closed as it comes, no thread
                    continue
                if len(self._pending) >= MAX_PENDING:
                    oldest = next(iter(self._pending))
                    del self._pending[oldest]
                self._accepted.add(sock)
                self._pending[sock] = None
            if oldest is not None:
                _shut(oldest)  # its reader wakes and closes it
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._read, args=(sock,), name="sdnn-wire-read",
                             daemon=True).start()

    def _read(self, sock: socket.socket) -> None:
        sender, ring = None, None
        try:
            deadline = time.monotonic() + AUTH_TIMEOUT  # TLS and HMAC handshakes, both
            if isinstance(sock, ssl.SSLSocket):
                # the deadline bounds the whole TLS handshake, however slow its bytes;
                # no certificate of the cluster's: SSLError, closed with nothing parsed
                sock.settimeout(max(deadline - time.monotonic(), 1e-3))
                sock.do_handshake()
            hello = _authenticate(sock, self._key, deadline - time.monotonic())
            if hello is None:
                return  # not one of ours: closed unread
            with self._lock:
                if self._pending.pop(sock, False) is False:
                    return  # closed as the oldest waiting while it proved itself
            sender, path, token = hello
            _tune(sock)
            if path:
                ring = _attach(path, token)
                sock.sendall(b"\x01" if ring is not None else b"\x00")
            while True:
                self._deliver(read_frame(sock, ring))
        except (OSError, EOFError):  # the connection broke (or a stranger was too slow)
            pass
        except Exception as error:  # a bad frame: one line, not a thread's traceback
            if sender is not None and not self._closing:
                logger.warning("sdnn wire: closed the connection from %s: %s: %s", sender,
                               type(error).__name__, error)
        finally:
            with self._lock:
                self._pending.pop(sock, None)
                self._accepted.discard(sock)
            sock.close()
            if ring is not None:
                ring.close()
            if sender is not None and not self._closing:
                self._lost(sender)

    def close(self) -> None:
        """Stop listening and close every connection."""
        self._closing = True
        _shut(self._listener)  # wakes the thread blocked in accept(); close() would not
        self._listener.close()
        with self._lock:
            out, self._out = list(self._out.values()), {}
            accepted = list(self._accepted)
        for sock, lock, ring in out:
            sock.close()  # a send waiting for ring space sees it closed and stops
            if ring is not None and lock.acquire(timeout=2.0):
                ring.close()
                lock.release()
        for sock in accepted:
            _shut(sock)  # its reader wakes and closes it


def _shut(sock: socket.socket) -> None:
    """Wake a thread blocked on ``sock`` (its reads end). The plain socket's shutdown
    even for a TLS one: ``SSLSocket.shutdown`` drops its TLS state under the reader."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _tls_contexts(tls: tuple[ssl.SSLContext, ssl.SSLContext] | None
                  ) -> tuple[ssl.SSLContext, ssl.SSLContext] | None:
    """The wire's (listening, connecting) contexts, checked: both must verify the peer's
    certificate (the cluster's mutual authentication)."""
    if tls is None:
        return None
    try:
        listening, connecting = tls
    except (TypeError, ValueError):
        raise TypeError("tls is a (listening, connecting) pair of ssl.SSLContext, "
                        f"not {tls!r}") from None
    for name, context in (("listening", listening), ("connecting", connecting)):
        if not isinstance(context, ssl.SSLContext):
            raise TypeError(f"the wire's {name} TLS context is {type(context).__name__}, "
                            "not ssl.SSLContext")
        if context.verify_mode != ssl.CERT_REQUIRED:
            raise ValueError(f"the wire's {name} TLS context does not require the peer's "
                             "certificate (verify_mode CERT_REQUIRED): a stranger could "
                             "connect")
    # no session tickets: nothing resumes a wire's session, and after its handshake the
    # listener must write nothing the sender would read as the peer closing (ring.py)
    listening.num_tickets = 0
    return listening, connecting


def _placer(ring: Ring, sock: socket.socket) -> Callable[[list[memoryview]], list[int]]:
    def place(buffers: list[memoryview]) -> list[int]:
        """The message's large buffers, in order, in one ring span while they fit; from
        the first that does not, every large one is streamed through the ring after the
        header (:data:`~.frames.STREAMED`; the reader takes the ring's buffers in the order of the
        frame's entries, so none is placed after a streamed one). Small ones stay in the
        frame."""
        where = [0] * len(buffers)
        chosen, room, streaming = [], ring.limit(), False
        for i, b in enumerate(buffers):
            if b.nbytes < RING_MIN:
                continue
            if not streaming and b.nbytes <= room:
                chosen.append(i)
                room -= b.nbytes
            else:
                streaming = True
                where[i] = STREAMED
        if chosen:
            positions = ring.write([buffers[i] for i in chosen], sock)
            for i, position in zip(chosen, positions, strict=True):
                where[i] = position + 1
        return where
    return place


def _ring_answer(sock: socket.socket, ring: Ring, deadline: float) -> Ring | None:
    """The reader's answer to the ring offered: the ring if it mapped it, None (and the
    ring closed) if it could not; an end of file or silence is a failed connection
    (``ConnectionError``; the ring left to the caller)."""
    try:
        answer = bytes(_recv_by(sock, 1, deadline))
    except TimeoutError as error:  # the caller closes the ring
        raise ConnectionError("the peer did not answer the ring it was offered") from error
    if answer == b"\x01":
        return ring
    ring.close()
    return None


def _attach(path: str, token: bytes) -> Ring | None:
    """The ring a peer offered, if it is one of the wire's own in :data:`~.ring.
    DIRECTORY` (no other file is opened)."""
    if os.path.dirname(path) != DIRECTORY or not os.path.basename(path).startswith(
            "sdnn-wire-"):
        return None
    return Ring.attach(path, token)
