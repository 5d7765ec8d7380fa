"""Adversarial model-parallel slices (issue 34): slices cut from a damaged store and kept
after it was restored, slice files changed in place (a column id out of range, one value
in range), a damaged index, a read-only folder beside the store.

Each gives a re-cut (with a :class:`StaleSlicesWarning`) and the reference's answer, or an
``error:`` naming the file or place at exit 2; never a wrong answer, a crashed worker or
"run it again". Every run is on the session's real LocalCluster.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import dask
import numpy as np
import pytest

from sdnn_dask.cli import main
from sdnn_dask.core.network import Network
from sdnn_dask.core.reference import categories, infer_reference
from sdnn_dask.data import io, store
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.data.streaming import StreamedNetwork
from sdnn_dask.parallel.faults import connected
from sdnn_dask.parallel.model_executor import ModelParallelExecutor
from sdnn_dask.parallel.slabs.slices import (
    SlicesError,
    StaleSlicesWarning,
    close_parts,
    read_slices_index,
    write_part_slices,
)
from sdnn_dask.partition import make_neuron_partition
from sdnn_dask.testing import assert_same_result

N, L, ROWS, SEED = 1024, 12, 300, 4


def _network() -> Network:
    """RadiX-Net 1024-12's pattern with weights drawn in 0.02..0.1 and no clamp reached
    (ymax 1e6): neurons' activations differ, so one edge moved shows in the answer, where
    RadiX-Net's equal weights make every neuron of a row alike and one edge more or less
    among 32 saturated inputs change nothing (a wrong slice would go unseen)."""
    net = make_network(N, L, seed=3)
    rng = np.random.default_rng(7)
    layers = []
    for w in net.layers:
        w = w.copy()
        w.data = rng.uniform(0.02, 0.1, w.nnz).astype(np.float32)
        layers.append(w)
    return Network(layers, bias=net.bias, ymax=1e6, name="radixnet-1024-12-drawn")


@pytest.fixture(scope="module")
def net() -> Network:
    return _network()


@pytest.fixture(scope="module")
def inputs():
    return make_inputs(ROWS, N, seed=SEED)


@pytest.fixture(scope="module")
def reference(net, inputs):
    return infer_reference(net, inputs)


@pytest.fixture(scope="module")
def pristine(net, tmp_path_factory) -> Path:
    return store.write_network(tmp_path_factory.mktemp("pristine") / "net", net)


@pytest.fixture
def folder(pristine, tmp_path) -> Path:
    """A fresh copy of the store (no slices beside it)."""
    return Path(shutil.copytree(pristine, tmp_path / "net"))


def run(client, folder: Path, weights: str, transport: str = "direct"):
    """A model-parallel run of the store at ``folder``: 2 block parts, one per worker."""
    executor = ModelParallelExecutor(client, StreamedNetwork(folder), weights=weights,
                                     warm_up=False)
    return executor.run(make_inputs(ROWS, N, seed=SEED), partition="block", k=2,
                        transport=transport), executor


def recut(client, folder: Path, weights: str, match: str, transport: str = "direct"):
    """A run expected to find its slices stale or damaged: the result (checked first, so
    that a wrong answer is what fails) and the slices folder; a :class:`StaleSlicesWarning`
    matching ``match`` must have been given."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, executor = run(client, folder, weights, transport)
    assert_same_result(result, infer_reference(_network(), make_inputs(ROWS, N, seed=SEED)))
    said = [str(w.message) for w in caught if issubclass(w.category, StaleSlicesWarning)]
    assert any(re.search(match, text) for text in said), said
    return result, executor


def new_processes(client) -> None:
    """What a later run in new worker processes sees: nothing opened in memory (a
    resident part would otherwise keep the layers it loaded, and never read them again)."""
    client.run(close_parts)
    close_parts()


def move_a_column(path: Path, row_nnz: int) -> None:
    """Rewrite one column id of a store's layer file in place, in range and its row still
    increasing (every check of the contents passes; only the hash tells): an input of
    row 0 moved to its free neighbour."""
    indices = np.load(path, mmap_mode="r+")
    rows = indices.reshape(-1, row_nnz)
    for r, row in enumerate(rows):
        gaps = np.flatnonzero(np.diff(row.astype(np.int64)) > 1)
        if len(gaps):
            rows[r, gaps[0]] += 1
            break
    indices.flush()


