"""Per-block layer maths, shared by every executor. Knows nothing of Dask.

One layer of the challenge recurrence on a block of rows is::

    Z = Y @ W ;  Z += b on the nonzeros of Z ;  Y = min(max(Z, 0), ymax) ;  drop zeros

Two compiled (numba) implementations of that step, chosen per layer by the density of the
live rows:

* :func:`sparse_step` walks the rows of ``Y`` (CSR) and scatters into a dense accumulator of
  one output row, then scans the accumulator in column order, so the output comes out sorted
  without a sort. Best when rows hold few nonzeros.
* :func:`dense_step` keeps the live rows as a dense ``neurons x rows`` tile (``Y`` transposed)
  and forms each output neuron as a sum of 32-ish scaled input rows: contiguous, vectorised
  loops over a cache-sized run of rows. Past about 5% density this beats any scatter.

Rows that die (all zero) are compacted away after every layer, so later layers only touch
the survivors: for 1024-120 on the official inputs about 3% of the rows are left after
8 layers. :func:`forward_block` drives a whole block through all layers.

A stored entry whose sum is exactly 0.0 gets no bias, as in the MATLAB reference
(``logical(Z)``) and scipy's product, which drops numerical zeros.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numba
import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import config
from .network import Network, as_csr32

#: Rows of the dense tile processed together (4 KiB per neuron row). Measured on the
#: official 1024-neuron layers: 1024 beats 256 and 4096 by 20-40% (cache reuse of the
#: ~32 input rows that feed each output neuron).
_ROW_TILE = 1024

#: Fixed cost of a dense layer, in rows' worth of work: the density needed to go dense is
#: ``threshold * (1 + _SETUP_ROWS / rows)``.
_SETUP_ROWS = 100.0


@numba.njit(nogil=True, cache=True)
def sparse_step(yp, yi, yx, wp, wi, wx, bias, ymax, n_out, compact):  # pragma: no cover
    """One layer on CSR rows ``(yp, yi, yx)`` with ``W`` in CSR ``(wp, wi, wx)``.

    Returns ``(op, oi, ox, kept)``: the output CSR and the input-row positions it keeps
    (all rows when ``compact`` is false, else only rows with a nonzero).
    """
    nrows = yp.shape[0] - 1
    acc = np.zeros(n_out, np.float32)
    cap = max(1024, 2 * yx.shape[0])
    op = np.zeros(nrows + 1, np.int64)
    oi = np.empty(cap, np.int32)
    ox = np.empty(cap, np.float32)
    kept = np.empty(nrows, np.int64)
    nkept = 0
    nnz = 0
    for r in range(nrows):
        for p in range(yp[r], yp[r + 1]):
            k = yi[p]
            v = yx[p]
            for q in range(wp[k], wp[k + 1]):
                acc[wi[q]] += v * wx[q]
        if nnz + n_out > cap:  # grow the output, doubling, so appends stay amortised O(1)
            cap = max(2 * cap, nnz + n_out)
            oi2 = np.empty(cap, np.int32)
            ox2 = np.empty(cap, np.float32)
            oi2[:nnz] = oi[:nnz]
            ox2[:nnz] = ox[:nnz]
            oi = oi2
            ox = ox2
        start = nnz
        for j in range(n_out):
            z = acc[j]
            if z != 0.0:
                acc[j] = 0.0
                z += bias[j]
                if z > 0.0:
                    if z > ymax:
                        z = ymax
                    oi[nnz] = j
                    ox[nnz] = z
                    nnz += 1
        if nnz > start or not compact:
            kept[nkept] = r
            nkept += 1
            op[nkept] = nnz
    return op[: nkept + 1], oi[:nnz], ox[:nnz], kept[:nkept]


@numba.njit(nogil=True, cache=True)
def dense_step(yt, wtp, wti, wtx, bias, ymax, n_out, row_tile):  # pragma: no cover
    """One layer on a dense tile ``yt`` (``n_in x rows``) with ``W^T`` in CSR.

    Returns ``(zt, alive, nnz)``: the ``n_out x rows`` output, which rows have a nonzero,
    and the number of nonzeros.
    """
    rows = yt.shape[1]
    zt = np.zeros((n_out, rows), np.float32)
    alive = np.zeros(rows, np.bool_)
    nnz = 0
    for r0 in range(0, rows, row_tile):
        r1 = min(rows, r0 + row_tile)
        m = r1 - r0
        for j in range(n_out):
            dst = zt[j, r0:r1]
            for q in range(wtp[j], wtp[j + 1]):
                w = wtx[q]
                src = yt[wti[q], r0:r1]
                for r in range(m):
                    dst[r] += w * src[r]
            b = bias[j]
            for r in range(m):
                z = dst[r]
                if z != 0.0:
                    z += b
                    if z <= 0.0:
                        z = 0.0
                    else:
                        if z > ymax:
                            z = ymax
                        alive[r0 + r] = True
                        nnz += 1
                    dst[r] = z
    return zt, alive, nnz


@numba.njit(nogil=True, cache=True)
def _csr_to_dense_t(yp, yi, yx, n):  # pragma: no cover
    rows = yp.shape[0] - 1
    yt = np.zeros((n, rows), np.float32)
    for r in range(rows):
        for p in range(yp[r], yp[r + 1]):
            yt[yi[p], r] = yx[p]
    return yt


def dense_t_to_csr(yt: np.ndarray) -> sp.csr_matrix:
    """The ``rows x n`` CSR of a dense transposed tile."""
    return as_csr32(sp.csr_matrix(yt.T))


@dataclass
class BlockOutput:
    """What one block of rows leaves after the last layer.

    Attributes
    ----------
    rows
        Block-local positions (0-based, increasing) of the rows that are still nonzero.
    values
        Their activations, ``len(rows) x N`` float32 CSR.
    n_rows
        Rows the block had on input.
    trace
        One row per layer: ``layer, mode, rows_in, rows_out, nnz_out, seconds``.
    """

    rows: np.ndarray
    values: sp.csr_matrix
    n_rows: int
    trace: pd.DataFrame = field(repr=False)

    def to_csr(self) -> sp.csr_matrix:
        """The full ``n_rows x N`` output, zero rows included."""
        values = self.values.tocoo()
        n = self.values.shape[1]
        return as_csr32(
            sp.csr_matrix(
                (values.data, (self.rows[values.row], values.col)), shape=(self.n_rows, n)
            )
        )


TRACE_COLUMNS = ["layer", "mode", "rows_in", "rows_out", "nnz_out", "seconds"]


def forward_block(
    network: Network,
    inputs: sp.csr_matrix | sp.sparray,
    *,
    dense_threshold: float | None = None,
    max_dense_bytes: int | None = None,
) -> BlockOutput:
    """Run a block of input rows through every layer of ``network``.

    Parameters
    ----------
    network
        The weights, bias and clamp.
    inputs
        ``rows x N`` sparse input block (converted to float32 CSR).
    dense_threshold
        Live-row density above which a layer runs on a dense tile
        (default ``sdnn.kernel.dense-threshold``).
    max_dense_bytes
        Largest dense tile; more rows than fit are run in independent chunks
        (default ``sdnn.kernel.max-dense-bytes``).

    Returns
    -------
    BlockOutput
        The surviving rows, their activations and a per-layer trace.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sdnn_dask.network import Network
    >>> net = Network([sp.identity(4, format="csr") * 2] * 2, bias=-1.0, ymax=32)
    >>> out = forward_block(net, sp.csr_matrix([[1, 0, 0, 0], [0, 0, 0, 0], [3, 1, 0, 0]]))
    >>> out.rows.tolist(), out.values.toarray().tolist()
    ([0, 2], [[1.0, 0.0, 0.0, 0.0], [9.0, 1.0, 0.0, 0.0]])
    """
    y = as_csr32(inputs)
    n = network.n_neurons
    if y.shape[1] != n:
        raise ValueError(f"inputs have {y.shape[1]} columns, the network has {n} neurons")
    if dense_threshold is None:
        dense_threshold = config.get("kernel.dense-threshold")
    if max_dense_bytes is None:
        max_dense_bytes = config.get("kernel.max-dense-bytes")
    threshold = float(dense_threshold)
    budget = int(max_dense_bytes)
    chunk_rows = max(1, budget // (4 * n))
    if y.shape[0] <= chunk_rows:
        return _forward_chunk(network, y, threshold, chunk_rows)
    # Rows are independent: run chunks that fit the dense budget one after another.
    outs = [
        _forward_chunk(network, y[start : start + chunk_rows], threshold, chunk_rows)
        for start in range(0, y.shape[0], chunk_rows)
    ]
    offsets = np.arange(0, y.shape[0], chunk_rows)
    rows = np.concatenate([o.rows + off for o, off in zip(outs, offsets, strict=True)])
    values = as_csr32(sp.vstack([o.values for o in outs], format="csr"))
    trace = (
        pd.concat([o.trace for o in outs])
        .groupby(["layer", "mode"], as_index=False, sort=False)
        .sum()
    )
    return BlockOutput(rows.astype(np.int64), values, int(y.shape[0]), trace[TRACE_COLUMNS])


def _forward_chunk(
    network: Network, y: sp.csr_matrix, threshold: float, chunk_rows: int
) -> BlockOutput:
    n = network.n_neurons
    bias = network.bias
    ymax = np.float32(network.ymax)
    transposed = network.transposed
    n_rows = int(y.shape[0])
    # Start from the rows that hold anything: empty input rows are dead already.
    live = np.flatnonzero(np.diff(y.indptr)).astype(np.int64)
    y = y[live] if len(live) < y.shape[0] else y
    yp, yi, yx = y.indptr, y.indices, y.data
    yt: np.ndarray | None = None
    nnz = int(yx.shape[0])
    trace = []
    for k, w in enumerate(network.layers, start=1):
        rows_in = len(live)
        t0 = time.perf_counter()
        if rows_in == 0:
            trace.append((k, "none", 0, 0, 0, 0.0))
            continue
        # A dense layer costs ~n_out * 32 loop set-ups whatever the row count, so few rows
        # need a higher density to pay for it (measured crossover: ~5 rows when full).
        dense_wanted = (nnz >= threshold * (1.0 + _SETUP_ROWS / rows_in) * n * rows_in
                        and rows_in <= chunk_rows)
        if dense_wanted and yt is None:
            yt = _csr_to_dense_t(yp, yi, yx, n)
        elif not dense_wanted and yt is not None:
            y = dense_t_to_csr(yt)
            yp, yi, yx = y.indptr, y.indices, y.data
            yt = None
        if yt is not None:
            wt = transposed[k - 1]
            yt, alive, nnz = dense_step(
                yt, wt.indptr, wt.indices, wt.data, bias, ymax, n, _ROW_TILE
            )
            if not alive.all():
                yt = np.ascontiguousarray(yt[:, alive])
                live = live[alive]
            mode = "dense"
        else:
            yp, yi, yx, kept = sparse_step(
                yp, yi, yx, w.indptr, w.indices, w.data, bias, ymax, n, True
            )
            live = live[kept]
            nnz = int(yx.shape[0])
            mode = "sparse"
        trace.append((k, mode, rows_in, len(live), int(nnz), time.perf_counter() - t0))
    if yt is not None:
        values = dense_t_to_csr(yt)
    else:
        values = sp.csr_matrix((yx, yi, yp), shape=(len(live), n))
    return BlockOutput(live, values, n_rows, pd.DataFrame(trace, columns=TRACE_COLUMNS))


def warm_up_kernels() -> str:
    """Compile (or load from numba's cache) both kernel paths in this process.

    Executors run it on every worker, and serial runs here, before anything is timed, so
    no timing includes compilation.
    """
    tiny = Network([sp.identity(32, format="csr", dtype=np.float32) * 2] * 2,
                   bias=-0.5, ymax=32.0, name="warm-up")
    x = sp.random(64, 32, density=0.5, format="csr", dtype=np.float32, rng=0)
    forward_block(tiny, x, dense_threshold=0.0)
    forward_block(tiny, x, dense_threshold=2.0)
    return "ok"
