"""Timing records: the documented schema, atomic appends, and the report built from them."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from sdnn_dask import records, report
from sdnn_dask.parallel import run_serial
from sdnn_dask.radixnet import make_inputs, make_network


@pytest.fixture(scope="module")
def serial_runs():
    net = make_network(1024, 6, seed=0)
    inputs = make_inputs(200, 1024, seed=0)
    return [run_serial(net, inputs, "reference"), run_serial(net, inputs, "kernel")]


def test_schema_is_documented_and_complete(serial_runs):
    frame = records.run_records(serial_runs[0], study="s1", check="PASS", max_abs_diff=0.0)
    assert list(frame.columns) == records.RUN_COLUMNS
    for column in records.RUN_COLUMNS:  # every column is explained in the module docstring
        assert column in records.__doc__, column
    row = frame.iloc[0]
    assert row["strategy"] == "reference" and row["inputs"] == 200
    assert row["edges"] == 6 * 32 * 1024
    assert row["edges_per_s"] == pytest.approx(200 * row["edges"] / row["wall_s"])
    assert "numpy=" in row["versions"] and "dask=" in row["versions"]
    layers = records.layer_records(serial_runs[1], study="s1")
    assert list(layers.columns) == records.LAYER_COLUMNS and len(layers) == 6


def test_append_and_read(tmp_path, serial_runs):
    path = tmp_path / "results" / records.RECORDS_FILE
    for run in serial_runs:
        records.append_records(records.run_records(run, study="s1", check="PASS"), path)
    back = records.read_records(tmp_path / "results")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # as a plain open() would make it
    assert back["strategy"].tolist() == ["reference", "kernel"]
    assert list(back.columns) == records.RUN_COLUMNS


def test_interrupted_append_leaves_the_old_file(tmp_path, serial_runs, monkeypatch):
    path = tmp_path / records.RECORDS_FILE
    records.append_records(records.run_records(serial_runs[0], study="s1"), path)
    before = path.read_bytes()

    def broken_to_csv(self, target, *args, **kwargs):
        with open(target, "w") as handle:
            handle.write("half a tab")
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", broken_to_csv)
    with pytest.raises(KeyboardInterrupt):
        records.append_records(records.run_records(serial_runs[1], study="s1"), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [records.RECORDS_FILE]


def test_read_missing_records(tmp_path):
    with pytest.raises(FileNotFoundError, match="no records yet"):
        records.read_records(tmp_path)


def _fake(study, strategy, partition, wall, blocks=1, check="PASS"):
    return pd.DataFrame({
        "study": study, "run_id": f"{study}-{strategy}-{partition}-{wall}", "time": "t",
        "strategy": strategy, "partition": partition, "network": "n", "neurons": 1024,
        "layers": 120, "edges": 100, "inputs": 10, "workers": blocks, "blocks": blocks,
        "block": range(blocks), "compute_s": wall, "wall_s": wall,
        "edges_per_s": 1000 / wall, "imbalance": 1.0, "survivor_imbalance": 1.0,
        "check": check, "check_against": "reference", "max_abs_diff": 0.0, "params": "",
    })


def test_comparison_normalises_to_the_baseline_of_the_latest_study():
    table = pd.concat([
        _fake("a", "reference", "none", 100.0),  # an older study: ignored
        _fake("b", "reference", "none", 10.0),
        _fake("b", "kernel", "none", 4.0),
        _fake("b", "data", "hash", 2.0, blocks=2),
        _fake("b", "data", "hash", 3.0, blocks=2),
        _fake("b", "data", "block", 5.0, blocks=2, check="FAIL"),
    ])
    cmp = report.comparison(table).set_index(["strategy", "partition"])
    assert cmp.loc[("reference", "none"), "speedup"] == 1.0
    assert cmp.loc[("data", "hash"), "repeats"] == 2
    assert cmp.loc[("data", "hash"), "seconds"] == 2.5  # median of the repeats
    assert cmp.loc[("data", "hash"), "speedup"] == 4.0
    assert cmp.loc[("data", "hash"), "vs_kernel"] == pytest.approx(1.6)
    assert cmp.loc[("data", "block"), "check"] == "FAIL"
    text = report.summary_markdown(table)
    assert "| data | hash |" in text and "study: `b`" in text
    assert report.to_text(report.comparison(table)).count("\n") == 5


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    table = pd.concat([_fake("b", "reference", "none", 10.0), _fake("b", "kernel", "none", 4.0)])
    path = report.plot_comparison(table, tmp_path / "cmp.png")
    assert path.stat().st_size > 1000
    assert np.frombuffer(path.read_bytes()[:4], dtype=np.uint8).tolist() == [137, 80, 78, 71]


def test_communication_per_layer_from_the_records(tmp_path):
    """report.communication: MB per layer of the latest study's model runs, from layers.csv."""
    from sdnn_dask import report

    records = pd.DataFrame({
        "study": ["s1"] * 3, "run_id": ["a", "b", "c"], "time": ["t"] * 3,
        "strategy": ["model", "model", "data"], "partition": ["block"] * 3,
        "network": ["n"] * 3, "neurons": [4] * 3, "layers": [2] * 3, "edges": [8] * 3,
        "inputs": [3] * 3, "workers": [2] * 3, "blocks": [2] * 3, "wall_s": [1.0] * 3,
        "edges_per_s": [24.0] * 3, "imbalance": [1.0] * 3, "survivor_imbalance": [1.0] * 3,
        "check": ["PASS"] * 3, "check_against": ["reference"] * 3, "max_abs_diff": [0.0] * 3,
        "params": [""] * 3, "compute_s": [0.5] * 3,
    })
    layers = pd.DataFrame({
        "run_id": ["a", "a", "a", "a", "b", "b", "b", "b", "c", "c"],
        "block": [0, 1, 0, 1, 0, 1, 0, 1, 0, 0],
        "layer": [1, 1, 2, 2, 1, 1, 2, 2, 1, 2],
        "bytes_in": [1e6, 2e6, 0, 1e6, 3e6, 2e6, 0, 3e6, 0, 0],
        "columns_in": [4, 4, 2, 2, 4, 4, 2, 2, 0, 0],
    })
    table = report.communication(records, layers)
    assert table[["layer", "mb_moved", "columns_in"]].values.tolist() == [
        [1, 4.0, 8], [2, 2.0, 4]]  # medians of runs a (3, 1 MB) and b (5, 3 MB)
    pytest.importorskip("matplotlib")
    assert report.plot_communication(records, layers, tmp_path / "c.png").stat().st_size > 0
    assert report.plot_communication(records[records.strategy == "data"], layers,
                                     tmp_path / "d.png") is None
