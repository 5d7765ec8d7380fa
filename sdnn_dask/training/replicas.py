"""A worker's replica of a data-parallel trainer (its model copy, optimiser and
workspace), the training rows held for a persistent loop, and a data-parallel slot's step.

Replicas are kept in the worker's memory between steps, by trainer id and worker address,
below both the data-parallel trainer (:mod:`~.data_parallel`, which places and drops them)
and the slot task (:mod:`~.slot_task`, which steps them), so neither imports the other.

A data-parallel slot's step (:func:`data_step`) runs the serial kernels on its rows and
sums the gradient: with two workers the backward sends each bucket of the gradient to
the other as soon as its layers are done (:func:`gradient_buckets`), so the exchange runs
under the layers below; with more, the gradient is all-reduced after the backward
(:func:`~sdnn_dask.parallel.transport.collectives.allreduce`).

A bucket is a message, and a message costs its sender about 0.1-0.15 ms whatever its
size (the header's pickling and system call, and the receiving reader thread taking the
GIL), against about 0.01 ms to pickle the header and copy 128 KiB into the ring timed
alone: a bucket has to be large for its early start to pay (:data:`BUCKET_BYTES`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
from distributed import get_worker

from ..parallel.transport.collectives import REDUCE, Slot, pair_sum, timed_allreduce
from . import compiled
from .compiled import Workspace
from .loop import gradients
from .model import Gradients, SparseModel, flatten, unflatten
from .optim import SGD

#: Each worker's trainers, by (trainer id, worker address): its model copy, optimiser and
#: workspace (the address too, so the workers of a threaded cluster, which share this
#: module, keep a copy each).
_STATE: dict[tuple[str, str], tuple[SparseModel, SGD, Workspace]] = {}


def held(trainer: str) -> tuple[SparseModel, SGD, Workspace]:
    """This worker's copy of ``trainer``'s model, its optimiser and workspace."""
    return _STATE[(trainer, get_worker().address)]


def place_replica(trainer: str, model: SparseModel, lr: float, momentum: float,
                  weight_decay: float) -> str:
    """Keep a copy of ``model`` and a new optimiser for it on this worker, as ``trainer``'s."""
    # this worker's own, updated in place every step. The pattern is copied too: the
    # scattered model's arrays are views of the one buffer its message was read into,
    # and keeping its indices would keep its values (the whole buffer) alive as well
    copy = model.copy()
    _STATE[(trainer, get_worker().address)] = (
        copy, SGD(copy, lr, momentum=momentum, weight_decay=weight_decay), Workspace())
    return trainer


def held_replica_bytes(trainer: str | None = None) -> dict[str, int]:
    """Per trainer id with a replica on this worker (or ``trainer``'s alone), the bytes
    of its model's values and pattern."""
    here = get_worker().address
    return {key: model.parameter_bytes + model.pattern_bytes
            for (key, where), (model, _, _) in list(_STATE.items())
            if where == here and (trainer is None or key == trainer)}


def drop_replica(trainer: str) -> bool:
    """Forget this worker's copy of ``trainer``'s model (``False``: it held none)."""
    drop_held(trainer)
    return _STATE.pop((trainer, get_worker().address), None) is not None


#: Training rows held on each worker for a persistent loop's steps, by (trainer key, part,
#: worker address): the rows (data parallelism) or the input columns a part reads
#: (``needed x rows``), and their labels.
_HELD: dict[tuple[str, int, str], tuple[Any, np.ndarray]] = {}


def hold_rows(trainer: str, part: int, x: Any, labels: np.ndarray) -> int:
    """Keep ``x`` and ``labels`` here for ``trainer``'s slot of part ``part``: its steps
    are then fed row ids (:func:`held_rows`) instead of the rows."""
    _HELD[(trainer, part, get_worker().address)] = (x, np.asarray(labels))
    return int(np.asarray(labels).shape[0])


