"""One part's share of a model sliced by a neuron partition, kept on its worker.

Both transports of model-parallel (and hybrid) training keep the same state: per layer
``l``, part ``p``'s :class:`_Slice` holds ``W_l[needed_p, own_p]`` (``own_p``: the level
``l`` neurons it owns; ``needed_p``: the level ``l-1`` neurons with a stored weight into
them), ``b_l[own_p]`` and, for ``l >= 2``, which positions it fetches from each source
part and sends to each reader part; its :class:`_Part` adds the readout rows
``R[own_p(L)]``, the readout bias ``c`` on part 0, and the SGD settings and momentum.

A worker keeps its parts in :data:`PARTS`, keyed by (trainer key, part); a hybrid's row
group ``g`` uses the trainer key ``f"{trainer}/g{g}"``, so each group's parts are its own.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..core.network import Network, pattern_order
from ..partition import NeuronPartition
from ..partition.routing import LayerRoutes, route_partition
from .compiled import positions_index
from .model import SparseModel
from .optim import sgd_update
from .replicas import drop_held


@dataclass(eq=False)
class _Slice:
    """One part's share of one layer, and what it keeps of the current step."""

    own: np.ndarray          # level l neurons computed here (global ids, sorted)
    needed: np.ndarray       # level l-1 neurons read (global ids, sorted)
    w: sp.csr_matrix         # W_l[needed, own], float32, values updated in place
    w_pos: np.ndarray        # position in W_l.data of each entry of w.data
    wt: sp.csr_matrix        # its transpose; values refreshed from w before each forward
    to_t: np.ndarray         # wt.data = w.data[to_t]
    order_fwd: np.ndarray
    order_bwd: np.ndarray
    bias: np.ndarray         # b_l[own]
    # source part -> positions within ``needed`` of the columns that part owns (l >= 2)
    fetch: dict[int, np.ndarray] = field(default_factory=dict)
    # destination part -> positions within ``own`` of the columns it reads in layer l + 1
    send: dict[int, np.ndarray] = field(default_factory=dict)
    velocity_w: np.ndarray | None = None
    velocity_b: np.ndarray | None = None
    # this step's: the gathered input tile, the output tile, gradients, partial errors
    inputs: np.ndarray | None = None
    outputs: np.ndarray | None = None
    grad_w: np.ndarray | None = None
    grad_b: np.ndarray | None = None
    partial: np.ndarray | None = None
    # how its errors are summed (parts.sum_plan), made on first use
    sum_plan: Any = None


@dataclass(eq=False)
class _Part:
    """Everything one part keeps on its worker between tasks."""

    part: int
    layers: list[_Slice]
    readout: np.ndarray                 # R[own_L]
    readout_bias: np.ndarray | None     # c, on part 0 only
    ymax: float
    lr: float
    momentum: float
    weight_decay: float
    velocity_r: np.ndarray | None = None
    velocity_c: np.ndarray | None = None
    grad_r: np.ndarray | None = None
    grad_c: np.ndarray | None = None
    #: the direct transport's buffers and visiting orders (made on the worker, reused)
    workspace: Any = None


#: Each worker's parts, by (trainer key, part).
PARTS: dict[tuple[str, int], _Part] = {}


def place_part(trainer: str, state: _Part) -> int:
    """Keep ``state`` here as ``trainer``'s part (its layers may follow,
    :func:`add_layers`). A threaded cluster's workers are given the very object
    scattered, once per row group: every group then gets its own copy."""
    if any(held is state for held in PARTS.values()):
        state = copy.deepcopy(state)
    PARTS[(trainer, state.part)] = state
    return state.part


def add_layers(trainer: str, part: int, slices: list[_Slice]) -> int:
    """Append ``slices`` (its next layers) to ``trainer``'s part ``part`` here (copied
    if another part here holds them already: a threaded cluster's row groups); the
    bytes it holds for its slices now."""
    state = PARTS[(trainer, part)]
    held = {id(sl) for other in PARTS.values() for sl in other.layers}
    state.layers.extend(copy.deepcopy(sl) if id(sl) in held else sl for sl in slices)
    return sum(slice_bytes(sl) for sl in state.layers)


def held_part_bytes(trainer: str | None = None) -> dict[tuple[str, int], int]:
    """Per (trainer key, part) held here (every trainer's, or ``trainer``'s and its row
    groups'), the bytes of its slices (:func:`slice_bytes`) and readout."""
    out = {}
    for key, state in list(PARTS.items()):
        if trainer is None or key[0] == trainer or key[0].startswith(trainer + "/"):
            out[key] = int(sum(slice_bytes(sl) for sl in state.layers)
                           + state.readout.nbytes)
    return out


def drop_parts(trainer: str) -> int:
    """Drop a trainer's parts here (every row group's)."""
    drop_held(trainer)
    keys = [key for key in list(PARTS)
            if key[0] == trainer or key[0].startswith(trainer + "/")]
    # a threaded cluster's workers share PARTS: another may be dropping the same keys
    return sum(PARTS.pop(key, None) is not None for key in keys)


