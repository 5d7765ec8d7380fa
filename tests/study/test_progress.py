"""Progress bars over the runs: the library's compare and Study.run, and the CLI's compare
and study, each show one bar on stderr that reaches n/n; progress=False, bar=False and
--quiet show none."""

from __future__ import annotations

import logging
import re
import textwrap

import pytest
from cli_run import run

from sdnn_dask import records, study
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
    # 3 repeats by default (the reference and the kernel, each 3 times)
    assert drawn and drawn[-1].startswith("runs: 100%") and "6/6" in drawn[-1]
    assert "3 repeats of 2 configuration(s), 6 runs" in err
    assert "the first repeat took " in err and "the 2 left will take about " in err
    code, err = run([*serial, "--quiet"], capsys)
    assert code == 0 and err == ""


class FakeClient:
    """A client whose close logs what the nannies log when they kill a busy worker."""

    def __init__(self):
        self.closed = 0

    def nthreads(self):
        return {"tcp://a": 1, "tcp://b": 1}

    def close(self):
        self.closed += 1
        logging.getLogger("distributed.nanny").warning("Worker process still alive, killing")


def test_ctrl_c_in_a_study_closes_the_cluster_it_started_quietly(tmp_path, monkeypatch,
                                                                 caplog):
    """A KeyboardInterrupt (a notebook's interrupt button) stops Study.run after closing
    the cluster it started, without the logs of workers killed mid-task; the runs recorded
    so far stay."""
    import sdnn_dask.cluster
    from sdnn_dask.study.runner import Runner

    fake = FakeClient()
    monkeypatch.setattr(sdnn_dask.cluster, "local_client", lambda workers=None: fake)
    real_run = Runner.run

    def interrupted_after_one(self, spec, *, repeat=0):
        if spec.strategy != "kernel":
            raise KeyboardInterrupt
        return real_run(self, spec, repeat=repeat)

    monkeypatch.setattr(Runner, "run", interrupted_after_one)
    path = tmp_path / "tiny.yaml"
    path.write_text(textwrap.dedent(STUDY))
    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        Study.from_yaml(path).run(None, tmp_path / "r", progress=False)
    assert fake.closed == 1 and not caplog.records
    assert logging.root.manager.disable == logging.NOTSET  # logging back on
    assert len(records.recorded_keys(tmp_path / "r")) == 1
    fake.close()  # an ordinary close still logs
    assert len(caplog.records) == 1


def test_compare_estimates_the_rest_after_the_first_repeat(client, tiny_problem):
    specs = [RunSpec("kernel"), RunSpec("data", "block")]
    events: list[str] = []
    study.compare(tiny_problem, client, specs=specs, repeat=3, bar=False,
                  progress=events.append,
                  on_run=lambda outcome, done, total: events.append(f"run {done}/{total}"))
    # before any run: how many, and that the estimate comes after the first repeat
    assert events.index("3 repeats of 2 configuration(s), 6 runs: how long they take is "
                        "estimated after the first repeat") < events.index("run 1/6")
    said = [i for i, e in enumerate(events) if e.startswith("the first repeat took ")]
    assert said == [events.index("run 2/6") + 1]  # once, right after the first repeat
    found = re.search(r"took (\d+) s; the 2 left will take about (\d+) s more",
                      events[said[0]])
    assert found, events[said[0]]
    first, rest = int(found[1]), int(found[2])
    assert abs(rest - 2 * first) <= 1  # the first repeat's time x the repeats left
    once: list[str] = []
    study.compare(tiny_problem, client, specs=specs[:1], bar=False, progress=once.append)
    assert not any("repeat" in e for e in once)  # one repeat: nothing to estimate


def test_durations_read_as_a_person_reads_them():
    from sdnn_dask.study.comparison import duration_text, estimate_text

    assert [duration_text(s) for s in (0.4, 45, 125, 3780)] == [
        "0 s", "45 s", "2 min 5 s", "1 h 3 min"]
    assert estimate_text(61, 2) == ("the first repeat took 1 min 1 s; the 2 left will take "
                                    "about 2 min 2 s more (an estimate: the first repeat's "
                                    "time x 2, its warm-ups and partitions included)")


def test_the_compare_command_repeats_three_times_unless_told():
    from sdnn_dask.cli import build_parser

    assert build_parser().parse_args(["compare"]).repeat == 3
    assert build_parser().parse_args(["compare", "--repeat", "1"]).repeat == 1
