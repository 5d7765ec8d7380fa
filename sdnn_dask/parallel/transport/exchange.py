"""Worker-to-worker exchange of model-parallel pieces, without the scheduler.

The direct transport (:mod:`.model_direct`) runs every part of a model-parallel run as one
long-running task; the parts' pieces travel between workers over ``distributed``'s own
comm layer, the way its P2P shuffle does it: a worker plugin (:class:`PieceExchange`)
adds a handler to every worker, and each worker keeps one connection per peer, opened
with the worker's own ``connection_args`` (so TLS and the cluster's credentials apply,
and no new listener is opened). On such a connection the sender writes one-way messages
(no reply), one per piece; the receiver's handler keeps reading them and files each
piece in the mailbox of its run.

Pieces are matched by run token, row group, layer and destination part: runs one after
another, a cancelled run and two executors sharing a cluster never mix, and a piece for
a run that has already ended on this worker is dropped. Serialising (pickle protocol 5,
arrays out of band) happens in the sending task's thread and deserialising in the
receiving one, so both are timed there and the event loop only moves frames.

A client can also file items in a run's boxes and wait for the run's tasks to reply,
through the handler :data:`FEED_OP` (:func:`~.run.feed_run`): that is how a persistent loop (one
task per slot for many steps) is fed its steps and hands back what each step measured,
without a task per step.

A run on a worker ends (and its state goes) when every part it hosts has left, or when
it is aborted: by the client (:func:`abort_run`, when a worker was lost or the run was
interrupted), or here when a peer's connection breaks mid-run, which makes every part of
the runs involving that peer raise :exc:`~.faults.WorkerLostError` at once.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future as ConcurrentFuture
from typing import Any

from dask.utils import parse_bytes
from distributed import WorkerPlugin
from distributed.comm import connect, get_address_host
from distributed.comm.core import CommClosedError
from distributed.core import Status
from distributed.protocol import Serialize, Serialized, deserialize, serialize, to_serialize

from ... import config
from ..faults import WorkerLostError
from .wire import Wire, WireAddress

#: Key of the exchange in ``Worker.extensions``, and the plugin's name.
EXTENSION = "sdnn-exchange"
#: The handler a peer's connection opens with; every later message on it is a piece.
STREAM_OP = "sdnn_exchange_stream"
#: The handler a client calls to feed a run's tasks here and wait for their replies.
FEED_OP = "sdnn_exchange_feed"
#: The source of what the client files in a run's boxes (parts are numbered from 0).
CLIENT = -1
#: Run tokens remembered after their run ended here, so late pieces are dropped.
CLOSED_TOKENS = 4096

#: The exchanges of the workers in this process, by address: a threaded cluster's workers
#: (``LocalCluster(processes=False)``) hand pieces to each other directly.
_IN_PROCESS: dict[str, PieceExchange] = {}
_IN_PROCESS_LOCK = threading.Lock()


def wire_tls(worker: Any) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A TLS worker's (listening, connecting) SSL contexts for its wire, made from its own
    :class:`distributed.Security` as its comms' are (the cluster's CA, the worker's
    certificate, the peer's required both ways).

    Raises
    ------
    RuntimeError
        If the worker's security has no TLS credentials (its comms would have none
        either): the wire does not go in the clear on a ``tls://`` cluster.
    """
    security = worker.security
    listening = security.get_listen_args("worker")["ssl_context"]
    connecting = security.get_connection_args("worker")["ssl_context"]
    if listening is None or connecting is None:
        raise RuntimeError(f"worker {worker.address} is on tls:// but its Security has no "
                           "TLS certificate and CA for the role 'worker' "
                           "(distributed.comm.tls.worker.*): its wire cannot run TLS")
    return listening, connecting


def wire_ring_bytes() -> int:
    """The shared-memory ring a wire offers each peer on its host (``sdnn.transport.
    wire-ring``: bytes, or a size such as ``"16 MiB"``; 0 or false: none)."""
    value = config.get("transport.wire-ring", "16 MiB")
    if value in (None, False, 0, "0"):
        return 0
    return int(parse_bytes(value)) if isinstance(value, str) else int(value)


class RunAborted(RuntimeError):
    """A direct run was stopped from outside (its client cancelled or interrupted it)."""


def pack(obj: Any) -> tuple[Serialized, int]:
    """``obj`` serialised for a message (arrays stay out of band), and its frames' bytes."""
    header, frames = serialize(obj, serializers=("pickle",), on_error="raise")
    return Serialized(header, frames), sum(memoryview(f).nbytes for f in frames)


