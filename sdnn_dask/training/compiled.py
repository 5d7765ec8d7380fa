"""The compiled (numba, float32) training path, on the inference kernel's design.

Activations are dense transposed tiles, ``neurons x rows`` (C order), so a neuron's values
for a run of rows are contiguous. Per layer:

* forward: :func:`layer_forward_t` is the inference kernel's
  :func:`~sdnn_dask.core.kernels.dense_step` (each output neuron the sum of its ~32 scaled
  input rows, walking ``W^T`` in CSR; a branch-free epilogue), its survivor count unused;
* backward: :func:`delta_t` masks ``dL/dY`` with ``[0 < Y < ymax]`` (derivative 0 at
  exactly 0 and exactly ymax; 0 where ``Z == 0`` since ``Y = 0`` there) and sums the bias
  gradient; :func:`layer_backward_t` then walks ``W`` in CSR (row ``i``: the outputs
  ``j`` it feeds) and, four stored ``(i, j)`` at a time, adds ``W[i, j] * delta^T[j]`` to
  ``dY_prev^T[i]`` and takes the dot products of ``Y_prev^T[i]`` with the same
  ``delta^T[j]`` (the sampled weight gradient), all on contiguous rows; it can also apply
  the layer below's mask on the way out (``mask_ymax``), so a serial backward needs no
  separate :func:`delta_t` pass; :func:`sampled_gradient_t` is the weight gradient alone
  (the first layer, where ``dY_prev`` is not needed).

The rows are processed in runs of ``ROW_TILE`` (as inference), so the ~32 rows one
neuron reads come from a cache-sized slab. Rows that die are kept (a training batch is
small and its gradient needs every row's logits); they cost time, not correctness.

The kernels take any ``n_in x n_out`` CSR, not only the square layers of the challenge, so
a part of a layer (model parallelism) can run them on its slice. No Dask here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from ..core.kernels import ROW_TILE, dense_step
from ..core.network import pattern_order
from .losses import softmax_cross_entropy
from .model import Gradients, SparseModel, unflatten

__all__ = [
    "CompiledCache",
    "Workspace",
    "backward",
    "delta_t",
    "forward",
    "layer_backward_t",
    "layer_forward_t",
    "loss",
    "sampled_gradient_t",
]

#: The backward kernels may reassociate their dot products (so they vectorise) and
#: contract to FMA; no assumption about NaN or infinity is made.
_FAST = {"reassoc", "contract", "nsz"}


def layer_forward_t(yt: np.ndarray, wt: sp.csr_matrix, bias: np.ndarray, ymax: float,
                    out: np.ndarray, order: np.ndarray | None = None) -> None:
    """One layer forward on a transposed tile: ``out = act(W^T @ yt)`` (``n_out x rows``).

    Parameters
    ----------
    yt
        ``n_in x rows`` float32, C order: ``Y_prev^T``.
    wt
        ``W^T`` as float32 CSR (``n_out x n_in``).
    bias
        ``n_out`` float32.
    ymax
        The clamp.
    out
        ``n_out x rows`` float32, overwritten with ``Y^T``: ``min(max(Z + b, 0), ymax)``
        where ``Z != 0``, else 0. Bit-identical to the inference kernel's output.
    order
        The order in which output neurons are formed (speed only; default 0..n_out-1).
    """
    if order is None:
        order = _identity(wt.shape[0])
    # the inference kernel's step: the same sums in the same order, its survivor count unused
    dense_step(yt, wt.indptr, wt.indices, wt.data, bias, np.float32(ymax), out, ROW_TILE,
               order)


@numba.njit(nogil=True, cache=True, fastmath=_FAST)
def _delta_t(dyt, yt, ymax, out, db):  # pragma: no cover
    n, rows = yt.shape
    zero = np.float32(0.0)
    for j in range(n):
        s = zero
        for r in range(rows):
            y = yt[j, r]
            d = dyt[j, r] if (y > zero) & (y < ymax) else zero
            out[j, r] = d
            s += d
        db[j] = s


def delta_t(dyt: np.ndarray, yt: np.ndarray, ymax: float, out: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """``delta^T = dY^T * [0 < Y^T < ymax]`` and the bias gradient (its row sums).

    Parameters
    ----------
    dyt
        ``n x rows`` float32, ``(dL/dY)^T``.
    yt
        ``n x rows`` float32, the layer's output ``Y^T``.
    ymax
        The clamp: at exactly ``ymax``, as at exactly 0, the derivative is 0.
    out
        Where to write ``delta^T`` (may be ``dyt`` itself); default a new array.

    Returns
    -------
    delta_t, db : ndarray
        ``n x rows`` and ``n`` float32. ``Y = 0`` wherever ``Z == 0``, so those entries,
        which got no bias, add nothing to ``db``.
    """
    if out is None:
        out = np.empty_like(dyt)
    db = np.empty(yt.shape[0], np.float32)
    _delta_t(dyt, yt, np.float32(ymax), out, db)
    return out, db


@numba.njit(nogil=True, cache=True, fastmath=_FAST)
def _backward_step(dt, ypt, wp, wi, wx, dypt, grad, db, row_tile, order, tile_rows,
                   want_dy, mask, ymax):  # pragma: no cover
    """Over the stored ``q`` of each row ``i`` of ``W`` (CSR ``wp, wi, wx``), with
    ``t = tile_rows[i]`` (row ``i``'s row in the tiles ``ypt`` and ``dypt``):
    ``dypt[t] = sum_q wx[q] dt[wi[q]]`` (if ``want_dy``; then masked by
    ``0 < ypt[t] < ymax`` and summed into ``db[i]`` if ``mask``) and
    ``grad[q] = <ypt[t], dt[wi[q]]>``, in runs of ``row_tile`` rows. Only the rows in
    ``order`` are visited (and their entries of ``grad`` and ``db`` written): two calls
    on complementary orders give what one call on both would."""
    rows = dt.shape[1]
    n_in = order.shape[0]
    zero = np.float32(0.0)
    for ii in range(n_in):
        i = order[ii]
        for q in range(wp[i], wp[i + 1]):
            grad[q] = 0.0
        if mask:
            db[i] = 0.0
    for r0 in range(0, rows, row_tile):
        r1 = min(rows, r0 + row_tile)
        m = r1 - r0
        for ii in range(n_in):
            i = order[ii]
            t = tile_rows[i]
            y = ypt[t, r0:r1]
            dst = dypt[t, r0:r1]
            if want_dy:
                for r in range(m):
                    dst[r] = 0.0
            q, q_end = wp[i], wp[i + 1]
            # Four outputs per pass; the update of dst and the dot products in two loops
            # over the same (L1-resident) rows: one loop doing both vectorises poorly
            # (measured 2x slower at 64 rows).
            while q + 4 <= q_end:
                w0, w1, w2, w3 = wx[q], wx[q + 1], wx[q + 2], wx[q + 3]
                d0 = dt[wi[q], r0:r1]
                d1 = dt[wi[q + 1], r0:r1]
                d2 = dt[wi[q + 2], r0:r1]
                d3 = dt[wi[q + 3], r0:r1]
                if want_dy:
                    for r in range(m):
                        dst[r] = (((dst[r] + w0 * d0[r]) + w1 * d1[r]) + w2 * d2[r]) + w3 * d3[r]
                g0 = zero
                g1 = zero
                g2 = zero
                g3 = zero
                for r in range(m):
                    yr = y[r]
                    g0 += yr * d0[r]
                    g1 += yr * d1[r]
                    g2 += yr * d2[r]
                    g3 += yr * d3[r]
                grad[q] += g0
                grad[q + 1] += g1
                grad[q + 2] += g2
                grad[q + 3] += g3
                q += 4
            while q < q_end:
                w = wx[q]
                d = dt[wi[q], r0:r1]
                if want_dy:
                    for r in range(m):
                        dst[r] += w * d[r]
                g = zero
                for r in range(m):
                    g += y[r] * d[r]
                grad[q] += g
                q += 1
            if want_dy and mask:  # dst is final for these rows: make it the layer below's delta
                s = zero
                for r in range(m):
                    yr = y[r]
                    v = dst[r] if (yr > zero) & (yr < ymax) else zero
                    dst[r] = v
                    s += v
                db[i] += s


@numba.njit(nogil=True, cache=True)
def gather_rows(dst, dst_rows, src, src_rows):  # pragma: no cover
    """``dst[dst_rows[i]] = src[src_rows[i]]`` for every ``i`` (rows of 2-D arrays)."""
    for i in range(dst_rows.shape[0]):
        dst[dst_rows[i], :] = src[src_rows[i], :]


@numba.njit(nogil=True, cache=True, fastmath=_FAST)
def gather_delta(srcs, ptr, src, row, yt, ymax, out, db):  # pragma: no cover
    """A slice's ``delta^T`` from partial errors, in one pass: for each of its neurons
    ``j``, ``dY^T[j] = sum`` of the rows ``srcs[src[c]][row[c]]``, ``c`` in
    ``ptr[j]..ptr[j+1]`` (in that order, from 0), then masked by ``0 < yt[j] < ymax``
    into ``out[j]``, and ``db[j]`` its sum (what :func:`delta_t` makes of the sum)."""
    n, rows = yt.shape
    zero = np.float32(0.0)
    for j in range(n):
        d = out[j]
        for r in range(rows):
            d[r] = zero
        for c in range(ptr[j], ptr[j + 1]):
            s = srcs[src[c]][row[c]]
            for r in range(rows):
                d[r] += s[r]
        y = yt[j]
        acc = zero
        for r in range(rows):
            v = d[r] if (y[r] > zero) & (y[r] < ymax) else zero
            d[r] = v
            acc += v
        db[j] = acc


def _identity(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)


def layer_backward_t(dt: np.ndarray, ypt: np.ndarray, w: sp.csr_matrix,
                     dypt: np.ndarray | None = None, order: np.ndarray | None = None, *,
                     mask_ymax: float | None = None, grad: np.ndarray | None = None,
                     tile_rows: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``dY_prev^T = W @ delta^T`` and the sampled weight gradient, in one pass over ``W``.

    Parameters
    ----------
    dt
        ``n_out x rows`` float32, ``delta^T`` (from :func:`delta_t`).
    ypt
        ``n_in x rows`` float32, the layer's input ``Y_prev^T``.
    w
        ``W`` as float32 CSR (``n_in x n_out``).
    dypt
        Where to write ``dY_prev^T`` (``n_in x rows``; must not be ``dt``); default new.
    order
        The order in which rows of ``W`` are visited (speed only).
    grad
        Where to write the sampled gradient (``w.nnz`` float32); default new. With an
        ``order`` of some rows, only their entries are written.
    tile_rows
        Row ``i`` of ``W``'s row in the tiles ``ypt`` and ``dypt`` (int64, default
        ``i``): a model-parallel part's tile holds its inputs in the order they arrive
        (its own outputs, then each peer's piece), not in ``W``'s order, and may have
        rows no entry of ``W`` reads. The sums are the same, in the same order.
    mask_ymax
        If given, ``Y_prev`` is itself a layer's output clamped at ``mask_ymax``, and
        ``dypt`` receives the layer below's ``delta^T = dY_prev^T * [0 < Y_prev^T <
        mask_ymax]`` instead (what :func:`delta_t` would make of it), with its bias
        gradient. Only valid when ``w`` holds every input of ``Y_prev`` (not for a slice
        whose partial sums must first be added up).

    Returns
    -------
    dypt : ndarray
        ``dY_prev^T`` (or the layer below's ``delta^T``), float32.
    grad : ndarray
        ``G`` aligned with ``w.data``: ``G[q] = sum_r Y_prev[r, i_q] delta[r, j_q]``.
    db_prev : ndarray or None
        With ``mask_ymax``, the layer below's bias gradient; else None.
    """
    if dypt is None:
        dypt = np.empty_like(ypt)
    if grad is None:
        grad = np.empty(w.nnz, np.float32)
    mask = mask_ymax is not None
    db = np.empty(w.shape[0] if mask else 0, np.float32)
    identity = _identity(w.shape[0])
    _backward_step(dt, ypt, w.indptr, w.indices, w.data, dypt, grad, db, ROW_TILE,
                   identity if order is None else order,
                   identity if tile_rows is None else tile_rows, True, mask,
                   np.float32(mask_ymax if mask else 0.0))
    return dypt, grad, db if mask else None


def sampled_gradient_t(ypt: np.ndarray, dt: np.ndarray, w: sp.csr_matrix,
                       order: np.ndarray | None = None, grad: np.ndarray | None = None
                       ) -> np.ndarray:
    """The sampled weight gradient alone: ``G[q] = <Y_prev^T[i_q], delta^T[j_q]>``.

    Parameters are as in :func:`layer_backward_t`; only the pattern of ``w`` is read.
    """
    if grad is None:
        grad = np.empty(w.nnz, np.float32)
    # dypt is never written when want_dy is false: pass ypt in its place
    identity = _identity(w.shape[0])
    _backward_step(dt, ypt, w.indptr, w.indices, w.data, ypt, grad, grad[:0], ROW_TILE,
                   identity if order is None else order, identity, False, False,
                   np.float32(0.0))
    return grad


def positions_index(positions: np.ndarray) -> np.ndarray:
    """``positions - 1`` (float64 values ``1..nnz`` that survived a transpose or a
    slice) as the smallest integer index: int32 below 2**31 entries, so a map from one
    order of a layer's values to another costs 4 bytes an edge, not 8 (1 GB a copy of
    the model at 65536-120)."""
    dtype = np.int32 if positions.size < 2**31 - 1 else np.int64
    out = positions.astype(dtype)
    out -= 1
    return out


class _Layout:
    """Per layer, what the pattern alone decides: ``W^T``'s pattern (``wt_indptr``,
    ``wt_indices``), the map from ``W.data`` to ``W^T``'s values (``to_t``), and both
    visiting orders. Built once per model.

    ``W^T``'s values are not kept per layer: the forward gathers each layer's into one
    buffer (:meth:`values`, the largest layer's size) just before it runs the layer, as
    ``W`` may have been updated since the last call. A model's worth of them (4 bytes an
    edge, 1 GB at 65536-120) would only ever be read one layer at a time."""

    def __init__(self, model: SparseModel):
        self.indices = [w.indices for w in model.weights]  # to notice a replaced pattern
        self.wt_indptr, self.wt_indices, self.to_t = [], [], []
        self.order_fwd, self.order_bwd = [], []
        for w in model.weights:
            # Transpose the positions 1..nnz (never 0, which a conversion could drop as a
            # stored zero): wt.data then says where each entry of W came from.
            pos = sp.csr_matrix((np.arange(1, w.nnz + 1, dtype=np.float64), w.indices,
                                 w.indptr), shape=w.shape)
            post = pos.T.tocsr()
            post.sort_indices()
            if post.nnz != w.nnz:
                raise AssertionError("transposing the pattern lost entries")
            self.to_t.append(positions_index(post.data))
            self.wt_indptr.append(post.indptr.astype(np.int64))
            self.wt_indices.append(post.indices.astype(np.int32))
            self.order_fwd.append(pattern_order(post))
            del pos, post  # float64 positions: twice the layer's values
            self.order_bwd.append(pattern_order(w))
        self._values = np.empty(max(w.nnz for w in model.weights), np.float32)

    def values(self, model: SparseModel, k: int) -> np.ndarray:
        """Layer ``k``'s ``W^T`` values now (in the shared buffer: valid until the next
        call)."""
        out = self._values[:model.weights[k].nnz]
        np.take(model.weights[k].data, self.to_t[k], out=out)
        return out

    def wt(self, model: SparseModel, k: int) -> sp.csr_matrix:
        """Layer ``k``'s ``W^T`` as CSR, its values those of :meth:`values`."""
        w = model.weights[k]
        return sp.csr_matrix((self.values(model, k), self.wt_indices[k], self.wt_indptr[k]),
                             shape=(w.shape[1], w.shape[0]), copy=False)

    def matches(self, model: SparseModel) -> bool:
        return len(self.indices) == model.n_layers and all(
            a is w.indices for a, w in zip(self.indices, model.weights, strict=True))


def _layout(model: SparseModel) -> _Layout:
    if model.dtype != np.float32:
        raise TypeError(f"the compiled path runs in float32; this model is {model.dtype} "
                        "(init_model(..., dtype=np.float32) or model.astype(np.float32))")
    layout = model._layout
    if not isinstance(layout, _Layout) or not layout.matches(model):
        layout = model._layout = _Layout(model)
    return layout


class Workspace:
    """Reusable activation tiles, per batch shape (saves allocations and page faults).

    A :class:`CompiledCache` made with a workspace holds its buffers: it is valid until the
    next :func:`forward` of the same shape with the same workspace. A few shapes are kept
    (an epoch's last, short batch does not evict the full one).
    """

    _KEEP = 4

    def __init__(self) -> None:
        self._by_key: dict[tuple, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        self._vector: np.ndarray | None = None

    def take(self, sizes: list[int], rows: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Tiles ``sizes[k] x rows`` (the input and one per layer) and two spare tiles of
        the largest size, reused when the shapes match."""
        key = (tuple(sizes), rows)
        found = self._by_key.pop(key, None)
        if found is None:
            found = ([np.empty((n, rows), np.float32) for n in sizes],
                     [np.empty((max(sizes), rows), np.float32) for _ in range(2)])
            while len(self._by_key) >= self._KEEP:
                self._by_key.pop(next(iter(self._by_key)))  # the least recently used
        self._by_key[key] = found  # most recent last
        return found

    def vector(self, size: int) -> np.ndarray:
        """A float32 vector of ``size`` values, the same one each time (a gradient's)."""
        if self._vector is None or self._vector.size != size:
            self._vector = np.empty(size, np.float32)
        return self._vector


@dataclass
class CompiledCache:
    """What :func:`forward` keeps for :func:`backward`.

    Attributes
    ----------
    activations
        ``Y_0^T .. Y_L^T`` (``Y_0^T`` the inputs), ``n x rows`` float32.
    logits
        ``rows x classes`` float32.
    """

    activations: list[np.ndarray]
    logits: np.ndarray
    _spare: list[np.ndarray]


def _input_tile(x: np.ndarray | sp.spmatrix | sp.sparray, out: np.ndarray) -> None:
    if sp.issparse(x):
        x = x.toarray()
    out[...] = np.asarray(x).T


def forward(model: SparseModel, x: np.ndarray | sp.spmatrix | sp.sparray,
            workspace: Workspace | None = None) -> CompiledCache:
    """Every layer and the readout on the input rows ``x`` (``rows x n_inputs``), float32.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sdnn_dask.training import init_model
    >>> model = init_model([sp.identity(4, format="csr")] * 2, classes=3, seed=0)
    >>> forward(model, np.ones((5, 4))).logits.shape
    (5, 3)
    """
    layout = _layout(model)
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) != 2 or shape[1] != model.n_inputs:
        raise ValueError(f"inputs must be rows x {model.n_inputs}, got {shape}")
    rows = int(shape[0])
    sizes = [model.n_inputs] + [w.shape[1] for w in model.weights]
    tiles, spare = (workspace or Workspace()).take(sizes, rows)
    _input_tile(x, tiles[0])
    ymax = np.float32(model.ymax)
    for k in range(model.n_layers):
        # W^T's values gathered now (W may have been updated since the last call): the
        # inference kernel's step, as layer_forward_t runs it
        dense_step(tiles[k], layout.wt_indptr[k], layout.wt_indices[k],
                   layout.values(model, k), model.biases[k], ymax, tiles[k + 1], ROW_TILE,
                   layout.order_fwd[k])
    logits = tiles[-1].T @ model.readout + model.readout_bias
    return CompiledCache(list(tiles), logits, spare)


def backward(model: SparseModel, cache: CompiledCache, labels: np.ndarray,
             out: np.ndarray | None = None,
             ready: Callable[[int], None] | None = None) -> tuple[float, Gradients]:
    """The mean softmax cross-entropy of ``cache``'s rows and its gradient (float32).

    Parameters
    ----------
    out
        Optional float32 vector of every parameter's size end to end (the order of
        :meth:`SparseModel.parameters`): the gradients are written into it and returned
        as views of it (data parallelism then reduces it as it is, without a copy).
    ready
        With ``out``: called with ``k`` as soon as layer ``k``'s weight gradient is final
        in ``out`` (from the top layer down), so it can be sent while the layers below
        are computed; the biases and readout are final when this returns.

    Returns
    -------
    loss : float
    grads : Gradients
        For every parameter; the weights' aligned with ``W_l.data``.
    """
    layout = _layout(model)
    value, dlogits = softmax_cross_entropy(cache.logits, labels)
    tiles = cache.activations
    views = _views(out, model) if out is not None else None
    if views is None:
        d_readout = tiles[-1] @ dlogits
        d_readout_bias = dlogits.sum(axis=0)
    else:
        d_readout = np.matmul(tiles[-1], dlogits, out=views[-2])
        d_readout_bias = np.sum(dlogits, axis=0, out=views[-1])
    a, b = cache._spare
    n_last = tiles[-1].shape[0]
    dyt = a[:n_last]
    np.matmul(model.readout, dlogits.T, out=dyt)
    dws, dbs = [], []
    dt, db = delta_t(dyt, tiles[-1], model.ymax, out=dyt)  # in place; the top layer's delta
    for k in range(model.n_layers - 1, -1, -1):
        w = model.weights[k]
        dbs.append(db)
        if k > 0:
            # the layer below's delta straight away (its mask applied on the way out)
            below = b[: w.shape[0]]
            dt, g, db = layer_backward_t(dt, tiles[k], w, below, layout.order_bwd[k],
                                         mask_ymax=model.ymax,
                                         grad=None if views is None else views[k])
            a, b = b, a
        else:
            g = sampled_gradient_t(tiles[k], dt, w, layout.order_bwd[k],
                                   grad=None if views is None else views[k])
        dws.append(g)
        if ready is not None and views is not None:
            ready(k)
    if views is not None:  # the biases' (small) into the vector too
        n = model.n_layers
        for k, db_k in enumerate(dbs[::-1]):
            views[n + k][...] = db_k
        dbs = [views[n + k] for k in range(n)][::-1]
    return value, Gradients(dws[::-1], dbs[::-1], d_readout, d_readout_bias)


def _views(out: np.ndarray, model: SparseModel) -> list[np.ndarray]:
    """Views of the flat vector ``out`` shaped as ``model``'s parameters, in order."""
    params = model.parameters()
    if out.dtype != np.float32 or out.shape != (sum(p.size for p in params),):
        raise ValueError(f"out must be a float32 vector of {sum(p.size for p in params)} "
                         f"values, got {out.dtype} {out.shape}")
    return unflatten(out, params)


def loss(model: SparseModel, x: np.ndarray | sp.spmatrix | sp.sparray, labels: np.ndarray,
         workspace: Workspace | None = None) -> float:
    """The mean softmax cross-entropy of the model on ``x``."""
    return softmax_cross_entropy(forward(model, x, workspace).logits, labels)[0]
