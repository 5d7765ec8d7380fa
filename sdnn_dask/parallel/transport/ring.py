"""A shared-memory ring: the wire's way for large buffers between processes of one host.

On a loopback socket every byte is copied into the kernel by the sender and out of it by
the receiver's reader, with the TCP stack's work on top: 0.5 ms a MB for the sender
alone here, idle, and about twice that on two cores busy with kernels, where a
shared-memory copy takes 0.08 ms a MB. So a :class:`~.wire.Wire` connection between
workers of one host gets a ring: the sender copies a large buffer into it and sends only
where it lies; the receiver's reader copies it out into a buffer of its own and releases
the space. The socket still carries every frame's header, in order, so the ring needs no
locks: its writer is the connection's one sender (under the connection's lock), its
reader the connection's one reader thread, and both go round it in frame order.

Layout: a header page (the sender's random token at 0, the released position at 64 and
again at 72) and then ``size`` bytes of data. Positions only grow; a buffer lies at
``position % size``, never across the end (the rest of the round is skipped). The sender
waits while a buffer would overwrite bytes not yet released.

The file lives in ``/dev/shm`` (memory, not disk) and is unlinked as soon as the reader
has mapped it (or when the sender closes, if no reader ever did): nothing is left behind
by a killed worker once its connections are up. Its pages are reserved when it is made
(``posix_fallocate``), so a full ``/dev/shm`` means no ring (the socket carries
everything), never a fault on first touch.
"""

from __future__ import annotations

import mmap
import os
import secrets
import select
import socket
import stat
import struct
import threading
import time

#: Bytes before the data: the token, then the released position (twice).
HEADER = 4096
TOKEN_BYTES = 16
_RELEASED = struct.Struct("=Q")
_RELEASED_AT = (64, 72)

#: Where rings are made: memory-backed on Linux.
DIRECTORY = "/dev/shm"

#: How long a sender waits for space before it gives up on a reader that releases nothing.
WAIT_LIMIT = 120.0


class RingTimeout(ConnectionError):
    """The reader released no space for :data:`WAIT_LIMIT` seconds."""


