"""User errors on the command line: ``error: ...`` on stderr, exit code 2, before any work.

And the final write phase of ``compare``: every file replaced, or none.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from cli_run import run

from sdnn_dask.cli import main
from sdnn_dask.report import html as html_report

#: A small compare: serial runs only, one worker (a few seconds).
SMALL = ["compare", "-N", "1024", "-L", "4", "-n", "200", "--partitions", "none",
         "--model", "none", "--hybrid", "none", "--workers", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("challenge")
    assert main(["generate", str(folder), "-N", "1024", "-L", "2", "-n", "50", "-q"]) == 0
    return folder


OPTIONS = [
    # numeric options, checked by the parser
    (["infer", "-n", "-5"], "--inputs/-n: must be >= 1, got -5"),
    (["compare", "-n", "0"], "--inputs/-n: must be >= 1, got 0"),
    (["generate", "OUT", "-n", "-5"], "--inputs/-n: must be >= 1"),
    (["infer", "-n", "abc"], "'abc' is not an integer"),
    (["infer", "-L", "0"], "--layers/-L: must be >= 1, got 0"),
    (["generate", "OUT", "-L", "0"], "--layers/-L: must be >= 1"),
    (["partition", "-L", "-3"], "--layers/-L: must be >= 1"),
    (["infer", "-N", "1000"], "must be one of 1024, 4096, 16384, 65536"),
    (["compare", "-N", "2048"], "must be one of 1024, 4096, 16384, 65536"),
    (["generate", "OUT", "-N", "1000"], "must be one of 1024, 4096, 16384, 65536"),
    (["partition", "-N", "32"], "must be one of 1024, 4096, 16384, 65536"),
    (["infer", "-k", "0"], "-k/--parts: must be >= 1, got 0"),
    (["compare", "-k", "-1"], "-k/--parts: must be >= 1"),
    (["partition", "-k", "0"], "-k/--parts: must be >= 1"),
    (["infer", "--blocks", "0"], "--blocks: must be >= 1"),
    (["compare", "--blocks", "0"], "--blocks: must be >= 1"),
    (["compare", "--row-groups", "0"], "--row-groups: must be >= 1"),
    (["infer", "--workers", "0"], "--workers: must be >= 1"),
    (["compare", "--workers", "0"], "--workers: must be >= 1"),
    (["infer", "--seed", "-1"], "--seed: must be >= 0, got -1"),
    (["compare", "--seed", "-1"], "--seed: must be >= 0"),
    (["generate", "OUT", "--seed", "-1"], "--seed: must be >= 0"),
    (["partition", "--seed", "-1"], "--seed: must be >= 0"),
    (["infer", "--epsilon", "-1"], "--epsilon: must be a finite number >= 0"),
    (["partition", "--epsilon", "nan"], "--epsilon: must be a finite number >= 0"),
    (["compare", "--epsilon", "inf"], "--epsilon: must be a finite number >= 0"),
    (["infer", "--tile", "0"], "--tile: must be >= 1"),
    (["compare", "--repeat", "0"], "--repeat: must be >= 1"),
    (["partition", "--nbuckets", "0"], "--nbuckets: must be >= 1"),
    # checked against each other, before anything is generated or read
    (["infer", "-k", "2000"], "-k/--parts 2000: at most one part per neuron (N = 1024)"),
    (["compare", "-k", "1025"], "-k/--parts 1025: at most one part per neuron"),
    (["partition", "-k", "2000"], "-k/--parts 2000: at most one part per neuron"),
    (["infer", "--truth", "truth.tsv"], "--inputs-file and --truth go with --data"),
    (["infer", "--data", "/nonexistent/folder"], "--data /nonexistent/folder: no such folder"),
    # the cluster, before anything runs
    (["infer", "--cluster", "nosuchprofile"], "unknown cluster 'nosuchprofile'"),
    (["compare", "--cluster", "nosuchprofile"], "unknown cluster 'nosuchprofile'"),
    (["cluster", "show", "--cluster", "nosuchprofile"], "unknown cluster 'nosuchprofile'"),
    (["compare", "--cluster", "tcp://127.0.0.1:1", "--workers", "2"],
     "--workers starts workers (local, slurm): tcp://127.0.0.1:1 is a running scheduler"),
]


@pytest.mark.parametrize(("argv", "message"), OPTIONS,
                         ids=[" ".join(a) for a, _ in OPTIONS])
def test_bad_option_is_error_and_exit_2_before_any_work(argv, message, tmp_path, capsys):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    code, err = run(argv, capsys)
    assert code == 2, err
    assert "error:" in err and message in err, err
    assert "generating" not in err and "reading" not in err  # nothing was started
    assert not (tmp_path / "out").exists()


def test_truth_and_inputs_file_missing(data, tmp_path, capsys):
    for option in ("--truth", "--inputs-file"):
        missing = tmp_path / "missing.tsv"
        code, err = run(["infer", "--data", str(data), "-L", "2", option, str(missing)],
                        capsys)
        assert code == 2, err
        assert f"error: {option} {missing}: no such file" in err
        assert "reading" not in err  # before the network is read


def test_row_groups_at_most_the_rows(data, capsys):
    """Known once the inputs are read (50 rows here): checked then, before any run."""
    code, err = run(["infer", "--data", str(data), "-L", "2", "--strategy", "hybrid",
                     "--row-groups", "51", "--workers", "1"], capsys)
    assert code == 2, err
    assert "error: --row-groups 51: more row groups than the 50 input rows" in err
    assert "LocalCluster" not in err
    code, err = run(["compare", "--data", str(data), "-L", "2", "-n", "20", "--row-groups",
                     "30", "--partitions", "none", "--model", "none", "--hybrid", "block",
                     "--no-write"], capsys)
    assert code == 2, err
    assert "more row groups than the 20 input rows" in err and "[1/" not in err


def test_data_with_negative_inputs_is_an_error_not_495_rows(data, capsys):
    code, err = run(["infer", "--data", str(data), "-L", "2", "-n", "-5"], capsys)
    assert code == 2 and "--inputs/-n: must be >= 1, got -5" in err


@pytest.mark.parametrize("where", ["file", "proc"])
def test_results_folder_not_writable_fails_before_any_run(where, tmp_path, capsys):
    if where == "file":
        results = tmp_path / "results"
        results.write_text("not a folder")
        expected = f"error: --results {results}: not a folder"
    else:  # even root cannot make a folder under /proc
        results = Path("/proc/nope")
        expected = "error: --results /proc/nope: not writable"
    code, err = run([*SMALL, "--results", str(results)], capsys)
    assert code == 2, err
    assert expected in err
    assert "generating" not in err
    if where == "file":
        assert results.read_text() == "not a folder"


@pytest.mark.parametrize("where", ["file", "proc"])
def test_generate_into_a_file_or_unwritable_folder(where, tmp_path, capsys):
    out = tmp_path / "out" if where == "file" else Path("/proc/nope")
    if where == "file":
        out.write_text("a file")
    code, err = run(["generate", str(out), "-L", "1", "-n", "5"], capsys)
    assert code == 2, err
    assert f"error: generate OUT {out}: not " + ("a folder" if where == "file" else
                                                 "writable") in err
    assert "generating" not in err


def test_study_unknown_cluster(tmp_path, capsys):
    pytest.importorskip("nbclient", reason="needs the study extra")
    notebook = tmp_path / "x.ipynb"
    notebook.write_text("{}")
    code, err = run(["notebook", str(notebook), "--cluster", "nosuchprofile"], capsys)
    assert code == 2 and "error: unknown cluster 'nosuchprofile'" in err


def test_exit_code_2_as_a_program():
    """Through ``python -m sdnn_dask``: status 2, the message once, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "sdnn_dask", "infer", "-k", "2000"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == "error: -k/--parts 2000: at most one part per neuron (N = 1024)\n"


