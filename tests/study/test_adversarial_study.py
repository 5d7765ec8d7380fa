"""Adversarial study files and results folders (issue 34): each mistake is one ``error:``
line at exit 2 before any run (naming the study file, the key or the path), and Ctrl-C in
a study one line at exit 130 that says how to go on.

Every case goes through ``sdnn-dask study`` (``main`` in this process, or
``python -m sdnn_dask`` where a signal or a hang is what is tested) on tiny problems.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dask
import pytest
from cli_run import ENV, interrupt, one_error_line, run, spawned_workers

from sdnn_dask import records

#: One serial run of a tiny problem: a study that would finish in a second if let run.
TINY = """
    problems: [{neurons: 1024, layers: 2, inputs: 20}]
    runs: [{strategy: kernel}]
"""


def write(folder: Path, text: str, name: str = "s.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


# --------------------------------------------------------------------------- the grid's size


def test_a_grid_over_the_limit_is_refused_with_its_count(tmp_path, capsys):
    """Counted from the lists, before a run is made: the limit is the setting's."""
    path = write(tmp_path, """
        repeats: 3
        problems: [{neurons: 1024, layers: 2, inputs: [20, 30]}]
        runs: [{strategy: [reference, kernel]}]
    """)
    with dask.config.set({"sdnn.study.max-runs": 10}):
        code, err = run(["study", str(path), "--results", str(tmp_path / "r"), "-q"], capsys)
    assert code == 2
    assert one_error_line(err) == (
        f"error: {path}: the grid has 12 runs (2 problem(s) x 2 run configuration(s) x 3 "
        "repeat(s)); a study runs at most 10 (sdnn.study.max-runs): split it, or shorten "
        "its lists\n")
    assert not (tmp_path / "r").exists()


def test_a_million_run_grid_is_refused_at_once(tmp_path):
    """The default limit (10000). The old code made and checked the grid's runs, then
    started a million of them: here it is refused before one is made."""
    seeds = list(range(100))
    path = write(tmp_path, f"""
        repeats: 5000
        problems: [{{neurons: 1024, layers: 2, inputs: 20}}]
        runs: [{{strategy: data, partition: random, seed: {seeds}, workers: [1, 2]}}]
    """)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "sdnn_dask", "study", str(path),
                             "--results", str(tmp_path / "r"), "-q"], env=ENV,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("a million-run study was not refused within 60 s")
    assert proc.returncode == 2
    assert one_error_line(err) == (
        f"error: {path}: the grid has 1,000,000 runs (1 problem(s) x 200 run configuration(s) "
        "x 5,000 repeat(s)); a study runs at most 10,000 (sdnn.study.max-runs): split it, or "
        "shorten its lists\n")
    assert time.monotonic() - start < 30


# --------------------------------------------------------------------------- the study file


def test_an_empty_problem_list_is_an_error_not_the_full_challenge(tmp_path, capsys):
    """The old code ran the default problem, 1024-120 x 60000, for ``problems: []``."""
    path = write(tmp_path, "problems: []\nruns: [{strategy: kernel}]\n")
    code, err = run(["study", str(path), "--results", str(tmp_path / "r"), "-q"], capsys)
    assert code == 2
    assert one_error_line(err).startswith(f"error: {path}: problems: an empty list; give at "
                                          "least one problem")
    assert not (tmp_path / "r").exists()


#: "Billion laughs": nine lists of nine aliases of the one before, 9**9 "lol"s in a few
#: hundred bytes. The old code built it (cheaply: aliases share) and then quoted it in its
#: "description: expected text" message: 4 GB to stderr, then a MemoryError.
ALIAS_BOMB = "\n".join([
    "name: laughs", "description:", "  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]",
    *(f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)),
    "runs: [{strategy: kernel}]\n"])


def capped(argv: list[str], memory: int = 2 * 2**30, timeout: float = 60
           ) -> subprocess.CompletedProcess:
    """``sdnn-dask argv`` with its address space capped at ``memory`` bytes and a timeout:
    a regression that builds what it should refuse fails here instead of swapping."""
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    proc = subprocess.Popen([sys.executable, "-m", "sdnn_dask", *argv], env=ENV,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=limit)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"sdnn-dask {argv[0]} still running after {timeout} s")
    return subprocess.CompletedProcess(argv, proc.returncode, out,
                                       err[:10_000].decode(errors="replace"))


