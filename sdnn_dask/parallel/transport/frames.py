"""The wire's frames: how one message crosses a wire connection, and the bounds every
length read from a peer is checked against before anything is allocated for it.

A frame is a fixed prefix (magic, header length, buffer count), per buffer its length and
where it is (0: on the socket, after the header; :data:`STREAMED`: through the ring in
chunks after the header, each announced on the socket; else its ring position + 1), the
header (the message pickled, its payload's frames left out of band) and the socket's
buffers. Only frames from a peer that passed the handshake of :mod:`.wire` are read:
headers are pickled, as ``multiprocessing`` pickles what authenticated peers send.
"""

from __future__ import annotations

import pickle
import socket
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
from distributed.protocol import Serialized

from .ring import Ring

#: A frame's prefix: magic, header bytes, buffers.
PREFIX = struct.Struct("!4sQI")
MAGIC = b"SDNW"
ENTRY = struct.Struct("!QQ")  # a buffer's length, and where it is
#: Where a buffer too large for the message's ring span is: streamed through the ring in
#: chunks after the header, each announced on the socket by an ENTRY (its length, its
#: ring position + 1), so a piece larger than the ring never falls back to the socket.
STREAMED = (1 << 64) - 1

#: The most a frame may carry, checked before anything is allocated: header bytes, buffer
#: count, and bytes of the buffers on the socket (a layer's piece is about 1 MB at 512
#: rows, a gradient bucket a few MB). A sender refuses a larger message
#: (:exc:`FrameTooLarge`).
MAX_HEADER = 16 << 20
MAX_BUFFERS = 1 << 16
MAX_FRAME_BYTES = 4 << 30

#: Buffers read from the socket from this size on are allocated untouched (see
#: :func:`_recv_exactly`).
LAZY_BYTES = 1 << 20


class FrameError(ValueError):
    """A frame that breaks the wire's format or bounds: its connection is closed."""


class FrameTooLarge(ValueError):
    """A message larger than a frame may be (:data:`MAX_FRAME_BYTES` and the like)."""


def _recv_exactly(sock: socket.socket, n: int) -> bytearray | memoryview:
    """``n`` bytes from ``sock`` into a buffer of their own (``ConnectionError`` at EOF).
    From :data:`LAZY_BYTES` on the buffer is not zeroed first (``bytearray`` would touch
    every page): its memory is taken as the bytes arrive, not when they are announced."""
    out = bytearray(n) if n < LAZY_BYTES else np.empty(n, np.uint8)
    view = memoryview(out)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("the connection closed")
        got += k
    return out if n < LAZY_BYTES else view


def encode_frames(msg: dict[str, Any],
            place: Callable[[list[memoryview]], list[int]] | None = None) -> list[Any]:
    """A message as the buffers of one frame: a Serialized payload's frames travel as
    they are (not copied); everything else is pickled, arrays out of band.
    ``place(buffers)``, if given, puts some elsewhere (a ring) and says where each is
    (0: it stays in the frame). Raises :exc:`FrameTooLarge` past the frame's bounds
    (before anything is placed)."""
    payload = msg.get("payload")
    buffers: list[Any] = []
    if isinstance(payload, Serialized):
        head = dict(msg, payload=None, serialized=payload.header)
        buffers = [memoryview(f).cast("B") for f in payload.frames]
        header = pickle.dumps(head, protocol=5)
    else:
        header = pickle.dumps(msg, protocol=5,
                              buffer_callback=lambda b: buffers.append(b.raw()))
    total = sum(b.nbytes for b in buffers)
    if len(header) > MAX_HEADER or len(buffers) > MAX_BUFFERS or total > MAX_FRAME_BYTES:
        raise FrameTooLarge(
            f"a message of {len(header)} header bytes and {len(buffers)} buffers of "
            f"{total} bytes is past the wire's bounds ({MAX_HEADER}, {MAX_BUFFERS}, "
            f"{MAX_FRAME_BYTES}): send it in pieces")
    where = place(buffers) if place is not None else [0] * len(buffers)
    entries = b"".join(ENTRY.pack(b.nbytes, w) for b, w in zip(buffers, where, strict=True))
    after = [b if w == 0 else Streamed(b) for b, w in zip(buffers, where, strict=True)
             if w in (0, STREAMED)]
    return [PREFIX.pack(MAGIC, len(header), len(buffers)) + entries + header, *after]


