"""Every code block of README.md and docs/*.md runs, as written or in the reduced form below.

Each page's fenced blocks run in order in one folder of their own: a fresh temporary copy
of the repository's tracked files (so a command written for the repository root, such as
``sdnn-dask study studies/quick.yaml`` or ``python benchmarks/...``, runs as written, and
whatever it writes lands in the copy, never in the repository). Blocks that continue one
another (generate, then read what was generated) share it.

- ``bash``/``sh``: ``bash -euo pipefail``, the venv's ``bin`` first on ``PATH``;
  ``console``: its ``$ `` lines, the same way;
- ``python``: saved as a script in the page's folder and run by this interpreter;
- ``yaml``: a Dask config (top-level ``sdnn:``) is merged into the config and every cluster
  profile it names resolved; anything else is a study file, loaded by ``Study.from_yaml``;
- ``text``: output (a table a command prints, a file layout), not run.

A block without a language is an error: say what it is. A block that cannot run as written
is a defect of the page, to be fixed there; the only exceptions are the two tables below.
After each page the copy's tracked files must be unchanged, and so must
``git status --porcelain`` of the repository itself.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import SHARED, slurm_unavailable

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN = {"bash", "sh", "console", "python", "yaml"}
NOT_RUN = {"text"}
TIMEOUT = 300  # seconds, per block

# Lines not run, exactly as written on the page, and why. Kept minimal: installation (this
# test already runs inside the installed venv), a server that never exits, and mutation
# testing (hours on two cores, the `mutation` extra, which `test` does not install, and it
# works in copies of the repository made inside it, in .mutation/).
SKIPPED_LINES = {
    "python3 -m venv .venv && . .venv/bin/activate": "installation",
    'pip install -e ".[test]"': "installation",
    'pip install -e ".[jupyter]"': "installation",
    "jupyter lab studies/": "starts a server that waits for a browser "
                            "(tests/test_notebooks.py executes the notebooks)",
    'pip install -e ".[test,mutation]"': "installation (mutation testing)",
    "python scripts/mutation.py                      # every target, 2 jobs (resumable)":
        "mutation testing",
    "python scripts/mutation.py kernels io:120       # some targets; io on a sample of 120":
        "mutation testing",
    "python scripts/mutation.py --report --survivors # scores, and the mutants that lived":
        "mutation testing",
    "python scripts/mutation.py kernels --rerun-survivors   # after improving the tests":
        "mutation testing",
    "python scripts/mutation.py --known-bugs         # the bugs the suite once missed: all caught?":
        "mutation testing",
}

# Commands too large for a test, run in a reduced form: (page, text on the page, what runs
# instead, why). Every entry must still match its page (test_tables_match_the_pages).
# one quick test file, wherever the tests' folders put it
SMALL_TEST = next(REPO.glob("tests/**/test_result.py")).relative_to(REPO).as_posix()
SUBSTITUTIONS = [
    ("README.md", "sdnn-dask compare      #", "sdnn-dask compare -N 1024 -L 24 -n 2000 #",
     "the default problem, 1024-120 x 60000, takes ~2 min"),
    ("README.md", "python -m pytest       #", f"python -m pytest -q {SMALL_TEST} #",
     "the whole suite takes ~14 min (and would run this test)"),
    ("development.md", "python -m pytest                          #",
     f"python -m pytest -q {SMALL_TEST} #",
     "the whole suite takes ~14 min (and would run this test)"),
    ("development.md", 'python -m pytest -m "not system"          #',
     f'python -m pytest -q -m "not system" {SMALL_TEST} #',
     "all but tests/system takes ~6 min"),
    ("data.md", "-N 1024 -L 120 \\", "-N 1024 -L 6 \\",
     "the official 120 layers x 60000 rows take minutes; 6 layers of the 1200 rows"),
    ("data.md", "--tile 50", "--tile 1 --model none --hybrid none",
     "as above; the model and hybrid runs are in README's quick start"),
    ("benchmarks.md", "-N 65536 -L 1920", "-N 1024 -L 6",
     "65536-1920 is an 8.05 GB store and minutes of runs"),
    ("benchmarks.md", "neuron65536-l1920.store", "neuron1024-l6.store", "as above"),
    ("clusters-and-security.md", "sdnn-dask compare --cluster slurm --workers 8",
     "sdnn-dask compare -N 1024 -L 6 -n 1000 --model none --hybrid none --cluster slurm "
     "--workers 2", "8 jobs and the default problem; data parallelism alone (test_slurm "
     "runs the rest on SLURM)"),
    ("clusters-and-security.md", "sbatch studies/slurm-compare.sbatch    ",
     "sbatch --wait studies/slurm-compare.sbatch -N 1024 -L 6 -n 1000 --model none "
     "--hybrid none", "wait for the job; a small problem, data parallelism alone"),
    ("clusters-and-security.md", "sbatch --ntasks=10 studies/slurm-compare.sbatch --repeat 3",
     "sbatch --wait --ntasks=4 studies/slurm-compare.sbatch -N 1024 -L 6 -n 1000 --model none "
     "--hybrid none", "10 tasks and 3 repeats of the default problem"),
]
SHARED_PATH = "../shared/data/graphchallenge"  # replaced by where the data really is
SLURM_MARKERS = ("--cluster slurm", "sbatch ")  # blocks that need a running SLURM


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, in order (``` fences; ~~~ is not used in these pages)."""
    found, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(.*)$", lines[i])
        if m is None:
            i += 1
            continue
        start, lang, body = i, m.group(2).strip().split(" ")[0].lower(), []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][len(m.group(1)):])
            i += 1
        assert i < len(lines), f"{page.name}:{start + 1}: a fence that never closes"
        found.append(Block(page, start + 1, lang, "\n".join(body) + "\n"))
        i += 1
    return found


