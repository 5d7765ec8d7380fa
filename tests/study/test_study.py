"""The study library: run specs, compare, YAML studies, their validation, resume after a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pytest

from sdnn_dask import records, study
from sdnn_dask.core.reference import infer_reference
from sdnn_dask.study import ProblemSpec, RunSpec, Study, StudyError

# --------------------------------------------------------------------------- run specs


def test_spec_defaults_make_equal_runs_equal_keys():
    assert RunSpec("data").partition == "block"
    assert RunSpec("kernel").key() == RunSpec("kernel", "none", workers=1).key()
    assert RunSpec("model").transport == "direct" and RunSpec("model").row_groups == 1
    assert RunSpec("hybrid").row_groups == 2
    assert RunSpec("model", "hypergraph").epsilon == 0.03
    # the seed matters only where something is random
    assert RunSpec("data", "block", seed=3).key() == RunSpec("data", "block").key()
    assert RunSpec("data", "random", seed=3).key() != RunSpec("data", "random").key()
    assert RunSpec("data", "hash", workers=1).key() != RunSpec("data", "hash", workers=2).key()
    # a data run merges a worker's blocks unless told not to
    assert RunSpec("data").merge is True and RunSpec("model").merge is None
    assert RunSpec("data", merge=False).key() != RunSpec("data").key()
    assert RunSpec("data", merge=True).key() == RunSpec("data").key()
    assert "alone" in RunSpec("data", merge=False).label.split()
    keys = {RunSpec(s, p).key() for s in ("data", "model") for p in ("block", "hash", "random")}
    assert len(keys) == 6 and all(len(k) == 12 for k in keys)


@pytest.mark.parametrize("kwargs, message", [
    ({"strategy": "modle"}, "did you mean 'model'"),
    ({"strategy": "data", "partition": "hypergraph"}, "takes partition block | hash | random"),
    ({"strategy": "data", "transport": "direct"}, "transport does not apply to data"),
    ({"strategy": "model", "row_groups": 2}, "use strategy hybrid"),
    ({"strategy": "model", "blocks": 4}, "blocks does not apply to model"),
    ({"strategy": "kernel", "workers": 2}, "uses one worker"),
    ({"strategy": "model", "transport": "grpah"}, "did you mean 'graph'"),
    ({"strategy": "data", "workers": 0}, "workers must be a positive integer"),
    ({"strategy": "model", "partition": "block", "epsilon": 0.1}, "epsilon applies to"),
    ({"strategy": "data", "partition": "block", "nbuckets": 2}, "nbuckets applies to"),
    ({"strategy": "model", "placement": "dynamic"}, "placement applies to data"),
    ({"strategy": "data", "placement": "dynamc"}, "did you mean 'dynamic'"),
    ({"strategy": "model", "merge": False}, "merge applies to data"),
    ({"strategy": "data", "merge": 1}, "merge must be true or false"),
])
def test_impossible_specs_are_refused(kwargs, message):
    with pytest.raises(StudyError, match=message):
        RunSpec(**kwargs)


# --------------------------------------------------------------------------- study files


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_study_file_expands_to_its_grid(tmp_path):
    path = _write(tmp_path, """
        name: grid
        repeats: 2
        problems:
          - {neurons: 1024, layers: [6, 12], inputs: 300}
        runs:
          - {strategy: [reference, kernel]}
          - {strategy: data, partition: [block, hash], workers: [1, 2]}
          - {strategy: model, partition: block, transport: [direct, graph]}
          - {strategy: data, partition: block, workers: 1}   # a duplicate: run once
    """)
    grid = Study.from_yaml(path)
    assert grid.name == "grid" and grid.repeats == 2
    assert [p.layers for p in grid.problems] == [6, 12]
    assert len(grid.specs) == 2 + 4 + 2
    assert grid.total == 2 * 8 * 2 == len(list(grid.plan()))
    # serial runs first in every repeat of every problem
    first = [s.strategy for _, r, s in list(grid.plan())[:8]]
    assert first[:2] == ["reference", "kernel"]


@pytest.mark.parametrize("text, message", [
    ("runs: [{strategy: data, partitoin: hash}]",
     r"s.yaml: runs\[0\]: unknown key 'partitoin' \(did you mean 'partition'\?\)"),
    ("repeat: 2\nruns: [{strategy: kernel}]", r"unknown key 'repeat' \(did you mean 'repeats'"),
    ("runs: [{strategy: data, workers: two}]", r"runs\[0\]: workers must be an integer, got 'two'"),
    ("problems: [{neurons: 1000}]\nruns: [{strategy: kernel}]", r"problems\[0\]: .*1000"),
    ("problems: [{neurons: 1024, inputs: 3}]\nruns: [{strategy: hybrid, row_groups: 4}]",
     "more row groups than the 3 input rows"),
    ("workers: 2\nruns: [{strategy: data, workers: [1, 2, 3]}]", "the study's cluster has 2"),
    ("runs: [{partition: hash}]", r"runs\[0\]: every run entry names a strategy"),
    ("runs: []", "give at least one run entry"),
    ("repeats: 0\nruns: [{strategy: kernel}]", "repeats: must be >= 1"),
    ("runs: [{strategy: kernel}]\nrepeats: [1]", "repeats: expected an integer"),
    ("runs: {strategy: kernel", r"s.yaml, line \d+: not valid YAML"),
    ("- just a list", "a study is a mapping"),
])
def test_bad_study_files_fail_before_anything_runs(tmp_path, text, message):
    with pytest.raises(StudyError, match=message):
        Study.from_yaml(_write(tmp_path, text))


def test_relative_paths_are_relative_to_the_study_file(tmp_path):
    (tmp_path / "sub").mkdir()
    path = _write(tmp_path / "sub", "problems: [{data: ../challenge, truth: /abs/t.tsv}]\n"
                                    "runs: [{strategy: kernel}]")
    [problem] = Study.from_yaml(path).problems
    assert problem.data == str(tmp_path / "challenge") and problem.truth == "/abs/t.tsv"


def test_a_problem_is_checked_when_it_is_made():
    with pytest.raises(StudyError, match="neurons must be one of 1024, 4096"):
        ProblemSpec(neurons=1000)
    with pytest.raises(StudyError, match="layers must be a positive integer"):
        ProblemSpec(layers=0)
    assert ProblemSpec().key() == ProblemSpec(1024, 120).key() != ProblemSpec(4096).key()


def test_the_shipped_studies_are_valid():
    root = Path(__file__).resolve().parents[2] / "studies"
    files = sorted(root.glob("*.yaml"))
    assert files, "studies/ ships study files"
    for path in files:
        grid = Study.from_yaml(path)
        assert grid.total > 0 and grid.name


# --------------------------------------------------------------------------- the problem


def test_load_problem_takes_the_layers_a_folder_holds(tmp_path):
    from sdnn_dask.data import io
    from sdnn_dask.data.images import make_inputs
    from sdnn_dask.data.radixnet import make_network

    net = make_network(1024, 3)
    io.write_weights(tmp_path, net.layers)
    io.write_inputs(tmp_path / "sparse-images-1024.tsv", make_inputs(50, 1024))
    said = []
    problem = study.load_problem(neurons=1024, layers=120, data=str(tmp_path), cache=False,
                                 progress=said.append)
    assert problem.network.n_layers == 3 and problem.spec.layers == 3
    assert any("holds layers 1-3 of N = 1024, not 120: running 3 layers" in m for m in said)
    with pytest.raises(StudyError, match="no layer file of N = 4096"):
        study.load_problem(neurons=4096, data=str(tmp_path))
    with pytest.raises(StudyError, match="no such folder"):
        study.load_problem(data=str(tmp_path / "missing"))


def test_a_problem_made_by_hand_is_keyed_by_its_inputs(small_problem):
    rows = small_problem.inputs
    reordered = study.Problem(small_problem.network, rows[::-1].tocsr(), None, "by hand")
    same = study.Problem(small_problem.network, rows.copy(), None, "by hand")
    assert reordered.key() != same.key() == study.Problem(small_problem.network, rows, None,
                                                          "again").key()


def test_tiling_repeats_rows_and_truth(tmp_path):
    problem = study.load_problem(neurons=1024, layers=6, inputs=40, tile=3)
    assert problem.inputs.shape == (120, 1024)
    assert (problem.inputs[:40] != problem.inputs[80:]).nnz == 0


# --------------------------------------------------------------------------- compare


@pytest.fixture(scope="module")
def small_problem():
    return study.load_problem(neurons=1024, layers=12, inputs=800, seed=1)


def test_compare_checks_every_run_against_the_reference(client, small_problem):
    specs = [RunSpec("reference"), RunSpec("kernel"), RunSpec("data", "hash", workers=1),
             RunSpec("data", "random", seed=4), RunSpec("model", "block"),
             RunSpec("hybrid", "random", parts=2)]
    seen = []
    found = study.compare(small_problem, client, specs=specs, repeat=2, study="t",
                          on_run=lambda outcome, done, total: seen.append((done, total)))
    assert seen == [(i, 12) for i in range(1, 13)]
    runs = found.runs.drop_duplicates("run_id")
    assert len(runs) == 12 and set(runs["check"]) == {"PASS"} and found.failed.empty
    assert runs.groupby("spec").size().tolist() == [2] * 6  # two repeats of each spec
    assert sorted(runs["repeat"].tolist()) == [0] * 6 + [1] * 6
    one = found.runs[(found.runs["strategy"] == "data") & (found.runs["partition"] == "hash")]
    assert set(one["workers"]) == {1} and one["worker"].nunique() == 1  # one worker used
    assert runs.loc[runs["partition"] == "random"].groupby("strategy")["seed"].agg(set).to_dict() \
        == {"data": {4}, "hybrid": {0}}
    assert list(found.runs.columns) == records.RUN_COLUMNS
    # the records' survivors are the reference's own
    truth = infer_reference(small_problem.network, small_problem.inputs).categories
    for run_id, blocks in found.runs.groupby("run_id"):
        if blocks["strategy"].iloc[0] in ("model", "hybrid"):
            continue  # a part counts its own columns' rows
        assert blocks["survivors"].sum() == len(truth), run_id


def test_a_wrong_answer_is_recorded_as_fail(client, small_problem, monkeypatch):
    from sdnn_dask.parallel import serial

    real = serial.forward_block

    def wrong(network, inputs, **kwargs):
        out = real(network, inputs, **kwargs)
        out.values.data[:1] += 1.0
        return out

    monkeypatch.setattr(serial, "forward_block", wrong)
    found = study.compare(small_problem, client, specs=[RunSpec("kernel")], study="f")
    assert found.failed["strategy"].tolist() == ["kernel"]
    assert found.runs["check"].tolist() == ["FAIL"]


def test_kernel_settings_set_on_the_client_reach_every_strategy(client, small_problem):
    """dask.config.set in the client's process governs data and model tasks alike."""
    specs = [RunSpec("data", "block"), RunSpec("model", "block")]
    modes = {}
    for threshold in (0.0, 2.0):  # 0: every layer dense; 2: none (classes off: with
        with dask.config.set({"sdnn.kernel.dense-threshold": threshold,  # them, no choice)
                              "sdnn.kernel.classes": False}):
            found = study.compare(small_problem, client, specs=specs, study="k",
                                  warm_up=False)
        assert set(found.runs["dense_threshold"]) == {threshold}
        assert set(found.runs["classes"]) == {"off"}
        layers = found.layers.merge(found.runs[["run_id", "strategy"]].drop_duplicates(),
                                    on="run_id")
        live = layers[layers["rows_in"] > 0]
        modes[threshold] = {s: set(m) for s, m in live.groupby("strategy")["mode"]}
    assert modes[0.0] == {"data": {"dense"}, "model": {"dense"}}
    assert modes[2.0] == {"data": {"sparse"}, "model": {"sparse"}}


