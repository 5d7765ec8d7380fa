"""Under CI=true a test that would skip for want of data, SLURM or an extra fails instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]

INNER = '''
import pytest

def test_needs_slurm():
    pytest.skip("SLURM is not running")

@pytest.mark.skipif(True, reason="official challenge data not found")
def test_needs_shared():
    pass

def test_runs():
    """
    >>> 1 + 1  # doctest: +SKIP
    3
    """
'''


@pytest.mark.parametrize("ci", ["true", ""])
def test_skips_fail_under_ci(tmp_path, ci):
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = ci
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA",
                          "--doctest-modules", "-o", "addopts=", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = run.stdout
    if ci:
        assert run.returncode == 1, out
        # a skip in the test body fails it, one in setup (a skipif mark, a fixture) errors it;
        # the +SKIP doctest still skips
        assert "1 failed, 1 passed, 1 skipped, 1 error" in out, out
        assert "CI=true and this test would have skipped: SLURM is not running" in out
        assert "would have skipped: official challenge data not found" in out
    else:
        assert run.returncode == 0, out
        assert "1 passed, 3 skipped" in out, out
