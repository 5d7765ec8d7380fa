"""The package's house rules that the import-layer contracts cannot see (docs/architecture.md).

``lint-imports`` (run by ``.ci/run``) checks the layers and that no package's modules import
each other in a circle. These tests check the rest, reading the sources:

* no module imports a private name (``_x``) from another module;
* every module's docstring says what it is;
* no module is over :data:`MAX_LINES` lines, except the compiled kernels named in
  :data:`LONG_KERNELS`, whose hot loops are compiled together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "sdnn_dask"

#: About 600 lines, with a margin for a docstring or two.
MAX_LINES = 650

#: Modules allowed past MAX_LINES, and why.
LONG_KERNELS: dict[str, str] = {}

MODULES = sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_module(name: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = _name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_private_name_is_imported_from_another_module(path):
    tree = ast.parse(path.read_text())
    private = [
        f"line {node.lineno}: from {_imported_module(_name(path), path, node)} "
        f"import {alias.name}"
        for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
        and _imported_module(_name(path), path, node).startswith("sdnn_dask")
    ]
    assert not private, f"{path.relative_to(PACKAGE.parent)} imports private names: {private}"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_every_module_says_what_it_is(path):
    if path.name == "__main__.py":
        return
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc and len(doc.split()) >= 4, f"{path.relative_to(PACKAGE.parent)}: no docstring"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_modules_stay_small(path):
    lines = len(path.read_text().splitlines())
    name = _name(path)
    if name in LONG_KERNELS:
        return
    assert lines <= MAX_LINES, (
        f"{path.relative_to(PACKAGE.parent)} has {lines} lines (at most {MAX_LINES}): split "
        "it by concept, or name it in LONG_KERNELS with the reason")


def test_the_long_kernels_exist():
    names = {_name(p) for p in MODULES}
    assert set(LONG_KERNELS) <= names