class Ring:
    """One direction of one connection's ring (see the module docstring).

    Make it with :meth:`create` (the sender) or :meth:`attach` (the reader)."""

    def __init__(self, path: str, mm: mmap.mmap, size: int, token: bytes):
        self.path, self.size, self.token = path, size, token
        self._mm = mm
        self._view = memoryview(mm)
        self.head = 0  # the sender's next position
        self.taken = 0  # the reader's released position
        self.bytes = 0  # bytes that went this way (the sender's count)
        self._fence = threading.Lock()

    # -- making one ---------------------------------------------------------------------

    @classmethod
    def create(cls, size: int, directory: str = DIRECTORY) -> Ring | None:
        """A new ring of ``size`` data bytes, or None where none can be made (no such
        directory, no room in it)."""
        token = secrets.token_bytes(TOKEN_BYTES)
        path = os.path.join(directory, f"sdnn-wire-{os.getpid()}-{token.hex()[:16]}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            return None
        try:
            os.posix_fallocate(fd, 0, HEADER + size)  # ENOSPC now, not SIGBUS later
            mm = mmap.mmap(fd, HEADER + size)
        except OSError:
            _unlink(path)
            return None
        finally:
            os.close(fd)
        mm[:TOKEN_BYTES] = token
        return cls(path, mm, size, token)

    @classmethod
    def attach(cls, path: str, token: bytes) -> Ring | None:
        """The ring the sender made at ``path`` (unlinked once mapped), or None if it is
        not there or not that sender's (another host's path, a stale file, anything but
        a regular file of this user's: no link followed, no FIFO waited on)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            total = info.st_size
            if (total <= HEADER or not stat.S_ISREG(info.st_mode)
                    or info.st_uid != os.getuid()):
                return None
            mm = mmap.mmap(fd, total)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        if mm[:TOKEN_BYTES] != token:
            mm.close()
            return None
        _unlink(path)  # mapped at both ends: the name is no longer needed
        return cls(path, mm, total - HEADER, token)

    # -- the sender ---------------------------------------------------------------------

    def limit(self) -> int:
        """The most one message puts in the ring (half of it: a message never waits for
        the whole ring to drain)."""
        return self.size // 2

    def released(self) -> int:
        """The reader's released position, never more than it is: the two copies are
        written one after the other, so at most one is being written when read, and
        the smaller one is a value the position had."""
        a = _RELEASED.unpack_from(self._mm, _RELEASED_AT[0])[0]
        b = _RELEASED.unpack_from(self._mm, _RELEASED_AT[1])[0]
        return min(a, b)

    def write(self, buffers: list[memoryview], sock: socket.socket) -> list[int]:
        """Copy ``buffers`` (one message's, at most :meth:`limit` bytes in all) into the
        ring side by side, once the reader has released their space; their positions.

        One span for the message: its header, sent after, is what lets the reader
        release any of it, so a later buffer of the same message must not wait for space
        only the earlier ones' release would free. ``sock`` is the connection, watched
        while waiting: a reader that closed it releases nothing more
        (``ConnectionError``)."""
        total = sum(b.nbytes for b in buffers)
        if not 0 < total <= self.limit():
            raise ValueError(f"{total} bytes do not go by a ring of {self.size}")
        position = self.head
        offset = position % self.size
        if offset + total > self.size:  # not across the end: skip the rest of this round
            position += self.size - offset
            offset = 0
        deadline = None
        while position + total - self.released() > self.size:
            if deadline is None:
                deadline = time.monotonic() + WAIT_LIMIT
            elif time.monotonic() > deadline:
                raise RingTimeout(f"the reader released no ring space in {WAIT_LIMIT:g} s")
            if _closed(sock):
                raise ConnectionError("the connection closed while waiting for ring space")
            time.sleep(50e-6)
        with self._fence:  # a full barrier: the released space is not written early
            pass
        positions = []
        for buffer in buffers:
            n = buffer.nbytes
            at = HEADER + position % self.size
            self._view[at:at + n] = buffer.cast("B")
            positions.append(position)
            position += n
        self.head = position
        self.bytes += total
        return positions

    # -- the reader ---------------------------------------------------------------------

    def take(self, position: int, nbytes: int) -> bytearray:
        """The buffer at ``position``, copied out, and its space released. Raises
        ``ValueError`` (nothing allocated) for a place the sender cannot have written:
        before the last buffer taken, across the end, or past the space released."""
        self._check(position, nbytes)
        out = bytearray(nbytes)
        self.take_into(position, memoryview(out))
        return out

    def _check(self, position: int, nbytes: int) -> None:
        offset = position % self.size
        if (position < self.taken or not 0 < nbytes <= self.limit()
                or offset + nbytes > self.size or position + nbytes > self.taken + self.size):
            raise ValueError(f"{nbytes} bytes at {position} are not in this ring")

    def take_into(self, position: int, out: memoryview) -> None:
        """As :meth:`take`, the buffer copied into ``out`` (its length is the buffer's)."""
        nbytes = out.nbytes
        self._check(position, nbytes)
        offset = position % self.size
        out.cast("B")[:] = self._view[HEADER + offset:HEADER + offset + nbytes]
        with self._fence:  # the copy is done before the space is released
            pass
        end = position + nbytes
        for at in _RELEASED_AT:
            _RELEASED.pack_into(self._mm, at, end)
        self.taken = end

    def close(self) -> None:
        """Unmap it (and unlink it, if no reader did)."""
        _unlink(self.path)
        self._view.release()
        try:
            self._mm.close()
        except BufferError:  # a slice still held somewhere: unmapped when it goes
            pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _closed(sock: socket.socket) -> bool:
    """Whether the peer closed ``sock`` (its reader never writes after the handshake,
    so anything readable is an end of file or a reset)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