def test_kernel_settings_of_a_spec_govern_its_run(client, small_problem):
    specs = [RunSpec("kernel", dense_threshold=2, classes=False),
             RunSpec("data", dense_threshold=0.0, classes=False),
             RunSpec("hybrid", dense_threshold=2.0, chunk_bytes=1 << 16),
             RunSpec("data", "hash", classes=True)]
    assert specs[0].key() != RunSpec("kernel").key() and specs[0].dense_threshold == 2.0
    found = study.compare(small_problem, client, specs=specs, study="k")
    runs = found.runs.drop_duplicates("run_id")
    hashed = runs[runs["partition"] == "hash"]
    assert hashed["classes"].tolist() == ["on"] and hashed["check"].tolist() == ["PASS"]
    runs = runs[runs["partition"] != "hash"].set_index("strategy")
    # (the hybrid's unset: the configuration's, on)
    assert runs["classes"].to_dict() == {"kernel": "off", "data": "off", "hybrid": "on"}
    assert runs["dense_threshold"].to_dict() == {"kernel": 2.0, "data": 0.0, "hybrid": 2.0}
    assert runs.loc["hybrid", "chunk_bytes"] == 1 << 16 and set(runs["check"]) == {"PASS"}
    layers = found.layers.merge(found.runs[["run_id", "strategy"]].drop_duplicates(),
                                on="run_id")
    live = layers[(layers["rows_in"] > 0) & ~layers["run_id"].isin(hashed["run_id"])]
    assert {s: set(m) for s, m in live.groupby("strategy")["mode"]} == {
        "kernel": {"sparse"}, "data": {"dense"}, "hybrid": {"sparse"}}
    with pytest.raises(StudyError, match="the reference recurrence has none"):
        RunSpec("reference", dense_threshold=1.0)