def _poke(path: Path, offset: int, dtype: str, change) -> None:
    """Rewrite the value at ``offset`` (bytes) of a raw file in place with ``change(v)``."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        value = np.frombuffer(handle.read(np.dtype(dtype).itemsize), dtype)[0]
        handle.seek(offset)
        handle.write(np.array([change(value)], dtype).tobytes())


def _level(layer: int) -> np.ndarray:
    """Dense activations of every row at level ``layer`` (the reference's)."""
    net = _network()
    first = Network(net.layers[:layer], bias=net.bias, ymax=net.ymax)
    return infer_reference(first, make_inputs(ROWS, N, seed=SEED)).output.toarray()


def _differs(y: np.ndarray, a: int, b: int) -> bool:
    """Whether neurons ``a`` and ``b`` differ by more than 1 in some row (an edge moved
    from one to the other then changes the answer past any rounding)."""
    return bool(np.abs(y[:, a] - y[:, b]).max() > 1)


def damage_slice(slices: Path, what: str) -> None:
    """Change one value of part 1's slices, in place, the file's size kept: in the last
    layer, an input whose activations differ from the one it is swapped for (so the answer
    changes); in layer 1 for the partition and the table."""
    table = np.load(slices / "part1.index.npy")
    if what == "column-out-of-range":  # a column id past N (uint16): needed_of's index
        _poke(slices / "part1.columns.bin", 2 * int(table[0, 0]), "<u2", lambda v: 60000)
    elif what == "column-in-range":  # one id moved to a free neighbour: still sorted
        y = _level(L - 1)
        start, nnz = int(table[L - 1, 0]), int(table[L - 1, 1])
        columns = np.fromfile(slices / "part1.columns.bin", "<u2")[start:start + nnz]
        rows = columns.reshape(-1, 32).astype(np.int64)  # RadiX-Net: 32 inputs a neuron
        at = next(r * 32 + c for r, row in enumerate(rows) for c in range(31)
                  if row[c] + 1 < row[c + 1] and _differs(y, row[c], row[c] + 1))
        _poke(slices / "part1.columns.bin", 2 * (start + at), "<u2", lambda v: v + 1)
    elif what == "take-in-range":  # another position of the part's own slab
        layer = int(np.flatnonzero(table[:, 7:].sum(axis=1))[-1]) + 1  # the last sending
        owners = np.load(slices / "parts.npy")[layer - 1]
        own = np.flatnonzero(owners == 1)  # part 1's slab of level layer - 1
        y = _level(layer - 1)
        takes = np.fromfile(slices / "part1.take.bin", "<u2")
        start = int(table[layer - 1, 6])
        at = next(i for i in range(start, start + int(table[layer - 1, 7:].sum()))
                  if takes[i] + 1 < len(own) and _differs(y, own[takes[i]],
                                                          own[takes[i] + 1]))
        _poke(slices / "part1.take.bin", 2 * at, "<u2", lambda v: v + 1)
    elif what == "owner-in-range":  # level 1's neuron 600 given to the other part
        header = slices / "parts.npy"
        offset = len(np.lib.format.magic(1, 0)) + 2 + int.from_bytes(
            header.read_bytes()[8:10], "little")
        _poke(header, offset + N + 600, "u1", lambda v: 1 - v)
    elif what == "table-in-range":  # layer 1's columns start two values later
        with open(slices / "part1.index.npy", "r+b") as handle:
            handle.seek(-table.nbytes, os.SEEK_END)
            data = table.copy()
            data[0, 0] += 2
            handle.write(data.tobytes())
    else:
        raise ValueError(what)


@pytest.mark.parametrize("weights", ["resident", "streamed"])
def test_slices_cut_from_a_damaged_store_are_cut_again_once_it_is_restored(
        client, folder, reference, weights):
    # the case: slices cut from a damaged layer (here knowingly: verify off, which
    # cut them unchecked), the store restored, and model parallelism kept FAILing
    path = folder / f"l{L}.indices.npy"
    original = path.read_bytes()
    move_a_column(path, 32)
    with dask.config.set({"sdnn.store.verify": False}):
        damaged, executor = run(client, folder, weights)
    assert abs(damaged.output - reference.output).max() > 0  # the damage did matter
    slices = executor.slices
    path.write_bytes(original)  # restored
    new_processes(client)
    _, executor = recut(client, folder, weights, "cut from other files of layer")
    assert executor.slices == slices
    assert read_slices_index(slices)["store"]["layers"][L - 1]["indices"] == \
        store.open_store(folder).manifest["layers"][L - 1]["files"]["indices"]["sha256"]
    with dask.config.set({"sdnn.store.verify": False}):  # fresh now, even unchecked
        assert_same_result(run(client, folder, weights)[0], reference)


def test_a_store_damaged_and_restored_from_the_command_line(client, folder, tmp_path,
                                                            capsys):
    path = folder / "l3.indices.npy"
    original = path.read_bytes()
    move_a_column(path, 32)
    out = tmp_path / "categories.tsv"
    argv = ["infer", "--data", str(folder), "-L", str(L), "-n", str(ROWS), "--seed",
            str(SEED), "--strategy", "model", "--weights", "streamed", "--partition",
            "block", "--cluster", client.scheduler.address, "--categories-out", str(out),
            "-q"]
    assert main(argv) == 2  # nothing is cut from a layer that fails its hash
    assert f"error: {path}: SHA-256" in capsys.readouterr().err
    path.write_bytes(original)
    assert main(argv) == 0
    net = _network()
    expected = categories(infer_reference(net, make_inputs(ROWS, N, seed=SEED)).output)
    np.testing.assert_array_equal(io.read_categories(out), expected)


@pytest.mark.parametrize("weights, transport", [("resident", "direct"),
                                                ("streamed", "direct"),
                                                ("streamed", "graph")])
def test_a_column_out_of_range_in_a_slice_is_cut_again(client, folder, reference, weights,
                                                       transport):
    first, executor = run(client, folder, weights, transport)
    assert_same_result(first, reference)
    workers = set(connected(client))
    damage_slice(executor.slices, "column-out-of-range")
    new_processes(client)
    recut(client, folder, weights, "part1.columns.bin: layer 1: columns outside 0..1023",
          transport)
    assert set(connected(client)) == workers  # no worker died


@pytest.mark.parametrize("what, said", [
    ("column-in-range", f"part1.columns.bin: layer {L}'s checksum differs"),
    ("take-in-range", "part1.take.bin: layer .*'s checksum differs"),
    ("owner-in-range", "parts.npy: level 1's checksum differs"),
    ("table-in-range", "part1.index.npy: its SHA-256 differs"),
])
@pytest.mark.parametrize("weights", ["resident", "streamed"])
def test_one_value_in_range_changed_in_a_slice_is_caught_by_its_checksum(
        client, folder, reference, what, said, weights):
    first, executor = run(client, folder, weights)
    assert_same_result(first, reference)
    damage_slice(executor.slices, what)
    new_processes(client)
    recut(client, folder, weights, said.replace(".bin", r"\.bin").replace(".npy", r"\.npy"))


def test_a_changed_slices_index_is_cut_again(folder, net):
    partition = make_neuron_partition(net, 2, "block")
    slices = write_part_slices(StreamedNetwork(folder), partition)
    index = json.loads((slices / "slices.json").read_text())
    index["parts"][1]["bytes"]["columns"] += 0  # the same: still its own
    index["volume"][0][1] += 1  # a number in range, changed
    (slices / "slices.json").write_text(json.dumps(index, indent=1))
    with pytest.warns(StaleSlicesWarning, match="checksum differs"):
        assert write_part_slices(StreamedNetwork(folder), partition) == slices
    assert read_slices_index(slices)["volume"][0][1] == index["volume"][0][1] - 1


def _read_only(place: Path) -> None:
    """Make ``place`` unwritable, also for root (the immutable attribute) where it can."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(
                ["chattr", "+i", str(place)], capture_output=True).returncode != 0:
            pytest.skip("running as root, and chattr +i is not available here")
    else:
        place.chmod(0o555)


def _writable(place: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(place)], capture_output=True)
    else:
        place.chmod(0o755)


def test_a_read_only_folder_beside_the_store_is_named(client, pristine, tmp_path, capsys):
    beside = tmp_path / "shared"
    beside.mkdir()
    folder = Path(shutil.copytree(pristine, beside / "net"))
    _read_only(beside)
    try:
        code = main(["infer", "--data", str(folder), "-L", str(L), "-n", str(ROWS),
                     "--strategy", "model", "--weights", "streamed", "--partition",
                     "block", "--cluster", client.scheduler.address, "-q"])
        err = capsys.readouterr().err
        with pytest.raises(SlicesError) as error:
            write_part_slices(StreamedNetwork(folder), make_neuron_partition(
                _network(), 2, "block"))
    finally:
        _writable(beside)
    assert code == 2, err
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert f"error: {beside / 'net.slices'}: cannot be written" in line
    assert f"into {beside / 'net.slices'}" in line and "writable" in line
    assert "died" not in err and "run it again" not in err
    assert str(beside) in str(error.value)
