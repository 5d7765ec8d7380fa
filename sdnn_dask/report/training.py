"""The training report: summaries of training steps, and where data and model parallelism
cross, in tables and words.

Read from :mod:`sdnn_dask.study.training_comparison`'s rows (one per strategy, partition,
batch size and step; or, for the digits, per epoch: :func:`digits_steps`).
:func:`summarise` gives medians per batch and :func:`crossover` the batch where model
parallelism's bytes (activations and errors, proportional to the batch) equal data
parallelism's (every weight gradient, whatever the batch); :func:`training_markdown` puts
them in a report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..formatting import to_markdown

__all__ = [
    "CROSSOVER_COLUMNS",
    "crossover",
    "crossover_sentences",
    "digits_figure",
    "digits_steps",
    "summarise",
    "training_markdown",
]

#: The columns of :func:`crossover`'s rows.
CROSSOVER_COLUMNS = ["strategy", "partition", "workers", "data_bytes_per_step",
                     "bytes_per_row", "bytes_crossover_batch", "batches",
                     "seconds_crossover_batch"]


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
        :func:`~sdnn_dask.study.training_comparison.compare_training`'s rows (:data:`STEP_COLUMNS`).

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
            text += " " + _side_text(mine, data, batches)
        out.append(text)
    return out


def _side_text(mine: pd.DataFrame, data: pd.DataFrame, batches: list[int]) -> str:
    """Where model parallelism's steps (``mine``) stand against data parallelism's at
    ``batches``, whose medians do not cross: above or below only where every batch's
    spread of steps (fastest to slowest) is clear of the other's; else within noise."""
    a, b = (x.groupby("batch")["seconds"].agg(["min", "median", "max"]).reindex(batches)
            for x in (mine, data))
    slower = bool((a["median"] > b["median"]).all())
    clear = (a["min"] > b["max"]) if slower else (a["max"] < b["min"])
    where = (f"at the one batch measured ({batches[0]})" if len(batches) == 1 else
             f"at every batch measured ({batches[0]} to {batches[-1]})")
    if not clear.all():
        noisy = ", ".join(str(x) for x in clear.index[~clear.to_numpy()])
        return (f"Its median seconds per step are {'above' if slower else 'below'} data "
                f"parallelism's {where}, but within the spread of their steps at batch "
                f"{noisy}: no faster strategy can be named there.")
    return (f"Its seconds per step are {'above' if slower else 'below'} data parallelism's "
            f"{where}, every step's: it is {'slower' if slower else 'faster'}.")


def training_markdown(steps: pd.DataFrame, figure: str | None = None,
                      figure_missing: str = "", *, loss_rtol: float = 1e-3) -> str:
    """The training report: :func:`summarise`'s table, :func:`crossover`'s, the crossover
    in words, and ``figure`` (a PNG's path relative to the report) embedded, or
    ``figure_missing`` said in its place; ``loss_rtol`` is the tolerance the steps were
    checked with (:data:`sdnn_dask.study.training_comparison.LOSS_RTOL`)."""
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
        f"every step's loss checked against the serial step's (within {loss_rtol:g}).", "",
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


def digits_steps(epochs: pd.DataFrame, rows: int) -> pd.DataFrame:
    """:func:`~sdnn_dask.study.training_comparison.compare_digits`' epochs (of one or more
    batch sizes, ``rows`` training rows) as what :func:`crossover` reads: per epoch, the
    mean seconds and bytes of a step (an epoch's are ``ceil(rows / batch)`` steps). The
    first epoch of each run is left out when there are more (its seconds include the
    workers' first calls)."""
    later = epochs[epochs["epoch"] > 1] if (epochs["epoch"] > 1).any() else epochs
    per_epoch = np.ceil(rows / later["batch"].to_numpy(float))
    return later.assign(seconds=later["seconds"] / per_epoch,
                        bytes_moved=later["bytes_moved"] / per_epoch)


def digits_figure(epochs: pd.DataFrame) -> Any:
    """The digits epochs (:func:`~sdnn_dask.study.training_comparison.compare_digits`'
    rows, one or more batch sizes) as two panels against the epoch: the training loss
    (mean over the epoch's steps) and the held-out accuracy, one line per strategy,
    partition and batch, the serial run's loss dashed beneath them. Needs matplotlib
    (the ``report`` extra)."""
    try:  # not through .figures, which reads this module's crossover
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError("plots need matplotlib: pip install 'sdnn_dask[report]'") from error

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax_loss, ax_accuracy = fig.subplots(1, 2)
    for batch, rows in epochs.groupby("batch", sort=True):
        serial = rows[rows["strategy"] == "serial"]
        if serial.empty:  # the serial run's loss is on every row
            serial = rows.drop_duplicates("epoch")
        ax_loss.plot(serial["epoch"], serial["serial_loss"], "k--", lw=1,
                     label=f"serial, batch {batch}")
    for (strategy, partition, batch), rows in epochs.groupby(
            ["strategy", "partition", "batch"], sort=False):
        label = (f"{strategy}, batch {batch}" if strategy == "serial"
                 else f"{strategy} {partition}, batch {batch}")
        ax_loss.plot(rows["epoch"], rows["loss"], marker="o", ms=3, label=label)
        ax_accuracy.plot(rows["epoch"], rows["test_accuracy"], marker="o", ms=3, label=label)
    ax_loss.set(xlabel="epoch", ylabel="training loss (mean over the epoch)",
                title="Loss: every strategy against the serial run")
    ax_accuracy.set(xlabel="epoch", ylabel="held-out accuracy (360 digits)",
                    title="Held-out accuracy")
    for ax in (ax_loss, ax_accuracy):
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    ax_accuracy.legend(fontsize=8, loc="lower right")
    return fig
