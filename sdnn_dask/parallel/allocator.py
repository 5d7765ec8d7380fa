"""glibc allocator settings for processes that run the kernels. Knows nothing of Dask.

Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``. Setting any such
variable pins glibc's mmap threshold at 128 KiB, so every larger array (activation tiles,
layer outputs) is a fresh ``mmap`` whose pages fault in on first touch, and is unmapped
again when freed. Measured on the model-parallel step (official 1024-120, 12,000 rows):
1.8x slower in a worker than in a plain process, and equal once the thresholds below are
raised. :func:`tune_allocator` raises them in the calling process; executors run it on
their workers (``sdnn.worker.malloc-mmap-threshold`` / ``malloc-trim-threshold``; null
leaves a worker's allocator alone). Freed memory up to the trim threshold then stays in
the process for reuse instead of going back to the OS at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

from .. import config

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_allocator(mmap_threshold: int | None = None,
                   trim_threshold: int | None = None) -> dict[str, int | None]:
    """Raise glibc's mmap and trim thresholds in this process (a no-op off glibc).

    Parameters
    ----------
    mmap_threshold, trim_threshold
        Bytes; default ``sdnn.worker.malloc-mmap-threshold`` and
        ``sdnn.worker.malloc-trim-threshold``. ``None`` in the config skips the setting.

    Returns
    -------
    dict
        The values applied (``None`` where nothing was set).
    """
    if mmap_threshold is None:
        mmap_threshold = config.get("worker.malloc-mmap-threshold")
    if trim_threshold is None:
        trim_threshold = config.get("worker.malloc-trim-threshold")
    applied: dict[str, int | None] = {"mmap_threshold": None, "trim_threshold": None}
    if not sys.platform.startswith("linux"):
        return applied
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return applied
    if mmap_threshold is not None and mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)) == 1:
        applied["mmap_threshold"] = int(mmap_threshold)
    if trim_threshold is not None and mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)) == 1:
        applied["trim_threshold"] = int(trim_threshold)
    return applied


def trim_memory() -> bool:
    """Give the memory this process has freed back to the operating system
    (``malloc_trim(0)``; a no-op off glibc): between a study's runs, where the kernel ran
    in this process and left its freed tiles in the heap. Whether anything was returned."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):  # musl and others
        return False