def prepared(block: Block) -> str:
    """The block's text as it runs: substitutions applied, skipped lines commented out."""
    text = block.text
    for page, old, new, _why in SUBSTITUTIONS:
        if page == block.page.name:
            text = text.replace(old, new)
    if SHARED is not None:
        text = text.replace(SHARED_PATH, str(SHARED))
    kept = []
    for line in text.splitlines():
        skip = line.strip() in SKIPPED_LINES
        kept.append(f"# skipped by test_docs: {line}" if skip and block.lang != "python"
                    else line)
    return "\n".join(kept) + "\n"


# Folders other people edit while this test runs; a snippet, running in its copy, cannot
# reach them but by an absolute path, so the repository check leaves them out.
EDITED = ("sdnn_dask/", "tests/", "benchmarks/", "scripts/", "docs/", "README.md",
          "pyproject.toml")
CACHES = ("__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", ".venv")


def copy_tracked(dest: Path) -> dict[str, str]:
    """Copy the repository's tracked files into dest; their SHA-256, by path."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    digests = {}
    for name in filter(None, names):
        source = REPO / name
        if not source.is_file():  # deleted in the working tree
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest / name)
        digests[name] = hashlib.sha256(source.read_bytes()).hexdigest()
    return digests


def git_status() -> set[str]:
    """`git status --porcelain`, ignored files included (sdnn-results/ is ignored)."""
    out = subprocess.run(["git", "status", "--porcelain", "--ignored=matching"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return {line for line in out.splitlines()
            if not line[3:].startswith(EDITED) and not any(c in line for c in CACHES)}


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    # the copy's sdnn_dask/ must not shadow the installed package (the script's folder or,
    # under `python -m`, the working folder first on sys.path): numba would compile anew
    env["PYTHONSAFEPATH"] = "1"
    env.pop("PYTHONPATH", None)
    return env


def run(block: Block, folder: Path) -> None:
    text = prepared(block)
    env = environment()
    if block.lang == "yaml":
        check_yaml(block, text, folder)
        return
    if block.lang == "python":
        script = folder / f"snippet_{block.page.stem}_{block.line}.py"
        script.write_text(text)
        command = [sys.executable, script.name]
    else:
        if block.lang == "console":
            text = "\n".join(line[2:] for line in text.splitlines() if line.startswith("$ "))
        script = folder / f"snippet_{block.page.stem}_{block.line}.sh"
        script.write_text(text)
        command = ["bash", "-euo", "pipefail", script.name]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    took = time.perf_counter() - started
    print(f"{block.where()} ({block.lang}): {took:.1f} s")
    assert proc.returncode == 0, (
        f"{block.where()}: the {block.lang} block failed (exit {proc.returncode}); as run:\n"
        f"{text}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")


def check_yaml(block: Block, text: str, folder: Path) -> None:
    import copy

    import dask.config
    import yaml

    data = yaml.safe_load(text)
    if isinstance(data, dict) and set(data) == {"sdnn"}:  # a Dask config file
        from sdnn_dask.cluster.profiles import cluster_profile

        merged = dask.config.update(copy.deepcopy(dask.config.config), data)
        with dask.config.set({"sdnn": merged["sdnn"]}):
            for name in data["sdnn"].get("clusters", {}):
                cluster_profile(name)
        return
    from sdnn_dask import Study

    path = folder / f"study_{block.page.stem}_{block.line}.yaml"
    path.write_text(text)
    Study.from_yaml(path)


def test_every_block_says_what_it_is():
    for page in PAGES:
        for block in blocks(page):
            assert block.lang in RUN | NOT_RUN, (
                f"{block.where()}: a block with language {block.lang or 'none'!r}: tag it "
                f"{sorted(RUN | NOT_RUN)} (text for output, which is not run)")


def test_tables_match_the_pages():
    """Every substitution and skipped line is still on its page: the tables do not rot."""
    texts = {page.name: page.read_text() for page in PAGES}
    for page, old, _new, _why in SUBSTITUTIONS:
        assert old in texts[page], f"{page} no longer holds {old!r}: update SUBSTITUTIONS"
    every_line = {line.strip() for text in texts.values() for line in text.splitlines()}
    for line in SKIPPED_LINES:
        assert line in every_line, f"no page holds {line!r} any more: update SKIPPED_LINES"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_runs(page, tmp_path):
    runnable = [b for b in blocks(page) if b.lang in RUN]
    if not runnable:
        return
    folder = tmp_path / "repo"
    folder.mkdir()
    digests = copy_tracked(folder)
    before = git_status()
    not_run = []
    slurm_reason = None
    for block in runnable:
        if SHARED_PATH in block.text and SHARED is None:
            not_run.append(f"{block.where()}: official data not found (../shared/data/"
                           "graphchallenge beside the repo, or $SDNN_GRAPHCHALLENGE_DATA)")
            continue
        if any(marker in block.text for marker in SLURM_MARKERS):
            slurm_reason = slurm_reason or slurm_unavailable() or "ok"
            if slurm_reason != "ok":
                not_run.append(f"{block.where()}: {slurm_reason}")
                continue
        run(block, folder)
    changed = [name for name, digest in digests.items()
               if hashlib.sha256((folder / name).read_bytes()).hexdigest() != digest]
    assert not changed, f"{page.name}'s blocks changed tracked files: {changed}"
    appeared = git_status() - before
    assert not appeared, f"{page.name}'s blocks changed the repository: {sorted(appeared)}"
    if not_run:  # under CI=true, conftest turns this skip into a failure
        pytest.skip("; ".join(not_run))
