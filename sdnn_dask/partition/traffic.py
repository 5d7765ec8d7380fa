"""The traffic model parallelism really carries, estimated from a sample of the inputs.

Under model parallelism a part sends, in layer ``l``, the activation columns of level
``l - 1`` it owns and another part reads, for the rows that are alive there (and, with
deduplication, distinct). What that costs is not the column count alone (km1): a column
is free when no live row has a nonzero in it, and a layer whose rows all died, or which
carries one saturated row after deduplication, moves almost nothing whatever the cut. On
the challenge's networks the live rows fall from 60000 to a few thousand within 10-20
layers and, with deduplication, to one row soon after; the bytes sit in the first
layers.

:class:`SampledForward` runs a random sample of the input rows through the network
(SciPy, float32, the challenge's bias and clamp), layer by layer as the layers stream
past, and merges identical rows where model parallelism's parts look for them
(:func:`~sdnn_dask.core.kernels.dedup.look_due`). Each sampled row stands for rows of the
whole input: ``n / s`` of them (``n`` input rows, ``s`` sampled) while it is alone in its
class, one once other sampled rows turned out equal to it (a class seen twice in a sample
is the saturated class every survivor joins, computed once at any input size). The
*weight* of neuron ``i`` of a level is then the expected number of nonzeros its activation
column carries (:meth:`SampledLevel.column_weights`): the net weight of the traffic-weighted
hypergraph (:mod:`~.hypergraph`) and the basis of the byte forecast
(:mod:`sdnn_dask.parallel.exchange_forecast`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..core.kernels.dedup import duplicates, hash_csr, look_due
from ..core.kernels.steps import sparse_step

if TYPE_CHECKING:
    from ..core.network import Network

#: Input rows sampled by default. The survivors (3% of the challenge's inputs) set the
#: error: 2000 of 60000 rows forecast 16384-120's bytes 0.93-1.03x of the measured over
#: three seeds (docs/model-parallelism.md). The pass takes about 2 minutes at 65536.
DEFAULT_SAMPLE = 4000

#: A layer is partitioned with Mt-KaHyPar when its traffic is at least this share of the
#: heaviest layer's; the others carry the previous level's partition forward. At the
#: challenge's sizes the carried layers hold well under 1% of the bytes (one saturated row
#: each, against tens of thousands of rows in the first layers).
DEFAULT_MIN_SHARE = 1e-3


@dataclass(frozen=True)
class SampledLevel:
    """The sample's live rows at one level, and what each stands for.

    Attributes
    ----------
    level
        Level (0: the inputs; ``l``: the output of layer ``l``).
    values
        ``rows x N`` float32 CSR of the sample's live rows at this level, one per class of
        identical rows when deduplication merged them.
    scale
        ``(rows,)`` how many rows of the whole input each stands for among the rows a
        part computes and sends: ``n / s`` while alone in its class, else 1.
    live
        Estimated live rows of the whole input at this level (every row, merged or not).
    """

    level: int
    values: sp.csr_matrix
    scale: np.ndarray
    live: float

    @property
    def distinct(self) -> float:
        """Estimated distinct live rows of the whole input (the rows sent)."""
        return float(self.scale.sum())

    @property
    def nnz(self) -> float:
        """Estimated nonzeros of those rows."""
        return float(np.diff(self.values.indptr) @ self.scale)

    def column_weights(self) -> np.ndarray:
        """``(N,)`` float64: the estimated nonzeros each neuron's activation column carries."""
        rows = np.repeat(self.scale, np.diff(self.values.indptr))
        return np.bincount(self.values.indices, weights=rows,
                           minlength=self.values.shape[1])


