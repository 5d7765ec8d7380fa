"""A process's peak resident memory during one run: reset it before, read it after.

On Linux the kernel keeps a process's high-water mark of resident memory (``VmHWM`` in
``/proc/self/status``), and writing ``5`` to ``/proc/self/clear_refs`` resets it to the
resident size of the moment: reset just before a run and read just after, it is the
run's peak, not the process's since it started (which, in a worker that ran a large
network earlier, says nothing about this run). Where the reset is refused (not Linux, a
kernel without it, a sandbox), the peak falls back to ``ru_maxrss`` and is flagged as
since the process started (:data:`SINCE_START`), so a record never passes a lifetime
peak off as a run's.

Executors reset and read every worker of a run through ``client.run``
(:func:`reset_workers`, :func:`read_workers`); the serial strategies do it in their own
process (:func:`reset_peak`, :func:`read_peak`). Knows nothing of the strategies.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

#: The peak covers the run only: the high-water mark was reset just before it.
SINCE_RUN = "run"
#: The peak is the process's since it started (the reset was not possible here).
SINCE_START = "start"

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")

# whether this process's last reset succeeded (a failed one leaves a lifetime peak)
_state = {"reset": False}


@dataclass(frozen=True)
class Peak:
    """A process's peak resident memory.

    Attributes
    ----------
    bytes
        The peak resident set size in bytes.
    since
        :data:`SINCE_RUN` (since the last :func:`reset_peak`) or :data:`SINCE_START`.
    """

    bytes: int
    since: str


def reset_peak() -> bool:
    """Reset this process's peak resident memory to its resident size now.

    Returns
    -------
    bool
        Whether it was reset; if not, :func:`read_peak` reports the peak since the process
        started, flagged :data:`SINCE_START`.
    """
    try:
        with open(_CLEAR_REFS, "w") as handle:
            handle.write("5")
        ok = _vm_hwm() is not None  # without VmHWM the reset cannot be read back
    except OSError:  # not Linux, no clear_refs, or not allowed to write it
        ok = False
    _state["reset"] = ok
    return ok


def read_peak() -> Peak:
    """This process's peak resident memory: since the last successful :func:`reset_peak`
    (``VmHWM``), else since it started (``ru_maxrss``)."""
    hwm = _vm_hwm()
    if hwm is not None and _state["reset"]:
        return Peak(hwm, SINCE_RUN)
    if hwm is not None:
        return Peak(hwm, SINCE_START)
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux and the BSDs report kilobytes, macOS bytes
    return Peak(int(maxrss if sys.platform == "darwin" else maxrss * 1024), SINCE_START)


def _vm_hwm() -> int | None:
    """``VmHWM`` of ``/proc/self/status`` in bytes, or ``None`` where there is none."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                value, unit = line.split()[1:3]
                if unit != "kB":  # the only unit Linux writes: anything else is not it
                    return None
                return int(value) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_here(dask_worker: Any = None) -> bool:  # run on a worker by client.run
    return reset_peak()


def _read_here(dask_worker: Any = None) -> tuple[int, str]:  # run on a worker by client.run
    peak = read_peak()
    return peak.bytes, peak.since


def reset_workers(client: Any, workers: Iterable[str]) -> dict[str, bool]:
    """Reset the peak resident memory of every one of ``workers`` (``client.run``): just
    before a run, once its data is placed. Whether each was reset, by address (a worker
    that does not answer is left out: the run finds out it is gone)."""
    done = client.run(_reset_here, workers=list(workers), on_error="return")
    return {w: ok for w, ok in done.items() if isinstance(ok, bool)}


def read_workers(client: Any, workers: Iterable[str]) -> pd.DataFrame:
    """Every one of ``workers``' peak resident memory (``client.run``), just after a run:
    a table of ``worker``, ``peak_rss_bytes`` and ``peak_since`` to merge into the run's
    blocks on ``worker`` (a worker lost in the run is left out: its peak is unknown)."""
    peaks = client.run(_read_here, workers=list(workers), on_error="return")
    peaks = {w: p for w, p in peaks.items() if not isinstance(p, BaseException)}
    return pd.DataFrame([{"worker": w, "peak_rss_bytes": b, "peak_since": s}
                         for w, (b, s) in peaks.items()],
                        columns=["worker", "peak_rss_bytes", "peak_since"])