def test_an_alias_bomb_is_refused_before_it_is_built(tmp_path):
    """Aliases are refused as the YAML is composed, at the first anchor: nothing is built
    and nothing long is said, under an address space of 2 GiB."""
    path = write(tmp_path, ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 600
    proc = capped(["study", str(path), "--results", str(tmp_path / "r"), "-q"])
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc.stderr) == (
        f"error: {path}, line 3: a YAML anchor or alias (&a0); a study file writes each "
        "value out (an alias chain can expand a few bytes past memory)\n")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("text, line, what", [
    ("base: &b {strategy: kernel}\nruns: [*b]\n", 1, "&b"),
    # an alias of an anchor PyYAML never saw is an alias all the same
    ("runs: [{strategy: kernel}]\ndescription: *nowhere\n", 2, "*nowhere"),
    ("runs:\n  - <<: *base\n    strategy: kernel\n", 2, "*base"),
])
def test_anchors_and_aliases_are_refused_with_their_line(tmp_path, capsys, text, line, what):
    path = write(tmp_path, text)
    code, err = run(["study", str(path), "-q"], capsys)
    assert code == 2
    assert one_error_line(err).startswith(f"error: {path}, line {line}: a YAML anchor or "
                                          f"alias ({what}); ")


@pytest.mark.parametrize("text, message", [
    ("runs: [{strategy: kernel}]\ndescription: " + "[" * 40 + "]" * 40 + "\n",
     "line 2: nested over 16 deep"),
    ("runs: [{strategy: kernel}]\n# " + "x" * 2**20 + "\n", "over 1,048,576 bytes"),
    ("runs: [{strategy: kernel}]\ndescription: caf\xe9\n", "line 2: not UTF-8 text"),
])
def test_a_study_file_past_its_bounds_is_refused(tmp_path, capsys, text, message):
    """The old code let deep nesting end in a RecursionError traceback, read any size, and
    raised UnicodeDecodeError on a Latin-1 file."""
    path = tmp_path / "s.yaml"
    path.write_bytes(text.encode("latin-1"))
    code, err = run(["study", str(path), "-q"], capsys)
    assert code == 2
    assert one_error_line(err).startswith(f"error: {path}{', ' if 'line' in message else ': '}"
                                          f"{message}")


@pytest.mark.parametrize("text, cut", [
    ("description: [" + ", ".join(["word"] * 5000) + "]\n", "...(5000 items)"),
    ("name: laughs\n? " + "k" * 5000 + "\n: 1\n", "...(5000 chars)"),
    ("runs: [{strategy: kernel, partition: " + "p" * 5000 + "}]\n", "...(5000 chars)"),
])
def test_values_quoted_in_messages_are_cut(tmp_path, capsys, text, cut):
    """A value a message quotes is cut to 200 characters, its length said."""
    path = write(tmp_path, text if text.startswith("runs") else
                 text + "runs: [{strategy: kernel}]\n")
    code, err = run(["study", str(path), "-q"], capsys)
    assert code == 2
    assert cut in one_error_line(err)
    assert len(err) < 800, err


