"""``sdnn-dask train``: training steps under every strategy, checked against the serial step."""

from __future__ import annotations

import pandas as pd
import pytest

from sdnn_dask.cli import main
from sdnn_dask.training.compare import STEP_COLUMNS


def test_train_runs_every_strategy_and_records_each_step(tmp_path, capsys):
    code = main(["train", "-L", "3", "--batches", "16,40", "--steps", "2", "--model",
                 "block,hash", "--workers", "2", "--results", str(tmp_path), "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    steps = pd.read_csv(tmp_path / "training.csv")
    assert list(steps.columns) == STEP_COLUMNS
    configs = set(zip(steps["strategy"], steps["partition"], strict=True))
    assert configs == {("serial", "none"), ("data", "block"), ("model", "block"),
                       ("model", "hash")}
    assert sorted(steps["batch"].unique()) == [16, 40]
    assert (steps.groupby(["strategy", "partition", "batch"]).size() == 2).all()
    assert (steps["check"] == "PASS").all()
    # each step's loss is the serial step's on the same batch, to float32 rounding
    assert ((steps["loss"] - steps["serial_loss"]).abs() <= 1e-5 * steps["serial_loss"]).all()
    data = steps[steps["strategy"] == "data"]
    assert (data["bytes_moved"] == data["bytes_moved"].iloc[0]).all()  # batch-independent
    model = steps[steps["strategy"] == "model"]
    per_row = model["bytes_moved"] / model["batch"]
    assert (per_row.groupby(model["partition"]).nunique() == 1).all()  # proportional
    for line in ("serial", "data", "model"):
        assert any(row.startswith(line) and row.endswith("PASS") for row in out.splitlines())


@pytest.mark.parametrize("argv, message", [
    (["--model", "blok"], "unknown partition 'blok'"),
    (["--batches", "0"], "expected positive integers"),
    (["--batches", "a,b"], "expected positive integers"),
])
def test_train_refuses_bad_options(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "-L", "2", "--no-write", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