def unpack(payload: Any) -> Any:
    """The object a message carried (already an object on an in-process comm)."""
    if isinstance(payload, Arrived):
        payload = payload.payload
    if isinstance(payload, Serialize):  # wrapped for a comm that kept it (in process)
        payload = payload.data
    if isinstance(payload, Serialized):
        return deserialize(payload.header, payload.frames)
    return payload


class Arrived:
    """A piece that came from another worker: its payload, when it was queued there and
    when it was filed here (``time.time()`` of each machine)."""

    __slots__ = ("arrived", "payload", "sent")

    def __init__(self, payload: Any, sent: float, arrived: float):
        self.payload, self.sent, self.arrived = payload, sent, arrived


class _Run:
    """One run's state on one worker: its mailbox, its parts, its fate."""

    def __init__(self, token: str):
        self.token = token
        self.cond = threading.Condition()
        #: (group, layer, part) -> {source part: payload}
        self.boxes: dict[tuple[int, int, int], dict[int, Any]] = {}
        self.error: BaseException | None = None
        self.expected = 0  # parts of the run hosted here (known once one joined)
        self.joined = 0
        self.left = 0
        self.peers: set[str] = set()
        self.strategy = "model"
        #: box key -> called (under ``cond``) when that box is filled, or the run fails:
        #: the feed handler's wake-ups on the event loop, for the replies it waits for
        self.watchers: dict[tuple[int, int, int], Any] = {}

    def put(self, group: int, layer: int, parts: Iterable[int], source: int,
            payload: Any) -> None:
        with self.cond:
            for p in parts:
                self.boxes.setdefault((group, layer, p), {})[source] = payload
                wake = self.watchers.get((group, layer, p))
                if wake is not None:
                    wake()
            self.cond.notify_all()

    def fail(self, error: BaseException) -> None:
        with self.cond:
            if self.error is None:
                self.error = error
            self.cond.notify_all()
            for wake in set(self.watchers.values()):
                wake()