def test_a_spec_the_cluster_cannot_run_fails_before_any_run(client, small_problem):
    with pytest.raises(StudyError, match="workers 3, but the cluster has 2"):
        study.compare(small_problem, client, specs=[RunSpec("kernel"),
                                                    RunSpec("data", workers=3)])


# --------------------------------------------------------------------------- studies


def test_a_study_records_each_run_and_resumes(client, tmp_path):
    path = _write(tmp_path, """
        name: tiny
        repeats: 2
        problems: [{neurons: 1024, layers: 6, inputs: 300}]
        runs:
          - {strategy: kernel}
          - {strategy: data, partition: [block, hash]}
    """)
    grid = Study.from_yaml(path)
    results = tmp_path / "results"
    first = grid.run(client, results, bar=False)
    keys = records.recorded_keys(results)
    assert len(keys) == 6 == first.runs["run_id"].nunique()
    assert {p.name for p in results.iterdir()} >= {"runs", "layers", "records.csv",
                                                   "layers.csv", "summary.md"}
    csv = pd.read_csv(results / "records.csv")
    assert csv["run_id"].nunique() == 6 and set(csv["study"]) == {"tiny"}
    with pytest.raises(StudyError, match="already holds 6 recorded run"):
        grid.run(client, results, bar=False)
    stamps = {p.name: p.stat().st_mtime_ns for p in (results / "runs").iterdir()}
    again = grid.run(client, results, resume=True, bar=False)  # nothing left to run
    assert {p.name: p.stat().st_mtime_ns for p in (results / "runs").iterdir()} == stamps
    assert again.runs["run_id"].nunique() == 6


