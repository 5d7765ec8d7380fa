"""Adversarial network stores: a layer's bytes changed in place, the same size and within
range, so that only the manifest's SHA-256 tells (issue 34).

Every strategy reads the store in its own way (the client reads it whole for resident
weights and to cut model-parallel slices; each data-parallel worker streams it), and each
must refuse a changed file with ``error: FILE ...`` at exit 2 rather than PASS on other
weights. The command line runs in-process on the session's real LocalCluster
(``--cluster ADDRESS``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.cli import main
from sdnn_dask.core.kernels import canonical
from sdnn_dask.core.network import Network
from sdnn_dask.core.reference import categories, infer_reference
from sdnn_dask.data import io, store
from sdnn_dask.data.radixnet import make_inputs, make_network
from sdnn_dask.data.store import reader as store_reader
from sdnn_dask.data.streaming import StreamedNetwork

N, L, ROWS, SEED = 1024, 12, 300, 5


def _network() -> Network:
    """RadiX-Net 1024-12 with layer 2's weights varied, so that the store keeps layer 2's
    values in a file (``l2.data.npy``) and every other layer as uint16 columns alone."""
    net = make_network(N, L, seed=3)
    w2 = net.layers[1].copy()
    w2.data = w2.data.copy()
    w2.data[::7] *= 2
    layers = [w2 if k == 1 else w for k, w in enumerate(net.layers)]
    return Network(layers, bias=net.bias, ymax=net.ymax, name="radixnet-1024-12-varied")


@pytest.fixture(scope="module")
def net() -> Network:
    return _network()


@pytest.fixture(scope="module")
def expected(net) -> np.ndarray:
    """The categories of the CLI's generated inputs (``-n ROWS --seed SEED``)."""
    return categories(infer_reference(net, make_inputs(ROWS, N, seed=SEED)).output)


@pytest.fixture(scope="module")
def pristine(net, tmp_path_factory) -> Path:
    return store.write_network(tmp_path_factory.mktemp("pristine") / "net", net)


@pytest.fixture
def folder(pristine, tmp_path) -> Path:
    """A fresh copy of the store (no slices beside it)."""
    return Path(shutil.copytree(pristine, tmp_path / "net"))


def move_a_column(folder: Path, layer: int = 3) -> Path:
    """Rewrite one column id of ``layer`` in place: in range, its row still strictly
    increasing (every check of the contents passes; only the hash differs)."""
    path = folder / f"l{layer}.indices.npy"
    row_nnz = store.open_store(folder, check_hashes=False).manifest["layers"][layer - 1][
        "encoding"]["row_nnz"]
    indices = np.load(path, mmap_mode="r+")
    rows = indices.reshape(-1, row_nnz)
    for r, row in enumerate(rows):
        gaps = np.flatnonzero(np.diff(row.astype(np.int64)) > 1)
        if len(gaps):
            rows[r, gaps[0]] += 1
            break
    indices.flush()
    del indices, rows
    return path


def change_a_value(folder: Path, layer: int = 2) -> Path:
    """Rewrite one weight of ``layer`` in place: finite, nonzero, another value."""
    path = folder / f"l{layer}.data.npy"
    data = np.load(path, mmap_mode="r+")
    data[5] = data[5] * 4
    data.flush()
    del data
    return path


DAMAGE = {"column": move_a_column, "value": change_a_value}
PATHS = {  # strategy, weights
    "kernel-resident": ("kernel", "resident"), "kernel-streamed": ("kernel", "streamed"),
    "data-resident": ("data", "resident"), "data-streamed": ("data", "streamed"),
    "model-resident": ("model", "resident"), "model-streamed": ("model", "streamed"),
}


