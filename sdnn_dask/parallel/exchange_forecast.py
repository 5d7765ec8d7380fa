"""Bytes model parallelism will move, forecast from a sample of the inputs before a run.

A part sends, in layer ``l``, one piece to each other worker that hosts parts reading its
columns (:func:`~.slabs.plans.piece_for`): the live rows with a nonzero in those columns,
8 bytes of row id each, and their values as a dense tile (4 bytes an entry) when at
least half the entries are nonzero, else as a :class:`~.slabs.layout.BlockCSC` (8 bytes
a nonzero, plus 8 bytes a column for each block of the part's rows,
:data:`~.slabs.layout.BLOCK_ROWS` rows a block; :meth:`~.slabs.layout.Slab.nbytes`). The
forecast replays that rule on a sample of the inputs
(:class:`~sdnn_dask.partition.traffic.SampledForward`, which merges identical rows where
the parts look for them) and scales each sampled row to the rows it stands for. What it
cannot see: which rows of the whole input repeat one another beyond what the sample
shows, and the sampling error of the live-row counts (a few per cent at the default
sample); docs/model-parallelism.md gives the measured error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..partition.neurons import NeuronPartition, connectivity
from ..partition.traffic import DEFAULT_SAMPLE, SampledForward
from .slabs.layout import BLOCK_ROWS

if TYPE_CHECKING:
    from ..core.network import Network

#: Columns of :func:`forecast_exchange`'s table.
FORECAST_COLUMNS = ["layer", "part", "distinct_rows", "pieces_in", "predicted_bytes_in"]


def forecast_exchange(network: Network, partition: NeuronPartition,
                      inputs: sp.spmatrix | sp.sparray, *, sample: int = DEFAULT_SAMPLE,
                      seed: int = 0, dedup: bool = True, route: list | None = None
                      ) -> pd.DataFrame:
    """Per layer and receiving part, the bytes a model-parallel run of ``inputs`` will move.

    Parameters
    ----------
    network, partition
        The network and its neuron partition.
    inputs
        The run's input rows.
    sample, seed
        Rows sampled to forecast, and which (see
        :class:`~sdnn_dask.partition.traffic.SampledForward`).
    dedup
        Whether the run merges identical rows (its default).
    route
        The worker (any label) of each part; pieces between parts of one worker cost
        nothing and one piece serves all the parts of a worker. Default: each part on its
        own worker.

    Returns
    -------
    pandas.DataFrame
        :data:`FORECAST_COLUMNS`, one row per layer and part: the distinct live rows sent
        (estimated, the same for every part), and the pieces and bytes the part receives
        (a piece for several parts of a worker counts for the first of them, as a run's
        ``bytes_in`` does); the bytes sum to what :attr:`RunResult.bytes_moved` measures.

    Examples
    --------
    >>> from sdnn_dask.data.radixnet import make_inputs, make_network
    >>> from sdnn_dask.partition import make_neuron_partition
    >>> net = make_network(1024, 20)
    >>> part = make_neuron_partition(net, 2, "hash")
    >>> f = forecast_exchange(net, part, make_inputs(4000), sample=1000)
    >>> len(f), bool(f.query("layer == 1")["predicted_bytes_in"].sum() > 0)
    (40, True)
    """
    k = partition.k
    route = list(range(k)) if route is None else list(route)
    if len(route) != k:
        raise ValueError(f"route must name one worker per part ({k}), got {len(route)}")
    frames = []
    for layer, w, level in SampledForward(network, inputs, sample=sample, seed=seed,
                                          dedup=dedup):
        owner = partition.parts[layer - 1]
        reads = connectivity(sp.csr_matrix(w), partition.parts[layer], k).toarray() > 0
        pieces, received = _layer_bytes(level.values, level.scale, owner, reads, route)
        frames.append(pd.DataFrame({"layer": layer, "part": np.arange(k),
                                    "distinct_rows": level.distinct, "pieces_in": pieces,
                                    "predicted_bytes_in": received}))
    return pd.concat(frames, ignore_index=True)[FORECAST_COLUMNS]


def _layer_bytes(y: sp.csr_matrix, scale: np.ndarray, owner: np.ndarray,
                 reads: np.ndarray, route: list) -> tuple[np.ndarray, np.ndarray]:
    """Pieces and expected bytes each part receives in one layer: ``y`` the sample's rows
    of the level feeding it, ``owner`` its neurons' parts, ``reads[i, q]`` whether part
    ``q`` reads neuron ``i``."""
    k = reads.shape[1]
    row_of = np.repeat(np.arange(y.shape[0]), np.diff(y.indptr))
    col_part = owner[y.indices]
    pieces, received = np.zeros(k, np.int64), np.zeros(k)
    workers = list(dict.fromkeys(route))
    for p in range(k):
        mine = owner == p
        if not mine.any():
            continue
        in_p = col_part == p
        # the part's blocks: BLOCK_ROWS of its live rows each (the sample's, scaled)
        slab_rows = float(scale[np.bincount(row_of[in_p], minlength=y.shape[0]) > 0].sum())
        n_blocks = max(1.0, np.ceil(slab_rows / BLOCK_ROWS))
        for where in workers:
            readers = [q for q in range(k) if route[q] == where and q != p]
            if where == route[p] or not readers:
                continue  # same process: the readers take the slab itself
            columns = mine & reads[:, readers].any(axis=1)
            cols = int(columns.sum())
            if not cols:
                continue
            taken = in_p & columns[y.indices]
            per_row = np.bincount(row_of[taken], minlength=y.shape[0])
            n_rows = float(scale[per_row > 0].sum())
            nnz = float(per_row @ scale)
            if n_rows and 2 * nnz >= cols * n_rows:  # a tile
                values = 4.0 * cols * n_rows
            else:  # indices and values, each block's column starts and the block bounds
                values = 8.0 * nnz + 8.0 * n_blocks * (cols + 1) + 8.0 * (n_blocks + 1)
            label = 4.0 * cols if len(readers) > 1 else 0.0
            pieces[readers[0]] += 1
            received[readers[0]] += 8.0 * n_rows + values + label
    return pieces, received
