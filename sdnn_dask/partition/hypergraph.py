"""Communication-aware neuron partitions: the column-net hypergraph model, with Mt-KaHyPar.

The model (Demirci and Ferhatosmanoglu, ICS 2021, column-net reading): for layer ``l`` the
vertices are the neurons, the level ``l`` ones weighted by their work (the nonzeros of
their column of ``W_l``); one net per level ``l-1`` neuron ``i`` holds ``i`` and the level
``l`` neurons it feeds. The net's connectivity minus one is the number of parts, besides
the owner of ``i``, that need its activation, so the km1 of a partition is the layer's
communication volume in activation columns.

Every layer is a synchronisation step, so every layer must be balanced on its own, and
the parts must agree across layers (the owner of neuron ``j`` at level ``l`` computes it
in layer ``l`` and sends it in layer ``l + 1``). Mt-KaHyPar balances one weight per vertex
(no multi-constraint), so the network is partitioned layer by layer:

* layer 1: the columns of ``W_1`` alone (nets: the rows, no source vertex); each input
  feature then goes to the least-loaded (by count) of the parts its net already spans,
  which adds nothing to the layer's km1, the same as leaving it a free weight-0 vertex;
* layer ``l >= 2``: the level ``l-1`` neurons are fixed vertices in the parts layer
  ``l-1`` gave them, only the level ``l`` neurons are free.

What Mt-KaHyPar 1.7 (PyPI ``mtkahypar``) needs, found by trying it and reading its source:

* a fixed vertex of weight 0 is silently treated as free (``hasFixedVertices()`` tests
  ``total fixed vertex weight > 0``), so fixed vertices get weight 1 and each block's cap
  is set with ``set_individual_target_block_weights`` to its fixed count plus the cap of
  the free work, ``max(ceil(W / k), floor((1 + eps) W / k))``: the bound is on work alone;
* the ``DETERMINISTIC`` preset gives the same partition for 1 or 2 threads and across runs
  (``DEFAULT`` with 2 threads does not), but it ignores ``set_seed`` (it reads a context
  seed the Python API does not expose); so ``seed`` relabels the vertices and orders the
  nets by a seeded permutation before they reach Mt-KaHyPar;
* ``initialize`` sets up a process-wide thread pool once; a second call only warns.

Weighted by traffic (:func:`hypergraph_partition` given the inputs): the nets weigh the
nonzeros a sample of the inputs sends through them (:mod:`~.traffic`), Mt-KaHyPar runs
on the layers that carry traffic only, and the levels then take the cheapest mix of its
parts and a few fixed candidates (:mod:`~.level_mix`); docs/model-parallelism.md has the
costs and the bytes saved.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from .. import config
from ..data.io.cache import CacheWarning
from ..data.streaming import StreamedNetwork
from .level_mix import LevelMix, describe, fixed_rows
from .neurons import NeuronPartition, blocks_of, connectivity
from .traffic import DEFAULT_MIN_SHARE, DEFAULT_SAMPLE, TrafficProfile, inputs_digest

if TYPE_CHECKING:
    from ..core.network import Network

MISSING = "hypergraph partitioning needs Mt-KaHyPar: pip install 'sdnn_dask[partition]'"

#: Bumped when the model or the settings change, so cached partitions are made again.
ALGORITHM_VERSION = 2

#: Mt-KaHyPar threads: the deterministic preset gives the same result for any count.
MAX_THREADS = 2

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}


def _mtkahypar():
    """The ``mtkahypar`` module, or an ImportError naming the extra."""
    try:
        import mtkahypar
    except ImportError as err:
        raise ImportError(MISSING) from err
    return mtkahypar


def _threads() -> int:
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        available = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, available))


def _initializer(mtk):
    """Mt-KaHyPar's initializer, made once per process (its thread pool is global)."""
    with _LOCK:
        # a forked child inherits the flag but not the thread pool's threads
        if _STATE.get("pid") != os.getpid():
            _STATE["initializer"] = mtk.initialize(_threads(), False)
            _STATE["pid"] = os.getpid()
        return _STATE["initializer"]