@pytest.mark.parametrize("name", ["../../escape", "/tmp/abs", "a/b", ".hidden", ".."])
def test_a_study_name_must_be_plain(tmp_path, monkeypatch, capsys, name):
    """The name is the default results folder under sdnn-results/: the old code wrote
    ``../../escape`` two folders above it."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    path = write(work, f"name: {name!r}\n" + textwrap.dedent(TINY))
    code, err = run(["study", str(path), "-q"], capsys)
    assert code == 2
    assert one_error_line(err).startswith(f"error: {path}: name: {name!r} is not a plain "
                                          "name")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "s.yaml"]


@pytest.mark.parametrize("entry, message", [
    ("data: /nonexistent", "problems[0]: data /nonexistent: no such folder"),
    ("data: [., missing]", "problems[0]: data missing: no such folder (relative to the "
                           "study file: {folder}/missing)"),
    ("inputs_file: /nonexistent.tsv", "problems[0]: inputs_file /nonexistent.tsv: no such "
                                      "file"),
])
def test_a_missing_path_names_the_study_file_and_the_key(tmp_path, capsys, entry, message):
    """The old code said ``error: data /nonexistent: no such folder`` when that problem's
    turn came, naming no study file (after a cluster was started, and earlier problems
    run)."""
    path = write(tmp_path, f"""
        problems:
          - {{neurons: 1024, layers: 2, inputs: 20, {entry}}}
        runs: [{{strategy: kernel}}]
    """)
    code, err = run(["study", str(path), "--results", str(tmp_path / "r"), "-q"], capsys)
    assert code == 2
    assert one_error_line(err) == f"error: {path}: {message.format(folder=tmp_path)}\n"
    assert not (tmp_path / "r").exists()


def test_a_study_of_more_workers_than_the_machine_hosts_is_refused(tmp_path, capsys):
    """``workers: 100000`` names the study file and its key (the old code went on; with a
    run that needs the cluster it started them all)."""
    path = write(tmp_path, "workers: 100000\n" + textwrap.dedent(TINY))
    code, err = run(["study", str(path), "--results", str(tmp_path / "r"), "-q"], capsys)
    assert code == 2
    assert one_error_line(err).startswith(f"error: {path}: workers 100000: a LocalCluster on "
                                          "this machine takes at most ")


def test_generated_inputs_past_memory_are_refused(tmp_path, capsys):
    path = write(tmp_path, """
        problems: [{neurons: 1024, layers: 2, inputs: 1000000000000}]
        runs: [{strategy: kernel}]
    """)
    code, err = run(["study", str(path), "--results", str(tmp_path / "r"), "-q"], capsys)
    assert code == 2
    assert "1,000,000,000,000 input rows would take about" in one_error_line(err)


# --------------------------------------------------------------------------- the results folder


@pytest.mark.parametrize("part, kind", [("runs", "file"), ("layers", "file"),
                                        ("records.csv", "folder")])
def test_a_results_folder_with_a_part_of_the_wrong_kind_is_refused_up_front(
        tmp_path, capsys, part, kind):
    """``R/runs`` a file: the old code ran the first run, then raised FileExistsError (a
    traceback); ``records.csv`` a folder failed after every run."""
    path = write(tmp_path, TINY)
    results = tmp_path / "r"
    results.mkdir()
    if kind == "file":
        (results / part).write_text("in the way")
    else:
        (results / part).mkdir()
    code, err = run(["study", str(path), "--results", str(results), "-q"], capsys)
    assert code == 2
    message = one_error_line(err)
    assert message.startswith(f"error: --results: {results / part}: ")
    assert ("not a folder" if kind == "file" else "a folder where the study writes a file") \
        in message
    assert sorted(p.name for p in results.iterdir()) == [part]  # nothing run or written


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_in_a_study_is_one_line_that_says_how_to_go_on(tmp_path):
    """SIGINT to the whole process group, as a terminal sends it, once the study has
    recorded a run: the old code printed every worker's KeyboardInterrupt traceback."""
    path = write(tmp_path, """
        name: interrupted
        repeats: 50
        workers: 2
        problems: [{neurons: 1024, layers: 30, inputs: 3000}]
        runs:
          - {strategy: kernel}
          - {strategy: data, partition: [block, hash]}
    """)
    results = tmp_path / "r"
    seen: list[int] = []

    def two_recorded(proc) -> bool:
        if len(records.recorded_keys(results)) < 2:
            return False
        seen.append(len(spawned_workers(proc.pid)))  # they get the signal too
        return True

    code, err = interrupt(["study", str(path), "--results", str(results), "-q"],
                          two_recorded, waiting="the study recorded no run in time")
    assert seen == [2]
    assert code == 130
    recorded = len(records.recorded_keys(results))
    assert err == (f"interrupted; {recorded} of the 150 runs are recorded in {results}/: go "
                   "on with --resume\n")
