"""Checking runs on a sample of their rows (a problem's ``check_rows``), for networks whose
float64 reference of every row would take hours (issue 35's challenge table)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.core.kernels import KernelSettings, forward_block
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.study import ProblemSpec, StudyError
from sdnn_dask.study.sampling import SampledCheck
from sdnn_dask.study.validation import digest


@pytest.fixture(scope="module")
def problem():
    net = make_network(1024, 40, seed=2)
    x = make_inputs(2000, 1024, seed=2)
    out = forward_block(net, x, settings=KernelSettings.resolve(dedup=True)).to_csr()
    return net, x, out


def test_a_right_output_passes_on_a_sample_with_survivors(problem):
    net, x, out = problem
    check = SampledCheck(net, x, rows=64, seed=1)
    rows = check.sample(out)
    survivors = np.flatnonzero(np.diff(out.indptr))
    assert 64 <= len(rows) <= 72 and np.isin(rows, survivors).sum() >= 8
    passed, diff, n = check.verify(out, dedup=True)
    assert passed and n == len(rows) and diff < 1e-3
    assert check.verify(out.copy(), dedup=False)[0]
    assert len(check._references) == 1  # the same survivors: the same sample, once


def test_a_wrong_survivor_fails(problem):
    net, x, out = problem
    wrong = out.copy()
    wrong.data *= np.float32(1.01)  # every survivor off by 1%
    assert not SampledCheck(net, x, rows=64).verify(wrong, dedup=False)[0]


def test_a_survivor_killed_fails_when_drawn(problem):
    net, x, out = problem
    dead = sp.csr_matrix(out.shape, dtype=np.float32)  # every row killed
    passed, _, _ = SampledCheck(net, x, rows=400).verify(dead, dedup=False)
    assert not passed  # 400 random rows of 2000 hold survivors (3% survive)


def test_check_rows_is_a_positive_integer_and_keeps_old_keys():
    with pytest.raises(StudyError, match="check_rows must be a positive integer"):
        ProblemSpec(1024, 120, check_rows=0)
    spec = ProblemSpec(1024, 120, inputs=500)
    fields = dataclasses.asdict(spec)
    del fields["check_rows"]
    assert spec.key() == digest(fields)  # recorded studies resume
    assert ProblemSpec(1024, 120, inputs=500, check_rows=10).key() != spec.key()


def test_a_study_checks_its_runs_on_samples(tmp_path, capsys):
    import pandas as pd
    from cli_run import run

    study = tmp_path / "s.yaml"
    study.write_text("name: sampled\nworkers: 1\nproblems:\n"
                     "  - {neurons: 1024, layers: 30, inputs: 600, check_rows: 32}\n"
                     "runs:\n  - {strategy: kernel, dedup: [true, false]}\n"
                     "  - {strategy: data, partition: block}\n")
    code, err = run(["study", str(study), "--results", str(tmp_path / "out"), "-q"], capsys)
    assert code == 0, err
    records = pd.read_csv(tmp_path / "out" / "records.csv", keep_default_na=False)
    assert set(records["check_against"]) == {"sample"} and set(records["check"]) == {"PASS"}
    assert sorted(records["dedup"]) == ["off", "on", "on"]
