"""Every test module runs alone: ``pytest tests/x/test_y.py`` collects whatever else ran.

pytest puts a test module's own folder on ``sys.path`` (and ``tests/``, the root
conftest's), so a module that imports another folder's module by bare name collects in
the whole suite and fails alone: ``tests/parallel/test_model_dedup.py`` imported
``test_dedup`` (tests/core/) that way. Two checks:

* read every test module (``ast``, no import): it imports no test module (``test_*``: its
  tests would be collected twice) and no helper module of another folder of ``tests/``
  (shared helpers live in ``tests/`` itself, e.g. ``cli_run.py``, ``dedup_cases.py``);
* collect alone (``pytest --collect-only``, one process each, two at a time) one module of
  each folder for each helper module it imports: the check above, made by pytest itself.

One process per module for all of them costs about 100 s on two cores; the reading check
covers every module in well under a second.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
MODULES = sorted(TESTS.rglob("test_*.py"))
#: Every module under tests/ by name, with the folder it is in.
LOCAL = {path.stem: path.parent for path in TESTS.rglob("*.py")}


def _local_imports(path: Path, source: str | None = None) -> set[str]:
    """The names of tests/' own modules that ``path`` (or ``source``, as if it were there)
    imports, at any depth of its code."""
    names = set()
    text = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {name for name in names if name in LOCAL}


def _unreachable(path: Path, source: str | None = None) -> list[str]:
    """What ``path`` imports that it cannot import when run alone (or must not import)."""
    wrong = []
    for name in sorted(_local_imports(path, source)):
        folder = LOCAL[name]
        if name.startswith("test_"):
            wrong.append(f"{name} (a test module: move what it shares into tests/)")
        elif folder not in (TESTS, path.parent):
            wrong.append(f"{name} (in {folder.relative_to(TESTS)}/, not on this module's "
                         "path when it runs alone: move it into tests/)")
    return wrong


def test_no_test_module_imports_what_it_cannot_reach_alone():
    found = {str(path.relative_to(TESTS)): _unreachable(path) for path in MODULES}
    found = {name: wrong for name, wrong in found.items() if wrong}
    assert not found, "\n".join(f"{name} imports {', '.join(wrong)}"
                                for name, wrong in found.items())


def _samples() -> list[Path]:
    """One module per folder and per local module imported (the first by name)."""
    chosen: dict[tuple[Path, str], Path] = {}
    for path in MODULES:
        for name in _local_imports(path):
            chosen.setdefault((path.parent, name), path)
    return sorted(set(chosen.values()))


def _collect_alone(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", str(path)], cwd=TESTS.parent,
                          capture_output=True, text=True, timeout=300)


def test_modules_that_import_helpers_collect_alone():
    samples = _samples()
    assert TESTS / "parallel" / "test_model_dedup.py" in samples  # the case that broke
    with ThreadPoolExecutor(2) as pool:  # two cores: two processes at a time
        runs = dict(zip(samples, pool.map(_collect_alone, samples), strict=True))
    failed = {path: run for path, run in runs.items() if run.returncode != 0}
    assert not failed, "\n\n".join(
        f"{path.relative_to(TESTS)} does not collect alone:\n{run.stdout[-1500:]}"
        for path, run in failed.items())


@pytest.mark.parametrize("source, wrong", [
    ("from test_dedup import x\n", ["test_dedup (a test module: move what it shares into "
                                     "tests/)"]),
    ("def f():\n    import core_helper\n", ["core_helper (in core/, not on this module's "
                                             "path when it runs alone: move it into tests/)"]),
    ("from dedup_cases import assert_bitwise\nimport numpy\n", []),
    ("from parallel_helper import y\n", []),
])
def test_the_reading_check_sees_what_fails_alone(monkeypatch, source, wrong):
    """The check itself, on a module of tests/parallel/, with a helper in tests/core/ and
    one in tests/parallel/ (added to what it knows of tests/, as if they were there)."""
    monkeypatch.setitem(LOCAL, "core_helper", TESTS / "core")
    monkeypatch.setitem(LOCAL, "parallel_helper", TESTS / "parallel")
    assert _unreachable(TESTS / "parallel" / "test_x.py", source) == wrong
