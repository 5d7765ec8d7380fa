"""Progress bars over the runs: the library's compare and Study.run, and the CLI's compare
and study, each show one bar on stderr that reaches n/n; progress=False, bar=False and
--quiet show none."""

from __future__ import annotations

import re
import textwrap

import pytest
from cli_run import run

from sdnn_dask import study
from sdnn_dask.study import RunSpec, Study
from sdnn_dask.study.comparison import RunBar

TINY = ["--neurons", "1024", "--layers", "6", "--inputs", "300"]
STUDY = """
    name: tiny
    problems: [{neurons: 1024, layers: 6, inputs: 300}]
    runs:
      - {strategy: kernel}
      - {strategy: data, partition: [block, hash]}
"""


@pytest.fixture(scope="module")
def tiny_problem():
    return study.load_problem(neurons=1024, layers=6, inputs=300, seed=1)


def bar_lines(err: str) -> list[str]:
    """What a tqdm bar drew on stderr, each redraw (``\\r``) a line of its own."""
    return [line for line in re.split(r"[\r\n]", err) if "run/s" in line or "s/run" in line]


def test_compare_shows_a_bar_that_reaches_n_of_n(client, tiny_problem, capsys):
    specs = [RunSpec("kernel"), RunSpec("data", "block"), RunSpec("data", "hash")]
    said: list[str] = []
    study.compare(tiny_problem, client, specs=specs, progress=said.append)
    drawn = bar_lines(capsys.readouterr().err)
    assert drawn and "3/3" in drawn[-1] and drawn[-1].startswith("runs: 100%")
    # each run named in the description while it runs, and the messages still said
    assert any(line.startswith("data hash: ") and "2/3" in line for line in drawn)
    assert any("sending the weights" in message for message in said)


def test_compare_without_progress_prints_nothing(client, tiny_problem, capsys):
    specs = [RunSpec("kernel"), RunSpec("data", "block")]
    study.compare(tiny_problem, client, specs=specs, progress=False)
    study.compare(tiny_problem, client, specs=specs, bar=False)
    assert capsys.readouterr().err == ""


def test_a_study_shows_a_bar_over_its_runs(client, tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(textwrap.dedent(STUDY))
    grid = Study.from_yaml(path)
    grid.run(client, tmp_path / "shown", report=False)
    drawn = bar_lines(capsys.readouterr().err)
    assert drawn and drawn[-1].startswith("tiny: 100%") and "3/3" in drawn[-1]
    assert any(line.startswith("tiny: data block: ") for line in drawn)
    grid.run(client, tmp_path / "silent", progress=False, report=False)
    assert capsys.readouterr().err == ""


def test_messages_print_above_the_bar_not_through_it(capsys):
    with RunBar(2) as runs:
        say = runs.around(print)
        runs.start("kernel")
        say("a step")
        runs.done("0.1 s PASS")
        runs.done()
    captured = capsys.readouterr()
    assert captured.out == "a step\n"
    assert bar_lines(captured.err)[-1].startswith("runs: 100%")
    with RunBar(2, enabled=False) as runs:
        assert runs.around(print) is print
        runs.start("kernel")
        runs.done()
    assert capsys.readouterr().err == ""


def test_cli_compare_shows_the_bar_and_quiet_hides_it(tmp_path, capsys):
    serial = ["compare", *TINY, "--partitions", "none", "--model", "none", "--hybrid",
              "none", "--results", str(tmp_path / "r")]
    code, err = run(serial, capsys)
    assert code == 0
    drawn = bar_lines(err)
    assert drawn and drawn[-1].startswith("runs: 100%") and "2/2" in drawn[-1]
    code, err = run([*serial, "--quiet"], capsys)
    assert code == 0 and err == ""
