"""Running the command line for the CLI tests: in-process (its exit code and stderr), or
as a terminal would, to press Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from sdnn_dask.cli import main


def run(argv: list[str], capsys) -> tuple[int, str]:
    """``main(argv)``'s exit code (returned, or raised as argparse does) and its stderr."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def one_error_line(err: str) -> str:
    """The message of an stderr that is exactly one ``error:`` line."""
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    return err


ROOT = Path(__file__).resolve().parents[1]
#: The environment a subprocess of ``sdnn-dask`` runs in: this checkout first on the path.
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def spawned_workers(pid: int) -> list[psutil.Process]:
    """The worker processes (multiprocessing's spawned children) of process ``pid``."""
    return [c for c in psutil.Process(pid).children()
            if "spawn_main" in " ".join(c.cmdline())]


def interrupt(argv: list[str], ready: Callable[[subprocess.Popen], bool], *,
              after: float = 0.0, limit: float = 180.0, waiting: str = "it was not ready"
              ) -> tuple[int, str]:
    """Run ``sdnn-dask argv`` as a terminal would (its own process group), and press
    Ctrl-C ``after`` seconds once ``ready(proc)``: SIGINT to the whole group, the client
    and every worker alike. Returns the exit code and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "sdnn_dask", *argv], env=ENV,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + limit
        while not ready(proc):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, waiting
            time.sleep(0.02)
        time.sleep(after)
        assert proc.poll() is None, "it ended before the interrupt: make the problem larger"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, err
