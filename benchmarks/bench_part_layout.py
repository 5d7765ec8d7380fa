"""A model-parallel part's layer work in two tile layouts: gathered against own-output.

Generated RadiX-Net 1024-120 with random values, k = 2 (``--partition``, default
hypergraph), official-like rows. Both parts' forward and backward run in this one
process, one after the other layer by layer, the peers' pieces handed over as arrays:
the kernels and the tile handling of a step, with no exchange and no waiting. Two
layouts of each layer's input tile and partial errors:

- **gathered** (the direct transport before the own-output layout; the graph transport
  still lays its tiles out so): the tile's rows in the order of the slice's ``needed``
  neurons; a part gathers its own outputs into it row by row, then each peer's piece
  row by row, and backward gathers each peer's partial errors out of its tile;
- **own** (:class:`sdnn_dask.training.slot_task._PartWorkspace`): the tile's head is the
  part's own outputs, written there by the layer below, and each peer's piece is one
  block, copied whole; ``W^T``'s column ids and ``W``'s rows point into that layout.

Printed: per step and part (medians of ``--repeats``), the forward and backward seconds,
of them the seconds spent laying tiles out (gathers, copies), and the ratio of the two
layouts. The gradients of both layouts are checked bit for bit against each other::

    python benchmarks/bench_part_layout.py [--rows 512] [--layers 120] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from sdnn_dask.core.kernels import ROW_TILE, dense_step
from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.parallel.allocator import tune_allocator
from sdnn_dask.partition import make_neuron_partition
from sdnn_dask.training import init_model
from sdnn_dask.training.compiled import delta_t, gather_delta, gather_rows, layer_backward_t
from sdnn_dask.training.model_parts import slice_model, sum_plan
from sdnn_dask.training.slot_task import _PartWorkspace


class _Clock:
    """Seconds per phase, summed over the parts (then divided by their number)."""

    def __init__(self):
        self.seconds = {"forward": 0.0, "backward": 0.0, "layout": 0.0}

    def add(self, phase: str, since: float) -> float:
        now = time.perf_counter()
        self.seconds[phase] += now - since
        return now


def _step(parts, x_t: np.ndarray, dlogits: np.ndarray, own: bool, clock: _Clock
          ) -> list[list[np.ndarray]]:
    """Both parts' forward and backward, layer by layer; each part's weight gradients."""
    rows, k, n_layers = x_t.shape[1], len(parts), len(parts[0].layers)
    spaces = [_PartWorkspace(s, s.part, rows) for s in parts] if own else None
    ymax = np.float32(parts[0].ymax)
    inputs = [[None] * n_layers for _ in range(k)]
    outputs = [[None] * n_layers for _ in range(k)]
    pieces: dict[tuple[int, int], np.ndarray] = {}   # (to, from) -> this layer's piece
    for layer in range(1, n_layers + 1):
        sent = {}
        for p, state in enumerate(parts):
            sl = state.layers[layer - 1]
            t = time.perf_counter()
            if layer == 1:
                tile = x_t
            elif own:
                tile = spaces[p].inputs[layer - 1]
                for q, block in spaces[p].blocks[layer - 1].items():
                    tile[block] = pieces[(p, q)]
            else:
                tile = np.empty((len(sl.needed), rows), np.float32)
                below = state.layers[layer - 2]
                if p in sl.fetch:
                    gather_rows(tile, sl.fetch[p], outputs[p][layer - 2], below.send[p])
                for q in sl.fetch:
                    if q != p:
                        piece = pieces[(p, q)]
                        gather_rows(tile, sl.fetch[q], piece,
                                    np.arange(len(piece), dtype=np.int64))
            t = clock.add("layout", t)
            out = (spaces[p].outputs[layer - 1] if own
                   else np.empty((len(sl.own), rows), np.float32))
            indices = spaces[p].wt_indices[layer - 1] if own else sl.wt.indices
            dense_step(tile, sl.wt.indptr, indices, sl.wt.data, sl.bias, ymax, out,
                       ROW_TILE, sl.order_fwd)
            for q, ix in sl.send.items():
                if q != p:
                    sent[(q, p)] = out[ix]
            inputs[p][layer - 1], outputs[p][layer - 1] = tile, out
            clock.add("forward", t)
        pieces = sent
    grads = [[None] * n_layers for _ in range(k)]
    partials = [[None] * n_layers for _ in range(k)]
    for layer in range(n_layers, 0, -1):
        sent = {}
        for p, state in enumerate(parts):
            sl = state.layers[layer - 1]
            t = time.perf_counter()
            dyt = np.empty((len(sl.own), rows), np.float32)
            if layer == n_layers:
                np.matmul(state.readout, dlogits.T, out=dyt)
                delta, _ = delta_t(dyt, outputs[p][layer - 1], state.ymax, out=dyt)
            else:
                above = state.layers[layer]
                plan = sum_plan(sl, p, sl.send.get(p) if own else above.fetch.get(p))
                readers, ptr, src, row = plan
                srcs = tuple(partials[p][layer] if q == p else pieces[(p, q)]
                             for q in readers)
                db = np.empty(len(sl.own), np.float32)
                if srcs:
                    gather_delta(srcs, ptr, src, row, outputs[p][layer - 1], ymax, dyt, db)
                else:
                    dyt[...] = 0.0
                delta = dyt
            grad = np.empty(sl.w.nnz, np.float32)
            if layer > 1:
                partial = np.empty_like(inputs[p][layer - 1])
                layer_backward_t(delta, inputs[p][layer - 1], sl.w, partial, sl.order_bwd,
                                 grad=grad,
                                 tile_rows=spaces[p].tile_rows[layer - 1] if own else None)
                t = clock.add("backward", t)
                if own:
                    for q, block in spaces[p].blocks[layer - 1].items():
                        sent[(q, p)] = partial[block].copy()
                else:
                    for q, ix in sl.fetch.items():
                        if q != p:
                            sent[(q, p)] = partial[ix]
                partials[p][layer - 1] = partial
                t = clock.add("layout", t)
            else:
                layer_backward_t(delta, inputs[p][0], sl.w, None, sl.order_bwd, grad=grad)
                clock.add("backward", t)
            grads[p][layer - 1] = grad
        pieces = sent
    return grads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--layers", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--partition", default="hypergraph")
    args = parser.parse_args(argv)
    tune_allocator()
    network = make_network(1024, args.layers)
    partition = make_neuron_partition(network, 2, args.partition,
                                      cache=args.partition == "hypergraph")
    model = init_model(network, 10, seed=1)
    parts = slice_model(partition, model, 0.01, 0.0, 0.0)
    x_t = np.ascontiguousarray(make_inputs(args.rows, 1024, seed=0).toarray().T,
                               dtype=np.float32)
    dlogits = np.random.default_rng(0).standard_normal((args.rows, 10)).astype(np.float32)
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for repeat in range(args.repeats + 1):  # the first of each: compilation, untimed
        grads = {}
        for own in (False, True):  # interleaved: both see the same machine
            clock = _Clock()
            grads[own] = _step(parts, x_t, dlogits, own, clock)
            if repeat:
                runs[own].append({key: s / len(parts) for key, s in clock.seconds.items()})
        for a, b in zip(grads[False], grads[True], strict=True):
            for ga, gb in zip(a, b, strict=True):
                if not np.array_equal(ga, gb):
                    raise SystemExit("the layouts' gradients differ")
    print(f"1024-{args.layers}, {args.partition} k = 2, {args.rows} rows: one part's "
          f"step in this process (ms, medians of {args.repeats}; gradients bit for bit "
          "equal)")
    print(f"{'layout':>9} {'forward':>9} {'backward':>9} {'layout ops':>11} {'total':>9}")
    totals = {}
    for own, name in ((False, "gathered"), (True, "own")):
        med = {key: statistics.median(r[key] for r in runs[own]) * 1e3
               for key in runs[own][0]}
        totals[own] = med["forward"] + med["backward"] + med["layout"]
        print(f"{name:>9} {med['forward']:9.1f} {med['backward']:9.1f} "
              f"{med['layout']:11.1f} {totals[own]:9.1f}")
    print(f"own-output layout: {totals[False] / totals[True]:.2f}x the gathered one")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
