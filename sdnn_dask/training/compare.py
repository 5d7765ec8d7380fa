"""Training under every strategy, side by side, checked against the serial run.

:func:`compare_training` starts one model, copies it for the serial compiled step, the
data-parallel trainer and a model-parallel trainer per neuron partition, and gives them
the same batches: every step's loss is checked against the serial step's on the same
batch (the copies take the same steps, so they stay together up to float32 rounding in
another order). One row per strategy, partition, batch size and step; no timing includes
compilation or placement (an untimed first step each). :func:`summarise` gives medians per
batch and :func:`crossover` the batch where model parallelism's bytes (activations and
errors, proportional to the batch) equal data parallelism's (every weight gradient,
whatever the batch); :func:`training_markdown` puts them in a report.

:func:`compare_digits` trains every strategy on the digits task for whole epochs from the
same initial model and batches, and checks each epoch's loss and held-out accuracy against
the serial run's.

Every trainer is built by :func:`make_trainer` from :data:`TRAINERS`: a strategy is one
entry there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from distributed import Client

from ..core.network import Network
from ..data.images import make_inputs
from ..formatting import to_markdown
from .compiled import Workspace
from .data_parallel import DataParallelTrainer
from .digits import DigitsData, digits_model, load_digits_1024
from .loop import fit, fit_trainer, step_bytes, train_step
from .model import SparseModel, init_model
from .model_parallel import ModelParallelTrainer
from .optim import SGD

__all__ = [
    "CROSSOVER_COLUMNS",
    "DIGITS_COLUMNS",
    "STEP_COLUMNS",
    "TRAINERS",
    "compare_digits",
    "compare_training",
    "crossover",
    "crossover_sentences",
    "digits_steps",
    "make_trainer",
    "runs",
    "summarise",
    "training_markdown",
]

#: The columns of :func:`compare_training`'s rows.
STEP_COLUMNS = ["strategy", "partition", "workers", "row_groups", "batch", "step", "seconds",
                "loss", "serial_loss", "bytes_moved", "check"]

#: The columns of :func:`compare_digits`'s rows.
DIGITS_COLUMNS = ["strategy", "partition", "workers", "row_groups", "batch", "epoch", "loss",
                  "serial_loss",
                  "train_accuracy", "test_accuracy", "seconds", "bytes_moved", "check"]

#: The columns of :func:`crossover`'s rows.
CROSSOVER_COLUMNS = ["strategy", "partition", "workers", "data_bytes_per_step",
                     "bytes_per_row", "bytes_crossover_batch", "batches",
                     "seconds_crossover_batch"]

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
                             f"{strategy!r}")
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
        raise ValueError(f"strategy must be one of {', '.join(TRAINERS)}, got {strategy!r}")
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
    workers = len(client.scheduler_info()["workers"])
    k = k or workers
    configs = runs(strategies, partitions)
    rng = np.random.default_rng(seed)
    rows = max(batches) * (steps + 1)
    inputs = make_inputs(rows, network.n_neurons, seed=seed).toarray()
    labels = rng.integers(0, classes, rows)
    out = []
    for batch in batches:
        start_model = init_model(network, classes, seed=seed)
        serial = start_model.copy()
        optimizer = SGD(serial, lr, momentum=momentum)
        workspace = Workspace()  # the serial step's tiles reused, as every trainer's are
        trainers: list[tuple[str, str, int, Any]] = []
        try:
            for strategy, partition in configs:
                say(f"batch {batch}: placing the {strategy}-parallel "
                    + (f"{partition} parts" if TRAINERS[strategy].per_partition
                       else "model copies"))
                trainers.append((strategy, partition, workers, make_trainer(
                    client, strategy, partition, start_model, k=k, row_groups=row_groups,
                    lr=lr, momentum=momentum, seed=seed)))
            for s in range(steps + 1):  # step 0 untimed: compilation, first transfers
                x = inputs[s * batch:(s + 1) * batch]
                y = labels[s * batch:(s + 1) * batch]
                t0 = time.perf_counter()
                expected = train_step(serial, x, y, optimizer, workspace=workspace)
                serial_s = time.perf_counter() - t0
                if s:
                    out.append(("serial", "none", 1, 1, batch, s, serial_s, expected,
                                expected, 0, "PASS"))
                for strategy, partition, used, trainer in trainers:
                    step = trainer.step(x, y)
                    ok = np.isclose(step.loss, expected, rtol=LOSS_RTOL, atol=0.0)
                    if s:
                        out.append((strategy, partition, used,
                                    row_groups_of(strategy, used, row_groups), batch, s,
                                    step.seconds, step.loss, expected, step_bytes(step),
                                    "PASS" if ok else "FAIL"))
                say(f"batch {batch}: step {s} of {steps} done" + (" (untimed)" if not s
                                                                  else ""))
        finally:
            for *_, trainer in trainers:
                trainer.close()
    return pd.DataFrame(out, columns=STEP_COLUMNS)


def summarise(steps: pd.DataFrame) -> pd.DataFrame:
    """Per strategy, partition and batch: median seconds per step, against the serial
    step, MB moved per step, and whether every step passed."""
    keys = ["strategy", "partition", "workers", "row_groups", "batch"]
    table = (steps.groupby(keys, sort=False)
             .agg(seconds=("seconds", "median"), mb_per_step=("bytes_moved", "median"),
                  check=("check", lambda c: "PASS" if (c == "PASS").all() else "FAIL"))
             .reset_index())
    serial = table[table["strategy"] == "serial"].set_index("batch")["seconds"]
    table["vs_serial"] = table["batch"].map(serial) / table["seconds"]
    table["mb_per_step"] = table["mb_per_step"] / 1e6
    return table[[*keys, "seconds", "vs_serial", "mb_per_step", "check"]]


def crossover(steps: pd.DataFrame) -> pd.DataFrame:
    """Where model parallelism's bytes and seconds per step meet data parallelism's.

    Data parallelism moves every weight gradient each step, whatever the batch; model
    parallelism moves activation columns forward and errors backward, ``bytes_per_row``
    for every row of the batch. So they move the same at a batch of ``data bytes /
    bytes_per_row`` rows, fewer below it for model parallelism, more above.

    Parameters
    ----------
    steps
        :func:`compare_training`'s rows (:data:`STEP_COLUMNS`).

    Returns
    -------
    pandas.DataFrame
        :data:`CROSSOVER_COLUMNS`, one row per model-parallel partition and worker count
        with a data-parallel run on as many workers: ``data_bytes_per_step`` (the median
        over data parallelism's steps), ``bytes_per_row`` (the least-squares slope through
        0 of the partition's bytes against the batch: the bytes are proportional to it),
        ``bytes_crossover_batch`` (their ratio), ``batches`` (the batch sizes both ran, as
        ``"64,512"``), ``seconds_crossover_batch``: the batch where the median seconds per
        step of the two are equal, interpolated linearly in log batch between the first
        two measured batch sizes where the faster one changes; NaN if they do not cross
        between the measured sizes (nothing is extrapolated).
    """
    out = []
    medians = (steps.groupby(["strategy", "partition", "workers", "batch"], sort=False)
               .agg(seconds=("seconds", "median"), bytes_moved=("bytes_moved", "median"))
               .reset_index())
    for workers, rows in medians.groupby("workers", sort=False):
        data = rows[rows["strategy"] == "data"]
        if data.empty:
            continue
        data_bytes = float(data["bytes_moved"].median())
        data_seconds = data.set_index("batch")["seconds"]
        model_steps = steps[(steps["strategy"] == "model") & (steps["workers"] == workers)]
        for partition, mine in model_steps.groupby("partition", sort=False):
            batch = mine["batch"].to_numpy(float)
            per_row = float(np.dot(batch, mine["bytes_moved"].to_numpy(float))
                            / np.dot(batch, batch))
            seconds = rows[(rows["strategy"] == "model") & (rows["partition"] == partition)
                           ].set_index("batch")["seconds"]
            common = sorted(set(seconds.index) & set(data_seconds.index))
            out.append({
                "strategy": "model", "partition": partition, "workers": workers,
                "data_bytes_per_step": data_bytes, "bytes_per_row": per_row,
                "bytes_crossover_batch": data_bytes / per_row if per_row > 0 else math.nan,
                "batches": ",".join(str(int(b)) for b in common),
                "seconds_crossover_batch": _crossing(
                    common, [seconds[b] - data_seconds[b] for b in common]),
            })
    return pd.DataFrame(out, columns=CROSSOVER_COLUMNS)


def _crossing(batches: Sequence[int], diff: Sequence[float]) -> float:
    """The first batch where ``diff`` (measured at ``batches``, ascending) is 0, linear in
    log batch between two measured sizes of opposite sign; NaN if it never changes sign."""
    for i, d in enumerate(diff):
        if d == 0:
            return float(batches[i])
        if i + 1 < len(diff) and d * diff[i + 1] < 0:
            lo, hi = math.log(batches[i]), math.log(batches[i + 1])
            return math.exp(lo + (hi - lo) * d / (d - diff[i + 1]))
    return math.nan


def _mb(value: float) -> str:
    return f"{value / 1e6:.3g} MB"


def crossover_sentences(table: pd.DataFrame, steps: pd.DataFrame) -> list[str]:
    """The crossover (``table``: :func:`crossover` of ``steps``) in words, one sentence per
    model-parallel partition; a sentence saying why there is none without both
    strategies."""
    if table.empty:
        return ["No crossover: it needs a data-parallel and a model-parallel run on the same "
                "workers."]
    out = []
    data_bytes = table.groupby("workers", sort=False)["data_bytes_per_step"].first()
    for workers, moved in data_bytes.items():
        out.append(f"Data parallelism on {workers} workers moves every weight gradient each "
                   f"step: {_mb(moved)} whatever the batch.")
    for row in table.itertuples(index=False):
        text = (f"Model parallelism ({row.partition}) moves activations forward and errors "
                f"backward, {row.bytes_per_row / 1e3:.3g} kB per row of the batch: fewer "
                f"bytes than data parallelism below a batch of "
                f"{row.bytes_crossover_batch:.0f} rows, more above.")
        batches = [int(b) for b in row.batches.split(",") if b]
        if not math.isnan(row.seconds_crossover_batch):
            text += (f" Its measured seconds per step equal data parallelism's at a batch of "
                     f"about {row.seconds_crossover_batch:.0f} (interpolated in log batch).")
        elif batches:
            mine = steps[(steps["strategy"] == "model") & (steps["partition"] == row.partition)
                         & (steps["workers"] == row.workers)]
            data = steps[(steps["strategy"] == "data") & (steps["workers"] == row.workers)]
            slower = (mine.groupby("batch")["seconds"].median()
                      > data.groupby("batch")["seconds"].median()).reindex(batches).all()
            text += (f" Its measured seconds per step do not cross data parallelism's between "
                     f"batches {batches[0]} and {batches[-1]}: it is "
                     f"{'slower' if slower else 'faster'} at every batch measured.")
        out.append(text)
    return out


def training_markdown(steps: pd.DataFrame, figure: str | None = None,
                      figure_missing: str = "") -> str:
    """The training report: :func:`summarise`'s table, :func:`crossover`'s, the crossover
    in words, and ``figure`` (a PNG's path relative to the report) embedded, or
    ``figure_missing`` said in its place."""
    table = crossover(steps)
    shown = table.assign(
        data_mb_per_step=table["data_bytes_per_step"] / 1e6,
        kb_per_row=table["bytes_per_row"] / 1e3,
        bytes_crossover_batch=table["bytes_crossover_batch"].round(1),
        seconds_crossover_batch=table["seconds_crossover_batch"].round(1))
    lines = [
        "# Training steps: serial, data and model parallelism, hybrid", "",
        "Median seconds per step over the timed steps of each batch size (after an untimed "
        "one), against the serial compiled step, and MB moved between workers per step; "
        f"every step's loss checked against the serial step's (within {LOSS_RTOL:g}).", "",
        to_markdown(summarise(steps)), "",
        "## Bytes moved: data against model parallelism", "",
        *(line for sentence in crossover_sentences(table, steps) for line in (sentence, "")),
    ]
    if len(table):
        lines += [to_markdown(shown, ["strategy", "partition", "workers", "data_mb_per_step",
                                      "kb_per_row", "bytes_crossover_batch", "batches",
                                      "seconds_crossover_batch"]), "",
                  "`bytes_crossover_batch`: the batch at which model parallelism's bytes per "
                  "step equal data parallelism's; `seconds_crossover_batch`: where their "
                  "median seconds per step do (interpolated in log batch; empty if they do "
                  "not cross between the batches measured).", ""]
    if figure:
        lines += [f"![bytes and seconds per step against the batch]({figure})", ""]
    elif figure_missing:
        lines += [figure_missing, ""]
    return "\n".join(lines)


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
    workers = len(client.scheduler_info()["workers"])
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


def digits_steps(epochs: pd.DataFrame, rows: int) -> pd.DataFrame:
    """:func:`compare_digits`' epochs (of one or more batch sizes, ``rows`` training rows)
    as what :func:`crossover` reads: per epoch, the mean seconds and bytes of a step
    (an epoch's are ``ceil(rows / batch)`` steps). The first epoch of each run is left
    out when there are more (its seconds include the workers' first calls)."""
    later = epochs[epochs["epoch"] > 1] if (epochs["epoch"] > 1).any() else epochs
    per_epoch = np.ceil(rows / later["batch"].to_numpy(float))
    return later.assign(seconds=later["seconds"] / per_epoch,
                        bytes_moved=later["bytes_moved"] / per_epoch)
