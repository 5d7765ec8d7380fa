"""Adversarial challenge files: the data-reading surface (issue 34).

Files that claim more than they hold, and names that hold the wrong thing. Each must be an
``error:`` naming the file (and the line, where one is at fault) at exit 2 with no
traceback, or be read right: never a matrix out of proportion to the file, a silently
shorter network, a run without a verdict, or a guess between two versions of a file.

Every test here failed before the fix: a 1e9 row id allocated a 1e9-row matrix (a
``MemoryError`` under a memory limit), a folder at a layer's name ran the layers before it
(exit 0), a folder at the categories' name gave no verdict (exit 0), of a ``.tsv`` and a
``.tsv.gz`` that differ the plain one was read without a word, and a cache of other files
put under a network's cache name was loaded as that network.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from cli_run import run

from sdnn_dask import study
from sdnn_dask.cli import main
from sdnn_dask.data import io
from sdnn_dask.data.io import ChallengeFormatError
from sdnn_dask.data.io import text as io_text
from sdnn_dask.data.radixnet import make_network

REPO = Path(__file__).resolve().parents[2]
#: Address space a child may take beyond what it holds once imported: ample for reading
#: a few small files, far below the 4 GB of row pointers of a 1e9-row matrix.
HEADROOM = 1_500_000_000
#: The CLI run on the challenge folders here: one serial strategy, no cache, no progress.
INFER = ["infer", "-N", "1024", "-L", "6", "--strategy", "kernel", "--no-cache", "-q"]


def assert_error(code: int, err: str, *names: str) -> None:
    """One ``error:`` line at exit 2 naming every one of ``names``, and no traceback."""
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for name in names:
        assert name in err, (name, err)


@pytest.fixture(scope="module")
def challenge(tmp_path_factory) -> Path:
    """A 1024-neuron, 6-layer challenge folder with 200 inputs and their categories."""
    folder = tmp_path_factory.mktemp("challenge") / "data"
    assert main(["generate", str(folder), "-N", "1024", "-L", "6", "-n", "200", "-q"]) == 0
    return folder


@pytest.fixture
def data(challenge, tmp_path) -> Path:
    """A copy of the challenge folder to damage."""
    return Path(shutil.copytree(challenge, tmp_path / "data"))


def in_a_small_address_space(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a child whose address space is capped at what it holds once
    ``sdnn_dask``'s CLI is imported plus :data:`HEADROOM` (``RLIMIT_AS``): an allocation
    of gigabytes fails there, whatever this machine's memory."""
    resource = pytest.importorskip("resource")
    del resource
    prelude = textwrap.dedent(f"""
        import json, resource, sys
        import psutil
        import sdnn_dask.cli
        from sdnn_dask.data import io
        limit = psutil.Process().memory_info().vms + {HEADROOM}
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)


# --------------------------------------------------------------------------- row ids


def test_a_row_id_of_1e9_is_an_error_naming_file_and_line_before_allocating(data):
    """One line ``1000000000 1 1`` appended to 200 rows' inputs: before, a 1e9-row matrix
    (4 GB of row pointers alone, a ``MemoryError`` in the 1.5 GB of address space left
    here); now an error naming the file and the line, and nothing big allocated."""
    inputs = data / "sparse-images-1024.tsv"
    lines = len(inputs.read_text().splitlines())
    with inputs.open("a") as handle:
        handle.write("1000000000\t1\t1\n")
    child = in_a_small_address_space(f"""
        try:
            io.read_inputs({str(inputs)!r}, 1024)
        except io.ChallengeFormatError as error:
            print(json.dumps([str(error.path), error.line, str(error)]))
    """)
    assert child.returncode == 0 and child.stderr == "", child.stderr[-2000:]
    path, line, message = json.loads(child.stdout)
    assert (path, line) == (str(inputs), lines + 1)
    assert f"row 1000000000 is beyond the {2**20} rows the file's {lines + 1} lines justify" \
        in message

    # and through the command line: one error line, exit 2, no traceback
    child = in_a_small_address_space(f"""
        sys.exit(sdnn_dask.cli.main({[*INFER, "--data", str(data)]!r}))
    """)
    assert_error(child.returncode, child.stderr, str(inputs), f"line {lines + 1}",
                 "row 1000000000")


def test_a_declared_row_count_that_cannot_fit_is_an_error_not_a_memory_error(data):
    """``n_rows=10**9`` is declared, so the ids are justified, but its matrix cannot be had
    in the address space left: an error saying so, before the allocation that fails."""
    inputs = data / "sparse-images-1024.tsv"
    child = in_a_small_address_space(f"""
        try:
            io.read_inputs({str(inputs)!r}, 1024, n_rows=10**9)
        except io.ChallengeFormatError as error:
            print(json.dumps([str(error.path), error.line, str(error)]))
    """)
    assert child.returncode == 0 and child.stderr == "", child.stderr[-2000:]
    path, line, message = json.loads(child.stdout)
    assert (path, line) == (str(inputs), None)
    assert "the declared 1000000000 rows make a 1000000000 x 1024 matrix" in message
    assert "GB of memory available" in message


def test_the_row_id_bound_scales_with_the_lines_and_names_the_first_line_beyond(tmp_path):
    """Rows with no nonzero are allowed (ids may run ahead of the lines): up to 2**20
    whatever the file holds, beyond that 4 per line; a declared size lifts the bound."""
    path = tmp_path / "sparse-images-4.tsv"
    path.write_text(f"1\t1\t1\n{2**20}\t2\t1\n")
    assert io.read_inputs(path, 4).shape == (2**20, 4)  # 2**20 - 2 empty rows: fine
    path.write_text(f"1\t1\t1\n{2**20 + 1}\t2\t1\n3\t3\t1\n{2**21}\t4\t1\n")
    with pytest.raises(ChallengeFormatError) as info:
        io.read_inputs(path, 4)
    assert (info.value.path, info.value.line) == (path, 2)
    assert f"row {2**20 + 1} is beyond the {2**20} rows the file's 4 lines justify" \
        in str(info.value)
    assert io.read_inputs(path, 4, n_rows=2**21).shape == (2**21, 4)
    # columns of a size not declared are bounded alike
    path.write_text(f"1\t{2**22}\t1\n")
    with pytest.raises(ChallengeFormatError, match=f"column {2**22} is beyond the"):
        io.read_triples(path)


def test_a_matrix_over_the_memory_available_names_the_line_of_its_largest_row(
        tmp_path, monkeypatch):
    """Within the bound but not within memory (here: 1 kB, and no 64 MiB floor)."""
    monkeypatch.setattr(io_text, "_available_memory", lambda: 1000)
    monkeypatch.setattr(io_text, "_CHECKED_BYTES", 0)
    path = tmp_path / "sparse-images-4.tsv"
    path.write_text("1\t1\t1\n900\t2\t1\n3\t3\t1\n900\t4\t1\n")
    with pytest.raises(ChallengeFormatError) as info:
        io.read_inputs(path, 4)
    assert (info.value.path, info.value.line) == (path, 2)
    assert "row 900 (the largest row id) makes a 900 x 4 matrix of 4 entries" \
        in str(info.value)


# --------------------------------------------------------------------------- folders


@pytest.mark.parametrize("how", ["folder", "folder beside a .gz"])
def test_a_folder_at_a_layer_name_is_an_error_naming_it(data, capsys, how):
    """Layer 4 of 6 a folder: before, layers 1-3 were run, exit 0 (and with a ``.gz``
    beside the folder, the ``.gz`` was read without a word)."""
    layer = data / "neuron1024" / "n1024-l4.tsv"
    if how == "folder beside a .gz":
        _gzip_beside(layer, layer.read_text())
    layer.unlink()
    layer.mkdir()
    with pytest.raises(ChallengeFormatError, match="is a folder") as info:
        io.read_network(data, 1024, 6)
    assert info.value.path == layer
    with pytest.raises(ChallengeFormatError) as info:
        study.load_problem(neurons=1024, layers=6, data=str(data), cache=False)
    assert info.value.path == layer
    code, err = run([*INFER, "--data", str(data)], capsys)
    assert_error(code, err, str(layer), "is a folder")
    assert "categories" not in err  # no run


@pytest.mark.parametrize("how", ["folder", "broken link"])
def test_something_not_a_file_at_the_categories_name_is_an_error(data, capsys, how):
    """Before, a folder (or a broken link) where the truth should be: a run without a
    verdict, exit 0."""
    truth = data / "neuron1024-l6-categories.tsv"
    truth.unlink()
    if how == "folder":
        truth.mkdir()
    else:
        truth.symlink_to(data / "no-such-file.tsv")
    error = ChallengeFormatError if how == "folder" else FileNotFoundError
    with pytest.raises(error, match=str(truth)):
        study.load_problem(neurons=1024, layers=6, data=str(data), cache=False)
    code, err = run([*INFER, "--data", str(data)], capsys)
    assert_error(code, err, str(truth))
    assert "PASS" not in capsys.readouterr().out


def test_a_folder_at_the_inputs_name_is_an_error_naming_it(data, capsys):
    """Before: ``read_inputs`` looked for the inputs inside the folder and named a file in
    it as missing, and the CLI said "no such file" of the folder."""
    inputs = data / "sparse-images-1024.tsv"
    inputs.unlink()
    inputs.mkdir()
    with pytest.raises(ChallengeFormatError, match="is a folder; expected the inputs file"):
        io.read_inputs(inputs, 1024)
    code, err = run([*INFER, "--data", str(data)], capsys)
    assert_error(code, err, str(inputs), "is a folder")


# --------------------------------------------------------------------------- .tsv and .tsv.gz


def _gzip_beside(path: Path, text: str) -> Path:
    """``path.gz`` holding ``text``, gzipped."""
    packed = path.with_name(path.name + ".gz")
    packed.write_bytes(gzip.compress(text.encode()))
    return packed


def test_a_tsv_and_tsv_gz_are_read_when_the_same_and_refused_when_they_differ(data, capsys):
    """``gunzip -k`` leaves the same text twice: read, no word. Two different texts: which
    holds the data is not for the reader to guess, so an error naming both (before, the
    plain one was read without a word)."""
    layer = data / "neuron1024" / "n1024-l2.tsv"
    text = layer.read_text()
    packed = _gzip_beside(layer, text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = io.read_network(data, 1024, 6)
    assert (same.layers[1] != io.read_layer(packed, 1024)).nnz == 0
    code, err = run([*INFER, "--data", str(data)], capsys)
    assert code == 0, err

    lines = text.splitlines()
    row, col, _ = lines[2].split("\t")
    lines[2] = f"{row}\t{col}\t0.5"
    _gzip_beside(layer, "\n".join(lines) + "\n")
    with pytest.raises(ChallengeFormatError) as info:
        io.read_network(data, 1024, 6)
    assert str(layer) in str(info.value) and str(packed) in str(info.value)
    assert "differ" in str(info.value) and "from line 3 on" in str(info.value)
    code, err = run([*INFER, "--data", str(data)], capsys)
    assert_error(code, err, str(layer), str(packed), "from line 3 on")


def test_inputs_and_categories_pairs_that_differ_are_refused_too(data, capsys):
    """The same rule for every name of the folder: the inputs and the truth."""
    truth = data / "neuron1024-l6-categories.tsv"
    packed = _gzip_beside(truth, truth.read_text() + "7\n")  # one category more
    with pytest.raises(ChallengeFormatError, match="differs from"):
        study.load_problem(neurons=1024, layers=6, data=str(data), cache=False)
    packed.unlink()
    inputs = data / "sparse-images-1024.tsv"
    packed = _gzip_beside(inputs, "1\t1\t1\n")
    code, err = run([*INFER, "--data", str(data)], capsys)
    assert_error(code, err, str(inputs), str(packed), "from line 1 on")


# --------------------------------------------------------------------------- the cache


def test_a_cache_of_other_files_under_a_networks_cache_name_is_refused(tmp_path):
    """The cache file's name is the key of its text files, but nothing in the file tied it
    to them: a cache of another network of the same size copied under the name was loaded
    as this one (a wrong answer). It is refused now, and rebuilt."""
    cache = tmp_path / "cache"
    a = make_network(1024, 6, seed=3).layers
    b = [w.copy() for w in a]
    b[0].data *= 2  # same size, other weights
    io.write_weights(tmp_path / "a", a)
    io.write_weights(tmp_path / "b", b)
    io.read_network(tmp_path / "a", 1024, 6, cache=cache)
    (cache_a,) = cache.glob("*.npz")
    io.read_network(tmp_path / "b", 1024, 6, cache=cache)
    (cache_b,) = set(cache.glob("*.npz")) - {cache_a}
    shutil.copy(cache_a, cache_b)
    with pytest.warns(io.CacheWarning, match="made from other files"):
        again = io.read_network(tmp_path / "b", 1024, 6, cache=cache)
    assert all((x != y).nnz == 0 for x, y in zip(again.layers, b, strict=True))
    # a flipped bit in the values is refused too (the zip's CRC-32), not loaded as a value
    raw = bytearray(cache_b.read_bytes())
    value = np.float32(b[0].data[0]).tobytes()
    at = raw.index(value * 4)  # inside the values array, not a header
    raw[at] ^= 1
    cache_b.write_bytes(bytes(raw))
    with pytest.warns(io.CacheWarning, match="CRC"):
        again = io.read_network(tmp_path / "b", 1024, 6, cache=cache)
    assert all((x != y).nnz == 0 for x, y in zip(again.layers, b, strict=True))
