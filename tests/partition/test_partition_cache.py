"""The hypergraph partition cache (issue 43): a file records what it was made for and is
checked when read, a traffic partition's key holds the network's values, and a cache that
cannot be written only warns.

Every partition read back is compared with the same partition computed without a cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

from sdnn_dask.core.network import Network
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.partition import NeuronPartition, PartitionCacheWarning, hypergraph_partition
from sdnn_dask.partition.hypergraph import TrafficSettings, is_cached

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mtkahypar") is None,
                                reason="needs the partition extra (Mt-KaHyPar)")

SETTINGS = TrafficSettings(sample=300, min_share=0.02)


@pytest.fixture(scope="module")
def twins() -> tuple[Network, Network, object]:
    """Two networks of the same N, L and patterns, the second with the values of its
    first layers halved (so other rows die early and the traffic differs), and inputs."""
    a = make_network(1024, 8, seed=3)
    halved = [w.copy() for w in a.layers]
    for w in halved[:3]:
        w.data = (w.data * np.float32(0.5)).astype(np.float32)
    b = Network(halved, bias=a.bias, ymax=a.ymax)
    return a, b, make_inputs(300, 1024, seed=3)


def _quiet(call):
    """``call()`` with every PartitionCacheWarning an error: the cache was used as is."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", PartitionCacheWarning)
        return call()


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.npz"))


def test_a_traffic_partition_is_cached_per_network_values(twins, tmp_path):
    """Same N, L, patterns and inputs, other weight values: each network gets its own
    cache file, read back without a warning, equal to its uncached partition (with the
    values left out of the key the second one found the first one's file)."""
    a, b, x = twins
    part_a = _quiet(lambda: hypergraph_partition(a, 2, inputs=x, traffic=SETTINGS,
                                                 cache=tmp_path))
    assert not is_cached(b, 2, inputs=x, traffic=SETTINGS, cache=tmp_path)
    part_b = _quiet(lambda: hypergraph_partition(b, 2, inputs=x, traffic=SETTINGS,
                                                 cache=tmp_path))
    assert len(_files(tmp_path)) == 2
    fresh_b = hypergraph_partition(b, 2, inputs=x, traffic=SETTINGS)
    np.testing.assert_array_equal(part_b.parts, fresh_b.parts)
    assert not np.array_equal(part_a.parts, part_b.parts)  # the values do matter here
    for net, part in ((a, part_a), (b, part_b)):
        assert is_cached(net, 2, inputs=x, traffic=SETTINGS, cache=tmp_path)
        again = _quiet(lambda net=net: hypergraph_partition(net, 2, inputs=x,
                                                            traffic=SETTINGS, cache=tmp_path))
        np.testing.assert_array_equal(again.parts, part.parts)


@pytest.mark.parametrize("objective", ["km1", "traffic"])
def test_another_networks_file_under_this_name_is_recomputed(twins, tmp_path, objective):
    """Another network's cached partition copied under this one's file name: a warning
    naming the file and what differs, then this network's partition (equal to the one
    computed without a cache), and the file replaced by it."""
    a, b, x = twins
    if objective == "km1":  # uniform weights depend on the patterns: another pattern
        b = make_network(1024, 8, seed=4)
        kwargs = {}
    else:
        kwargs = {"inputs": x, "traffic": SETTINGS}
    theirs, mine = tmp_path / "theirs", tmp_path / "mine"
    hypergraph_partition(a, 2, cache=theirs, **kwargs)
    fresh = hypergraph_partition(b, 2, cache=mine, **kwargs)
    (their_file,), (my_file,) = _files(theirs), _files(mine)
    my_stamp = NeuronPartition.read_stamp(my_file)
    assert my_stamp["network"] != NeuronPartition.read_stamp(their_file)["network"]
    shutil.copyfile(their_file, my_file)
    assert not is_cached(b, 2, cache=mine, **kwargs)
    with pytest.warns(PartitionCacheWarning) as record:
        got = hypergraph_partition(b, 2, cache=mine, **kwargs)
    assert len(record) == 1
    message = str(record[0].message)
    assert str(my_file) in message and "made for another network" in message
    np.testing.assert_array_equal(got.parts, fresh.parts)
    assert NeuronPartition.read_stamp(my_file) == my_stamp  # replaced by this one's
    again = _quiet(lambda: hypergraph_partition(b, 2, cache=mine, **kwargs))
    np.testing.assert_array_equal(again.parts, fresh.parts)