def _step_param(p: np.ndarray, g: np.ndarray, v: np.ndarray | None, state: _Part,
                decays: bool) -> None:
    dtype = p.dtype.type
    flat = p.reshape(-1)
    sgd_update(flat, np.ascontiguousarray(g, dtype=p.dtype).reshape(-1),
            v.reshape(-1) if v is not None else flat[:0], dtype(state.lr),
            dtype(state.momentum), dtype(state.weight_decay if decays else 0.0),
            v is not None)


def sum_plan(sl: _Slice, part: int, own_rows: np.ndarray | None = None
             ) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """How a slice's errors are summed (:func:`~.compiled.gather_delta`), the same on
    both transports: the parts that read its neurons in the next layer (this part first,
    if it reads its own, then the others in part order), and per neuron the (source,
    row) pairs of its partial errors in that order, as CSR ``ptr, src, row``.

    Every source's piece holds the neurons it reads in the order of ``sl.send[q]``;
    ``own_rows`` (the direct transport, which reads its own partials in place) says where
    this part's own are instead."""
    readers = ([part] if part in sl.send else []) + sorted(q for q in sl.send if q != part)
    n = len(sl.own)
    pairs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for s_index, q in enumerate(readers):
        rows = (own_rows if q == part and own_rows is not None
                else np.arange(len(sl.send[q])))
        for j, r in zip(sl.send[q].tolist(), rows.tolist(), strict=True):
            pairs[j].append((s_index, r))
    ptr = np.zeros(n + 1, np.int64)
    ptr[1:] = np.cumsum([len(p) for p in pairs])
    flat = [pair for p in pairs for pair in p]
    src = np.array([a for a, _ in flat], np.int64)
    row = np.array([b for _, b in flat], np.int64)
    return readers, ptr, src, row


def apply_update(state: _Part) -> None:
    """SGD on a part's slices with its gradients (as :class:`~.optim.SGD`: decay on W and
    R only)."""
    for sl in state.layers:
        _step_param(sl.w.data, sl.grad_w, sl.velocity_w, state, True)
        _step_param(sl.bias, sl.grad_b, sl.velocity_b, state, False)
    _step_param(state.readout, state.grad_r, state.velocity_r, state, True)
    if state.readout_bias is not None:
        _step_param(state.readout_bias, state.grad_c, state.velocity_c, state, False)



def fetch_part(trainer: str, p: int) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray,
                                                     np.ndarray]], np.ndarray,
                                          np.ndarray | None]:
    state = PARTS[(trainer, p)]
    return ([(sl.w_pos, sl.w.data.copy(), sl.own, sl.bias.copy()) for sl in state.layers],
            state.readout.copy(),
            None if state.readout_bias is None else state.readout_bias.copy())


def _positions(w: sp.csr_matrix) -> sp.csr_matrix:
    """``w``'s pattern with values ``1..nnz`` (float64: exact; never 0, which slicing could
    drop as a stored zero): after any slicing, ``data - 1`` says where an entry came from."""
    return sp.csr_matrix((np.arange(1, w.nnz + 1, dtype=np.float64), w.indices, w.indptr),
                         shape=w.shape)


def _slice_layer(w: sp.csr_matrix, bias: np.ndarray, own: np.ndarray, needed: np.ndarray,
                 momentum: float) -> _Slice:
    """Part of a layer: the rows ``needed`` of ``w`` (those with a stored entry in the
    columns ``own``, :class:`~sdnn_dask.partition.routing.PartRoute`)."""
    pos = _positions(w)
    cols = pos[:, own].tocsr()  # all rows, the owned columns
    sub = cols[needed].tocsr()
    del pos, cols
    sub.sort_indices()
    w_pos = positions_index(sub.data)  # int32: 4 bytes an edge, not 8
    ws = sp.csr_matrix((w.data[w_pos].astype(np.float32), sub.indices.astype(np.int32),
                        sub.indptr.astype(np.int64)), shape=sub.shape)
    ws.has_sorted_indices = True
    del sub
    local = sp.csr_matrix((np.arange(1, ws.nnz + 1, dtype=np.float64), ws.indices,
                           ws.indptr), shape=ws.shape).T.tocsr()
    local.sort_indices()
    to_t = positions_index(local.data)
    wt = sp.csr_matrix((ws.data[to_t], local.indices.astype(np.int32),
                        local.indptr.astype(np.int64)), shape=local.shape)
    return _Slice(own=own, needed=needed, w=ws, w_pos=w_pos, wt=wt, to_t=to_t,
                  order_fwd=pattern_order(wt), order_bwd=pattern_order(ws),
                  bias=np.ascontiguousarray(bias[own], dtype=np.float32),
                  velocity_w=np.zeros(ws.nnz, np.float32) if momentum else None,
                  velocity_b=np.zeros(len(own), np.float32) if momentum else None)


