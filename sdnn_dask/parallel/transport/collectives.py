"""Collectives of a persistent run's slots: keyed messages, feeds, all-reduce, pair sums.

A slot (row group ``g``, part ``c``) of a persistent run (a training loop,
:func:`sdnn_dask.training.slot_task.run_slot`) talks to the other slots through its
worker's :class:`~.exchange.PieceExchange`: :class:`Slot` files its pieces by step,
phase, layer and destination, waits for the ones it reads, counts bytes and seconds, and
receives its feeds and hands back its replies. :func:`allreduce` and :func:`pair_sum` sum
a vector across the row groups on top of it. Bytes only: what the vectors mean is the
caller's.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .exchange import (
    CLIENT,
    PieceExchange,
    unpack,
    wait_pieces,
)

#: Phases of a step (the low 3 bits of a message's key group); the client's feeds and
#: the slots' replies have phases of their own.
FORWARD, LOGITS, DLOGITS, BACKWARD, REDUCE, GATHER, FEED, REPLY = range(8)

#: The byte counters a slot returns: per phase, cross-worker and same-worker.
BYTE_KEYS = ("forward", "backward", "readout", "gradient")

#: Where a slot's step time goes, in seconds (each step's reply has them all).
TIMING_KEYS = ("forward_s", "backward_s", "update_s", "wait_s", "send_s", "allreduce_s")

#: How long an idle loop waits for its next feed: for ever (a cancelled task, or a client
#: gone, still stops it within a poll).
FEED_TIMEOUT = float("inf")


class Slot:
    """What one slot's task needs of the exchange: where its peers are, and the sends."""

    def __init__(self, exchange: PieceExchange, run: Any, token: str, group: int, part: int,
                 groups: int, route: list[list[str]], alive: Any, timeout: float,
                 poll: float):
        self.exchange, self.run, self.token = exchange, run, token
        self.group, self.part, self.groups, self.route = group, part, groups, route
        self.here = exchange.worker.address
        self.alive, self.timeout, self.poll = alive, timeout, poll
        self.step = 0
        self.sent: list[Any] = []
        self.checked = 0
        self.begin_step(0)

    def begin_step(self, step: int) -> None:
        """Step ``step`` of the loop starts: its messages are keyed by it, counted anew."""
        self.step = step
        self.moved = dict.fromkeys(BYTE_KEYS, 0)
        self.local = dict.fromkeys(BYTE_KEYS, 0)
        self.wait_s = 0.0
        self.send_s = 0.0

    def _key_group(self, group: int, phase: int) -> int:
        return 8 * (self.step * self.groups + group) + phase

    def next_feed(self, number: int) -> Any:
        """Wait for the client's feed ``number`` (a list of steps, or None: stop)."""
        got = wait_pieces(self.run, (8 * self.group + FEED, number, self.part), [CLIENT],
                          alive=self.alive, poll=self.poll, timeout=FEED_TIMEOUT)
        return unpack(got[CLIENT])

    def reply(self, number: int, value: Any) -> None:
        """Hand the client what feed ``number``'s steps measured (its feed call returns)."""
        self.run.put(8 * self.group + REPLY, number, [self.part], self.part, value)

    def send(self, phase: int, counter: str, group: int, layer: int, part: int,
             source: int, array: np.ndarray, *, reused: bool = False) -> Any:
        """File ``array`` in slot ``(group, part)``'s box for ``phase`` and ``layer``.

        The array is not copied (a slot in this process gets the array itself, a message
        to another worker reads it until written), so it must not change after; with
        ``reused`` (the sender will write into it) a copy is sent, unless the exchange
        has written it when this returns (its wire). The message's future is returned
        (None in process)."""
        t0 = time.perf_counter()
        where = self.route[group][part]
        key_group = self._key_group(group, phase)
        future = None
        if reused and (where == self.here or not self.exchange.writes_at_once(where)):
            array = array.copy()
        if where == self.here:  # same process: the array itself
            self.run.put(key_group, layer, [part], source, array)
            if (group, part) != (self.group, self.part):
                self.local[counter] += array.nbytes
        else:  # packed by the exchange, unless its wire takes the array as it is
            msg = {"op": "piece", "token": self.token, "group": key_group, "layer": layer,
                   "source": source, "parts": [part], "payload": array, "packed": False,
                   "sent": time.time(), "reply": False}
            future = self.exchange.send(where, msg)
            self.sent.append(future)
            self.moved[counter] += array.nbytes
        self.send_s += time.perf_counter() - t0
        return future

    def receive(self, phase: int, layer: int, sources: list[int]) -> dict[int, np.ndarray]:
        """Wait for this slot's pieces of ``phase`` and ``layer`` from ``sources``."""
        t0 = time.perf_counter()
        got = wait_pieces(self.run, (self._key_group(self.group, phase), layer, self.part),
                          sources, alive=self.alive, poll=self.poll, timeout=self.timeout)
        self.wait_s += time.perf_counter() - t0
        return {q: unpack(v) for q, v in got.items()}

    def mark(self) -> float:
        """Seconds so far minus those spent waiting and sending: differences of marks
        are compute."""
        return time.perf_counter() - self.wait_s - self.send_s

    def check_sends(self) -> None:
        """Raise if a send already failed (its future holds a WorkerLostError); each
        future is looked at until it is done, once."""
        while self.checked < len(self.sent) and self.sent[self.checked].done():
            self.sent[self.checked].result()
            self.checked += 1

    def flush(self) -> None:
        """Wait until every message this slot sent is written."""
        for future in self.sent:
            future.result(timeout=self.timeout)