def held_rows(trainer: str, part: int) -> tuple[Any, np.ndarray]:
    """What :func:`hold_rows` keeps here for ``trainer``'s part ``part``."""
    try:
        return _HELD[(trainer, part, get_worker().address)]
    except KeyError:
        raise RuntimeError(f"no training rows are held for {trainer} (part {part}) on "
                           f"{get_worker().address}: call the trainer's hold() before "
                           "feeding it row ids") from None


def drop_held(trainer: str) -> int:
    """Forget the rows held here for ``trainer`` (and its row groups' keys)."""
    here = get_worker().address
    keys = [key for key in list(_HELD) if key[2] == here
            and (key[0] == trainer or key[0].startswith(trainer + "/"))]
    return sum(_HELD.pop(key, None) is not None for key in keys)


#: Bytes of gradient a data-parallel slot on two workers sends at once, as soon as
#: its layers are computed (the last piece, with the biases and readout, may be smaller).
#: At 1 MiB the copy into the ring (about 0.1 ms) is as much as the message's fixed cost.
#: Measured against 64 KiB (``benchmarks/bench_training_loop.py --buckets``, the digits,
#: both orders, two runs each): 0.65x-0.77x against 0.49x-0.62x the serial epoch at 4
#: layers and batch 32, 1.07x-1.27x against 0.99x-1.17x at 256; 1.55x-1.68x against
#: 1.41x-1.59x at 120 layers and batch 512.
BUCKET_BYTES = 1 << 20


def gradient_buckets(model: Any, bucket_bytes: int = BUCKET_BYTES
                     ) -> list[tuple[int, int, int]]:
    """How the flat gradient (:meth:`~.model.SparseModel.parameters`' order) goes out in
    pieces while the backward runs: ``(layer, lo, hi)``, sent once layer ``layer``'s
    weight gradient is final (from the top down), each at least ``bucket_bytes``; then,
    with ``layer`` -1 (sent when the backward is done), the weights of the layers left
    and the biases and readout (one piece if no weights went early).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from sdnn_dask.training import init_model
    >>> model = init_model([sp.identity(4096, format="csr")] * 3, classes=2, seed=0)
    >>> gradient_buckets(model, bucket_bytes=16 << 10)  # 16 KiB a layer's weights
    [(2, 8192, 12288), (1, 4096, 8192), (-1, 0, 4096), (-1, 12288, 32770)]
    >>> gradient_buckets(model, bucket_bytes=1 << 20)  # one message, after the backward
    [(-1, 0, 32770)]
    """
    params = model.parameters()
    return list(_buckets(tuple(p.size for p in params), params[0].itemsize,
                         model.n_layers, bucket_bytes))


@functools.lru_cache(maxsize=64)
def _buckets(sizes: tuple[int, ...], itemsize: int, n: int, bucket_bytes: int
             ) -> tuple[tuple[int, int, int], ...]:
    ends = np.cumsum(sizes)
    starts = ends - np.array(sizes)
    out, hi, size = [], int(ends[n - 1]), 0
    for k in range(n - 1, 0, -1):  # layer 0's goes with the rest
        size += sizes[k] * itemsize
        if size >= bucket_bytes:
            out.append((k, int(starts[k]), hi))
            hi, size = int(starts[k]), 0
    if hi == ends[n - 1]:  # nothing went early: one message after the backward
        return (*out, (-1, 0, int(ends[-1])))
    return (*out, (-1, 0, hi), (-1, int(ends[n - 1]), int(ends[-1])))