class SampledForward:
    """A random sample of ``inputs`` run through ``network`` one layer at a time.

    Iterating yields ``(layer, w, level)`` for every layer ``1..L``: the layer's matrix and
    the :class:`SampledLevel` that feeds it (level ``layer - 1``); the sample then steps
    through ``w``. The layers are read once, in order (a network store streams them).

    Parameters
    ----------
    network
        The network (in memory or streamed from a store).
    inputs
        The input rows the forecast stands for (``n x N``).
    sample
        Rows sampled (all of them when ``n`` is no larger).
    seed
        Picks the sample.
    dedup
        Merge identical rows where model parallelism looks for them
        (:func:`~sdnn_dask.core.kernels.dedup.look_due`); ``False`` for runs without.

    Examples
    --------
    >>> from sdnn_dask.data.radixnet import make_inputs, make_network
    >>> net = make_network(1024, 32)
    >>> levels = [lv for _, _, lv in SampledForward(net, make_inputs(6000), sample=600)]
    >>> round(levels[0].distinct), levels[-1].distinct  # 6000 distinct inputs; one survivor
    (6000, 1.0)
    """

    def __init__(self, network: Network, inputs: sp.spmatrix | sp.sparray, *,
                 sample: int = DEFAULT_SAMPLE, seed: int = 0, dedup: bool = True):
        inputs = sp.csr_matrix(inputs)
        if inputs.shape[1] != network.n_neurons:
            raise ValueError(f"inputs have {inputs.shape[1]} columns; the network has "
                             f"{network.n_neurons} neurons")
        if int(sample) != sample or sample < 1:
            raise ValueError(f"sample must be a positive integer, got {sample!r}")
        self.network = network
        self.n_rows = inputs.shape[0]
        rng = np.random.default_rng(seed)
        take = (np.arange(self.n_rows) if self.n_rows <= sample
                else np.sort(rng.choice(self.n_rows, int(sample), replace=False)))
        self.sample = len(take)
        self.ratio = self.n_rows / max(1, self.sample)
        self.inputs = inputs[take].astype(np.float32)
        self.inputs.sum_duplicates()
        self.inputs.eliminate_zeros()
        self.dedup = bool(dedup)

    def __iter__(self) -> Iterator[tuple[int, sp.csr_matrix, SampledLevel]]:
        net = self.network
        n_layers, n = net.n_layers, net.n_neurons
        bias = np.broadcast_to(np.asarray(net.bias, dtype=np.float32), (n,))
        ymax = np.float32(net.ymax)
        y = self.inputs[np.diff(self.inputs.indptr) > 0]
        count = np.ones(y.shape[0], np.int64)  # sampled rows each row stands for
        distinct = y.shape[0]
        for layer, w in enumerate(net.layers, start=1):
            scale = np.where(count == 1, self.ratio, 1.0)
            yield layer, w, SampledLevel(layer - 1, y, scale, float(count.sum() * self.ratio))
            y = _step(y, w, bias, ymax)
            alive = np.diff(y.indptr) > 0
            y, count = y[alive], count[alive]
            if self.dedup and distinct != 1 and look_due(layer, n_layers):
                y, count = _merge_identical(y, count)
                distinct = y.shape[0]


@dataclass(frozen=True, eq=False)
class TrafficProfile:
    """Per layer, the estimated rows and nonzeros model parallelism exchanges.

    Attributes
    ----------
    rows, sample, dedup
        Input rows stood for, rows sampled, and whether identical rows were merged.
    live, distinct, nnz
        ``(L,)`` estimates for the level feeding each layer (index ``l - 1`` for layer
        ``l``): live rows, distinct live rows (the rows sent), and their nonzeros (the
        layer's *traffic*: what every activation column would carry if all were sent).
    min_share
        Layers with ``nnz >= min_share * nnz.max()`` are the *heavy* ones.
    weights
        Column weights (:meth:`SampledLevel.column_weights`) of the heavy layers only.
    seconds
        Time the sample's forward pass took.
    """

    rows: int
    sample: int
    dedup: bool
    live: np.ndarray
    distinct: np.ndarray
    nnz: np.ndarray
    min_share: float
    weights: dict[int, np.ndarray] = field(repr=False)
    seconds: float = 0.0

    @property
    def heavy(self) -> list[int]:
        """The layers (1-based) whose traffic is at least ``min_share`` of the heaviest's."""
        return sorted(self.weights)

    def frame(self) -> pd.DataFrame:
        """One row per layer: ``layer, live, distinct, nnz, heavy``."""
        layers = np.arange(1, len(self.nnz) + 1)
        return pd.DataFrame({"layer": layers, "live": self.live, "distinct": self.distinct,
                             "nnz": self.nnz, "heavy": np.isin(layers, self.heavy)})

    @classmethod
    def measure(cls, network: Network, inputs: sp.spmatrix | sp.sparray, *,
                sample: int = DEFAULT_SAMPLE, seed: int = 0, dedup: bool = True,
                min_share: float = DEFAULT_MIN_SHARE,
                progress: Callable[[int, int], None] | None = None) -> TrafficProfile:
        """Run a sample of ``inputs`` through ``network`` (:class:`SampledForward`) and
        keep what the partitioner and the forecast need.

        Examples
        --------
        >>> from sdnn_dask.data.radixnet import make_inputs, make_network
        >>> p = TrafficProfile.measure(make_network(1024, 40), make_inputs(3000), sample=600,
        ...                            min_share=0.01)
        >>> p.heavy == list(range(1, len(p.heavy) + 1)), len(p.heavy) < 40  # the first ones
        (True, True)
        """
        if not 0 <= min_share <= 1:
            raise ValueError(f"min_share must be in [0, 1], got {min_share}")
        start = time.perf_counter()
        forward = SampledForward(network, inputs, sample=sample, seed=seed, dedup=dedup)
        n_layers = network.n_layers
        live, distinct, nnz = (np.zeros(n_layers) for _ in range(3))
        weights: dict[int, np.ndarray] = {}
        peak = 0.0
        for layer, _, level in forward:
            live[layer - 1], distinct[layer - 1] = level.live, level.distinct
            nnz[layer - 1] = level.nnz
            peak = max(peak, nnz[layer - 1])
            if nnz[layer - 1] > 0 and nnz[layer - 1] >= min_share * peak:  # may be heavy
                weights[layer] = level.column_weights()
            if progress is not None:
                progress(layer, n_layers)
        weights = {lay: w for lay, w in weights.items() if nnz[lay - 1] >= min_share * peak}
        return cls(forward.n_rows, forward.sample, forward.dedup, live, distinct, nnz,
                   float(min_share), weights, time.perf_counter() - start)


