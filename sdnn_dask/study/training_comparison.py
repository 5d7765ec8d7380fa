"""Training under every strategy, side by side, checked against the serial run (the
report on it: :mod:`sdnn_dask.report.training`).

:func:`compare_training` runs the serial compiled steps from one model first, alone,
and keeps their losses; then each strategy in turn (the data-parallel trainer, a
model-parallel trainer per neuron partition, ...) starts from the same model, made again
from the same seed, takes the same batches, and is closed before the next is placed:
every step's loss is checked against the serial step's on the same batch (the runs take
the same steps, so they stay together up to float32 rounding in another order). One row
per strategy, partition, batch size and step; no timing includes compilation or placement
(an untimed first step each).

One run at a time is what fits (issue 45): at 65536-120 a model is 2 GB of values and
pattern, a data-parallel worker holds about 24 bytes an edge of it, and every strategy's
copies placed at once (as before) ran this 24 GB machine out of memory. The client holds
at most one copy of the model's values, and none while a trainer runs. The runs' steps
are therefore not interleaved: a machine whose load changes between runs shows in their
seconds.

:func:`compare_digits` trains every strategy on the digits task for whole epochs from the
same initial model and batches, and checks each epoch's loss and held-out accuracy against
the serial run's.

Every trainer is built by :func:`make_trainer` from :data:`TRAINERS`: a strategy is one
entry there.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from distributed import Client

from ..core.network import Network
from ..dask_workers import worker_info
from ..data.images import make_inputs
from ..parallel.allocator import trim_memory
from ..training.compiled import Workspace
from ..training.data_parallel import DataParallelTrainer
from ..training.digits import DigitsData, digits_model, load_digits_1024
from ..training.loop import fit, fit_trainer, step_bytes, train_step
from ..training.model import SparseModel, init_model
from ..training.model_parallel import ModelParallelTrainer
from ..training.optim import SGD
from .validation import shown

__all__ = [
    "DIGITS_COLUMNS",
    "STEP_COLUMNS",
    "TRAINERS",
    "compare_digits",
    "compare_training",
    "make_trainer",
    "runs",
]

#: The columns of :func:`compare_training`'s rows.
STEP_COLUMNS = ["strategy", "partition", "workers", "row_groups", "batch", "step", "seconds",
                "loss", "serial_loss", "bytes_moved", "check"]

#: The columns of :func:`compare_digits`'s rows.
DIGITS_COLUMNS = ["strategy", "partition", "workers", "row_groups", "batch", "epoch", "loss",
                  "serial_loss",
                  "train_accuracy", "test_accuracy", "seconds", "bytes_moved", "check"]

#: Relative difference of a step's loss from the serial one's that still passes: float32
#: sums in another order drift apart slowly over many layers (1e-5 at 4 layers, up to a
#: few 1e-4 after 5 steps at 120).
LOSS_RTOL = 1e-3

#: Relative difference of an epoch's mean loss from the serial run's that still passes, on
#: the digits. Measured (4 layers, batch 32, lr 0.01, momentum 0.9, 2 workers, k = 2): the
#: data- and model-parallel losses stay within 2e-7 of the serial ones for 5 epochs (seeds
#: 0 and 1; seed 0's data parallelism within 5e-7 for 15), but training can amplify the
#: rounding of sums in another order: seed 1's model-parallel run drifts about tenfold an
#: epoch after the fifth (1e-6 at epoch 6, 3e-5 at 8, 1.1e-4 at 9). 1e-3 passes 10 epochs
#: with room, and a real difference in the update still fails: a learning rate 1% off
#: moves the epoch losses by 3e-3 to 1e-2, momentum 0.899 for 0.9 by 1.2e-3 to 1e-2, one
#: update skipped an epoch by 1e-2 to 7e-2 (from epoch 2 on). Deeper networks amplify far
#: more (24 layers, lr 0.005: 3e-4 in the first epoch, 0.3 by the fourth, the serial
#: accuracy itself swinging between epochs): there a right trainer fails this check, the
#: trajectories having separated, and only the accuracies can be compared.
EPOCH_LOSS_RTOL = 1e-3

#: Largest difference of an epoch's held-out accuracy from the serial run's that passes
#: (0.02: 7 of the 360 held-out digits).
ACCURACY_TOL = 0.02


@dataclass(frozen=True)
class TrainerKind:
    """How :func:`make_trainer` builds one strategy's trainer.

    Attributes
    ----------
    build
        ``build(client, model, partition, *, k, row_groups, lr, momentum, seed)``: a
        trainer with ``.step(x, labels)``, ``.model()``, ``.close()``, a context manager.
    per_partition
        One run per neuron partition (model parallelism); else one run, labelled
        ``"block"`` (data parallelism's contiguous row blocks).
    """

    build: Callable[..., Any]
    per_partition: bool


def _data_parallel(client: Client, model: SparseModel, partition: str, *, k: int | None,
                   row_groups: int, lr: float, momentum: float, seed: int
                   ) -> DataParallelTrainer:
    return DataParallelTrainer(client, model, lr=lr, momentum=momentum)


def _model_parallel(client: Client, model: SparseModel, partition: str, *, k: int | None,
                    row_groups: int, lr: float, momentum: float, seed: int
                    ) -> ModelParallelTrainer:
    return ModelParallelTrainer(client, model, partition, k=k, lr=lr, momentum=momentum,
                                seed=seed)


def _hybrid(client: Client, model: SparseModel, partition: str, *, k: int | None,
            row_groups: int, lr: float, momentum: float, seed: int) -> ModelParallelTrainer:
    return ModelParallelTrainer(client, model, partition, k=k, row_groups=row_groups, lr=lr,
                                momentum=momentum, seed=seed)


#: The parallel strategies, by name (a new strategy is one entry).
TRAINERS: dict[str, TrainerKind] = {
    "data": TrainerKind(_data_parallel, per_partition=False),
    "model": TrainerKind(_model_parallel, per_partition=True),
    "hybrid": TrainerKind(_hybrid, per_partition=True),
}

#: Row groups of the hybrid runs unless told (each run by its own copy of the k parts).
HYBRID_ROW_GROUPS = 2


def row_groups_of(strategy: str, workers: int, row_groups: int) -> int:
    """The row groups a strategy's run splits each batch into (data: one per worker)."""
    return {"serial": 1, "data": workers, "model": 1}.get(strategy, row_groups)


def runs(strategies: Sequence[str], partitions: Sequence[str]) -> list[tuple[str, str]]:
    """The (strategy, partition) runs: one per strategy, or one per neuron partition for
    those that take one (:attr:`TrainerKind.per_partition`)."""
    out = []
    for strategy in strategies:
        if strategy not in TRAINERS:
            raise ValueError(f"strategy must be one of {', '.join(TRAINERS)}, got "
                             f"{shown(strategy)}")
        kind = TRAINERS[strategy]
        out += [(strategy, p) for p in partitions] if kind.per_partition else [
            (strategy, "block")]
    return out


def make_trainer(client: Client, strategy: str, partition: str, model: SparseModel, *,
                 k: int | None = None, row_groups: int = HYBRID_ROW_GROUPS, lr: float,
                 momentum: float = 0.0, seed: int = 0) -> Any:
    """The trainer of ``strategy`` (a key of :data:`TRAINERS`) on ``partition``, starting
    from a copy of ``model`` (``row_groups``: the hybrid's)."""
    if strategy not in TRAINERS:
        raise ValueError(f"strategy must be one of {', '.join(TRAINERS)}, got "
                         f"{shown(strategy)}")
    return TRAINERS[strategy].build(client, model, partition, k=k, row_groups=row_groups,
                                    lr=lr, momentum=momentum, seed=seed)


def compare_training(client: Client, network: Network, *, batches: Sequence[int] = (64, 512),
                     steps: int = 3, strategies: Sequence[str] = ("data", "model", "hybrid"),
                     partitions: Sequence[str] = ("block",), k: int | None = None,
                     row_groups: int = HYBRID_ROW_GROUPS, classes: int = 10, seed: int = 0,
                     lr: float = 0.01, momentum: float = 0.9,
                     progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Time ``steps`` training steps per batch size: serial, data, model parallel, hybrid.

    Parameters
    ----------
    client
        The cluster's client (every worker is used).
    network
        Its layers' patterns are trained (random values on them, :func:`init_model`).
    batches, steps
        Batch sizes, and timed steps of each (after an untimed one).
    strategies, partitions
        The parallel strategies (keys of :data:`TRAINERS`), and the neuron partitions of
        those that take one (``()``: none), ``k`` parts (default: one per worker).
    row_groups
        The hybrid's row groups (each run by its own copy of the ``k`` parts).
    classes, seed, lr, momentum
        Readout classes (the labels are random: this is about time and bytes), the seed
        of the values, inputs and labels, and the SGD settings.

    Returns
    -------
    pandas.DataFrame
        :data:`STEP_COLUMNS`; ``check`` is ``PASS`` when the step's loss is within
        :data:`LOSS_RTOL` of the serial step's.
    """
    say = progress or (lambda _message: None)
    workers = len(worker_info(client))
    k = k or workers
    configs = runs(strategies, partitions)
    rng = np.random.default_rng(seed)
    rows = max(batches) * (steps + 1)
    inputs = make_inputs(rows, network.n_neurons, seed=seed).toarray()
    labels = rng.integers(0, classes, rows)
    out: list[tuple[tuple[int, int, int], tuple]] = []  # (batch, step, run) -> row
    for b, batch in enumerate(batches):
        def batch_of(s: int, batch: int = batch) -> tuple[np.ndarray, np.ndarray]:
            return inputs[s * batch:(s + 1) * batch], labels[s * batch:(s + 1) * batch]

        # the serial reference first, alone, its loss per step kept: every strategy's
        # steps from the same start on the same batches are checked against them
        say(f"batch {batch}: the serial steps")
        serial = init_model(network, classes, seed=seed)
        optimizer = SGD(serial, lr, momentum=momentum)
        workspace = Workspace()  # the serial step's tiles reused, as every trainer's are
        expected = []
        for s in range(steps + 1):  # step 0 untimed: compilation
            t0 = time.perf_counter()
            expected.append(train_step(serial, *batch_of(s), optimizer,
                                       workspace=workspace))
            if s:
                out.append(((b, s, 0), ("serial", "none", 1, 1, batch, s,
                                        time.perf_counter() - t0, expected[s], expected[s],
                                        0, "PASS")))
        del serial, optimizer, workspace
        _release(client)
        for r, (strategy, partition) in enumerate(configs, start=1):
            say(f"batch {batch}: placing the {strategy}-parallel "
                + (f"{partition} parts" if TRAINERS[strategy].per_partition
                   else "model copies"))
            # the start again (same seed, same values): the client holds one copy of the
            # model at a time, and none once the trainer has placed it
            start = init_model(network, classes, seed=seed)
            trainer = make_trainer(client, strategy, partition, start, k=k,
                                   row_groups=row_groups, lr=lr, momentum=momentum,
                                   seed=seed)
            del start
            # init_model's float64 draws (and a placement's temporaries) were freed into
            # the heap: given back now, not after the run (3 GB at 65536-120)
            gc.collect()
            trim_memory()
            if hasattr(trainer, "held_bytes"):  # model parallelism: a k-th of it a part
                held = trainer.held_bytes()
                say(f"batch {batch}: the {strategy} parts hold "
                    + ", ".join(f"{n / 1e9:.2f}" for n in held.values()) + " GB of slices")
            try:
                for s in range(steps + 1):  # step 0 untimed: compilation, first transfers
                    step = trainer.step(*batch_of(s))
                    ok = np.isclose(step.loss, expected[s], rtol=LOSS_RTOL, atol=0.0)
                    if s:
                        out.append(((b, s, r), (
                            strategy, partition, workers,
                            row_groups_of(strategy, workers, row_groups), batch, s,
                            step.seconds, step.loss, expected[s], step_bytes(step),
                            "PASS" if ok else "FAIL")))
                say(f"batch {batch}: {strategy} ({partition}), {steps} steps done")
            finally:
                trainer.close()  # its copies dropped on the workers before the next
                del trainer
                _release(client)
    out.sort(key=lambda row: row[0])  # per batch and step, every run in turn
    return pd.DataFrame([row for _, row in out], columns=STEP_COLUMNS)


def _release(client: Client) -> None:
    """Give the memory a finished run freed back to the system, here and on every worker
    (glibc keeps freed blocks below its mmap threshold for reuse: the next strategy's
    placement should find the machine as the last one left it)."""
    gc.collect()
    trim_memory()
    client.run(_collect_and_trim)


def _collect_and_trim() -> bool:
    gc.collect()
    return trim_memory()


def compare_digits(client: Client, *, layers: int = 4, epochs: int = 5, batch: int = 32,
                   strategies: Sequence[str] = ("data", "model", "hybrid"),
                   partitions: Sequence[str] = ("block",), k: int | None = None,
                   row_groups: int = HYBRID_ROW_GROUPS,
                   seed: int = 0, lr: float = 0.01, momentum: float = 0.9,
                   data: DigitsData | None = None, loss_rtol: float = EPOCH_LOSS_RTOL,
                   progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Train every strategy on the digits, epoch by epoch, against the serial run.

    The serial :func:`~.loop.fit` and every trainer (:func:`~.loop.fit_trainer`) start
    from the same model (:func:`~.digits.digits_model`) and take the same shuffled batches.

    Parameters
    ----------
    client
        The cluster's client (every worker is used).
    layers, epochs, batch, lr, momentum
        The network's sparse layers, and the optimisation.
    strategies, partitions, k
        As in :func:`compare_training`.
    seed
        Seeds the pattern, the initial values, the held-out split and the shuffling.
    data
        The digits (default: ``load_digits_1024(seed)``; scikit-learn, the ``train`` extra).
    loss_rtol
        See :data:`EPOCH_LOSS_RTOL`.

    Returns
    -------
    pandas.DataFrame
        :data:`DIGITS_COLUMNS`, one row per strategy, partition and epoch (serial first;
        ``batch`` the batch size, for sweeps: see :func:`digits_steps`):
        ``loss`` the epoch's mean step loss, ``serial_loss`` the serial run's, the
        accuracies after the epoch, ``seconds`` of the epoch's steps, ``bytes_moved``
        between workers in the epoch (0 serial); ``check`` is ``PASS`` when the loss is
        within ``loss_rtol`` of the serial one and the held-out accuracy within
        :data:`ACCURACY_TOL` of the serial run's.
    """
    say = progress or (lambda _message: None)
    workers = len(worker_info(client))
    k = k or workers
    configs = runs(strategies, partitions)
    data = data if data is not None else load_digits_1024(seed)
    arrays = (data.x_train, data.y_train, data.x_test, data.y_test)
    start = digits_model(layers, seed)
    serial_model = start.copy()
    say(f"digits, {layers} layers: serial, {epochs} epochs of batch {batch}")
    serial = fit(serial_model, *arrays, epochs=epochs, batch=batch,
                 optimizer=SGD(serial_model, lr, momentum=momentum), seed=seed)
    histories = [("serial", "none", 1, serial.assign(bytes_moved=0))]
    for strategy, partition in configs:
        say(f"digits: {strategy} parallel ({partition}), {epochs} epochs")
        with make_trainer(client, strategy, partition, start, k=k, row_groups=row_groups,
                          lr=lr, momentum=momentum, seed=seed) as trainer:
            histories.append((strategy, partition, workers, fit_trainer(
                trainer, *arrays, epochs=epochs, batch=batch, seed=seed)))
    frames = []
    for strategy, partition, used, history in histories:
        ok = (np.isclose(history["loss"], serial["loss"], rtol=loss_rtol, atol=0.0)
              & ((history["test_accuracy"] - serial["test_accuracy"]).abs()
                 <= ACCURACY_TOL + 1e-12))
        frames.append(history.assign(strategy=strategy, partition=partition, workers=used,
                                     row_groups=row_groups_of(strategy, used, row_groups),
                                     batch=batch,
                                     serial_loss=serial["loss"],
                                     check=np.where(ok, "PASS", "FAIL")))
    return pd.concat(frames, ignore_index=True)[DIGITS_COLUMNS]
