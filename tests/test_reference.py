"""The serial reference: the challenge recurrence, and PASS/FAIL on the official data."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.network import Network
from sdnn_dask.reference import categories, check_categories, infer_reference


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