def overlapped_data_step(slot: Slot, model: Any, optimizer: Any, cache: Any,
                         labels: np.ndarray, share: float, vector: np.ndarray,
                         t0: float, t1: float, bucket_bytes: int = BUCKET_BYTES) -> float:
    """A data-parallel slot of two: the backward sends each bucket of its (scaled)
    gradient to the other slot as soon as its layers are done, so the exchange runs
    under the layers below; then every bucket is summed with the other's, in place.
    Without rows (``cache`` None: a batch smaller than the cluster) it sends zeros."""
    buckets = gradient_buckets(model, bucket_bytes)
    early = {layer: i for i, (layer, _, _) in enumerate(buckets) if layer >= 0}
    scale = vector.dtype.type(share)
    other, waited, sent_s = 1 - slot.group, slot.wait_s, slot.send_s

    def send(i: int) -> None:
        _, lo, hi = buckets[i]
        if share != 1.0:
            vector[lo:hi] *= scale
        slot.send(REDUCE, "gradient", other, i, slot.part, slot.group, vector[lo:hi],
                  reused=True)

    if cache is None:
        loss = 0.0
        vector[...] = 0.0
    else:
        loss, _ = compiled.backward(model, cache, labels, out=vector,
                                    ready=lambda k: send(early[k]) if k in early else None)
    for i, (layer, _, _) in enumerate(buckets):
        if layer < 0 or cache is None:
            send(i)
    t2 = time.perf_counter()
    for i, (_, lo, hi) in enumerate(buckets):
        pair_sum(slot, vector, lo, hi, i, sent=True)
    t3 = time.perf_counter()
    # the sends inside the backward are the exchange's, not compute
    inside = slot.send_s - sent_s
    slot.forward_s, slot.backward_s = t1 - t0, t2 - t1 - inside
    slot.allreduce_s = t3 - t2 + inside
    slot.wait_s, slot.send_s = waited, sent_s
    w = model.n_layers
    views = unflatten(vector, model.parameters())
    optimizer.step(Gradients(views[:w], views[w:2 * w], views[2 * w], views[2 * w + 1]))
    slot.update_s = time.perf_counter() - t3
    return loss * share


def data_step(slot: Slot, key: str, groups: int, x: Any, labels: np.ndarray,
              share: float, backend: str, bucket_bytes: int = BUCKET_BYTES) -> float:
    """A whole-model slot: the serial kernels on its rows, the gradient all-reduced
    (with two groups, sent in buckets of ``bucket_bytes`` during the backward)."""
    model, optimizer, workspace = held(key)
    arrays = model.parameters()
    t0 = time.perf_counter()
    if groups == 2 and backend == "compiled":  # each bucket sent once its layers are done
        vector = workspace.vector(sum(a.size for a in arrays))
        cache = compiled.forward(model, x, workspace) if x.shape[0] else None
        return overlapped_data_step(slot, model, optimizer, cache, labels, share, vector,
                                    t0, time.perf_counter(), bucket_bytes)
    if x.shape[0] and backend == "compiled":
        # the gradient written straight into one vector (reduced as it is), reused
        vector = workspace.vector(sum(a.size for a in arrays))
        cache = compiled.forward(model, x, workspace)
        t1 = time.perf_counter()
        loss, _ = compiled.backward(model, cache, labels, out=vector)
        if share != 1.0:
            vector *= vector.dtype.type(share)
    elif x.shape[0]:
        loss, grads = gradients(model, x, labels, backend, None)
        t1 = time.perf_counter()  # the reference's forward is not timed apart
        vector = flatten(grads.arrays())
        if share != 1.0:
            vector *= vector.dtype.type(share)
    else:  # a batch smaller than the cluster: this worker adds nothing, but updates
        loss, vector = 0.0, np.zeros(sum(a.size for a in arrays), model.dtype)
        t1 = time.perf_counter()
    t2 = time.perf_counter()
    slot.forward_s, slot.backward_s = t1 - t0, t2 - t1
    if groups > 1:
        vector = timed_allreduce(slot, groups, vector)
    t3 = time.perf_counter()
    w = model.n_layers
    views = unflatten(vector, arrays)
    optimizer.step(Gradients(views[:w], views[w:2 * w], views[2 * w], views[2 * w + 1]))
    slot.update_s = time.perf_counter() - t3
    return loss * share
