"""Every reference to the package's modules and names, in its docstrings and in the docs,
names something that exists.

Modules were merged and renamed (``.direct``, ``.slot``, ``.parts``, ``.feed`` are gone),
and about twenty docstrings still pointed at them. This reads every ``sdnn_dask/**/*.py``
(docstrings and comments) and ``README.md`` and ``docs/*.md`` (without importing anything)
and resolves:

* Sphinx roles (``:mod:``, ``:func:``, ``:class:``, ``:meth:``, ``:attr:``, ``:data:``,
  ``:exc:``, ``:obj:``): an absolute ``sdnn_dask.x.y`` must be a module, or a name
  defined, imported or assigned in one (a class's members too); a relative ``.x.y`` (and
  an unqualified ``x``) is looked up as Sphinx does, by suffix: some such full name must
  end with ``.x.y``. Targets outside the package (``numpy.ndarray``, ``ValueError``) are
  not checked;
* dotted ``sdnn_dask.x.y`` names in text;
* ``sdnn_dask/...`` and ``tests/...`` paths in text: the file or folder must exist.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sdnn_dask"
SOURCES = sorted(PACKAGE.rglob("*.py"))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj):`(?:[^`<]*<)?~?([\w.]+)>?`")
DOTTED = re.compile(r"(?<![\w./-])(sdnn_dask(?:\.\w+)+)")
PATH = re.compile(r"(?<![\w./-])((?:sdnn_dask|tests|docs|benchmarks|scripts|studies)"
                  r"/[\w./-]*\w)")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _names(body: list[ast.stmt]) -> dict[str, list[ast.stmt]]:
    """The names a module or class body binds, with a class's body for its members."""
    out: dict[str, list[ast.stmt]] = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = node.body
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out[node.name] = []
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        out[name.id] = []
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target,
                                                                              ast.Name):
            out[node.target.id] = []
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                out[(alias.asname or alias.name).split(".")[0]] = []
        elif isinstance(node, ast.If | ast.Try):  # TYPE_CHECKING imports, fallbacks
            out.update(_names(node.body))
            for handler in getattr(node, "handlers", []):
                out.update(_names(handler.body))
            out.update(_names(node.orelse))
    return out


def _self_attributes(body: list[ast.stmt]) -> set[str]:
    """The attributes a class's methods assign on ``self``."""
    return {node.attr for node in ast.walk(ast.Module(body=body, type_ignores=[]))
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name) and node.value.id == "self"}


def _index() -> set[str]:
    """Every module of the package and every name its modules (and classes) bind, a
    name imported from another module of the package standing for what it imports."""
    full: set[str] = set()
    aliases: dict[str, str] = {}  # module.name -> the full name it imports
    for path in SOURCES:
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        full.add(module)
        tree = ast.parse(path.read_text())
        for name, body in _names(tree.body).items():
            full.add(f"{module}.{name}")
            members = {**_names(body), **{key: [] for key in _self_attributes(body)}}
            for member, inner in members.items():
                full.add(f"{module}.{name}.{member}")
                full.update(f"{module}.{name}.{member}.{m}" for m in _names(inner))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (
                    node.module or "").startswith("sdnn_dask")):
                base = package.split(".")
                base = base[:len(base) - node.level + 1] if node.level else []
                source = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    aliases[f"{module}.{alias.asname or alias.name}"] = f"{source}.{alias.name}"
    for _ in range(3):  # re-exports of re-exports
        names = sorted(full)
        for alias, source in aliases.items():
            i = bisect.bisect_left(names, source)
            while i < len(names) and (names[i] == source or names[i].startswith(source + ".")):
                full.add(alias + names[i][len(source):])
                i += 1
    return full


INDEX = _index()
SUFFIXES = {name[i:] for name in INDEX for i in [m.start() for m in re.finditer(r"\.", name)]}


def _role_target_ok(target: str) -> bool:
    target = target.rstrip(".")
    if target.startswith("sdnn_dask."):
        return target in INDEX
    if target.startswith("."):
        return target in SUFFIXES
    if "." not in target:  # unqualified: a builtin, or a name somewhere in the package
        return hasattr(builtins, target) or f".{target}" in SUFFIXES
    return True  # dotted and not ours (numpy.ndarray, dask.system.CPU_COUNT)


def _dotted_ok(name: str) -> bool:
    return name.rstrip(".") in INDEX


def _path_ok(path: str) -> bool:
    return (ROOT / path.rstrip(".")).exists()


def unresolved(text: str) -> list[str]:
    """Every reference in ``text`` that names nothing, as written."""
    bad = [f"role {m.group(0)}" for m in ROLE.finditer(text) if not _role_target_ok(m[1])]
    bad += [f"name {m[1]}" for m in DOTTED.finditer(text) if not _dotted_ok(m[1])]
    bad += [f"path {m[1]}" for m in PATH.finditer(text) if not _path_ok(m[1])]
    return bad


def test_every_reference_in_the_sources_and_docs_resolves():
    found = {}
    for path in [*SOURCES, *DOCS]:
        bad = unresolved(path.read_text())
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    assert not found, "unresolved references:\n" + "\n".join(
        f"{name}: {ref}" for name, refs in found.items() for ref in refs)


def test_the_check_sees_a_stale_reference():
    """The resolver itself: what exists passes, what is gone (the old ``.direct``, a
    misspelt name, a moved file) does not."""
    assert unresolved(":mod:`~.faults` :exc:`~sdnn_dask.parallel.faults.WorkerLostError` "
                      ":func:`ValueError` :class:`numpy.ndarray` sdnn_dask.study.Study "
                      "sdnn_dask/parallel/faults.py :meth:`~.SGD.step`") == []
    assert unresolved(":mod:`~.direct` :func:`~.wire.Gone` sdnn_dask.parallel.nothing "
                      "sdnn_dask/parallel/direct.py :func:`gone_function`") == [
        "role :mod:`~.direct`", "role :func:`~.wire.Gone`", "role :func:`gone_function`",
        "name sdnn_dask.parallel.nothing", "path sdnn_dask/parallel/direct.py"]
