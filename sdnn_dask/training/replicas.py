"""A worker's replica of a data-parallel trainer: its model copy, optimiser and workspace.

Kept in the worker's memory between steps, by trainer id and worker address. Below both
the data-parallel trainer (:mod:`~.data_parallel`, which places and drops replicas) and
the direct transport's slot step (:mod:`~.direct`, which updates them), so neither
imports the other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
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
