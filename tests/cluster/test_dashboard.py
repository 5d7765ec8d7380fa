"""The Dask dashboard's link: said once when the CLI starts a cluster, or, without bokeh
(the dashboard extra), that the dashboard is not running and how to get it."""

from __future__ import annotations

import importlib.util
import sys
import types

from cli_run import run

from sdnn_dask.cli.common import Progress, say_dashboard
from sdnn_dask.cluster.client import DASHBOARD_MISSING, dashboard_line

HAS_BOKEH = importlib.util.find_spec("bokeh") is not None


def test_the_line_says_whether_the_dashboard_runs(client):
    # distributed gives a link either way: without bokeh its page only says bokeh is missing
    assert client.dashboard_link.startswith("http://127.0.0.1:")
    expected = f"dashboard: {client.dashboard_link}" if HAS_BOKEH else DASHBOARD_MISSING
    assert dashboard_line(client) == expected


def test_a_scheduler_that_loaded_the_dashboard_gets_its_link(client, monkeypatch):
    # the LocalCluster's scheduler runs in this process: it sees this module table
    monkeypatch.setitem(sys.modules, "distributed.dashboard.scheduler",
                        types.ModuleType("distributed.dashboard.scheduler"))
    assert dashboard_line(client) == f"dashboard: {client.dashboard_link}"


def test_quiet_or_no_cluster_says_nothing(client, capsys):
    say_dashboard(client, Progress(quiet=True))
    say_dashboard(None, Progress())
    assert capsys.readouterr().err == ""
    say_dashboard(client, Progress())
    assert capsys.readouterr().err == dashboard_line(client) + "\n"


def test_compare_says_the_dashboard_once_when_it_starts_a_cluster(tmp_path, capsys):
    code, err = run(["compare", "-N", "1024", "-L", "4", "-n", "200", "--partitions", "block",
                     "--model", "none", "--hybrid", "none", "--workers", "1", "--no-write"],
                    capsys)
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("dashboard: ")]
    if HAS_BOKEH:
        assert len(lines) == 1 and lines[0].startswith("dashboard: http://127.0.0.1:")
    else:
        assert lines == [DASHBOARD_MISSING]