def infer(client, folder: Path, strategy: str, weights: str, out: Path | None = None
          ) -> list[str]:
    argv = ["infer", "--data", str(folder), "-L", str(L), "-n", str(ROWS), "--seed",
            str(SEED), "--strategy", strategy, "--weights", weights, "-q"]
    if strategy != "kernel":
        argv += ["--cluster", client.scheduler.address, "--partition", "block"]
    if out is not None:
        argv += ["--categories-out", str(out)]
    return argv


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_file_changed_in_place_is_an_error_naming_it(client, folder, capsys, damage, path):
    changed = DAMAGE[damage](folder)
    store.open_store(folder)  # sizes and headers are as the manifest says: opens
    code = main(infer(client, folder, *PATHS[path]))
    err = capsys.readouterr().err
    assert code == 2, err
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert f"error: {changed}: SHA-256" in line and "differs from the manifest's" in line
    assert "died" not in err and "Traceback" not in err


def test_compare_on_a_changed_store_is_an_error_never_a_pass(client, folder, capsys):
    # the case: every run read the same changed layer and agreed, so all PASSed
    changed = move_a_column(folder)
    code = main(["compare", "--data", str(folder), "-L", str(L), "-n", str(ROWS),
                 "--seed", str(SEED), "--cluster", client.scheduler.address,
                 "--partitions", "block", "--model", "block", "--hybrid", "none",
                 "--no-write"])
    captured = capsys.readouterr()
    assert code == 2
    assert "PASS" not in captured.out
    assert f"error: {changed}: SHA-256" in captured.err


@pytest.mark.parametrize("path", ["kernel-streamed", "data-streamed", "model-streamed"])
def test_a_restored_store_is_checked_again_and_runs(client, folder, expected, tmp_path,
                                                    capsys, path):
    # each process remembers the files it hashed by path, hash, size, times and inode: a
    # file changed since (here twice, in place) is hashed again, on the client and workers
    original = (folder / "l3.indices.npy").read_bytes()
    out = tmp_path / "categories.tsv"
    if path != "model-streamed":  # (slices cut now would hold the manifest's layers:
        # later runs read them, not the store, and answer right whatever it holds)
        assert main(infer(client, folder, *PATHS[path], out)) == 0
        np.testing.assert_array_equal(io.read_categories(out), expected)
    move_a_column(folder)
    assert main(infer(client, folder, *PATHS[path], out)) == 2
    assert "differs from the manifest's" in capsys.readouterr().err
    with open(folder / "l3.indices.npy", "r+b") as handle:  # restored in place
        handle.write(original)
    out.unlink(missing_ok=True)
    assert main(infer(client, folder, *PATHS[path], out)) == 0
    np.testing.assert_array_equal(io.read_categories(out), expected)


@pytest.mark.parametrize("path", ["kernel-resident", "data-streamed"])
def test_verify_false_skips_the_check_knowingly(client, folder, expected, tmp_path, capsys,
                                                path):
    move_a_column(folder)
    out = tmp_path / "categories.tsv"
    with dask.config.set({"sdnn.store.verify": False}):  # read as it is, as asked
        assert main(infer(client, folder, *PATHS[path], out)) == 0
    assert main(infer(client, folder, *PATHS[path], out)) == 2  # the default checks
    assert "differs from the manifest's" in capsys.readouterr().err


def test_a_run_hashes_each_file_once_per_process(folder, net, monkeypatch):
    hashed = []

    def counting(path):  # the real hash, counted
        hashed.append(Path(path).name)
        return real(path)

    real = store_reader.file_sha256
    monkeypatch.setattr(store_reader, "file_sha256", counting)
    files = sorted(p.name for p in folder.glob("l*.npy"))
    held = store.open_store(folder)
    assert held.check_hashes and hashed == []  # opening reads headers only
    streamed = StreamedNetwork(held)
    for _ in range(2):  # two streamed passes and a resident read: each file hashed once
        for w, _, _ in streamed.kernel_layers():
            assert isinstance(canonical(w), sp.csr_matrix)
    held.to_network()
    assert sorted(hashed) == files
    # a file written since (the same bytes, in place) is hashed again at its next read
    path = folder / "l5.indices.npy"
    path.write_bytes(path.read_bytes())
    held.layer(5)
    assert sorted(hashed) == sorted([*files, "l5.indices.npy"])
