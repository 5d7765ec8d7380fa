"""Strangers knocking at every worker's wire while a run goes on (the wire tests')."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def knocking(addresses: dict[str, Any], knock: Callable[..., None], *args: Any
             ) -> Iterator[list[list[int]]]:
    """A thread per wire calling ``knock(address, *args, stop, count)`` until the block
    ends; yields each wire's ``count`` (a one-item list the knocker increments)."""
    stop = threading.Event()
    counts = [[0] for _ in addresses]
    knockers = [threading.Thread(target=knock, args=(tuple(a[:2]), *args, stop, c),
                                 daemon=True)
                for a, c in zip(addresses.values(), counts, strict=True)]
    for t in knockers:
        t.start()
    try:
        yield counts
    finally:
        stop.set()
        for t in knockers:
            t.join(timeout=10)
