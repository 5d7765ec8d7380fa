"""The serial reference: the challenge recurrence, and PASS/FAIL on the official data."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.core.network import Network
from sdnn_dask.core.reference import categories, check_categories, infer_reference


def test_official_rows_1_to_1200_give_the_truth(official_network, official_inputs,
                                                 official_truth):
    result = infer_reference(official_network, official_inputs)
    check = check_categories(result.categories, official_truth)
    assert check.passed, str(check)
    assert len(result.categories) == 19
    assert result.trace["rows_out"].iloc[-1] == 19
    assert list(result.trace["rows_out"].iloc[:8]) == [1098, 786, 415, 195, 98, 56, 31, 22]


def test_recurrence_by_hand():
    # W = [[1, 1], [0, -1]]; Y = [[1, 1], [0, 2], [2, 2]]; bias -0.5; ymax 2.5
    w = sp.csr_matrix(np.array([[1.0, 1.0], [0.0, -1.0]]))
    net = Network([w], bias=-0.5, ymax=2.5)
    y = sp.csr_matrix(np.array([[1.0, 1.0], [0.0, 2.0], [2.0, 2.0]]))
    out = infer_reference(net, y).output.toarray()
    # Z = [[1, 0], [0, -2], [2, 0]]: the zeros get no bias, 1-0.5=0.5, 2-0.5=1.5, -2.5 -> 0
    np.testing.assert_allclose(out, [[0.5, 0.0], [0.0, 0.0], [1.5, 0.0]])
    assert categories(out).tolist() == [0, 2]


def test_bias_only_on_nonzeros_and_clamp():
    net = Network([sp.identity(3, format="csr") * 10.0], bias=np.array([1.0, 1.0, 1.0]),
                  ymax=32)
    out = infer_reference(net, sp.csr_matrix([[0.0, 2.0, 5.0]])).output.toarray()
    np.testing.assert_allclose(out, [[0.0, 21.0, 32.0]])  # 0 stays 0 (no bias), 51 -> 32


def test_check_reports_fail():
    check = check_categories(np.array([1, 2, 3]), np.array([2, 3, 4]))
    assert not check.passed and check.verdict == "FAIL"
    assert check.missing.tolist() == [4] and check.extra.tolist() == [1]
    assert "1 missing" in str(check)
    assert check_categories(np.array([3, 1]), np.array([1, 3])).passed


def test_width_mismatch():
    net = Network([sp.identity(4, format="csr")], bias=-0.1)
    with pytest.raises(ValueError, match="4 neurons"):
        infer_reference(net, sp.csr_matrix((2, 5)))


def test_check_messages_and_one_sided_differences():
    check = check_categories(np.array([0, 1, 2, 9]), np.array([1, 2, 3, 4]))
    assert str(check) == ("FAIL: 4 categories, truth has 4; 2 missing (first: [4, 5]), "
                          "2 extra (first: [1, 10]), as 1-based row ids")
    assert str(check_categories(np.array([5]), np.array([5]))) == "PASS: 1 categories, truth has 1"
    only_extra = check_categories(np.array([0, 1, 2]), np.array([0, 1]))
    only_missing = check_categories(np.array([0]), np.array([0, 1]))
    assert not only_extra.passed and only_extra.extra.tolist() == [2]
    assert not only_missing.passed and only_missing.missing.tolist() == [1]
    with pytest.raises(AttributeError):  # a verdict cannot be edited after the fact
        check.passed = True


def test_trace_and_timing_are_consistent():
    net = Network([sp.identity(4, format="csr", dtype=np.float32) * 2] * 3, bias=-1.0, ymax=32)
    y = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 3, 0, 1]], dtype=np.float32))
    start = time.perf_counter()
    result = infer_reference(net, y)
    elapsed = time.perf_counter() - start
    assert result.trace["layer"].tolist() == [1, 2, 3]
    assert result.trace["rows_out"].tolist() == [2, 2, 2]
    assert result.trace["nnz_out"].tolist() == [3, 3, 3]
    # the clock brackets the layers: every layer's time is inside the run's, inside the call
    assert (result.trace["seconds"] >= 0).all()
    assert result.trace["seconds"].sum() <= result.seconds <= elapsed
    assert "trace" not in repr(result)  # the table stays out of the repr


def test_width_mismatch_message():
    net = Network([sp.identity(4, format="csr")], bias=-0.1)
    with pytest.raises(ValueError, match=r"^inputs have 5 columns, the network has 4 neurons$"):
        infer_reference(net, sp.csr_matrix((2, 5)))


def test_check_message_lists_the_first_five():
    check = check_categories(np.arange(10, 17), np.arange(0, 7))  # 7 missing, 7 extra
    assert "7 missing (first: [1, 2, 3, 4, 5])" in str(check)
    assert "7 extra (first: [11, 12, 13, 14, 15])" in str(check)
