"""Training steps under every strategy, side by side, checked against the serial step.

:func:`compare_training` starts one model, copies it for the serial compiled step, the
data-parallel trainer and a model-parallel trainer per neuron partition, and gives them
the same batches: every step's loss is checked against the serial step's on the same
batch (the copies take the same steps, so they stay together up to float32 rounding in
another order). One row per strategy, partition, batch size and step; no timing includes
compilation or placement (an untimed first step each).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from distributed import Client

from ..images import make_inputs
from ..network import Network
from .data_parallel import DataParallelTrainer
from .loop import train_step
from .model import init_model
from .model_parallel import ModelParallelTrainer
from .optim import SGD

__all__ = ["STEP_COLUMNS", "compare_training", "summarise"]

#: The columns of :func:`compare_training`'s rows.
STEP_COLUMNS = ["strategy", "partition", "workers", "batch", "step", "seconds", "loss",
                "serial_loss", "bytes_moved", "check"]

#: Relative difference of a step's loss from the serial one's that still passes: float32
#: sums in another order drift apart slowly over many layers (1e-5 at 4 layers, up to a
#: few 1e-4 after 5 steps at 120).
LOSS_RTOL = 1e-3


def compare_training(client: Client, network: Network, *, batches: Sequence[int] = (64, 512),
                     steps: int = 3, partitions: Sequence[str] = ("block",), k: int | None = None,
                     classes: int = 10, seed: int = 0, lr: float = 0.01, momentum: float = 0.9,
                     progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Time ``steps`` training steps per batch size: serial, data and model parallel.

    Parameters
    ----------
    client
        The cluster's client (every worker is used).
    network
        Its layers' patterns are trained (random values on them, :func:`init_model`).
    batches, steps
        Batch sizes, and timed steps of each (after an untimed one).
    partitions
        Neuron partitions of the model-parallel runs (``()``: none), ``k`` parts
        (default: one per worker).
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
    workers = len(client.scheduler_info()["workers"])
    k = k or workers
    rng = np.random.default_rng(seed)
    rows = max(batches) * (steps + 1)
    inputs = make_inputs(rows, network.n_neurons, seed=seed).toarray()
    labels = rng.integers(0, classes, rows)
    out = []
    for batch in batches:
        start_model = init_model(network, classes, seed=seed)
        serial = start_model.copy()
        optimizer = SGD(serial, lr, momentum=momentum)
        trainers: list[tuple[str, str, int, object]] = [
            ("data", "block", workers,
             DataParallelTrainer(client, start_model, lr=lr, momentum=momentum))]
        for method in partitions:
            say(f"batch {batch}: placing the model-parallel {method} parts")
            trainers.append(("model", method, workers, ModelParallelTrainer(
                client, start_model, method, k=k, lr=lr, momentum=momentum, seed=seed)))
        try:
            for s in range(steps + 1):  # step 0 untimed: compilation, first transfers
                x = inputs[s * batch:(s + 1) * batch]
                y = labels[s * batch:(s + 1) * batch]
                t0 = time.perf_counter()
                expected = train_step(serial, x, y, optimizer)
                serial_s = time.perf_counter() - t0
                if s:
                    out.append(("serial", "none", 1, batch, s, serial_s, expected, expected,
                                0, "PASS"))
                for strategy, partition, used, trainer in trainers:
                    step = trainer.step(x, y)
                    moved = getattr(step, "bytes_moved", None)
                    if moved is None:
                        moved = step.bytes_forward + step.bytes_backward
                    ok = np.isclose(step.loss, expected, rtol=LOSS_RTOL, atol=0.0)
                    if s:
                        out.append((strategy, partition, used, batch, s, step.seconds,
                                    step.loss, expected, moved, "PASS" if ok else "FAIL"))
                say(f"batch {batch}: step {s} of {steps} done" + (" (untimed)" if not s
                                                                  else ""))
        finally:
            for *_, trainer in trainers:
                trainer.close()
    return pd.DataFrame(out, columns=STEP_COLUMNS)


def summarise(steps: pd.DataFrame) -> pd.DataFrame:
    """Per strategy, partition and batch: median seconds per step, against the serial
    step, MB moved per step, and whether every step passed."""
    keys = ["strategy", "partition", "workers", "batch"]
    table = (steps.groupby(keys, sort=False)
             .agg(seconds=("seconds", "median"), mb_per_step=("bytes_moved", "median"),
                  check=("check", lambda c: "PASS" if (c == "PASS").all() else "FAIL"))
             .reset_index())
    serial = table[table["strategy"] == "serial"].set_index("batch")["seconds"]
    table["vs_serial"] = table["batch"].map(serial) / table["seconds"]
    table["mb_per_step"] = table["mb_per_step"] / 1e6
    return table[[*keys, "seconds", "vs_serial", "mb_per_step", "check"]]