def pattern_network(model: SparseModel) -> Network:
    """The model's pattern as a Network (for the partitioners; values are irrelevant).
    It shares the model's ``indices`` and ``indptr``; its values are 4 bytes an edge."""
    return Network([sp.csr_matrix((np.ones(w.nnz, np.float32), w.indices, w.indptr),
                                  shape=w.shape) for w in model.weights],
                   bias=0.0, ymax=model.ymax, name="training-pattern")


class _Transposes(Sequence):
    """``W_l^T``'s pattern per layer, made when asked for and not kept: routing reads
    one layer at a time, and all of them at once are 8 bytes an edge (2 GB at
    65536-120) that nothing needs after."""

    def __init__(self, model: SparseModel):
        self._weights = model.weights

    def __len__(self) -> int:
        return len(self._weights)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        w = self._weights[index]
        return sp.csr_matrix((np.ones(w.nnz, np.int8), w.indices, w.indptr),
                             shape=w.shape).T.tocsr()


def routes_of(model: SparseModel, partition: NeuronPartition) -> list[LayerRoutes]:
    """Every layer's routes of ``model``'s pattern under ``partition`` (the transposes
    made one layer at a time)."""
    return route_partition(_Transposes(model), partition)


def part_shell(model: SparseModel, routes: list[LayerRoutes], p: int, lr: float,
               momentum: float, weight_decay: float) -> _Part:
    """Part ``p`` without its layers (:func:`layer_slices` gives them): its readout rows,
    the readout bias on part 0, the SGD settings and momentum."""
    readout = np.ascontiguousarray(model.readout[routes[-1].parts[p].own])
    c = model.readout_bias.copy() if p == 0 else None
    return _Part(p, [], readout, c, model.ymax, float(lr), float(momentum),
                 float(weight_decay),
                 velocity_r=np.zeros_like(readout) if momentum else None,
                 velocity_c=np.zeros_like(c) if momentum and c is not None else None)


def layer_slices(model: SparseModel, routes: list[LayerRoutes], momentum: float
                 ) -> Iterator[list[_Slice]]:
    """Per layer, from the first, every part's slice of it (``[p]``), made when asked
    for: a trainer ships each layer's slices to their workers before it makes the next,
    so the client never holds every part's slices (32 bytes an edge) at once."""
    n_layers = model.n_layers
    for layer in range(n_layers):
        slices = [_slice_layer(model.weights[layer], model.biases[layer], route.own,
                               route.needed, momentum)
                  for route in routes[layer].parts]
        # a slice of layer l >= 2 receives from its sources; a slice of layer l - 1 sends
        # its readers in layer l what they read (the routes of layer l, seen from each side)
        if layer >= 1:
            for p, route in enumerate(routes[layer].parts):
                slices[p].fetch.update(route.receive)
        if layer + 1 < n_layers:
            for p, route in enumerate(routes[layer + 1].parts):
                for q in route.fetch:
                    slices[q].send[p] = route.fetch[q]
        yield slices


def slice_bytes(sl: _Slice) -> int:
    """Bytes of the arrays a slice keeps between steps (what its worker holds for it)."""
    arrays = [sl.own, sl.needed, sl.w.data, sl.w.indices, sl.w.indptr, sl.w_pos, sl.wt.data,
              sl.wt.indices, sl.wt.indptr, sl.to_t, sl.order_fwd, sl.order_bwd, sl.bias,
              sl.velocity_w, sl.velocity_b, *sl.fetch.values(), *sl.send.values()]
    return int(sum(a.nbytes for a in arrays if a is not None))


def slice_model(partition: NeuronPartition, model: SparseModel, lr: float, momentum: float,
                weight_decay: float) -> list[_Part]:
    """Every part's slices of ``model`` under ``partition`` (see the module docstring),
    all at once (the trainers place them layer by layer instead: :func:`layer_slices`)."""
    routes = routes_of(model, partition)
    parts = [part_shell(model, routes, p, lr, momentum, weight_decay)
             for p in range(partition.k)]
    for slices in layer_slices(model, routes, momentum):
        for part, sl in zip(parts, slices, strict=True):
            part.layers.append(sl)
    return parts


def held_state(dask_worker: Any = None) -> dict[str, list]:
    """What this worker holds for any trainer: data-parallel replicas (trainer ids),
    training rows (trainer key, part) and model-parallel parts (trainer key, part), each
    sorted (a threaded cluster's workers share the parts; the others are per worker).
    Run by ``client.run`` (which passes ``dask_worker``) or in a task."""
    from distributed import get_worker

    from . import replicas

    here = (dask_worker or get_worker()).address
    return {"replicas": sorted(key for key, where in list(replicas._STATE) if where == here),
            "rows": sorted((key, part) for key, part, where in list(replicas._HELD)
                           if where == here),
            "parts": sorted(PARTS)}