def _check_k(k: int) -> int:
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)


def _check_epsilon(epsilon: float) -> None:
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")


def partition_columns(
    w: sp.spmatrix | sp.sparray,
    k: int,
    *,
    epsilon: float = 0.03,
    seed: int = 0,
    fixed_rows: np.ndarray | None = None,
    net_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Partition the columns (output neurons) of one layer, minimising the column-net km1.

    Parameters
    ----------
    w
        The layer, ``n_rows x n_cols``; column ``j`` weighs its nonzeros (its work).
    k
        Number of parts.
    epsilon
        Work of every part ``<= max(ceil(W / k), floor((1 + epsilon) W / k))``, ``W`` the
        layer's nonzeros. Mt-KaHyPar may exceed it when no such split exists (a few
        columns heavier than the slack).
    seed
        Relabels vertices and nets before partitioning (the deterministic preset ignores
        Mt-KaHyPar's own seed): the same seed gives the same partition.
    fixed_rows
        Parts of the rows (the previous level's owners). ``None``: nets are the rows'
        columns alone (no source vertex). Given: each net also holds its row, a vertex
        fixed to ``fixed_rows[i]``, so km1 counts the columns sent to non-owners.
    net_weights
        One non-negative integer per row: what sending row ``i``'s activation column
        costs (its traffic, :meth:`~.traffic.SampledLevel.column_weights`), so the
        objective is the weighted km1; rows of weight 0 carry nothing and are left out.
        ``None``: every net weighs 1.

    Returns
    -------
    numpy.ndarray
        ``(n_cols,)`` int32 part of each column.

    Examples
    --------
    >>> from sdnn_dask.data.radixnet import radixnet_layer
    >>> from sdnn_dask.partition import column_net_km1
    >>> w = radixnet_layer(1024, 1)
    >>> parts = partition_columns(w, 4, seed=0)  # doctest: +SKIP
    >>> column_net_km1(w, parts)  # contiguous blocks give 3072  # doctest: +SKIP
    64
    """
    w = sp.csr_matrix(w, copy=True)
    w.eliminate_zeros()  # a stored zero is no edge
    k = _check_k(k)
    _check_epsilon(epsilon)
    n_rows, n_cols = w.shape
    if fixed_rows is not None:
        fixed_rows = np.asarray(fixed_rows)
        if fixed_rows.shape != (n_rows,):
            raise ValueError(f"fixed_rows must have one part per row ({n_rows}), "
                             f"got shape {fixed_rows.shape}")
        if n_rows and (fixed_rows.min() < 0 or fixed_rows.max() >= k):
            raise ValueError(f"fixed_rows must lie in [0, {k})")
    weights = np.bincount(w.indices, minlength=n_cols).astype(np.int64)
    total = int(weights.sum())
    if k == 1:
        return np.zeros(n_cols, dtype=np.int32)
    if total == 0:  # no work and nothing to send: any split will do
        return blocks_of(np.arange(n_cols), n_cols, k)
    if k > n_cols:
        raise ValueError(f"cannot split {n_cols} columns into k={k} non-empty parts")

    mtk = _mtkahypar()
    initializer = _initializer(mtk)
    rng = np.random.default_rng(seed)
    label = rng.permutation(n_cols)  # vertex id of column j
    nonempty = np.flatnonzero(np.diff(w.indptr))
    if net_weights is not None:
        net_weights = np.asarray(net_weights)
        if net_weights.shape != (n_rows,) or (n_rows and net_weights.min() < 0):
            raise ValueError(f"net_weights must be {n_rows} non-negative integers, got "
                             f"shape {net_weights.shape}")
        nonempty = nonempty[net_weights[nonempty] > 0]
    if net_weights is not None and not len(nonempty):  # no traffic: any balanced split
        return blocks_of(np.arange(n_cols), n_cols, k)
    pins = label[w.indices].tolist()
    ptr = w.indptr.tolist()
    net_rows = nonempty[rng.permutation(len(nonempty))].tolist()
    if fixed_rows is None:
        nets = [pins[ptr[i] : ptr[i + 1]] for i in net_rows]
        node_weights = np.empty(n_cols, dtype=np.int64)
        fixed_counts = np.zeros(k, dtype=np.int64)
    else:
        nets = [[n_cols + i, *pins[ptr[i] : ptr[i + 1]]] for i in net_rows]
        # weight 1, not 0: Mt-KaHyPar ignores fixed vertices whose total weight is 0
        node_weights = np.ones(n_cols + n_rows, dtype=np.int64)
        fixed_counts = np.bincount(fixed_rows, minlength=k).astype(np.int64)
    node_weights[label] = weights
    free_cap = max(-(-total // k), int(np.floor((1 + epsilon) * total / k)))

    context = initializer.context_from_preset(mtk.PresetType.DETERMINISTIC)
    context.set_partitioning_parameters(k, float(epsilon), mtk.Objective.KM1)
    # exact caps: the fixed vertices' unit weights do not loosen the bound on work
    context.set_individual_target_block_weights((fixed_counts + free_cap).tolist())
    context.logging = False
    edge_weights = ([1] * len(nets) if net_weights is None
                    else np.asarray(net_weights, dtype=np.int64)[net_rows].tolist())
    hypergraph = initializer.create_hypergraph(
        context, len(node_weights), len(nets), nets, node_weights.tolist(), edge_weights
    )
    if fixed_rows is not None:
        hypergraph.add_fixed_vertices([-1] * n_cols + fixed_rows.tolist(), k)
    with _LOCK:  # one partitioning at a time on the shared thread pool
        mtk.set_seed(int(seed))  # unused by the deterministic preset; seeded all the same
        result = np.asarray(hypergraph.partition(context).get_partition(), dtype=np.int64)
    if fixed_rows is not None and not np.array_equal(result[n_cols:], fixed_rows):
        raise RuntimeError("Mt-KaHyPar moved fixed vertices; the partition would be inconsistent")
    return result[label].astype(np.int32)


def _place_inputs(w: sp.csr_matrix, column_parts: np.ndarray, k: int) -> np.ndarray:
    """Owners of the rows of ``w`` that add nothing to its km1, balanced by count.

    Each row goes to one of the parts its columns already span (so its net's connectivity
    does not grow), the least loaded one; rows with fewer choices go first, and rows that
    feed nothing fill the least loaded parts.
    """
    c = connectivity(w, column_parts, k)
    degree = np.diff(c.indptr)
    order = np.argsort(np.where(degree == 0, k + 1, degree), kind="stable")
    owner = np.empty(w.shape[0], dtype=np.int32)
    load = np.zeros(k, dtype=np.int64)
    every_part = np.arange(k)
    indptr, indices = c.indptr, c.indices
    for i in order.tolist():
        choices = indices[indptr[i] : indptr[i + 1]] if degree[i] else every_part
        p = choices[np.argmin(load[choices])]
        owner[i] = p
        load[p] += 1
    return owner


@dataclass(frozen=True)
class TrafficSettings:
    """How a traffic-weighted partition estimates the traffic (:mod:`~.traffic`).

    Attributes
    ----------
    sample
        Input rows run through the network to estimate it.
    sample_seed
        Picks them.
    min_share
        Layers carrying at least this share of the heaviest layer's traffic are
        partitioned with Mt-KaHyPar; the others carry the previous level's parts forward.
    dedup
        Whether the runs merge identical rows (the traffic of the deep layers is then one
        row's).
    """

    sample: int = DEFAULT_SAMPLE
    sample_seed: int = 0
    min_share: float = DEFAULT_MIN_SHARE
    dedup: bool = True

    def as_params(self) -> dict[str, Any]:
        """The settings as a partition's (and a run's) parameters."""
        return {"traffic_sample": int(self.sample), "traffic_seed": int(self.sample_seed),
                "traffic_min_share": float(self.min_share),
                "traffic_dedup": bool(self.dedup)}


def network_digest(network: Network) -> str:
    """SHA-256 of what a network computes: every layer's pattern and values, the bias and
    the clamp. A store's layers are named by the SHA-256 its manifest records for their
    files (checked when they are read), so a 65536-1920 store is not read to key it."""
    digest = hashlib.sha256(f"N={network.n_neurons}|L={network.n_layers}|"
                            f"ymax={float(network.ymax)!r}".encode())
    digest.update(np.ascontiguousarray(
        np.broadcast_to(np.asarray(network.bias, np.float32), (network.n_neurons,))).tobytes())
    if isinstance(network, StreamedNetwork):
        for entry in network.store.manifest["layers"][: network.n_layers]:
            digest.update(json.dumps(entry, sort_keys=True).encode())
        return digest.hexdigest()
    for w in network.layers:
        for array, dtype in ((w.indptr, np.int64), (w.indices, np.int32),
                             (w.data, np.float32)):
            digest.update(np.ascontiguousarray(array, dtype=dtype).tobytes())
    return digest.hexdigest()


#: Layout of what a partition cache file records about itself (:func:`_cache_stamp`).
CACHE_STAMP = "sdnn-partition-cache-1"


class PartitionCacheWarning(CacheWarning):
    """A cached partition could not be used (unreadable, or made for another network,
    k or settings) or written; the partition is computed, or returned, all the same."""


def _cache_stamp(network: Network, k: int, epsilon: float, seed: int,
                 traffic: tuple[str, TrafficSettings] | None) -> dict[str, Any]:
    """What a cached partition is made for, recorded in its file and checked on load.

    ``key`` names the file: a digest of N, L, k, epsilon, seed and the patterns, or for a
    traffic-weighted partition the network's digest, the inputs and the settings. It is
    the key files were named by before they recorded a stamp, so such a file is found,
    refused (no stamp) with a warning and replaced, not left behind unused.
    ``network`` is what the partition depends on: the patterns alone with uniform
    weights, :func:`network_digest` (values, bias, clamp too) when the traffic weighs
    the nets. ``settings`` is a digest of the algorithm's version, epsilon, seed and, for
    a traffic-weighted partition, the inputs and :class:`TrafficSettings`.
    """
    key = hashlib.sha256(
        f"hypergraph|v{ALGORITHM_VERSION}|N={network.n_neurons}|L={network.n_layers}|"
        f"k={k}|eps={float(epsilon)!r}|seed={seed}".encode()
    )
    settings: dict[str, Any] = {"version": ALGORITHM_VERSION, "epsilon": float(epsilon),
                                "seed": int(seed)}
    if traffic is None:  # uniform weights: the patterns alone decide
        objective = "km1"
        patterns = hashlib.sha256(f"N={network.n_neurons}|L={network.n_layers}".encode())
        for w in network.layers:  # one pass: a streamed network's layers are read once
            for array in (np.ascontiguousarray(w.indptr, dtype=np.int64),
                          np.ascontiguousarray(w.indices, dtype=np.int32)):
                key.update(array)
                patterns.update(array)
        content = patterns.hexdigest()
    else:  # the values, bias, clamp and inputs decide the traffic too
        inputs, chosen = traffic
        objective, content = "traffic", network_digest(network)
        key.update(f"traffic|{content}|{inputs}|"
                   f"{json.dumps(chosen.as_params(), sort_keys=True)}".encode())
        settings.update(inputs=inputs, **chosen.as_params())
    return {"format": CACHE_STAMP, "objective": objective, "network": content, "k": int(k),
            "settings": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()
                                       ).hexdigest(),
            "key": key.hexdigest()[:24]}


def _cache_file(cache: bool | str | os.PathLike, network: Network, stamp: dict[str, Any]
                ) -> Path:
    folder = config.cache_dir() / "partitions" if cache is True else Path(cache)
    how = "hypergraph" if stamp["objective"] == "km1" else "traffic"
    return folder / (f"neurons-{how}-n{network.n_neurons}-l{network.n_layers}-"
                     f"k{stamp['k']}-{stamp['key']}.npz")


def _load_cached(path: Path, stamp: dict[str, Any], network: Network, *,
                 warn: bool) -> NeuronPartition | None:
    """The partition cached at ``path`` if it records ``stamp`` and fits ``network``;
    ``None`` otherwise, with a :class:`PartitionCacheWarning` naming the file and why
    when ``warn`` (the caller computes it again and replaces the file)."""
    if not path.is_file():
        return None
    why = None
    try:
        recorded = NeuronPartition.read_stamp(path)
        cached = NeuronPartition.load(path)
    # anything np.load can raise on a damaged file (EOFError, BadZipFile, ValueError,
    # KeyError, OSError, zlib.error, ...): made again and overwritten
    except Exception as error:
        why = f"unreadable: {type(error).__name__}: {error}"
    else:
        if recorded is None:
            why = "it does not record what it was made for (written before cache stamps)"
        elif recorded != stamp:
            # the key follows from the rest: named only when nothing else differs
            fields = [f for f in ("format", "objective", "network", "k", "settings")
                      if recorded.get(f) != stamp[f]] or ["key"]
            why = f"it was made for another {' and '.join(fields)}"
        elif cached.method != "hypergraph" or cached.k != stamp["k"] or cached.parts.shape != (
            network.n_layers + 1, network.n_neurons
        ):
            why = (f"it holds a {cached.method} partition into {cached.k} parts of shape "
                   f"{cached.parts.shape}")
    if why is None:
        return cached
    if warn:
        warnings.warn(f"{path}: cached partition not used: {why}; computing it again",
                      PartitionCacheWarning, stacklevel=3)
    return None


def _save_cached(path: Path, partition: NeuronPartition, stamp: dict[str, Any]) -> None:
    """Write a cache file; a failure only warns (the cache saves time, the partition is
    right without it)."""
    try:
        partition.save(path, stamp=stamp)
    except OSError as error:
        why = ("a file stands where a folder should be"
               if isinstance(error, (FileExistsError, NotADirectoryError))
               else error.strerror or str(error))
        warnings.warn(f"{path}: cannot write the partition cache ({why}); the partition is "
                      "returned uncached", PartitionCacheWarning, stacklevel=3)


def _traffic_key(inputs: Any, settings: TrafficSettings | None
                 ) -> tuple[str, TrafficSettings] | None:
    if inputs is None:
        return None
    return inputs_digest(inputs), settings or TrafficSettings()


def is_cached(network: Network, k: int, *, epsilon: float = 0.03, seed: int = 0,
              cache: bool | str | os.PathLike = True, inputs: Any = None,
              traffic: TrafficSettings | None = None) -> bool:
    """Whether :func:`hypergraph_partition` would read this partition from ``cache``."""
    stamp = _cache_stamp(network, k, epsilon, seed, _traffic_key(inputs, traffic))
    return _load_cached(_cache_file(cache, network, stamp), stamp, network,
                        warn=False) is not None


def hypergraph_partition(
    network: Network,
    k: int,
    *,
    epsilon: float = 0.03,
    seed: int = 0,
    cache: bool | str | os.PathLike | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    inputs: sp.spmatrix | sp.sparray | None = None,
    traffic: TrafficSettings | None = None,
) -> NeuronPartition:
    """Partition every level of ``network`` into ``k`` parts, layer by layer, with Mt-KaHyPar.

    Without ``inputs`` every layer is partitioned and every net weighs 1 (the column-net
    km1 of the paper). With ``inputs``, the partition is *traffic-weighted*: a sample of
    the inputs is run through the network first (:class:`~.traffic.TrafficProfile`), each
    net weighs the nonzeros its activation column is expected to carry, and only the
    layers carrying at least ``traffic.min_share`` of the heaviest layer's traffic are
    partitioned; every other layer keeps the previous level's parts (no Mt-KaHyPar run,
    and no read of its matrix).

    Parameters
    ----------
    network
        The network (in memory or streamed from a store).
    k
        Number of parts.
    epsilon
        Allowed work imbalance of every layer (see :func:`partition_columns`).
    seed
        Makes the result reproducible; different seeds give different (equally good in
        expectation) partitions.
    cache
        A folder, or ``True`` for ``sdnn_dask.config.cache_dir() / "partitions"``: a
        partition made before with the same inputs is read back instead of recomputed
        (``seconds`` stays the time it took to make). The key is the layers' patterns, N,
        L, k, epsilon and seed; a traffic-weighted partition's adds the network's values,
        bias and clamp, the inputs and ``traffic``. Each file records what it was made
        for (the key, the network's digest, k, the objective and a digest of the
        settings), checked when it is read: a file that records something else (copied
        from another network, written before the record was kept) or cannot be read is
        computed again and replaced, with a :class:`PartitionCacheWarning` naming it. A
        file that cannot be written (the folder is a file, the disk is full) also only
        warns: the partition is returned uncached. ``None``/``False``: no cache.
    progress
        Called as ``progress(stage, done, total)``: stage ``"sample"`` after each layer of
        the sample's pass, ``"mtkahypar"`` after each layer partitioned.
    inputs
        The input rows whose traffic weighs the partition; ``None``: uniform weights.
    traffic
        How the traffic is estimated (default :class:`TrafficSettings`()).

    Examples
    --------
    >>> from sdnn_dask.data.radixnet import make_network
    >>> net = make_network(1024, 6)
    >>> part = hypergraph_partition(net, 4)  # doctest: +SKIP
    >>> int(part.volume(net)["km1"].sum()) < 6 * 3072  # doctest: +SKIP
    True
    """
    k = _check_k(k)
    _check_epsilon(epsilon)
    key = _traffic_key(inputs, traffic)
    path = stamp = None
    if cache:
        stamp = _cache_stamp(network, k, epsilon, seed, key)
        path = _cache_file(cache, network, stamp)
        cached = _load_cached(path, stamp, network, warn=True)
        if cached is not None:
            return cached
    if k > 1:
        _mtkahypar()  # fail before any work when the extra is missing

    start = time.perf_counter()
    params: dict[str, Any] = {"seed": seed, "epsilon": float(epsilon), "objective": "km1",
                              "preset": "deterministic", "version": ALGORITHM_VERSION}
    if key is None:
        parts = _every_layer(network, k, epsilon, seed, progress)
    else:
        settings = key[1]
        profile = TrafficProfile.measure(
            network, inputs, sample=settings.sample, seed=settings.sample_seed,
            dedup=settings.dedup, min_share=settings.min_share,
            progress=None if progress is None else lambda d, t: progress("sample", d, t))
        parts, chosen = _heavy_layers(network, k, epsilon, seed, profile, progress)
        params.update(**chosen, objective="traffic", **settings.as_params(),
                      partitioned=_ranges(profile.heavy),
                      sample_seconds=round(profile.seconds, 3))
    result = NeuronPartition(method="hypergraph", k=k, parts=parts, params=params,
                             seconds=time.perf_counter() - start)
    if path is not None:
        _save_cached(path, result, stamp)
    return result


def _ranges(layers: list[int]) -> str:
    """``[1, 2, 3, 7]`` as ``"1-3,7"`` (the layers Mt-KaHyPar partitioned, for the record)."""
    out: list[str] = []
    for layer in layers:
        if out and layer == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{layer}"
        else:
            out.append(str(layer))
    return ",".join(out)


def _every_layer(network: Network, k: int, epsilon: float, seed: int,
                 progress: Callable[[str, int, int], None] | None) -> np.ndarray:
    """Every layer partitioned with Mt-KaHyPar, every net weighing 1."""
    n_layers = network.n_layers
    parts = np.empty((n_layers + 1, network.n_neurons), dtype=np.int32)
    for layer, w in enumerate(network.layers, start=1):
        if layer == 1:
            parts[1] = partition_columns(w, k, epsilon=epsilon, seed=seed)
            parts[0] = _place_inputs(w, parts[1], k)
        else:
            parts[layer] = partition_columns(w, k, epsilon=epsilon, seed=seed,
                                             fixed_rows=parts[layer - 1])
        if progress is not None:
            progress("mtkahypar", layer, n_layers)
    return parts


#: Net weight of a net that carries no traffic, against 1000 for the heaviest: the nets
#: keep the layer's structure before Mt-KaHyPar (its cut decides the later, heavier layers'
#: alignment). Leaving them out moved 17% more bytes than uniform km1 on 16384-24 x 60000 at
#: k = 2; a floor of 1, 10 or 100 moved 2-3% less than km1.
NET_WEIGHT_FLOOR = 10


def _net_weights(weights: np.ndarray) -> np.ndarray:
    """Traffic as Mt-KaHyPar's integer net weights: ``NET_WEIGHT_FLOOR`` to 1000 (its
    weights and the km1 sum are 32-bit)."""
    top = float(weights.max()) if weights.size else 0.0
    scale = (1000.0 - NET_WEIGHT_FLOOR) / top if top > 0 else 0.0
    return (np.rint(weights * scale) + NET_WEIGHT_FLOOR).astype(np.int64)


def _heavy_layers(network: Network, k: int, epsilon: float, seed: int,
                  profile: TrafficProfile,
                  progress: Callable[[str, int, int], None] | None
                  ) -> tuple[np.ndarray, dict[str, Any]]:
    """Mt-KaHyPar on the profile's heavy layers, the previous level's parts carried
    forward on the others, then the cheapest mix of it, layer hashing and contiguous
    blocks level by level (:mod:`~.level_mix`); layers after the last heavy one are not
    read. Returns the parts and what the mix chose."""
    n_layers, heavy, n = network.n_layers, profile.heavy, network.n_neurons
    parts = np.empty((n_layers + 1, n), dtype=np.int32)
    last = heavy[-1] if heavy else 0
    if last == 0:  # no traffic at all: any balanced split will do
        parts[:] = blocks_of(np.arange(n), n, k)
        return parts, {}
    fixed = fixed_rows(n, k)
    mix = LevelMix(("hypergraph", *fixed))
    done = 0
    for layer, w in enumerate(network.layers, start=1):
        if layer > last:
            break
        if layer not in profile.weights:
            parts[layer] = parts[layer - 1]
        else:
            weights = _net_weights(profile.weights[layer])
            if layer == 1:
                parts[1] = partition_columns(w, k, epsilon=epsilon, seed=seed,
                                             net_weights=weights)
                parts[0] = _place_inputs(w, parts[1], k)
            else:
                parts[layer] = partition_columns(w, k, epsilon=epsilon, seed=seed,
                                                 fixed_rows=parts[layer - 1],
                                                 net_weights=weights)
            done += 1
            if progress is not None:
                progress("mtkahypar", done, len(heavy))
        work = np.bincount(w.indices, minlength=w.shape[1])  # each column's multiply-adds
        cap = max(-(-int(work.sum()) // k), np.floor((1 + epsilon) * work.sum() / k))
        mix.add_layer(w, [parts[layer - 1], *fixed.values()], [parts[layer], *fixed.values()],
                      k, profile.weights.get(layer),
                      allowed=[True, *(np.bincount(row, work, k).max() <= cap
                                       for row in fixed.values())])
    path, cost = mix.choose()
    for level, state in enumerate(path):
        if state:
            parts[level] = fixed[mix.names[state]]
    parts[last + 1:] = parts[last]
    return parts, {"levels": describe(mix.names, path), "cut_traffic": round(cost),
                   "cut_traffic_layer_by_layer": round(mix.cost_of([0] * len(path)))}
