"""Identical live rows computed once (issue 35): the same bits as without, every row's
trace counted as without, and the merging seen to happen (``distinct_out``)."""

from __future__ import annotations

import dask
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from dedup_cases import assert_bitwise, several_groups
from dedup_cases import random_inputs as _inputs
from dedup_cases import random_network as _random_network
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from sdnn_dask.core.csr import take_rows
from sdnn_dask.core.kernels import (
    KernelSettings,
    finish_blocks,
    forward_block,
    forward_blocks,
    stream_blocks,
)
from sdnn_dask.core.kernels.dedup import Groups, duplicates, hash_csr, hash_dense_t
from sdnn_dask.core.kernels.forward import run_early_layers
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.parallel import DataParallelExecutor
from sdnn_dask.records import run_records

ON = KernelSettings.resolve(dedup=True)
OFF = KernelSettings.resolve(dedup=False)
COUNTED = ["layer", "rows_in", "rows_out", "nnz_out"]


def _both(network, x, **kwargs):
    on = forward_block(network, x, settings=ON, **kwargs)
    off = forward_block(network, x, settings=OFF, **kwargs)
    assert_bitwise(on.to_csr(), off.to_csr())
    assert on.trace[COUNTED].equals(off.trace[COUNTED])
    assert (off.trace["distinct_out"] == off.trace["rows_out"]).all()
    return on, off


# -- the pieces --------------------------------------------------------------------------


def test_a_row_hashes_the_same_dense_or_sparse():
    rng = np.random.default_rng(0)
    dense = rng.uniform(-1, 1, (40, 64)).astype(np.float32)
    dense[rng.random(dense.shape) < 0.6] = 0.0
    dense[3, 5] = -0.0  # a negative zero is a zero
    tile = np.ascontiguousarray(dense.T)  # neurons x rows
    csr = sp.csr_matrix(dense)
    assert np.array_equal(hash_dense_t(tile), hash_csr(csr.indptr, csr.indices, csr.data))
    twins = np.vstack([dense[:1], dense[:1]])
    csr2 = sp.csr_matrix(twins)
    h = hash_csr(csr2.indptr, csr2.indices, csr2.data)
    assert h[0] == h[1] and len(set(hash_dense_t(tile).tolist())) == 40