class PieceExchange(WorkerPlugin):
    """The per-worker side of the direct transport (see the module docstring).

    Registered on every worker, present and future, by
    :func:`ensure_exchange`; found in a task as ``get_worker().extensions[EXTENSION]``.
    """

    name = EXTENSION

    def setup(self, worker: Any) -> None:
        self.worker = worker
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}
        self._closed: deque[str] = deque(maxlen=CLOSED_TOKENS)
        self._closed_set: set[str] = set()
        self._peers: dict[str, _Peer] = {}
        self.wire: Wire | None = None
        worker.handlers[STREAM_OP] = self._serve
        worker.handlers[FEED_OP] = self._feed
        worker.extensions[EXTENSION] = self
        with _IN_PROCESS_LOCK:
            _IN_PROCESS[worker.address] = self

    def teardown(self, worker: Any) -> None:
        for run in list(self._runs.values()):
            run.fail(RunAborted("the worker's exchange was torn down"))
        for peer in self._peers.values():
            peer.abort()
        if self.wire is not None:
            self.wire.close()
        worker.handlers.pop(STREAM_OP, None)
        worker.handlers.pop(FEED_OP, None)
        worker.extensions.pop(EXTENSION, None)
        with _IN_PROCESS_LOCK:
            if _IN_PROCESS.get(worker.address) is self:
                del _IN_PROCESS[worker.address]

    # -- runs -------------------------------------------------------------------------

    def _run(self, token: str, *, create: bool = True) -> _Run | None:
        with self._lock:
            run = self._runs.get(token)
            if run is None and create and token not in self._closed_set:
                run = self._runs[token] = _Run(token)
            return run

    def join(self, token: str, *, expected: int, peers: Iterable[str],
             strategy: str = "model") -> _Run:
        """Register a part of run ``token`` hosted here (``expected`` parts in all)."""
        run = self._run(token)
        if run is None:
            raise RunAborted(f"run {token} was aborted before this part started")
        with run.cond:
            run.expected = expected
            run.strategy = strategy
            run.joined += 1
            run.peers.update(p for p in peers if p != self.worker.address)
        return run

    def leave(self, token: str) -> None:
        """A part of run ``token`` is done: the run's state goes with its last part."""
        with self._lock:
            run = self._runs.get(token)
            if run is None:
                return
            run.left += 1
            if run.left >= run.expected:
                self._close(token)

    def _close(self, token: str) -> None:  # holds self._lock
        self._runs.pop(token, None)
        if token not in self._closed_set:
            if len(self._closed) == self._closed.maxlen:
                self._closed_set.discard(self._closed[0])
            self._closed.append(token)
            self._closed_set.add(token)

    def abort(self, token: str, error: BaseException) -> bool:
        """Fail every part of run ``token`` here and drop its state; True if it was here."""
        with self._lock:
            run = self._runs.get(token)
            self._close(token)
        if run is not None:
            run.fail(error)
        return run is not None

    def active(self) -> list[str]:
        """Tokens of the runs with state on this worker."""
        with self._lock:
            return sorted(self._runs)

    def _peer_lost(self, address: str) -> None:
        """A peer's connection broke: every run it takes part in cannot finish."""
        with self._lock:
            runs = [r for r in self._runs.values() if address in r.peers]
        for run in runs:
            run.fail(WorkerLostError(run.strategy, [address], " (its connection to "
                                     f"{self.worker.address} broke)"))

    # -- receiving --------------------------------------------------------------------

    async def _serve(self, comm: Any, sender: str) -> Status:
        """Handler of a peer's connection: file every piece it sends until it closes.

        Deserialisation is left to the receiving part (``comm.deserialize = False``)."""
        comm.deserialize = False
        try:
            while True:
                msg = await comm.read()
                if msg.get("op") == "piece":
                    self._file(msg, time.time())
        except (CommClosedError, OSError):
            self._peer_lost(sender)
        return Status.dont_reply

    def _file(self, msg: dict[str, Any], arrived: float) -> None:
        """Put a piece message in its run's mailbox (dropped if the run ended here)."""
        run = self._run(msg["token"])
        if run is not None:
            run.put(msg["group"], msg["layer"], msg["parts"], msg["source"],
                    Arrived(msg["payload"], msg.get("sent", 0.0), arrived))

    async def _feed(self, comm: Any, token: str, items: list[Any], replies: list[Any]
                    ) -> dict[str, Any]:
        """Handler of a client's feed (:func:`~.run.feed_run`): file ``items``, each
        ``(group, layer, part, payload)``, in run ``token``'s boxes from :data:`CLIENT`,
        then wait until every box of ``replies`` (each ``(group, layer, part)``) holds the
        part's own reply, and return them in that order.

        Returns ``{"status": "ok", "replies": [...]}``, or ``"closed"`` (the run has
        already ended here) or ``"failed"`` with ``error``, the run's error as text (the
        client learns the details from the failed task itself)."""
        run = self._run(token)
        if run is None:
            return {"status": "closed", "error": f"run {token} has already ended on "
                                                 f"{self.worker.address}"}
        loop = asyncio.get_running_loop()
        event = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(event.set)

        wanted = [tuple(key) for key in replies]
        with run.cond:
            for key in wanted:
                run.watchers[key] = wake
        try:
            for group, layer, part, payload in items:
                run.put(group, layer, [part], CLIENT, unpack(payload))
            got: dict[tuple, Any] = {}
            while True:
                event.clear()  # before looking: a reply filed from now on sets it again
                with run.cond:
                    if run.error is not None:
                        return {"status": "failed", "error": repr(run.error)}
                    for key in wanted:
                        box = run.boxes.get(key)
                        if key not in got and box and key[2] in box:
                            got[key] = run.boxes.pop(key)[key[2]]
                if len(got) == len(wanted):
                    return {"status": "ok",
                            "replies": [to_serialize(got[key]) for key in wanted]}
                await event.wait()
        finally:
            with run.cond:
                for key in wanted:
                    run.watchers.pop(key, None)

    # -- the wire ---------------------------------------------------------------------

    def wire_address(self) -> WireAddress | None:
        """This worker's :class:`~.wire.Wire` (started on the first call) as its peers
        reach it; None on a cluster that is neither ``tcp://`` nor ``tls://`` (in
        process, other comms). On ``tls://`` the wire runs TLS with the worker's own
        credentials (:func:`wire_tls`)."""
        scheme = self.worker.address.split("://", 1)[0]
        if scheme not in ("tcp", "tls"):
            return None
        with self._lock:
            if self.wire is None:
                self.wire = Wire(get_address_host(self.worker.address), self.worker.address,
                                 deliver=lambda msg: self._file(msg, time.time()),
                                 lost=self._peer_lost, ring=wire_ring_bytes(),
                                 tls=wire_tls(self.worker) if scheme == "tls" else None)
            return self.wire.address

    def know_wires(self, table: dict[str, WireAddress | None]) -> int:
        """Send pieces by the wire to the workers of ``table`` that have one."""
        if self.wire is None:
            return 0
        peers = {a: w for a, w in table.items() if w is not None}
        self.wire.know(peers)
        return len(peers)

    # -- sending ----------------------------------------------------------------------

    def writes_at_once(self, address: str) -> bool:
        """Whether :meth:`send` to ``address`` is done with the message when it returns
        (by the wire; a comm's or an in-process peer's message still reads its arrays
        after)."""
        return self.wire is not None and self.wire.reaches(address)

    def send(self, address: str, msg: dict[str, Any]) -> ConcurrentFuture:
        """Queue ``msg`` to the worker at ``address`` (thread-safe, returns at once).

        The future's result is the bytes written on the wire; its exception a
        :exc:`WorkerLostError` naming ``address`` if the connection failed. A worker in
        this process (a threaded cluster) gets the message filed in its mailbox at once,
        by this thread: no event loop, no wire (0 bytes written). A worker this one
        reaches by its :class:`~.wire.Wire` gets it written by this thread there (the
        future is done when this returns).

        ``msg["payload"]`` is what :func:`pack` made of the object sent, or, with
        ``msg["packed"]`` False, the object itself: packed here unless the wire takes it
        as it is (pickled with its arrays out of band, not copied)."""
        if not msg.get("packed", True) and not self.writes_at_once(address):
            msg = dict(msg, payload=pack(msg["payload"])[0], packed=True)
        with _IN_PROCESS_LOCK:
            peer_here = _IN_PROCESS.get(address)
        if peer_here is not None and peer_here is not self:
            peer_here._file(msg, time.time())
            done: ConcurrentFuture = ConcurrentFuture()
            done.set_result(0)
            return done
        if self.wire is not None and self.wire.reaches(address):
            sent: ConcurrentFuture = ConcurrentFuture()
            try:  # written by this thread, no event loop between
                sent.set_result(self.wire.send(address, msg))
            except OSError as error:
                sent.set_exception(WorkerLostError("model", [address],
                                                   f" (sending to it failed: {error})"))
            return sent
        with self._lock:
            peer = self._peers.get(address)
            if peer is None:
                peer = self._peers[address] = _Peer(address)
        return asyncio.run_coroutine_threadsafe(
            peer.send(msg, self.worker.address, self.worker.connection_args),
            self.worker.loop.asyncio_loop)

    async def connect_peers(self, addresses: Iterable[str]) -> int:
        """Open the connections to ``addresses`` now (before anything is timed)."""
        n = 0
        for address in addresses:
            if address == self.worker.address:
                continue
            with self._lock:
                peer = self._peers.setdefault(address, _Peer(address))
            await peer.ensure(self.worker.address, self.worker.connection_args)
            n += 1
        return n