ROOT = Path(__file__).resolve().parents[2]
KILLED_STUDY = """
    name: killed
    repeats: 4
    workers: 2
    problems: [{neurons: 1024, layers: 12, inputs: 2000}]
    runs:
      - {strategy: [reference, kernel]}
      - {strategy: data, partition: [block, hash]}
      - {strategy: model, partition: block}
"""


def test_a_killed_study_resumes_with_no_run_lost_or_duplicated(tmp_path):
    path = _write(tmp_path, KILLED_STUDY)
    results = tmp_path / "results"
    command = [sys.executable, "-m", "sdnn_dask", "study", str(path), "--results",
               str(results), "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while len(records.recorded_keys(results)) < 4:  # killed mid-study, runs recorded
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the study recorded no run in time"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the client and the cluster it started
        proc.wait()
    done = records.recorded_keys(results)
    grid = Study.from_yaml(path)
    assert 4 <= len(done) < grid.total == 20
    before = {k: (results / "runs" / f"{k}.parquet").read_bytes() for k in done}
    resumed = subprocess.run([*command, "--resume"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    keys = records.recorded_keys(results)
    planned = {f"{p.key()}-{s.key()}-r{r}" for p, r, s in grid.plan()}
    assert keys == planned  # nothing lost
    # the runs recorded before the kill are kept as they were, not run again
    assert {k: (results / "runs" / f"{k}.parquet").read_bytes() for k in done} == before
    runs = records.read_records(results)
    per_run = runs.drop_duplicates("run_id")
    assert len(per_run) == 20 and per_run[["spec", "repeat"]].duplicated().sum() == 0
    assert set(per_run["check"]) == {"PASS"}
    assert not list((results / "runs").glob(".*"))  # no stale temporary file
    csv = pd.read_csv(results / "records.csv")
    assert csv["run_id"].nunique() == 20


def test_study_cli_refuses_a_folder_with_runs_without_resume(tmp_path, capsys):
    from sdnn_dask.cli import main

    path = _write(tmp_path, "runs: [{strategy: kernel}]\n"
                            "problems: [{neurons: 1024, layers: 2, inputs: 20}]")
    results = tmp_path / "r"
    assert main(["study", str(path), "--results", str(results), "-q"]) == 0
    with pytest.raises(SystemExit) as exit_info:
        main(["study", str(path), "--results", str(results), "-q"])
    assert exit_info.value.code == 2
    assert "add --resume" in capsys.readouterr().err
    assert main(["study", str(path), "--results", str(results), "-q", "--resume"]) == 0


def test_study_cli_names_the_file_of_a_bad_study(tmp_path, capsys):
    from sdnn_dask.cli import main

    path = _write(tmp_path, "runs: [{strategy: data, partition: hsah}]")
    with pytest.raises(SystemExit) as exit_info:
        main(["study", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: runs[0]: strategy data takes partition")
    assert "did you mean 'hash'" in err


def test_records_of_a_study_are_typed_in_parquet_and_csv(client, tmp_path):
    grid = Study.from_dict({"name": "typed", "problems": [{"neurons": 1024, "layers": 4,
                                                           "inputs": 100}],
                            "runs": [{"strategy": "data", "partition": "random", "seed": 7}]})
    results = tmp_path / "r"
    grid.run(client, results, bar=False)
    parquet = records.read_records(results)
    csv = records.read_records(results.parent / "r", "runs")  # the dataset, read back
    exported = pd.read_csv(results / "records.csv")
    assert parquet["seed"].dtype == "Int64" and parquet["seed"].tolist() == [7, 7]
    assert exported["seed"].tolist() == [7, 7] and "params" not in exported
    assert parquet.equals(csv)
    assert np.isfinite(parquet["wall_s"]).all()


def test_a_study_on_the_official_files_checks_against_the_truth(client, tmp_path,
                                                                 shared_data):
    """Real challenge files: the first 300 official rows, tiled twice, truth subset and
    tiled with them; every run PASSes against the truth categories."""
    grid = Study.from_dict({"name": "official", "problems": [{
        "neurons": 1024, "layers": 120, "data": str(shared_data), "inputs": 300, "tile": 2,
        "inputs_file": str(shared_data / "sparse-images-1024-rows1-1200.tsv.gz")}],
        "runs": [{"strategy": "kernel"}, {"strategy": "data", "partition": "hash"}]})
    found = grid.run(client, tmp_path / "r", bar=False, report=False)
    runs = found.runs.drop_duplicates("run_id")
    assert set(runs["check"]) == {"PASS"} and set(runs["check_against"]) == {"truth"}
    assert set(runs["inputs"]) == {600} and set(runs["source"]) == {str(shared_data)}
    problem = study.load_problem(grid.problems[0])
    from sdnn_dask.data import io

    truth = io.read_categories(shared_data / "neuron1024-l120-categories.tsv.gz")
    first = truth[truth < 300]
    assert problem.truth.tolist() == [*first.tolist(), *(first + 300).tolist()]


def test_a_problem_with_official_like_row_order():
    problem = study.load_problem(neurons=1024, layers=2, inputs=500, seed=3,
                                 order="official-like")
    from sdnn_dask.data.images import make_inputs

    assert (problem.inputs != make_inputs(500, 1024, seed=3, order="official-like")).nnz == 0
    assert "official-like row order" in problem.source
    assert ProblemSpec(order="iid").key() != ProblemSpec().key()
    assert ProblemSpec().order == "official-like"  # the generator's default
    iid = study.load_problem(neurons=1024, layers=2, inputs=500, seed=3, order="iid")
    assert (iid.inputs != make_inputs(500, 1024, seed=3, order="iid")).nnz == 0
    assert "iid row order" in iid.source
    with pytest.raises(StudyError, match="did you mean 'official-like'"):
        ProblemSpec(order="oficial-like")