def test_a_hash_collision_never_merges_different_rows():
    rows = np.array([[1.0, 2.0], [1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    same = lambda i, js: np.all(rows[js] == rows[i], axis=1)  # noqa: E731
    drop, merges = duplicates(np.zeros(len(rows), np.uint64), same)  # every hash equal
    assert drop.tolist() == [False, True, False, True, True, False]
    assert [(r, m.tolist()) for r, m in merges] == [(0, [1, 3]), (2, [4])]


def test_groups_expand_several_groups_given_out_of_order():
    """Representatives as the kernel hands them over when blocks joined at different
    layers (not in id order), several groups and rows never merged between them: each
    row maps to the position of its own representative."""
    g = Groups()
    g.merge(5, np.array([8, 11]))
    g.merge(2, np.array([3]))
    g.merge(0, np.array([6]))
    g.merge(2, np.array([9]))  # a later look: 2 stands for 9 too
    reps = np.array([5, 7, 2, 0, 4])  # 7 and 4 stand for themselves
    rows, source = g.expand(reps)
    assert rows.tolist() == [0, 2, 3, 4, 5, 6, 7, 8, 9, 11]
    assert reps[source].tolist() == [0, 2, 2, 4, 5, 0, 7, 5, 2, 5]
    assert g.of(2).tolist() == [2, 3, 9] and g.of(8).tolist() == [8]


def test_groups_expand_what_they_merged():
    g = Groups()
    g.merge(4, np.array([9]))
    g.merge(2, np.array([4, 7]))  # 4 stands for 9 already
    assert g.of(2).tolist() == [2, 4, 7, 9] and g.of(5).tolist() == [5]
    rows, source = g.expand(np.array([2, 5]))
    assert rows.tolist() == [2, 4, 5, 7, 9] and source.tolist() == [0, 0, 1, 0, 0]


# -- the kernel with and without ---------------------------------------------------------


def test_radixnet_survivors_are_computed_once():
    net = make_network(1024, 40, seed=1)
    x = make_inputs(3000, 1024, seed=1)
    on, _ = _both(net, x)
    last = on.trace.iloc[-1]
    assert last["rows_out"] > 10 and last["distinct_out"] == 1  # one saturated row


@pytest.mark.parametrize(("high", "bias"), [(0.2, 0.05), (0.15, "per-neuron"),
                                            (0.25, "per-neuron")])
def test_rows_that_meet_at_different_layers(high, bias):
    """Small ymax and positive weights: rows saturate (and so meet) layer after layer,
    with a positive bias and a per-neuron one."""
    net = _random_network(2, 48, 24, bias=bias, ymax=1.0, low=0.0, high=high)
    x = _inputs(3, 600, 48, density=0.1)
    on, _ = _both(net, x)
    distinct = on.trace["distinct_out"].to_numpy()
    live = on.trace["rows_out"].to_numpy()
    merged_at = np.flatnonzero(np.diff(live - distinct) > 0) + 2  # layers where rows met
    assert len(merged_at) >= 2 and distinct[-1] < live[-1], on.trace


def test_a_saturated_row_that_is_not_a_fixed_point():
    """Mixed signs: once merged, the rows go on changing (they are not stuck at ymax), and
    every copy changes alike."""
    net = _random_network(4, 48, 30, bias=-0.05, ymax=2.0, low=-0.3, high=0.6)
    x = _inputs(5, 400, 48, density=0.1)
    on, _ = _both(net, x)
    assert (on.trace["distinct_out"] < on.trace["rows_out"]).any()
    out = on.to_csr()
    assert out.nnz and 0 < out.data.min() and (out.data < net.ymax).any()


def test_tiled_inputs_are_merged_too():
    net = make_network(1024, 12, seed=2)
    x = make_inputs(300, 1024, seed=2)
    tiled = sp.vstack([x] * 4, format="csr")
    on, _ = _both(net, tiled)
    assert on.trace["distinct_out"].iloc[-1] * 4 <= on.trace["rows_out"].iloc[-1]


def test_rows_without_duplicates_are_unchanged():
    net = _random_network(6, 48, 12, bias=-0.1, ymax=8.0, low=-0.5, high=0.6)
    on, _ = _both(net, _inputs(7, 500, 48))
    assert (on.trace["distinct_out"] == on.trace["rows_out"]).all()


def test_several_blocks_merged_and_streamed():
    """Members of one representative in several blocks: each block's rows and counts
    are its own, as without deduplication; and the streamed form in several passes."""
    net = make_network(1024, 30, seed=3)
    x = make_inputs(2000, 1024, seed=3)
    blocks = [x[:700], x[700:1300], x[1300:]]
    for run in (lambda s: forward_blocks(net, blocks, s),
                lambda s: stream_blocks(net, blocks, s, pass_rows=900)):
        ons, offs = run(ON), run(OFF)
        for on, off in zip(ons, offs, strict=True):
            assert_bitwise(on.to_csr(), off.to_csr())
            assert on.trace[COUNTED].equals(off.trace[COUNTED])
        assert any((on.trace["distinct_out"] < on.trace["rows_out"]).any() for on in ons)


def test_data_parallelism_with_and_without(client):
    net = make_network(1024, 30, seed=4)
    x = make_inputs(1500, 1024, seed=4)
    results = {}
    for dedup in (True, False):
        with dask.config.set({"sdnn.kernel.dedup": dedup}):
            executor = DataParallelExecutor(client, net)
            results[dedup] = executor.run(x, partition="hash", n_blocks=4)
    assert_bitwise(results[True].output, results[False].output)
    on, off = results[True].layers, results[False].layers
    assert on[["block", *COUNTED]].reset_index(drop=True).equals(
        off[["block", *COUNTED]].reset_index(drop=True))
    assert (on["distinct_out"] < on["rows_out"]).any()
    assert (off["distinct_out"] == off["rows_out"]).all()
    for dedup, word in ((True, "on"), (False, "off")):
        assert set(run_records(results[dedup], study="t")["dedup"]) == {word}


@pytest.mark.parametrize(("flag", "word"), [("--dedup", "on"), ("--no-dedup", "off")])
def test_the_command_line_switch_is_recorded(tmp_path, capsys, flag, word):
    """``compare --dedup`` / ``--no-dedup``: the kernel and data-parallel runs record the
    setting they ran with (the reference and model parallelism have none), and every
    run still PASSes."""
    import pandas as pd
    from cli_run import run

    code, err = run(["compare", "-N", "1024", "-L", "30", "-n", "400", "--partitions", "hash",
                     "--model", "none", "--hybrid", "none", "--workers", "1", "-q",
                     "--results", str(tmp_path), flag], capsys)
    assert code == 0, err
    records = pd.read_csv(tmp_path / "records.csv", keep_default_na=False)
    by = records.groupby("strategy")["dedup"].agg(set).to_dict()
    assert by == {"reference": {""}, "kernel": {word}, "data": {word}}
    assert set(records["check"]) == {"PASS"}
    layers = pd.read_csv(tmp_path / "layers.csv")
    kernel = layers[layers["run_id"].isin(records.loc[records["strategy"] == "kernel",
                                                      "run_id"])]
    merged = (kernel["distinct_out"] < kernel["rows_out"]).any()
    assert merged == (word == "on")


def test_streamed_passes_join_for_the_deep_layers():
    """Rows in passes (a streamed network's way): each pass stops once few rows are left
    and the passes' survivors go on together; the same bits and counts, block by block,
    as every block run alone without deduplication, with or without it here."""
    net = make_network(1024, 30, seed=5)
    x = make_inputs(2000, 1024, seed=5)
    blocks = [x[:700], x[700:1300], x[1300:]]
    alone = forward_blocks(net, blocks, OFF)
    for settings in (ON, OFF):
        streamed = stream_blocks(net, blocks, settings, pass_rows=450)
        for a, b in zip(streamed, alone, strict=True):
            assert_bitwise(a.to_csr(), b.to_csr())
            assert a.trace[COUNTED].equals(b.trace[COUNTED])
    merged = pd.concat([o.trace for o in stream_blocks(net, blocks, ON, pass_rows=450)])
    assert (merged["distinct_out"] < merged["rows_out"]).any()


def test_early_layers_stop_when_few_rows_are_left():
    net = make_network(1024, 30, seed=5)
    x = make_inputs(600, 1024, seed=5)
    states = run_early_layers(net, [x[:250], x[250:]], ON, stop_rows=100)
    live = sum(len(c.live) for s in states for c in s.chunks)
    assert live <= 100 and 0 < states[0].layer == states[1].layer < 30
    out = finish_blocks(net, states, ON)
    alone = forward_blocks(net, [x[:250], x[250:]], OFF)
    for a, b in zip(out, alone, strict=True):
        assert_bitwise(a.to_csr(), b.to_csr())


# -- survivors in several groups ---------------------------------------------------------


def _assert_merged(trace: pd.DataFrame) -> None:
    """The run merged rows: its last layer, over the blocks, has fewer distinct than live."""
    last = trace.groupby("layer")[["rows_out", "distinct_out"]].sum().iloc[-1]
    assert last["rows_out"] > last["distinct_out"], trace


def test_survivors_in_several_groups_expand_to_their_own_rows():
    """One block, several blocks, streamed passes and early layers then the rest: the
    same bits as without deduplication and as the dense float64 recurrence, and the
    last layer has exactly the classes and the unique rows distinct."""
    from dense_reference import dense_infer

    net, x = several_groups()
    expected = dense_infer(net.layers, net.bias, net.ymax, x)
    one, _ = _both(net, x)
    assert one.trace["distinct_out"].iloc[-1] == 5 + 120 < one.trace["rows_out"].iloc[-1]
    np.testing.assert_array_equal(one.to_csr().toarray(), expected)
    blocks = [x[:70], x[70:160], x[160:]]
    offs = forward_blocks(net, blocks, OFF)
    runs = {"blocks": lambda s: forward_blocks(net, blocks, s),
            "streamed": lambda s: stream_blocks(net, blocks, s, pass_rows=100),
            "early-then-rest": lambda s: finish_blocks(
                net, run_early_layers(net, blocks, s, stop_rows=1), s)}
    for name, run in runs.items():
        ons = run(ON)
        for b, (on, off) in enumerate(zip(ons, offs, strict=True)):
            assert_bitwise(on.to_csr(), off.to_csr())
            assert on.trace[COUNTED].equals(off.trace[COUNTED]), (name, b)
        got = sp.vstack([on.to_csr() for on in ons]).toarray()
        np.testing.assert_array_equal(got, expected, err_msg=name)
        _assert_merged(pd.concat([on.trace for on in ons]))


@hypothesis_settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(0, 30), n=st.integers(1, 50),
       taken=st.integers(0, 60))
def test_take_rows_is_scipys_row_indexing(seed, rows, n, taken):
    """The compiled row gather that expands merged rows: scipy's ``csr[source]``."""
    rng = np.random.default_rng(seed)
    csr = sp.random(rows, n, density=0.3, format="csr", dtype=np.float32, rng=rng)
    source = rng.integers(0, rows, taken) if rows else np.zeros(0, np.int64)
    mine, scipys = take_rows(csr, source), csr[source]
    assert mine.shape == scipys.shape
    np.testing.assert_array_equal(mine.indptr, scipys.indptr)
    np.testing.assert_array_equal(mine.indices, scipys.indices)
    np.testing.assert_array_equal(mine.data, scipys.data)


def test_outputs_kept_once_per_distinct_row_expand_to_the_same_bits():
    """finish_blocks(expand=False) and stream_finish(expand=False), as data parallelism's
    joined survivors come back: the distinct rows once, and where each row's are."""
    from sdnn_dask.core.kernels import begin_block, finish_blocks, stream_early, stream_finish
    from sdnn_dask.data.radixnet import make_inputs, make_network

    net, x = make_network(1024, 40, seed=1), make_inputs(1500, 1024, seed=3)
    settings = KernelSettings.resolve(dedup=True)

    def begun():
        return [begin_block(net, x[:700], settings), begin_block(net, x[700:], settings)]

    plain = finish_blocks(net, begun(), settings)
    kept = finish_blocks(net, begun(), settings, expand=False)
    assert all(o.source is not None for o in kept)
    assert kept[0].values.shape[0] < len(kept[0].rows)  # fewer rows of values than rows
    for a, b in zip(plain, kept, strict=True):
        assert_bitwise(a.to_csr(), b.to_csr())
        assert_bitwise(a.values, b.expanded().values)
    # two processes' early passes, finished together, then expanded: as streamed alone
    earlies = [stream_early(net, [x[:500], x[500:800]], settings, pass_rows=300),
               stream_early(net, [x[800:]], settings, pass_rows=300)]
    joined = stream_finish(net, earlies, settings, expand=False)
    alone = [stream_blocks(net, [x[:500], x[500:800]], settings, pass_rows=300),
             stream_blocks(net, [x[800:]], settings, pass_rows=300)]
    for mine, theirs in zip(joined, alone, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            assert np.array_equal(a.rows, b.rows)
            np.testing.assert_allclose(a.to_csr().toarray(), b.to_csr().toarray(), rtol=1e-5)