# --------------------------------------------------------------------------- the write phase

OLD = {"records.csv": b"study,run_id\nold,1\n", "layers.csv": b"study,run_id\nold,1\n",
       "summary.md": b"# the previous study\n", "rate.png": b"old png bytes",
       "report.html": b"<html>the previous report</html>"}
#: What compare writes for SMALL (serial runs only: no communication to draw).
WRITTEN = {"records.csv", "layers.csv", "summary.md", "report.html", "rate.png",
           "survivors.png", "distinct-rows.png"}


def _old_results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    for name, content in OLD.items():
        (results / name).write_bytes(content)
    return results


def _assert_as_it_was(results: Path, extra: tuple[str, ...] = ()) -> None:
    # nothing new: no staging folder, no temporary file
    assert sorted(p.name for p in results.iterdir()) == sorted([*OLD, *extra])
    assert {name: (results / name).read_bytes() for name in OLD} == OLD


def test_compare_writes_every_file_and_keeps_the_old_rows(tmp_path, capsys):
    results = _old_results(tmp_path)
    code, err = run([*SMALL, "--results", str(results), "-q"], capsys)
    assert code == 0, err
    assert {p.name for p in results.iterdir()} == WRITTEN  # no communication without model
    runs = pd.read_csv(results / "records.csv")
    # the old row, then the reference and the kernel, 3 repeats each (the default)
    assert runs["study"].iloc[0] == "old" and len(runs) == 1 + 2 * 3
    assert (results / "summary.md").read_bytes() != OLD["summary.md"]
    assert (results / "report.html").read_bytes() != OLD["report.html"]
    assert (results / "rate.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_makes_a_missing_results_folder(tmp_path, capsys):
    results = tmp_path / "new" / "results"
    code, err = run([*SMALL, "--results", str(results), "-q"], capsys)
    assert code == 0, err
    assert {p.name for p in results.iterdir()} == WRITTEN


def test_failed_write_leaves_results_as_they_were(tmp_path, capsys):
    """``communication.png`` a folder: the write phase fails, every file keeps its bytes."""
    results = _old_results(tmp_path)
    (results / "communication.png").mkdir()
    code, err = run([*SMALL, "--model", "block", "-k", "2", "--results", str(results), "-q"],
                    capsys)
    assert code == 2, err
    assert "error: writing the results failed" in err and "communication.png" in err
    assert "left as it was" in err
    _assert_as_it_was(results, extra=("communication.png",))
    assert not any((results / "communication.png").iterdir())


def test_interrupt_while_writing_leaves_results_as_they_were(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(html_report, "render_html", interrupted)  # the last file written
    results = _old_results(tmp_path)
    code, err = run([*SMALL, "--results", str(results), "-q"], capsys)
    assert code == 130, err
    assert "interrupted while writing the results" in err and "left as it was" in err
    _assert_as_it_was(results)


def test_interrupt_between_the_renames_puts_the_old_files_back(tmp_path, capsys, monkeypatch):
    """A Ctrl-C after two of four files were moved into place: both are moved back."""
    results = _old_results(tmp_path)
    replace = os.replace
    moves = []

    def replace_then_interrupt(src, dst):
        if Path(dst).parent == results and Path(src).parent.name.startswith(".staging-"):
            moves.append(dst)  # a move into place (the undo moves come from .staging-*/.old)
            if len(moves) == 3:
                raise KeyboardInterrupt
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_then_interrupt)
    code, err = run([*SMALL, "--results", str(results), "-q"], capsys)
    assert code == 130, err
    assert len(moves) == 3
    _assert_as_it_was(results)


def test_report_write_is_all_or_nothing(tmp_path, capsys):
    results = tmp_path / "results"
    assert run([*SMALL, "--results", str(results), "-q"], capsys)[0] == 0
    (results / "rate.png").unlink()
    (results / "rate.png").mkdir()
    summary = b"# an older summary\n"  # not what the report would write
    (results / "summary.md").write_bytes(summary)
    code, err = run(["report", "--results", str(results), "--write"], capsys)
    assert code == 2, err
    assert "error: writing the report failed" in err and "left as it was" in err
    assert (results / "summary.md").read_bytes() == summary
    assert {p.name for p in results.iterdir()} == WRITTEN


def _copy(data: Path, tmp_path: Path) -> Path:
    """A writable copy of the generated challenge folder (gzipped inputs)."""
    import gzip
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(data, folder)
    for path in list(folder.rglob("*.tsv")):
        with open(path, "rb") as src, gzip.open(f"{path}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        path.unlink()
    return folder


def _inputs_gz(folder: Path) -> Path:
    [path] = folder.glob("sparse-images-*.tsv.gz")
    return path


@pytest.mark.parametrize("damage", ["truncated", "not gzip", "trailing garbage", "1e40",
                                    "nan"])
def test_bad_input_files_are_file_errors_with_exit_2(data, tmp_path, capsys, damage):
    folder = _copy(data, tmp_path)
    path = _inputs_gz(folder)
    raw = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "not gzip":
        path.write_bytes(b"1\t1\t1\n")
    elif damage == "trailing garbage":
        path.write_bytes(raw + b"garbage")
    else:
        import gzip

        text = gzip.decompress(raw).decode().splitlines()
        row, col, _ = text[2].split("\t")
        text[2] = f"{row}\t{col}\t{damage}"
        path.write_bytes(gzip.compress(("\n".join(text) + "\n").encode()))
    code, err = run(["infer", "--data", str(folder), "-L", "2", "--strategy", "kernel",
                     "--no-cache", "-q"], capsys)
    assert code == 2, err
    assert err.startswith("error: ") and path.name in err and "Traceback" not in err
    if damage in ("1e40", "nan"):
        assert "line 3" in err


def test_unreadable_file_is_a_file_error(data, tmp_path, capsys, monkeypatch):
    """As root nothing is unreadable, so ``open`` refuses the inputs file here."""
    import builtins

    folder = _copy(data, tmp_path)
    path = _inputs_gz(folder)
    real = builtins.open

    def denied(file, *args, **kwargs):
        if os.fspath(file) == os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    code, err = run(["infer", "--data", str(folder), "-L", "2", "--strategy", "kernel",
                     "--no-cache", "-q"], capsys)
    assert code == 2 and err.startswith("error: ") and path.name in err, err
    assert "Permission denied" in err


def test_cache_folder_that_is_a_file(data, tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("SDNN_CACHE_DIR", str(blocker))
    code, err = run(["infer", "--data", str(data), "-L", "2", "--strategy", "kernel", "-q"],
                    capsys)
    assert code == 2 and err.startswith("error: ") and str(blocker) in err, err


def test_ill_conditioned_rows_give_no_false_fail(tmp_path, capsys):
    """``compare -n 6000 -L 24`` reported FAIL on every run (row 3196 of the iid rows:
    its float32 error doubles every layer); checked against the bounded float64
    reference, all PASS."""
    code = main(["compare", "-n", "6000", "-L", "24", "--order", "iid", "--partitions",
                 "hash", "--model",
                 "none", "--hybrid", "none", "--workers", "1", "--no-write"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    rows = [line for line in captured.out.splitlines()
            if line.startswith(("reference", "kernel", "data"))]
    assert len(rows) == 3 and all(line.endswith("PASS") for line in rows), captured.out
    assert "1 ill-conditioned row(s)" in captured.err


def test_a_new_report_removes_the_plots_of_an_older_one(tmp_path, capsys):
    results = tmp_path / "results"
    assert run([*SMALL, "--results", str(results), "-q"], capsys)[0] == 0
    stale = ["rate-radixnet-4096-24-s0-6000.png", "communication.png", "comparison.png"]
    mine = ["my-figure.png", "notes.txt", "rates.png"]  # not named as the report's plots
    for name in stale + mine:
        (results / name).write_bytes(b"x")
    code, err = run(["report", str(results)], capsys)
    assert code == 0, err
    names = {p.name for p in results.iterdir()}
    assert names == WRITTEN | set(mine)
    assert (results / "rate.png").read_bytes()[:4] == b"\x89PNG"