def test_another_k_or_settings_under_this_name_is_recomputed(tmp_path):
    """The stamp names what differs: the k, and the settings (epsilon here)."""
    one = make_network(1024, 2, seed=5)
    folders = {name: tmp_path / name for name in ("k3", "eps", "mine")}
    hypergraph_partition(one, 3, cache=folders["k3"])
    hypergraph_partition(one, 2, epsilon=0.1, cache=folders["eps"])
    fresh = hypergraph_partition(one, 2, cache=folders["mine"])
    (mine,) = _files(folders["mine"])
    for name, field in (("k3", "k"), ("eps", "settings")):
        (theirs,) = _files(folders[name])
        shutil.copyfile(theirs, mine)
        with pytest.warns(PartitionCacheWarning, match=f"another {field}") as record:
            got = hypergraph_partition(one, 2, cache=folders["mine"])
        assert len(record) == 1 and str(mine) in str(record[0].message)
        np.testing.assert_array_equal(got.parts, fresh.parts)


def _key_before_stamps(network: Network, k: int) -> str:
    """The file name key of a uniform-weight partition as the cache wrote it before its
    files recorded a stamp (version 2, epsilon 0.03, seed 0)."""
    digest = hashlib.sha256(f"hypergraph|v2|N={network.n_neurons}|L={network.n_layers}|"
                            f"k={k}|eps={0.03!r}|seed=0".encode())
    for w in network.layers:
        digest.update(np.ascontiguousarray(w.indptr, dtype=np.int64).tobytes())
        digest.update(np.ascontiguousarray(w.indices, dtype=np.int32).tobytes())
    return digest.hexdigest()[:24]


def test_a_file_from_before_stamps_is_found_and_replaced(tmp_path):
    """A file as the cache wrote it before stamps (its name, no stamp) holding another
    partition: found under its name, refused with a warning, computed again and
    replaced by a stamped file of the same name (no file left behind unused)."""
    net = make_network(1024, 2, seed=9)
    fresh = hypergraph_partition(net, 2)
    old = tmp_path / f"neurons-hypergraph-n1024-l2-k2-{_key_before_stamps(net, 2)}.npz"
    stale = NeuronPartition("hypergraph", 2, 1 - fresh.parts)  # another partition
    stale.save(old)
    assert not is_cached(net, 2, cache=tmp_path)
    with pytest.warns(PartitionCacheWarning, match="does not record") as record:
        got = hypergraph_partition(net, 2, cache=tmp_path)
    assert len(record) == 1 and str(old) in str(record[0].message)
    np.testing.assert_array_equal(got.parts, fresh.parts)
    assert _files(tmp_path) == [old] and NeuronPartition.read_stamp(old)["k"] == 2


def test_a_damaged_file_is_recomputed_with_a_warning(tmp_path):
    net = make_network(1024, 2, seed=6)
    fresh = hypergraph_partition(net, 2, cache=tmp_path)
    (path,) = _files(tmp_path)
    path.write_bytes(path.read_bytes()[:200])  # torn
    with pytest.warns(PartitionCacheWarning, match="unreadable") as record:
        got = hypergraph_partition(net, 2, cache=tmp_path)
    assert len(record) == 1 and str(path) in str(record[0].message)
    np.testing.assert_array_equal(got.parts, fresh.parts)
    _quiet(lambda: hypergraph_partition(net, 2, cache=tmp_path))  # the file was replaced


# -- a cache that cannot be written ------------------------------------------------------


def test_a_cache_folder_that_is_a_file_only_warns(tmp_path):
    """The cache folder is a file (and one inside a file): one warning with the path and
    the reason, and the partition, the same as without a cache."""
    net = make_network(1024, 2, seed=7)
    fresh = hypergraph_partition(net, 2)
    blocker = tmp_path / "partitions"
    blocker.write_text("not a folder")
    for folder in (blocker, blocker / "inside"):
        with pytest.warns(PartitionCacheWarning) as record:
            got = hypergraph_partition(net, 2, cache=folder)
        assert len(record) == 1
        message = str(record[0].message)
        assert message.startswith(str(folder)) and "a file stands where a folder" in message
        np.testing.assert_array_equal(got.parts, fresh.parts)
        assert not is_cached(net, 2, cache=folder)
    assert blocker.read_text() == "not a folder"


@contextlib.contextmanager
def _full_disk(folder: Path):
    """A 64 KiB tmpfs at ``folder``, filled up; skips without the right to mount."""
    folder.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        with contextlib.suppress(OSError), open(folder / "filler", "wb") as handle:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_only_warns(tmp_path):
    """A cache on a full file system (a real one: a full tmpfs): one warning with the
    path and the reason, the partition as without a cache, no temporary file left."""
    net = make_network(1024, 2, seed=8)
    fresh = hypergraph_partition(net, 2)
    with _full_disk(tmp_path / "full") as folder:
        with pytest.warns(PartitionCacheWarning) as record:
            got = hypergraph_partition(net, 2, cache=folder)
        assert len(record) == 1
        message = str(record[0].message)
        assert message.startswith(str(folder)) and "No space left on device" in message
        np.testing.assert_array_equal(got.parts, fresh.parts)
        assert [p.name for p in folder.iterdir()] == ["filler"]