class Streamed:
    """A buffer that goes through the ring in chunks after the frame's header, each
    announced on the socket (:data:`STREAMED`)."""

    def __init__(self, buffer: memoryview):
        self.buffer = buffer


def stream_through(sock: socket.socket, ring: Ring, buffer: memoryview) -> int:
    """Write ``buffer`` through ``ring`` in chunks of at most its limit, each followed by
    its place on ``sock`` (the reader takes each as its notice comes, which frees the
    space for the next); the socket's bytes."""
    step, view, sent = ring.limit(), buffer.cast("B"), 0
    for start in range(0, view.nbytes, step):
        chunk = view[start:start + step]
        position = ring.write([chunk], sock)[0]
        notice = ENTRY.pack(chunk.nbytes, position + 1)
        sock.sendall(notice)
        sent += len(notice)
    return sent


def _recv_streamed(sock: socket.socket, ring: Ring, nbytes: int) -> bytearray | memoryview:
    """A :data:`STREAMED` buffer of ``nbytes`` (bounded by the caller): its chunks'
    notices from ``sock``, each checked before its bytes are taken from ``ring``."""
    out = bytearray(nbytes) if nbytes < LAZY_BYTES else np.empty(nbytes, np.uint8)
    view = memoryview(out).cast("B")
    got = 0
    while got < nbytes:
        chunk, where = ENTRY.unpack(_recv_exactly(sock, ENTRY.size))
        if where in (0, STREAMED) or not 0 < chunk <= nbytes - got:
            raise FrameError(f"a streamed buffer's chunk of {chunk} bytes at {where} "
                             f"({got} of {nbytes} bytes taken)")
        ring.take_into(where - 1, view[got:got + chunk])  # checks the ring's bounds
        got += chunk
    return out if nbytes < LAZY_BYTES else view


def read_frame(sock: socket.socket, ring: Ring | None = None) -> dict[str, Any]:
    """One message from ``sock`` and its ``ring`` (the inverse of :func:`encode_frames`), read
    from an authenticated peer. Raises :exc:`FrameError` for a frame past its bounds
    (nothing allocated for it), ``ConnectionError`` at EOF."""
    magic, header_bytes, n = PREFIX.unpack(_recv_exactly(sock, PREFIX.size))
    if magic != MAGIC:
        raise FrameError("not an sdnn wire frame")
    if header_bytes > MAX_HEADER or n > MAX_BUFFERS:
        raise FrameError(f"a frame of {header_bytes} header bytes and {n} buffers")
    raw = _recv_exactly(sock, ENTRY.size * n)
    entries = [ENTRY.unpack_from(raw, ENTRY.size * i) for i in range(n)]
    if sum(nbytes for nbytes, where in entries if where in (0, STREAMED)) > MAX_FRAME_BYTES:
        raise FrameError("a frame's buffers are past the wire's bound")
    header = _recv_exactly(sock, header_bytes)
    buffers = []
    for nbytes, where in entries:
        if where == 0:
            buffers.append(_recv_exactly(sock, nbytes))
        elif ring is None:
            raise FrameError("a frame points into a ring this connection has not")
        elif where == STREAMED:
            buffers.append(_recv_streamed(sock, ring, nbytes))
        else:
            buffers.append(ring.take(where - 1, nbytes))  # checks its bounds
    msg = pickle.loads(header, buffers=buffers)
    if "serialized" in msg:  # a Serialized payload: its frames were the buffers
        msg["payload"] = Serialized(msg.pop("serialized"), buffers)
    return msg
