"""Checks shared by the test suite and by users testing their own strategies."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .core.reference import Inference
from .core.result import RunResult, compare_outputs


def assert_same_result(
    result: RunResult | sp.spmatrix,
    reference: RunResult | Inference | sp.spmatrix,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> None:
    """Assert a result equals the serial reference: same categories, values to tolerance.

    Raises
    ------
    AssertionError
        With the categories found only on one side and the largest difference.
    """
    def matrix(x):
        return x.output if isinstance(x, RunResult | Inference) else x

    agreement = compare_outputs(matrix(result), matrix(reference), rtol=rtol, atol=atol)
    label = repr(result) if isinstance(result, RunResult) else "result"
    assert agreement.same_categories, f"{label}: categories differ: {agreement.detail}"
    assert agreement.max_abs_diff <= agreement.tolerance, (
        f"{label}: values differ by {agreement.max_abs_diff:.3g} > {agreement.tolerance:.3g}"
    )


def assert_categories(found: np.ndarray, expected: np.ndarray) -> None:
    """Assert two category sets are equal, showing (1-based) what differs."""
    found, expected = np.unique(found), np.unique(expected)
    missing = np.setdiff1d(expected, found) + 1
    extra = np.setdiff1d(found, expected) + 1
    assert not len(missing) and not len(extra), (
        f"categories differ: missing {missing[:10].tolist()}, extra {extra[:10].tolist()} "
        "(1-based)"
    )
