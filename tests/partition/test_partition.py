"""Row partitions and the bucket hash: bijective, reversible, covering."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdnn_dask.partition import (
    ROW_PARTITIONS,
    bucket_hash,
    bucket_unhash,
    even_bounds,
    imbalance,
    make_row_partition,
    survivors_per_block,
)


@given(size=st.integers(0, 5000), nbuckets=st.integers(1, 4))
def test_hash_is_a_reversible_permutation(size, nbuckets):
    v = np.arange(size)
    h = bucket_hash(v, size, nbuckets)
    assert np.array_equal(np.sort(h), v)
    assert np.array_equal(bucket_unhash(h, size, nbuckets), v)


def test_hash_formula():
    size, p = 1000, 128  # H = 7
    h = 1000 // p
    v = np.arange(size)
    expected = np.where(v < h * p, v // p + (v % p) * h, v)
    assert np.array_equal(bucket_hash(v, size), expected)
    assert bucket_hash(999, size) == 999  # beyond H * P: identity
    assert bucket_hash(1, size) == 7
    assert bucket_hash(5, 60000, nbuckets=2) == 5 * (60000 // 256)


@given(
    name=st.sampled_from(ROW_PARTITIONS),
    n_rows=st.integers(0, 3000),
    n_blocks=st.integers(1, 40),
    seed=st.integers(0, 100),
)
def test_partition_covers_every_row_once(name, n_rows, n_blocks, seed):
    part = make_row_partition(name, n_rows, n_blocks, seed=seed)
    blocks = part.blocks()
    assert len(blocks) == n_blocks
    sizes = [len(b) for b in blocks]
    assert max(sizes) - min(sizes) <= 1
    assert np.array_equal(np.sort(np.concatenate(blocks)), np.arange(n_rows))
    assert np.array_equal(part.order[part.inverse()], np.arange(n_rows))


def test_hash_spreads_consecutive_rows():
    part = make_row_partition("hash", 12800, 4)  # H = 100: a block is 32 residues mod 128
    owner = part.block_of()
    # 128 consecutive rows land in all four blocks, evenly
    assert np.bincount(owner[:128], minlength=4).tolist() == [32, 32, 32, 32]
    owner = make_row_partition("hash", 60000, 4).block_of()
    assert np.bincount(owner[:128], minlength=4).min() >= 31
    block = make_row_partition("block", 60000, 4).block_of()
    assert np.bincount(block[:128], minlength=4).tolist() == [128, 0, 0, 0]


def test_random_is_seeded():
    a = make_row_partition("random", 100, 3, seed=1).order
    assert np.array_equal(a, make_row_partition("random", 100, 3, seed=1).order)
    assert not np.array_equal(a, make_row_partition("random", 100, 3, seed=2).order)


def test_balance_metrics():
    assert imbalance([1, 1, 1, 1]) == 1.0
    assert imbalance([3, 1, 0, 0]) == 3.0
    assert np.isnan(imbalance([0, 0]))
    part = make_row_partition("block", 10, 2)
    assert survivors_per_block(part, np.array([0, 1, 9])).tolist() == [2, 1]
    assert even_bounds(5, 3).tolist() == [0, 2, 4, 5]


def test_unknown_partition():
    with pytest.raises(ValueError, match="unknown row partition"):
        make_row_partition("metis", 10, 2)


def test_row_partition_limits_and_identity():
    assert make_row_partition("block", 0, 1).n_rows == 0  # no rows is allowed
    one = make_row_partition("block", 5, 1)
    assert [b.tolist() for b in one.blocks()] == [[0, 1, 2, 3, 4]]
    with pytest.raises(ValueError, match="must be >= 1, got 0"):
        make_row_partition("block", 5, 0)
    with pytest.raises(ValueError, match="n_rows must be >= 0, got -1"):
        make_row_partition("block", -1, 2)
    # the default is one bucket: P = 128
    assert make_row_partition("hash", 300, 3).order.tolist() == \
        make_row_partition("hash", 300, 3, nbuckets=1).order.tolist()
    assert make_row_partition("hash", 300, 3).order.tolist() != \
        make_row_partition("hash", 300, 3, nbuckets=2).order.tolist()
    # partitions hold arrays: compared and hashed by identity, and never edited
    a, b = make_row_partition("block", 5, 2), make_row_partition("block", 5, 2)
    assert a == a and a != b and len({a, b}) == 2
    with pytest.raises(AttributeError):
        a.name = "hash"


def test_hash_arguments():
    assert bucket_hash(np.arange(0), size=0).tolist() == []  # an empty range is fine
    assert bucket_hash(np.arange(300), size=300, nbuckets=1).tolist() == \
        bucket_hash(np.arange(300), size=300).tolist()
    with pytest.raises(ValueError, match="size must be >= 0, got -1"):
        bucket_hash(0, size=-1)
    with pytest.raises(ValueError, match="nbuckets must be >= 1, got 0"):
        bucket_unhash(0, size=10, nbuckets=0)


def test_random_row_partition_default_seed():
    assert make_row_partition("random", 50, 2).order.tolist() == \
        make_row_partition("random", 50, 2, seed=0).order.tolist()
