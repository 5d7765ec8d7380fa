"""The reversible bucket hash of Mofrad et al. (HPEC 2020).

For ``D`` indices, ``P = 128 * nbuckets`` and ``H = D // P``::

    h(v) = v // P + (v % P) * H     for v < H * P
    h(v) = v                        otherwise

Writing ``v = a * P + b`` (``a < H``, ``b < P``), ``h(v) = a + b * H``: a transpose of the
``H x P`` grid of the first ``H * P`` indices, so ``h`` is a bijection and
``h^-1(u) = (u % H) * P + u // H`` on the same range. Consecutive indices land ``H``
apart, so any contiguous range of hashed positions samples the whole index space evenly:
that is what rebalances rows whose work clusters (images of similar digits next to
each other, neurons whose activations survive together).
"""

from __future__ import annotations

import numpy as np

#: Bucket width of the paper's hash.
BUCKET_WIDTH = 128


def _params(size: int, nbuckets: int) -> tuple[int, int]:
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    if nbuckets < 1:
        raise ValueError(f"nbuckets must be >= 1, got {nbuckets}")
    p = BUCKET_WIDTH * nbuckets
    return p, size // p


def bucket_hash(v: np.ndarray | int, size: int, nbuckets: int = 1) -> np.ndarray:
    """``h(v)`` for indices ``v`` in ``[0, size)``.

    Examples
    --------
    >>> bucket_hash(np.arange(5), size=256).tolist()
    [0, 2, 4, 6, 8]
    >>> int(bucket_unhash(bucket_hash(200, size=1000), size=1000))
    200
    """
    p, h = _params(size, nbuckets)
    v = np.asarray(v, dtype=np.int64)
    inside = v < h * p
    return np.where(inside, v // p + (v % p) * h, v) if h else v.copy()


def bucket_unhash(u: np.ndarray | int, size: int, nbuckets: int = 1) -> np.ndarray:
    """``h^-1(u)``: the index whose hash is ``u``."""
    p, h = _params(size, nbuckets)
    u = np.asarray(u, dtype=np.int64)
    inside = u < h * p
    return np.where(inside, (u % h) * p + u // h, u) if h else u.copy()