class _Peer:
    """One outgoing connection to another worker; writes happen one at a time."""

    def __init__(self, address: str):
        self.address = address
        self.comm: Any = None
        self._lock: asyncio.Lock | None = None

    async def ensure(self, local: str, connection_args: dict[str, Any]) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self._open(local, connection_args)

    async def _open(self, local: str, connection_args: dict[str, Any]) -> None:
        if self.comm is None or self.comm.closed():
            self.comm = None
            comm = await connect(self.address, **connection_args)
            await comm.write({"op": STREAM_OP, "sender": local, "reply": False})
            self.comm = comm

    async def send(self, msg: dict[str, Any], local: str,
                   connection_args: dict[str, Any]) -> int:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            try:
                await self._open(local, connection_args)
                return int(await self.comm.write(msg) or 0)
            except (CommClosedError, OSError) as error:
                self.comm = None
                raise WorkerLostError("model", [self.address],
                                      f" (sending to it failed: {error})") from error

    def abort(self) -> None:
        if self.comm is not None and not self.comm.closed():
            self.comm.abort()


def wait_pieces(run: _Run, key: tuple[int, int, int], sources: list[int], *,
                alive: Any, poll: float, timeout: float) -> dict[int, Any]:
    """Block until run ``run``'s box ``key`` holds a payload from every source.

    ``alive()`` is called every ``poll`` seconds and raises if this part must stop
    (its task was cancelled); after ``timeout`` seconds with no piece arriving a
    :exc:`TimeoutError` names the sources still missing.
    """
    deadline = time.monotonic() + timeout
    with run.cond:
        while True:
            if run.error is not None:
                raise run.error
            box = run.boxes.get(key)
            have = 0 if box is None else len(box)
            if have >= len(sources) and all(q in box for q in sources):
                return run.boxes.pop(key, {})
            run.cond.wait(poll)
            alive()
            now = time.monotonic()
            if (run.boxes.get(key) and len(run.boxes[key]) > have):
                deadline = now + timeout  # progress: a piece arrived
            elif now > deadline:
                missing = [q for q in sources if q not in (run.boxes.get(key) or {})]
                raise TimeoutError(
                    f"run {run.token}: group {key[0]}, layer {key[1]}, part {key[2]} waited "
                    f"{timeout:.0f} s for pieces from parts {missing}")
