"""Neuron partitions for model parallelism: which part owns each neuron of every level.

Model parallelism splits each layer's output neurons (columns of ``W_l`` in
``Y_l = Y_{l-1} @ W_l``) over ``k`` parts; part ``p`` computes
``Y_l[:, own_p] = Y_{l-1}[:, needed_p] @ W_l[needed_p, own_p]`` and receives from the
other parts only the activation columns it needs. Level 0 is the input features, level
``l`` the output of layer ``l``; ``parts[l, j]`` is the part that owns neuron ``j`` of
level ``l``, i.e. computes its activation (``l >= 1``) and holds it as an input of layer
``l + 1``.

* ``block``: contiguous near-equal ranges of neuron ids, the same at every level.
* ``hash``: the bucket hash of Mofrad et al. ("layer hashing"): neuron ``v`` goes to the
  block holding position ``h(v)``, the same mapping at every level.
* ``random``: one seeded random permutation shared by every level, then contiguous
  blocks: the random counterpart of layer hashing (only the relabeling differs).
* ``hypergraph``: the column-net model of Demirci and Ferhatosmanoglu, partitioned with
  Mt-KaHyPar layer by layer (:mod:`sdnn_dask.partition.hypergraph`).

The communication of layer ``l`` is the connectivity-minus-one (km1) of the column-net
hypergraph: one net per level ``l-1`` neuron ``i``, holding its owner and the parts of the
level ``l`` neurons it feeds; ``lambda_i - 1`` parts that do not own ``i`` need its
activation.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..files import atomic_path
from .balance import imbalance as _imbalance
from .rows import even_bounds

if TYPE_CHECKING:
    from ..core.network import Network



def connectivity(w: sp.csr_matrix, column_parts: np.ndarray, k: int,
                  row_parts: np.ndarray | None = None) -> sp.csr_matrix:
    """``C[i, p] = 1`` iff row ``i`` of ``w`` has a nonzero in a column of part ``p``.

    With ``row_parts``, ``C[i, row_parts[i]] = 1`` too (the owner holds the value).
    Duplicates are summed away, so ``C.indptr`` counts the distinct parts per row.
    """
    n_rows = w.shape[0]
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(w.indptr))
    cols = column_parts[w.indices].astype(np.int64)
    if row_parts is not None:
        rows = np.concatenate([rows, np.arange(n_rows, dtype=np.int64)])
        cols = np.concatenate([cols, row_parts.astype(np.int64)])
    c = sp.csr_matrix((np.ones(len(rows), dtype=np.int32), (rows, cols)), shape=(n_rows, k))
    c.sum_duplicates()
    c.data[:] = 1
    return c


def column_net_km1(w: sp.spmatrix | sp.sparray, column_parts: np.ndarray) -> int:
    """Connectivity minus one of a single layer's column-net hypergraph.

    Nets are the rows ``i`` of ``w`` (pins: the columns ``j`` with ``w[i, j] != 0``), with
    no source vertex: ``km1 = sum_i (lambda_i - 1)`` over the nonempty rows, ``lambda_i``
    the number of parts among row ``i``'s columns.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> w = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]]))
    >>> column_net_km1(w, np.array([0, 0, 1, 1]))  # row 1 spans both parts
    1
    """
    w = sp.csr_matrix(w, copy=True)  # eliminate_zeros below must not touch the caller's
    column_parts = np.asarray(column_parts)
    if column_parts.shape != (w.shape[1],):
        raise ValueError(
            f"column_parts must have one entry per column ({w.shape[1]}), "
            f"got shape {column_parts.shape}"
        )
    w.eliminate_zeros()
    if w.nnz == 0:
        return 0
    if column_parts.min() < 0:
        raise ValueError("column_parts must be >= 0")
    c = connectivity(w, column_parts, int(column_parts.max()) + 1)
    nonempty = np.count_nonzero(np.diff(w.indptr))
    return int(c.nnz - nonempty)


@dataclass(frozen=True, eq=False)
class NeuronPartition:
    """Every neuron of every level ``0..L`` assigned to one of ``k`` parts.

    Attributes
    ----------
    method
        How it was made: ``"block"``, ``"hash"``, ``"random"`` or ``"hypergraph"``.
    k
        Number of parts.
    parts
        ``(L + 1, N)`` int32; ``parts[l, j]`` owns neuron ``j`` of level ``l`` (level 0:
        the input features).
    params
        The method's parameters (seed, epsilon, nbuckets, ...); JSON-serialisable.
    seconds
        Time taken to compute it.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sdnn_dask.core.network import Network
    >>> from sdnn_dask.partition import make_neuron_partition
    >>> net = Network([sp.csr_matrix(np.ones((4, 4)))] * 2, bias=-0.1)
    >>> part = make_neuron_partition(net, 2)
    >>> part.owned(1, 1).tolist(), part.needed(net, 1, 1).tolist()
    ([2, 3], [0, 1, 2, 3])
    >>> part.volume(net)[["layer", "km1"]].values.tolist()  # every input goes to the other part
    [[1, 4], [2, 4]]
    >>> part.imbalance(net).tolist()
    [1.0, 1.0]
    """

    method: str
    k: int
    parts: np.ndarray = field(repr=False)
    params: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if int(self.k) != self.k or self.k < 1:
            raise ValueError(f"k must be a positive integer, got {self.k!r}")
        parts = np.asarray(self.parts)
        if parts.ndim != 2 or parts.shape[0] < 2:
            raise ValueError(
                f"parts must be (L + 1, N) with L >= 1 layers, got shape {parts.shape}"
            )
        if not np.issubdtype(parts.dtype, np.integer):
            raise ValueError(f"parts must hold integers, got dtype {parts.dtype}")
        if parts.size and (parts.min() < 0 or parts.max() >= self.k):
            raise ValueError(
                f"parts must lie in [0, {self.k}), got values in "
                f"[{parts.min()}, {parts.max()}]"
            )
        parts = np.array(parts, dtype=np.int32, order="C")  # a copy: the caller's stays writable
        parts.flags.writeable = False  # frozen: a shared partition must not change under a run
        object.__setattr__(self, "k", int(self.k))
        object.__setattr__(self, "parts", parts)
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "seconds", float(self.seconds))

    @property
    def n_levels(self) -> int:
        """Activation levels, ``L + 1`` (level 0 is the input features)."""
        return int(self.parts.shape[0])

    @property
    def n_neurons(self) -> int:
        """Neurons per level (N)."""
        return int(self.parts.shape[1])

    def _check_network(self, network: Network) -> None:
        if (network.n_layers + 1, network.n_neurons) != self.parts.shape:
            raise ValueError(
                f"partition is for {self.n_levels - 1} layers of {self.n_neurons} neurons; "
                f"the network has {network.n_layers} layers of {network.n_neurons}"
            )

    def _check_part(self, part: int) -> None:
        if not 0 <= part < self.k:
            raise ValueError(f"part must be in [0, {self.k}), got {part}")

    def owned(self, level: int, part: int) -> np.ndarray:
        """Sorted ids of the level ``level`` neurons that part ``part`` owns."""
        if not 0 <= level < self.n_levels:
            raise ValueError(f"level must be in [0, {self.n_levels}), got {level}")
        self._check_part(part)
        return np.flatnonzero(self.parts[level] == part)

    def needed(self, network: Network, layer: int, part: int) -> np.ndarray:
        """Sorted ids of the level ``layer - 1`` neurons part ``part`` reads in layer ``layer``.

        The rows ``i`` of ``W_layer`` (1-based) with a nonzero in a column the part owns,
        its own neurons included.
        """
        self._check_network(network)
        if not 1 <= layer < self.n_levels:
            raise ValueError(f"layer must be in 1..{self.n_levels - 1} (1-based), got {layer}")
        # row j of W^T is column j of W: the inputs that feed output neuron j
        columns = network.transposed[layer - 1][self.owned(layer, part)]
        return np.unique(columns.indices).astype(np.int64)

    def volume(self, network: Network) -> pd.DataFrame:
        """Communication per layer: activation columns sent to parts that do not own them.

        Returns
        -------
        pandas.DataFrame
            One row per layer: ``layer`` (1-based); ``km1``, the connectivity minus one of
            the layer's column-net hypergraph (nets: the level ``l-1`` neurons, each holding
            its owner and the parts of the neurons it feeds); ``volume``, the same quantity
            counted as ``sum_p |needed_p - owned_p|`` (columns each part receives; equal to
            ``km1`` by construction, kept as the figure an executor's bytes should match);
            ``max_received``, the most columns one part receives (the slowest exchange of a
            synchronous step). Multiply by live input rows and the value size for bytes.
        """
        self._check_network(network)
        rows = []
        for layer, w in enumerate(network.layers, start=1):
            owner = self.parts[layer - 1]
            c = connectivity(w, self.parts[layer], self.k, owner)
            km1 = c.nnz - w.shape[0]
            # columns p receives: p needs i (a pin in p) and does not own i
            needs = connectivity(w, self.parts[layer], self.k).tocoo()
            foreign = needs.col != owner[needs.row]
            received = np.bincount(needs.col[foreign], minlength=self.k)
            rows.append((layer, int(km1), int(received.sum()), int(received.max())))
        return pd.DataFrame(rows, columns=["layer", "km1", "volume", "max_received"])

    def work(self, network: Network) -> np.ndarray:
        """``(L, k)`` multiply-adds per part and layer: nonzeros of the columns it owns."""
        self._check_network(network)
        out = np.empty((network.n_layers, self.k), dtype=np.int64)
        # from the layers themselves, one at a time: a store's network streams them
        for layer, w in enumerate(network.layers, start=1):
            column_nnz = np.bincount(w.indices, minlength=w.shape[1])
            out[layer - 1] = np.bincount(self.parts[layer], weights=column_nnz,
                                         minlength=self.k)
        return out

    def imbalance(self, network: Network) -> np.ndarray:
        """``(L,)`` work imbalance per layer, ``max / mean`` over parts (1.0 is perfect)."""
        return np.array([_imbalance(loads) for loads in self.work(network)])

    def save(self, path: str | os.PathLike, *, stamp: dict[str, Any] | None = None) -> None:
        """Write to ``path`` as ``.npz`` (no pickle), atomically.

        Parameters
        ----------
        path
            The file to write.
        stamp
            What the file was made for (a cache's key and the digests it stands for),
            JSON-serialisable; read back by :meth:`read_stamp`. ``None``: no stamp.

        Raises
        ------
        OSError
            The file cannot be written (its folder is a file, the disk is full, ...);
            ``path`` is then untouched.
        """
        arrays = {
            "method": np.array(self.method),
            "k": np.array(self.k, dtype=np.int64),
            "parts": self.parts,
            "params": np.array([json.dumps(self.params, sort_keys=True)]),
            "seconds": np.array(self.seconds, dtype=np.float64),
        }
        if stamp is not None:
            arrays["stamp"] = np.array([json.dumps(stamp, sort_keys=True)])
        # a file handle: np.savez would append ".npz" to the temporary name
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> NeuronPartition:
        """Read a partition written by :meth:`save`."""
        # our own handle: np.load leaks the one it opens when the file is not a zip
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as archive:
            return cls(
                method=str(archive["method"]),
                k=int(archive["k"]),
                parts=archive["parts"],
                params=json.loads(str(archive["params"][0])),
                seconds=float(archive["seconds"]),
            )

    @staticmethod
    def read_stamp(path: str | os.PathLike) -> dict[str, Any] | None:
        """The ``stamp`` a file was saved with (:meth:`save`); ``None`` if it has none.

        Raises
        ------
        ValueError
            The stamp is not a JSON object (a damaged or foreign file).
        """
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as archive:
            if "stamp" not in archive.files:
                return None
            stamp = json.loads(str(archive["stamp"][0]))
        if not isinstance(stamp, dict):
            raise ValueError(f"{path}: the stamp is {type(stamp).__name__}, not an object")
        return stamp

    def __repr__(self) -> str:
        return (f"NeuronPartition(method={self.method!r}, k={self.k}, levels={self.n_levels}, "
                f"neurons={self.n_neurons}, params={self.params}, seconds={self.seconds:.3g})")


def blocks_of(positions: np.ndarray, n_items: int, k: int) -> np.ndarray:
    """Part of each position when ``n_items`` positions are cut into ``k`` even blocks."""
    bounds = even_bounds(n_items, k)
    return (np.searchsorted(bounds, positions, side="right") - 1).astype(np.int32)
