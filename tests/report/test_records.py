"""Timing records: the documented schema, atomic appends, and the report built from them."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from sdnn_dask import records, report
from sdnn_dask.core.result import RunResult
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import run_serial


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
        "check": check, "check_against": "reference", "max_abs_diff": 0.0,
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
        "compute_s": [0.5] * 3,
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


def _hand_made_run(**overrides) -> RunResult:
    """A three-worker, four-block run whose derived columns are worked out below by hand."""
    fields = dict(
        strategy="data", partition="hash",
        network={"name": "hand", "neurons": 16, "layers": 3, "edges": 12345},
        n_inputs=1000, n_workers=3, n_blocks=4, output=sp.csr_matrix((1000, 16)),
        wall_seconds=2.5,
        blocks=pd.DataFrame({"block": [0, 1, 2, 3], "worker": ["w0", "w1", "w2", "w0"],
                             "rows": [250] * 4, "survivors": [0, 4, 4, 8],
                             "compute_s": [1.0, 2.0, 3.0, 6.0]}),
        layers=pd.DataFrame({"block": [0, 0], "layer": [1, 2], "mode": ["sparse"] * 2,
                             "rows_in": [250, 10], "rows_out": [10, 0], "nnz_out": [30, 0],
                             "seconds": [0.25, 0.5]}),
        params={"seed": 3, "nbuckets": 2}, parts=1,
    )
    fields.update(overrides)
    return RunResult(**fields)


def test_derived_columns_against_hand_computed_values():
    frame = records.run_records(_hand_made_run(), study="s", check="PASS")
    assert len(frame) == 4 and frame["block"].tolist() == [0, 1, 2, 3]
    row = frame.iloc[0]
    assert row["edges_per_s"] == 1000 * 12345 / 2.5 == 4_938_000.0  # inputs x edges / wall
    assert row["workers"] == 3 and row["blocks"] == 4 and row["edges"] == 12345
    assert row["imbalance"] == 6.0 / 3.0  # max / mean of compute_s (mean 12/4)
    assert row["survivor_imbalance"] == 8.0 / 4.0  # max / mean of survivors (mean 16/4)
    assert row["row_groups"] == 1  # not given: one row group
    assert np.isnan(row["bytes_moved"]) and np.isnan(row["predicted_volume"])
    assert np.isnan(row["partition_s"]) and np.isnan(row["max_abs_diff"])
    assert (row["seed"], row["nbuckets"]) == (3, 2)  # typed columns, not k=v text
    assert pd.isna(row["epsilon"]) and row["row_partition"] == "" and row["spec"] == ""
    assert frame["seed"].dtype == "Int64" and frame["epsilon"].dtype == "float64"
    assert frame["strategy"].dtype == "string"
    assert list(frame.columns) == records.RUN_COLUMNS
    assert row["check"] == "PASS" and row["check_against"] == "reference"

    given = records.run_records(
        _hand_made_run(row_groups=2, bytes_moved=4096, predicted_volume=7,
                       partition_seconds=0.5), study="s", max_abs_diff=1e-6).iloc[0]
    assert (given["row_groups"], given["bytes_moved"], given["predicted_volume"],
            given["partition_s"], given["max_abs_diff"]) == (2, 4096, 7, 0.5, 1e-6)

    layers = records.layer_records(_hand_made_run(), study="s")
    assert layers["seconds"].tolist() == [0.25, 0.5]
    assert layers["study"].tolist() == ["s", "s"] and layers["bytes_in"].isna().all()


def test_versions_mark_a_missing_library(monkeypatch):
    monkeypatch.setattr(records, "_VERSIONED", ("numpy", "no-such-library-sdnn"))
    text = records.versions()
    assert text.startswith(f"numpy={np.__version__};no-such-library-sdnn=?;python=")


def test_append_to_an_empty_file_and_concatenate(tmp_path):
    path = tmp_path / records.RECORDS_FILE
    path.touch()  # left empty by an earlier crash: treated as no rows yet
    first = records.run_records(_hand_made_run(), study="s1")
    records.append_records(first, path)
    records.append_records(records.run_records(_hand_made_run(n_inputs=10), study="s2"), path)
    back = pd.read_csv(path)
    assert back["study"].tolist() == ["s1"] * 4 + ["s2"] * 4
    assert back["inputs"].tolist() == [1000] * 4 + [10] * 4


def test_records_frame_drops_empty_tables():
    empty = pd.DataFrame(columns=records.RUN_COLUMNS)
    assert list(records.records_frame([]).columns) == records.RUN_COLUMNS
    assert records.records_frame([]).empty
    one = records.run_records(_hand_made_run(), study="s")
    both = records.records_frame([empty, one, empty, one])
    assert len(both) == 8 and both.index.tolist() == list(range(8))


def test_problems_with_one_network_but_two_sources_stay_apart():
    table = pd.concat([
        _fake("b", "kernel", "none", 4.0).assign(source="generated"),
        _fake("b", "kernel", "none", 2.0).assign(source="generated, official-like order"),
        _fake("b", "data", "hash", 1.0, blocks=2).assign(source="generated"),
    ])
    cmp = report.comparison(table)
    assert sorted(cmp["network"]) == ["n [generated, official-like order]", "n [generated]",
                                      "n [generated]"]
    mine = cmp[cmp["network"] == "n [generated]"].set_index("strategy")
    assert mine.loc["kernel", "repeats"] == 1 and mine.loc["data", "vs_kernel"] == 4.0
    alone = report.comparison(table[table["source"] == "generated"])
    assert set(alone["network"]) == {"n"}  # no label needed with one source
