"""``sdnn-dask train``: training steps (and the report) and digits epochs under every
strategy, checked against the serial run."""

from __future__ import annotations

import pandas as pd
import pytest

from sdnn_dask.cli import Progress, main
from sdnn_dask.cli.train import _write_training
from sdnn_dask.report.training import digits_steps
from sdnn_dask.study.training_comparison import DIGITS_COLUMNS, STEP_COLUMNS


def test_train_runs_every_strategy_and_records_each_step(tmp_path, capsys):
    code = main(["train", "-L", "3", "--batches", "16,40", "--steps", "2", "--model",
                 "block,hash", "--workers", "2", "--results", str(tmp_path), "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    steps = pd.read_csv(tmp_path / "training.csv")
    assert list(steps.columns) == STEP_COLUMNS
    configs = set(zip(steps["strategy"], steps["partition"], strict=True))
    assert configs == {("serial", "none"), ("data", "block"), ("model", "block"),
                       ("model", "hash"), ("hybrid", "block"), ("hybrid", "hash")}
    groups = steps.groupby("strategy")["row_groups"].unique()
    assert {s: list(g) for s, g in groups.items()} == {"serial": [1], "data": [2],
                                                       "model": [1], "hybrid": [2]}
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
    hybrid = steps[steps["strategy"] == "hybrid"]
    # activations and errors as the model-parallel run's, plus a gradient per extra
    # row group (within the workers here: 2 x 2 slots on 2 workers), none across workers
    assert (hybrid["bytes_moved"].to_numpy() == model["bytes_moved"].to_numpy()).all()
    for line in ("serial", "data", "model", "hybrid"):
        assert any(row.startswith(line) and row.endswith("PASS") for row in out.splitlines())
    # the report: the crossover said, printed and in training.md, the figure beside it
    assert "whatever the batch" in out and "below a batch of" in out
    text = (tmp_path / "training.md").read_text()
    assert "| strategy | partition | workers | row_groups | batch | seconds |" in text
    assert text.count("Model parallelism (") == 2  # block and hash
    assert "![bytes and seconds per step against the batch](training.png)" in text
    assert (tmp_path / "training.png").read_bytes().startswith(b"\x89PNG")


def test_train_digits_writes_every_epoch(tmp_path, capsys):
    pytest.importorskip("sklearn", reason="scikit-learn not installed (pip install "
                        "'sdnn_dask[train]'): the digits are not run")
    code = main(["train", "--task", "digits", "--epochs", "1", "--model", "none",
                 "--workers", "2", "--results", str(tmp_path), "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    epochs = pd.read_csv(tmp_path / "training-epochs.csv")
    assert list(epochs.columns) == DIGITS_COLUMNS
    assert list(zip(epochs["strategy"], epochs["epoch"], strict=True)) == [("serial", 1),
                                                                          ("data", 1)]
    assert (epochs["check"] == "PASS").all()
    assert list(epochs["bytes_moved"] > 0) == [False, True]
    assert "held-out accuracy after 1 epochs:" in out
    assert any(line.strip().startswith("data block, batch 32: 0.") for line in out.splitlines())
    # issue 36 asked for the loss and accuracy plot beside the CSV
    assert sorted(p.name for p in tmp_path.iterdir()) == ["training-epochs.csv",
                                                          "training-epochs.png"]


def test_train_digits_sweeps_batches_and_says_where_strategies_cross(tmp_path, capsys):
    pytest.importorskip("sklearn", reason="scikit-learn not installed (pip install "
                        "'sdnn_dask[train]'): the digits are not run")
    code = main(["train", "--task", "digits", "--epochs", "2", "--batch", "64,256",
                 "--row-groups", "1", "--workers", "2", "--results", str(tmp_path), "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    epochs = pd.read_csv(tmp_path / "training-epochs.csv")
    assert sorted(epochs["batch"].unique()) == [64, 256]
    assert (epochs.groupby(["strategy", "batch"]).size() == 2).all()
    assert (epochs["check"] == "PASS").all()
    # data parallelism moves the same gradient a step whatever the batch, model
    # parallelism in proportion to it: the crossover is said from the epochs' steps
    steps = digits_steps(epochs, 1437)
    data = steps[steps["strategy"] == "data"].groupby("batch")["bytes_moved"].median()
    assert data[64] == pytest.approx(data[256], rel=1e-9)
    model = steps[steps["strategy"] == "model"].groupby("batch")["bytes_moved"].median()
    assert model[256] > 3 * model[64]
    assert "per step, data against model parallelism:" in out
    assert "whatever the batch" in out and "Model parallelism (block) moves" in out
    assert "data block, batch 256: 0." in out


def test_no_write_writes_nothing(tmp_path, capsys):
    folder = tmp_path / "out"
    code = main(["train", "-L", "2", "--batches", "8", "--steps", "1", "--model", "none",
                 "--workers", "2", "--results", str(folder), "--no-write", "-q"])
    assert code == 0 and "whatever the batch" not in capsys.readouterr().out
    assert not folder.exists()


def test_the_report_without_matplotlib(tmp_path, monkeypatch):
    """No figure: training.md says which extra to install, and an earlier training.png is
    removed rather than shown beside another run's tables."""
    import sdnn_dask.report.figures as figures

    def missing():
        raise ImportError(figures.EXTRA_HINT)

    monkeypatch.setattr(figures, "require_matplotlib", missing)
    (tmp_path / "training.png").write_bytes(b"an earlier run's")
    steps = pd.DataFrame(
        [("serial", "none", 1, 1, 8, 1, 0.01, 1.0, 1.0, 0, "PASS"),
         ("data", "block", 2, 2, 8, 1, 0.02, 1.0, 1.0, 1000, "PASS"),
         ("model", "block", 2, 1, 8, 1, 0.03, 1.0, 1.0, 80, "PASS")], columns=STEP_COLUMNS)
    written = _write_training(tmp_path, steps, Progress(quiet=True))
    assert [p.name for p in written] == ["training.csv", "training.md"]
    text = (tmp_path / "training.md").read_text()
    assert "pip install 'sdnn_dask[report]'" in text and "![" not in text
    assert "below a batch of 100 rows" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["training.csv", "training.md"]


@pytest.mark.parametrize("argv, message", [
    (["--model", "blok"], "unknown partition 'blok'"),
    (["--batches", "0"], "expected positive integers"),
    (["--batches", "a,b"], "expected positive integers"),
    (["--task", "dig"], "invalid choice: 'dig'"),
    (["--epochs", "2"], "--epochs: not an option of --task steps"),
    (["--task", "digits", "--batches", "8", "--steps", "2"],
     "--batches, --steps: not an option of --task digits"),
    (["--task", "digits", "--data", "."], "--data: not an option of --task digits"),
    (["--task", "digits", "-N", "4096"], "the digits are 1024 features"),
    (["--task", "digits", "--epochs", "0"], "must be >= 1"),
    (["--task", "digits", "--batch", "0"], "expected positive integers"),
    (["--lr", "0"], "error: --lr: lr must be a number in (0, 1000], got 0.0"),
    # inf in float32: every check FAILED, the serial run's against itself included
    (["--lr", "1e300"], "error: --lr: lr must be a number in (0, 1000] (past it training "
                        "diverges to NaN weights), got 1e+300"),
    (["--lr", "1001"], "error: --lr: lr must be a number in (0, 1000] (past it"),
    (["--task", "digits", "--epochs", "10001"], "error: --epochs: epochs must be an integer "
                                                "in [1, 10000], got 10001"),
    (["--task", "digits", "--epochs", str(10**20)], "error: --epochs: epochs must be an "
                                                    "integer in [1, 10000]"),
    (["--task", "digits", "--epochs", "1e20"], "'1e20' is not an integer"),
    (["--task", "digits", "--momentum", "1"], "momentum must be in [0, 1)"),
    (["--row-groups", "0"], "must be >= 1"),
    (["--batches", "4,16", "--row-groups", "5"], "the smallest batch has 4"),
    (["--task", "digits", "--batch", "2", "--row-groups", "3"], "the smallest batch has 2"),
])
def test_train_refuses_bad_options(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "-L", "2", "--no-write", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