def _step(y: sp.csr_matrix, w: sp.csr_matrix, bias: np.ndarray, ymax: np.float32
          ) -> sp.csr_matrix:
    """``min(max(y @ w + b, 0), ymax)`` on the nonzeros of ``y @ w`` (the challenge's
    step: a zero product stays zero, as the bias is negative), every row kept.

    The serial kernel's compiled sparse step (:func:`~sdnn_dask.core.kernels.steps.sparse_step`):
    its terms summed in the kernel's order, so rows the runs find identical are identical
    here too, and faster than scipy's product, sort and clip: a whole exchange forecast
    of 16384-60 takes 5.3 s against 11.9 (``benchmarks/bench_forecast.py``)."""
    # no canonical form needed: the step sums duplicates and adds explicit zeros; and a
    # store's layer may be read-only (mapped), which an in-place sort would refuse
    w = sp.csr_matrix(w, dtype=np.float32, copy=False)
    op, oi, ox, _ = sparse_step(y.indptr.astype(np.int64, copy=False),
                                y.indices.astype(np.int32, copy=False),
                                y.data.astype(np.float32, copy=False), w.indptr, w.indices,
                                w.data, bias, ymax, int(w.shape[1]), False)
    return sp.csr_matrix((ox, oi, op), shape=(y.shape[0], w.shape[1]))


def _merge_identical(y: sp.csr_matrix, count: np.ndarray
                     ) -> tuple[sp.csr_matrix, np.ndarray]:
    """One row per class of identical rows (value for value), with the classes' counts."""
    y.sort_indices()
    hashes = hash_csr(y.indptr, y.indices, y.data)

    def same(i: int, others: np.ndarray) -> np.ndarray:
        a = y[i]
        return np.array([(y[j] != a).nnz == 0 for j in others.tolist()], dtype=bool)

    drop, merges = duplicates(hashes, same)
    count = count.copy()
    for rep, others in merges:
        count[rep] += int(count[others].sum())
    keep = ~drop
    return y[keep], count[keep]


def inputs_digest(inputs: sp.spmatrix | sp.sparray) -> str:
    """SHA-256 of the input rows' pattern and values (keys cached partitions)."""
    x = sp.csr_matrix(inputs)
    x.sum_duplicates()  # canonical: equal matrices, equal digests
    digest = hashlib.sha256(f"{x.shape}|{x.indptr.dtype}|{x.indices.dtype}".encode())
    # the arrays' own buffers, no copies: 60000 rows at N = 65536 hold 400 M nonzeros
    for array in (x.indptr, x.indices, np.asarray(x.data, dtype=np.float32)):
        digest.update(memoryview(np.ascontiguousarray(array)).cast("B"))
    return digest.hexdigest()
