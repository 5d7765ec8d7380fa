"""Seeded RadiX-Net networks with the structure of the challenge's official ones.

Read off the official N = 1024 files (layers 1-6 exactly, later layers up to one row
permutation per block of layers)::

    W_k = (1/16) * Pi_b * kron(ones(16, 16), I + C^(2^s)),   s = (k-1) mod R,  b = (k-1) // R

with ``C`` the ``N' x N'`` cyclic shift, ``N' = N / 16``, ``R = log2(N')`` (6 for N = 1024,
8 / 10 / 12 for 4096 / 16384 / 65536), ``Pi_0`` the identity and ``Pi_b`` a seeded random
row permutation shared by the ``R`` layers of block ``b``. So before the permutation
``W(i, j) != 0`` iff ``(i - j) mod N'`` is 0 or ``2^s``: every row and every column holds
exactly 32 nonzeros, all ``1/16``. For N = 1024 the first six layers equal the official
``n1024-l1 .. l6`` whatever the seed.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

from ..core.network import Network
from .images import make_inputs

__all__ = ["block_permutations", "make_inputs", "make_network", "radixnet_layer"]

#: Side of the dense all-ones Kronecker factor: 16 x 2 = 32 nonzeros per row and column.
KRON_SIDE = 16
WEIGHT = np.float32(1.0 / KRON_SIDE)


def _radix_count(n_neurons: int) -> int:
    """``R = log2(N / 16)``; raises unless N is a power of two >= 32."""
    base = n_neurons // KRON_SIDE
    if n_neurons < 2 * KRON_SIDE or n_neurons % KRON_SIDE or base & (base - 1):
        raise ValueError(
            f"RadiX-Net needs N = 16 * 2^R neurons with R >= 1 (1024, 4096, 16384, 65536 "
            f"in the challenge), got N={n_neurons}"
        )
    return base.bit_length() - 1


def radixnet_layer(
    n_neurons: int, layer: int, row_permutation: np.ndarray | None = None
) -> sp.csr_matrix:
    """Layer ``layer`` (1-based) of the RadiX-Net pattern, before or after a row permutation.

    Parameters
    ----------
    n_neurons
        N, a power of two >= 32.
    layer
        1-based layer index; it sets the shift ``2^((layer-1) mod R)``.
    row_permutation
        ``Pi_b`` as an index array: row ``i`` of the result is row ``row_permutation[i]``
        of the pattern. ``None``: identity.

    Examples
    --------
    >>> w = radixnet_layer(1024, 1)
    >>> w.shape, w.nnz, set(w.data.tolist())
    ((1024, 1024), 32768, {0.0625})
    """
    if layer < 1:
        raise ValueError(f"layers are 1-based, got {layer}")
    radix = _radix_count(n_neurons)
    base = n_neurons // KRON_SIDE
    shift = 1 << ((layer - 1) % radix)
    rows = np.arange(n_neurons) if row_permutation is None else np.asarray(row_permutation)
    if rows.shape != (n_neurons,):
        raise ValueError(f"row_permutation must have length {n_neurons}")
    residue = rows % base
    # Columns j with (p_i - p_j) mod N' in {0, shift}: p_j = p_i or p_i - shift.
    targets = np.stack([residue, (residue - shift) % base], axis=1)  # (N, 2)
    groups = np.arange(KRON_SIDE) * base
    cols = (groups[None, :, None] + targets[:, None, :]).reshape(n_neurons, -1)
    cols.sort(axis=1)
    indptr = np.arange(0, cols.size + 1, cols.shape[1], dtype=np.int64)
    data = np.full(cols.size, WEIGHT, dtype=np.float32)
    return sp.csr_matrix((data, cols.ravel().astype(np.int32), indptr),
                         shape=(n_neurons, n_neurons))


def block_permutations(n_neurons: int, n_blocks: int, seed: int = 0) -> list[np.ndarray]:
    """The row permutations ``Pi_0 .. Pi_{n_blocks-1}`` (``Pi_0`` is the identity)."""
    rng = np.random.default_rng(seed)
    perms = [np.arange(n_neurons)]
    perms += [rng.permutation(n_neurons) for _ in range(1, n_blocks)]
    return perms


def make_network(
    n_neurons: int = 1024,
    n_layers: int = 120,
    *,
    seed: int = 0,
    bias: float | np.ndarray | None = None,
    ymax: float | None = None,
) -> Network:
    """Generate a seeded RadiX-Net network shaped like the challenge's.

    Parameters
    ----------
    n_neurons
        N (1024, 4096, 16384, 65536 in the challenge; any power of two >= 32 works).
    n_layers
        L, any positive number.
    seed
        Seeds the per-block row permutations; same seed, same network.
    bias, ymax
        As in :class:`~sdnn_dask.core.network.Network` (challenge values by default).

    Examples
    --------
    >>> net = make_network(1024, 12, seed=1)
    >>> net.n_layers, net.edges, round(float(net.bias[0]), 6)
    (12, 393216, -0.3)
    """
    layers = list(iter_layers(n_neurons, n_layers, seed=seed))
    return Network(layers, bias=bias, ymax=ymax, name=f"radixnet-{n_neurons}-{n_layers}-s{seed}")


def iter_layers(n_neurons: int = 1024, n_layers: int = 120, *, seed: int = 0
                ) -> Iterator[sp.csr_matrix]:
    """:func:`make_network`'s layers one at a time (the same matrices), so a network
    larger than memory can be written to a store (:func:`sdnn_dask.data.store.write_store`)
    while it is generated."""
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    radix = _radix_count(n_neurons)
    n_blocks = (n_layers + radix - 1) // radix
    perms = block_permutations(n_neurons, n_blocks, seed)
    for k in range(1, n_layers + 1):
        b = (k - 1) // radix
        yield radixnet_layer(n_neurons, k, None if b == 0 else perms[b])
