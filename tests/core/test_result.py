"""RunResult's defaults and derived values, and compare_outputs, against values by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from sdnn_dask.core.result import RunResult, compare_outputs


def _run(**overrides) -> RunResult:
    fields = dict(strategy="data", partition="hash",
                  network={"name": "n", "neurons": 3, "layers": 2, "edges": 50},
                  n_inputs=4, n_workers=2, n_blocks=2,
                  output=sp.csr_matrix(np.array([[0, 1, 0], [0, 0, 0], [2, 0, 0], [0, 0, 0]],
                                                dtype=np.float32)),
                  wall_seconds=0.5, blocks=pd.DataFrame(), layers=pd.DataFrame())
    fields.update(overrides)
    return RunResult(**fields)


def test_defaults_and_derived_values():
    run = _run()
    assert run.parts == 1 and run.row_groups is None and run.transport is None
    assert run.bytes_moved is None and run.messages is None and run.params == {}
    assert len(run.run_id) == 12 and int(run.run_id, 16) >= 0 and run.run_id != _run().run_id
    assert run.edges_per_second == 4 * 50 / 0.5 == 400.0
    assert run.categories.tolist() == [0, 2]
    assert repr(run) == ("RunResult(data/hash, n, 4 inputs, 2 workers x 2 blocks, 0.500 s, "
                         "400 edges/s, 2 categories)")


def test_compare_outputs_tolerance_and_details():
    ref = sp.csr_matrix(np.array([[0, 2.0], [1.0, 0]], dtype=np.float32))
    same = compare_outputs(ref.copy(), ref)
    assert same.ok and same.max_abs_diff == 0.0
    assert same.tolerance == 1e-5 + 1e-5 * 2.0  # atol + rtol * max|reference|
    near = sp.csr_matrix(np.array([[0, 2.0 + 2.5e-5], [1.0, 0]], dtype=np.float64))
    assert compare_outputs(near, ref).ok  # 2.5e-5 <= 3e-5
    far = sp.csr_matrix(np.array([[0, 2.0 + 4e-5], [1.0, 0]], dtype=np.float64))
    agreement = compare_outputs(far, ref)
    assert agreement.same_categories and not agreement.ok
    assert abs(agreement.max_abs_diff - 4e-5) < 1e-6
    custom = compare_outputs(far, ref, rtol=0.0, atol=1e-3)
    assert custom.ok and custom.tolerance == 1e-3

    empty = sp.csr_matrix((2, 2), dtype=np.float32)
    both_empty = compare_outputs(empty, empty)
    assert both_empty.ok and both_empty.tolerance == 1e-5 and both_empty.detail == (
        "0 categories vs 0; max |diff| 0")

    shape = compare_outputs(sp.csr_matrix((3, 2)), ref)
    assert not shape.ok and not shape.same_categories and shape.tolerance == 0.0
    assert shape.max_abs_diff == float("inf") and shape.detail == "shape (3, 2) != (2, 2)"

    other = sp.csr_matrix(np.array([[0, 0], [1.0, 0]], dtype=np.float32))
    moved = compare_outputs(sp.csr_matrix(np.array([[0, 2.0], [0, 0]], dtype=np.float32)), other)
    assert not moved.ok and not moved.same_categories
    assert moved.detail == ("1 categories vs 1; max |diff| 2; only here: [1], "
                            "only in reference: [2]")  # 1-based row ids


def test_agreement_limits():
    ref = sp.csr_matrix(np.array([[0.0, 2.0]]))
    at_the_limit = compare_outputs(sp.csr_matrix(np.array([[0.0, 2.0 + 0.5]])), ref,
                                   rtol=0.0, atol=0.5)
    assert at_the_limit.max_abs_diff == at_the_limit.tolerance == 0.5 and at_the_limit.ok
    with pytest.raises(AttributeError):  # an agreement cannot be edited after the fact
        at_the_limit.max_abs_diff = 0.0
    many = sp.csr_matrix(np.eye(8)[:7])  # rows 1..7 (1-based) nonzero
    none = sp.csr_matrix((7, 8))
    detail = compare_outputs(many, none).detail
    assert detail.endswith("only here: [1, 2, 3, 4, 5], only in reference: []")
    assert compare_outputs(none, many).detail.endswith(
        "only here: [], only in reference: [1, 2, 3, 4, 5]")