def chunks(n: int, groups: int) -> np.ndarray:
    """Bounds of ``groups`` near-equal contiguous chunks of ``0..n``."""
    return np.linspace(0, n, groups + 1).round().astype(np.int64)


def allreduce(slot: Slot, groups: int, vector: np.ndarray) -> np.ndarray:
    """The sum over the ``groups`` row groups of this part's flat gradient ``vector``
    (written into ``vector``, which is returned).

    Reduce-scatter, then all-gather: slot ``(g, c)`` sums chunk ``g`` of every group's
    vector, in group order, and sends the sum to the other groups' slots of part ``c``.
    Each chunk is summed once, so every group ends with the same bits; each slot sends
    and receives ``2 (R - 1) / R`` of a gradient (no slot receives more than that).
    With two groups that is one gradient each way, which :func:`pair_sum` sends in one
    round instead of two (floating-point addition of two terms is commutative, so both
    ends get ``v_0 + v_1`` to the bit, as the two rounds give).
    """
    me, part = slot.group, slot.part
    if groups == 2:  # one round: the whole vector each way (the same bytes as two halves)
        return pair_sum(slot, vector, 0, vector.size, 0)
    bounds = chunks(vector.size, groups)
    others = [g for g in range(groups) if g != me]
    for g in others:
        slot.send(REDUCE, "gradient", g, 0, part, me, vector[bounds[g]:bounds[g + 1]])
    got = slot.receive(REDUCE, 0, others)
    got[me] = vector[bounds[me]:bounds[me + 1]]
    total = got[0].copy()
    for g in range(1, groups):
        total += got[g]
    for g in others:
        slot.send(GATHER, "gradient", g, 0, part, me, total)
    # in place: chunk g of ``vector`` was read (for its sum) by group g only, which has
    # sent its total, so it is done with it; chunk ``me`` was read here
    vector[bounds[me]:bounds[me + 1]] = total
    for g, piece in slot.receive(GATHER, 0, others).items():
        vector[bounds[g]:bounds[g + 1]] = piece
    return vector


def pair_sum(slot: Slot, vector: np.ndarray, lo: int, hi: int, piece: int,
              sent: bool = False) -> np.ndarray:
    """``vector[lo:hi]`` plus the other group's, in place (two groups, one round): send
    ours (a copy, unless already ``sent``), add theirs when it comes. ``piece`` numbers
    the message."""
    other = 1 - slot.group
    if not sent:
        slot.send(REDUCE, "gradient", other, piece, slot.part, slot.group,
                         vector[lo:hi], reused=True)
    theirs = slot.receive(REDUCE, piece, [other])[other]
    vector[lo:hi] += theirs
    return vector


def timed_allreduce(slot: Slot, groups: int, vector: np.ndarray) -> np.ndarray:
    """:func:`allreduce`, its wall time in ``slot.allreduce_s``; its own waits and sends
    are its time, not counted again in the slot's ``wait_s`` and ``send_s``."""
    t0, waited, sent = time.perf_counter(), slot.wait_s, slot.send_s
    out = allreduce(slot, groups, vector)
    slot.allreduce_s = time.perf_counter() - t0
    slot.wait_s, slot.send_s = waited, sent
    return out


