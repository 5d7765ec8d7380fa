"""Shared fixtures: the real challenge data (when present) and a real Dask cluster."""

from __future__ import annotations

import faulthandler
import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from sdnn_dask.data import io

REPO = Path(__file__).resolve().parents[1]


def _shared_data() -> Path | None:
    env = os.environ.get("SDNN_GRAPHCHALLENGE_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data" / "graphchallenge")
    for path in candidates:
        if (path / "neuron1024").is_dir():
            return path
    return None


SHARED = _shared_data()
needs_shared = pytest.mark.skipif(
    SHARED is None,
    reason="official challenge data not found: set SDNN_GRAPHCHALLENGE_DATA or place it at "
           "../shared/data/graphchallenge beside the repo",
)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if SHARED is None:
        pytest.skip("official challenge data not found (../shared/data/graphchallenge or "
                    "$SDNN_GRAPHCHALLENGE_DATA)")
    return SHARED


@pytest.fixture(scope="session")
def official_network(shared_data, tmp_path_factory):
    """The official 1024-120 network (cached in a per-session temp folder)."""
    cache = tmp_path_factory.mktemp("npz-cache")
    return io.read_network(shared_data, 1024, 120, cache=cache)


@pytest.fixture(scope="session")
def official_inputs(shared_data) -> sp.csr_matrix:
    """The official rows 1..1200 of sparse-images-1024."""
    return io.read_inputs(shared_data / "sparse-images-1024-rows1-1200.tsv.gz", 1024)


@pytest.fixture(scope="session")
def official_truth(shared_data) -> np.ndarray:
    """Truth categories (0-based) with id <= 1200: the rows of the official subset."""
    truth = io.read_categories(shared_data / "neuron1024-l120-categories.tsv.gz")
    return truth[truth < 1200]


#: A worker of the session's cluster whose event loop answers nothing for this long dumps
#: every thread's stack to its stderr (captured with the test that waits on it).
STALL_DUMP_SECONDS = 150


def _watch_for_stalls(client, stop: threading.Event) -> None:
    """Re-arm each worker's :func:`faulthandler.dump_traceback_later` every 30 s through
    its event loop: a loop that stops answering (a deadlock, a task holding the GIL)
    lets the timer fire, and the failing test shows where every thread of it stood."""
    while not stop.wait(30):
        try:
            client.run(faulthandler.dump_traceback_later, STALL_DUMP_SECONDS,
                       on_error="ignore")
        except Exception:  # a worker restarting, the cluster closing: next round
            pass


@pytest.fixture(scope="session")
def client():
    """A real distributed LocalCluster: 2 single-threaded worker processes, loopback."""
    from sdnn_dask.cluster import local_client

    with local_client(2) as c:
        stop = threading.Event()
        c.run(faulthandler.dump_traceback_later, STALL_DUMP_SECONDS)
        threading.Thread(target=_watch_for_stalls, args=(c, stop), daemon=True,
                         name="stall-watch").start()
        yield c
        stop.set()
        c.run(faulthandler.cancel_dump_traceback_later, on_error="ignore")


# Under CI nothing may be skipped for want of data, SLURM or an extra: CI installs every
# extra, starts SLURM and has ../shared, so a skip there means a test silently did not run.
# Locally the same tests skip with their reason. (Doctests marked +SKIP are not this.)
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail") \
            and not isinstance(item, pytest.DoctestItem):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        reason = str(reason).removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = (f"CI=true and this test would have skipped: {reason}\n"
                           "(CI must provide what it needs; unset CI to let it skip locally)")


def pytest_report_header(config):
    seed = os.environ.get("HYPOTHESIS_SEED", "random (printed on failure)")
    absent = "absent (those tests FAIL under CI=true)" if IN_CI else "absent (those tests skip)"
    return [f"shared data: {SHARED or absent}", f"hypothesis seed: {seed}",
            f"CI={IN_CI}: skips for missing data, SLURM or extras {'fail' if IN_CI else 'skip'}"]


SYSTEM = Path(__file__).resolve().parent / "system"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests under ``tests/system`` (the CLI, faults, SLURM, the browser, notebooks, docs)
    are marked ``system``: ``python -m pytest -m "not system"`` runs the fast rest."""
    for item in items:
        if SYSTEM in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.system)


#: SLURM node states a job can start on.
SLURM_UP = ("idle", "mixed", "allocated", "completing")


def slurm_unavailable() -> str | None:
    """Why SLURM cannot run a test here, or None (the SLURM tests and the docs' SLURM
    blocks skip for it; under CI this file turns such skips into failures)."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no SLURM here (sinfo/sbatch not found); .ci/slurm-up starts one (root, Debian)"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                              timeout=20)
    except subprocess.TimeoutExpired:
        return "SLURM does not answer: sinfo took more than 20 s"
    if proc.returncode != 0:
        return f"SLURM does not answer: sinfo: {proc.stderr.strip() or proc.returncode}"
    states = {s.rstrip("*~#$@+-") for s in proc.stdout.split()}
    if not states & set(SLURM_UP):
        return f"no SLURM node is up (sinfo states: {sorted(states) or 'none'})"
    try:
        import dask_jobqueue  # noqa: F401
    except ImportError:
        return "dask-jobqueue is not installed: pip install 'sdnn_dask[slurm]'"
    return None
