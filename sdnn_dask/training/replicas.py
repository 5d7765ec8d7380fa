"""A worker's replica of a data-parallel trainer: its model copy, optimiser and workspace.

Kept in the worker's memory between steps, by trainer id and worker address. Below both
the data-parallel trainer (:mod:`~.data_parallel`, which places and drops replicas) and
the direct transport's slot step (:mod:`~.direct`, which updates them), so neither
imports the other.
"""

from __future__ import annotations

from distributed import get_worker

from .compiled import Workspace
from .model import SparseModel
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
    copy = model.copy()  # this worker's own: updated in place every step
    _STATE[(trainer, get_worker().address)] = (
        copy, SGD(copy, lr, momentum=momentum, weight_decay=weight_decay), Workspace())
    return trainer


def drop_replica(trainer: str) -> bool:
    """Forget this worker's copy of ``trainer``'s model (``False``: it held none)."""
    return _STATE.pop((trainer, get_worker().address), None) is not None
