"""Mutation testing of the core modules with cosmic-ray, in bounded time on two cores.

Each source file gets a cosmic-ray session; each mutant is tested by the tests chosen for
its module (``TARGETS``), stopping at the first failure. Sessions run in private copies of
the repository (``.mutation/tree-J``), one per job, so two jobs never see each other's
mutants; the numba cache is a fresh folder for every test run, so a mutant never runs
a kernel compiled from other source.

Usage (``pip install -e ".[mutation]"`` first)::

    python scripts/mutation.py                      # every target, 2 jobs, resumable
    python scripts/mutation.py kernels io --jobs 1  # some targets
    python scripts/mutation.py --report             # scores and survivors, no run
    python scripts/mutation.py records --rerun-survivors   # after improving the tests

The sessions are kept in ``.mutation/`` (git-ignored): an interrupted run goes on where it
stopped. Survivors are listed with ``--report --survivors``; why each one is equivalent or
accepted is written in ``docs/testing.md``.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / ".mutation"
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q", "--no-header",
          "-o", "addopts=", "--hypothesis-seed=0", "-W", "ignore"]

# module -> (source files under sdnn_dask/, tests that guard them)
TARGETS: dict[str, tuple[list[str], list[str]]] = {
    "kernels": (["core/kernels/steps.py", "core/kernels/chunks.py", "core/kernels/forward.py"],
                ["tests/core/test_kernels.py", "tests/core/test_reference.py"]),
    "reference": (["core/reference.py"],
                  ["tests/core/test_reference.py", "tests/core/test_kernels.py"]),
    "records": (["records.py"], ["tests/report/test_records.py"]),
    "result": (["core/result.py"],
               ["tests/core/test_result.py", "tests/report/test_records.py",
                "tests/core/test_check.py"]),
    "io": (["data/io/text.py", "data/io/challenge.py", "data/io/cache.py"],
           ["tests/data/test_io.py"]),
    "slabs": (["parallel/slabs/layout.py", "parallel/slabs/tiles.py", "parallel/slabs/plans.py",
               "parallel/slabs/part_layer.py"],
              ["tests/parallel/test_slabs.py", "tests/parallel/test_independent.py"]),
    "dedup": (["core/kernels/dedup.py"],
              # test_model_dedup imports test_dedup: it must come first
              ["tests/core/test_dedup.py", "tests/parallel/test_model_dedup.py"]),
    "partition": (["partition/rows.py", "partition/neurons.py", "partition/methods.py",
                   "partition/hypergraph.py",
                   "partition/hashing.py", "partition/balance.py"],
                  ["tests/partition/test_partition.py",
                   "tests/partition/test_neuron_partitions.py",
                   "tests/partition/test_traffic.py",
                   "tests/partition/test_partition_cache.py"]),
    "wire": (["parallel/transport/wire.py", "parallel/transport/frames.py"],
             ["tests/parallel/test_wire.py", "tests/parallel/test_adversarial_wire.py",
              "tests/parallel/test_wire_tls.py"]),
    "parallel": (["parallel/serial.py", "parallel/data_executor.py", "parallel/model_executor.py",
                  "parallel/model_direct.py", "parallel/transport/run.py",
                  "parallel/transport/exchange.py", "parallel/transfers.py",
                  "parallel/placement.py", "parallel/faults.py"],
                 ["tests/parallel/test_independent.py", "tests/parallel/test_model_parallel.py",
                  "tests/parallel/test_data_parallel.py", "tests/parallel/test_direct_transport.py",
                  "tests/system/test_faults.py"]),
}

# One mutant per site where cosmic-ray offers many: + <-> -, * <-> /, comparisons moved
# across their boundary or negated, numbers +-1, booleans flipped, and/or swapped, loops
# run zero times, break <-> continue, exceptions replaced. The exotic replacements
# (a + b -> a ** b, a < b -> a is b, ...) add thousands of mutants and no information.
KEEP = (
    r"ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul|FloorDiv_Mul|Mod_FloorDiv|Pow_Mul"
    r"|BitAnd_BitOr|BitOr_BitAnd|BitXor_BitAnd|LShift_RShift|RShift_LShift)"
    r"|ReplaceComparisonOperator_(Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Eq_NotEq|NotEq_Eq|Is_IsNot"
    r"|IsNot_Is|In_NotIn|NotIn_In)"
    r"|ReplaceUnaryOperator_(USub_UAdd|Delete_Not|Delete_Invert)"
    r"|ReplaceTrueWithFalse|ReplaceFalseWithTrue|ReplaceAndWithOr|ReplaceOrWithAnd"
    r"|ReplaceBreakWithContinue|ReplaceContinueWithBreak|NumberReplacer|ZeroIterationForLoop"
    r"|ExceptionReplacer"
)


# The bugs that issue 13 found the suite blind to, made by hand: --known-bugs checks that
# each one now fails its module's tests. (source, text, replacement, what it breaks)
KNOWN_BUGS = [
    ("core/kernels/steps.py",
     "            if z != 0.0:\n                acc[j] = 0.0\n                z += bias[j]",
     "            acc[j] = 0.0\n            z += bias[j]\n            if z != 0.0:",
     "the sparse step adds the bias to sums that are exactly zero"),
    ("core/kernels/steps.py",
     "            # on 1024-120 than with branches); the same values: no bias where z == 0.\n"
     "            for r in range(m):\n                z = dst[r]\n"
     "                y = min(max(z + b, zero), ymax)\n                y = y if z != 0.0 else zero",
     "            # on 1024-120 than with branches); the same values: no bias where z == 0.\n"
     "            for r in range(m):\n                z = dst[r]\n"
     "                y = min(max(z + b, zero), ymax)\n                y = y",
     "the dense step adds the bias to sums that are exactly zero"),
    ("records.py", '"edges_per_s": result.edges_per_second,',
     '"edges_per_s": result.edges_per_second * result.n_workers,',
     "records write a wrong edges/s for multi-worker runs"),
    ("data/io/cache.py", "        if cache_file.exists():", "        if False:",
     "the .npz weight cache is never read"),
    # issue 43's review: three more that passed every test
    ("parallel/transport/wire.py",
     "    if not hmac.compare_digest(proof, _proof(key, _CONNECTOR, mine, theirs)):",
     "    if not hmac.compare_digest(proof[:1], _proof(key, _CONNECTOR, mine, theirs)[:1]):",
     "the wire's listener checks the first byte of a connector's HMAC only"),
    ("parallel/transport/wire.py",
     "    if not hmac.compare_digest(answer, _proof(key, _LISTENER, mine, theirs)):",
     "    if not hmac.compare_digest(answer[:1], _proof(key, _LISTENER, mine, theirs)[:1]):",
     "the wire's connector checks the first byte of a listener's HMAC only"),
    ("core/kernels/dedup.py",
     "        ids = [self.of(r) for r in reps]",
     "        ids = [self.of(r) for r in np.sort(reps)]",
     "deduplication expands rows to the wrong group when representatives come unsorted"),
    ("partition/hypergraph.py",
     '        key.update(f"traffic|{content}|{inputs}|"',
     '        key.update(f"traffic|{inputs}|"',
     "a traffic partition's cache key leaves out the network's values"),
]


def known_bugs(only: str | None = None) -> int:
    """Make each known bug in a private copy and run its module's tests: all must fail,
    and the same tests must pass on the unmutated copy (else a failure says nothing).
    ``only``: the bugs whose source path contains it."""
    missed = 0
    bugs = [b for b in KNOWN_BUGS if only is None or only in b[0]]
    if not bugs:
        print(f"no known bug in a source matching {only!r}")
        return 1
    for source in dict.fromkeys(b[0] for b in bugs):
        tests = next(t for files, t in TARGETS.values() if source in files)
        if run_pytest(_tree(9), source, tests) != 0:
            print(f"BROKEN the tests of {source} fail on unmutated code: fix them first")
            return 1
    for source, text, replacement, what in bugs:
        tree = _tree(9)
        path = tree / "sdnn_dask" / source
        original = path.read_text()
        if original.count(text) != 1:
            print(f"?      {what}: the code it changes is gone from {source}; update KNOWN_BUGS")
            missed += 1
            continue
        path.write_text(original.replace(text, replacement))
        tests = next(t for files, t in TARGETS.values() if source in files)
        caught = run_pytest(tree, source, tests) != 0
        missed += not caught
        print(f"{'caught' if caught else 'MISSED'} {what}", flush=True)
    return 1 if missed else 0


def _session(source: str) -> Path:
    return WORK / "sessions" / (source.replace("/", "-").removesuffix(".py") + ".sqlite")


def _tree(job: int) -> Path:
    """A private copy of the package and tests for one job, refreshed from the repo."""
    tree = WORK / f"tree-{job}"
    # "original" keeps the unmutated sources the mutants are compared with
    for part, target in (("sdnn_dask", "sdnn_dask"), ("tests", "tests"),
                         ("scripts", "scripts"), ("sdnn_dask", "original")):
        shutil.rmtree(tree / target, ignore_errors=True)
        shutil.copytree(REPO / part, tree / target,
                        ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    for warm in WORK.glob(f"numba-warm-{tree.name}*"):  # compiled from older sources
        shutil.rmtree(warm, ignore_errors=True)

    shutil.copy2(REPO / "pyproject.toml", tree / "pyproject.toml")
    (tree / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return tree


# Imported at start-up by every Python process of a test run (the copy is on PYTHONPATH,
# so LocalCluster workers get it too). With SDNN_MUTATION_STABLE_STAMP set, numba's cache
# takes the copy's package files as unchanged, so a mutant outside every compiled function
# reuses the kernels compiled from the original source instead of compiling them all again
# (18 of the 22 s of tests/parallel/test_slabs.py). Numba's index key still hashes each function's
# bytecode; the mode is used only when the mutant is in a plain Python function's body.
SITECUSTOMIZE = """\
import os
if os.environ.get("SDNN_MUTATION_STABLE_STAMP"):
    from numba.core import caching

    _root = os.environ["SDNN_MUTATION_STABLE_STAMP"]
    _original = caching._SourceFileBackedLocatorMixin.get_source_stamp

    def _stable_stamp(self):
        if str(self._py_file).startswith(_root):
            return b"sdnn-mutation-stable-source"
        return _original(self)

    caching._SourceFileBackedLocatorMixin.get_source_stamp = _stable_stamp
"""


# decorators whose function numba compiles (or whose code generator it runs) into callers
_COMPILED = ("jit", "intrinsic", "overload", "vectorize", "cfunc", "stencil")


def _jitted(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef) and any(
        name in ast.unparse(d) for d in node.decorator_list for name in _COMPILED)


def _package_kernels(root: Path) -> dict[tuple[str, str], tuple[set[str], set[str]]]:
    """Every compiled function of the package: (module, name) -> (names it calls, globals
    it reads)."""
    found = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if _jitted(node):
                calls = {c.func.id if isinstance(c.func, ast.Name) else c.func.attr
                         for c in ast.walk(node) if isinstance(c, ast.Call)
                         and isinstance(c.func, (ast.Name, ast.Attribute))}
                reads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                found[path.stem, node.name] = (calls, reads)
    return found


def _stale_kernels(tree: Path, source: str) -> set[tuple[str, str]] | None:
    """The compiled functions whose cached machine code a mutant of ``source`` makes stale,
    or ``None`` when that cannot be told (then everything is compiled afresh).

    A mutant inside a plain Python function's body makes none stale. One inside a compiled
    function makes it and every compiled function calling it, transitively, stale (numba
    links a callee's code into its callers). One in a module-level assignment makes the
    compiled functions reading that global stale (numba freezes globals at compile time).
    """
    if not (tree / "original" / source).exists():
        return None
    original = (tree / "original" / source).read_text()
    mutated = (tree / "sdnn_dask" / source).read_text()
    a, b = original.splitlines(), mutated.splitlines()
    if len(a) != len(b):
        return None
    changed = [i + 1 for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    module = ast.parse(original)
    kernels = _package_kernels(tree / "original")
    name = Path(source).stem
    stale: set[tuple[str, str]] = set()
    for line in changed:
        holders = [n for n in ast.walk(module)
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and n.body[0].lineno <= line <= n.end_lineno]
        if any(_jitted(n) for n in holders):
            stale |= {(name, n.name) for n in holders if _jitted(n)}
        elif holders:
            continue  # a plain function's body: no kernel changes
        else:
            targets = [t.id for n in module.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                       and n.lineno <= line <= n.end_lineno
                       for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                       if isinstance(t, ast.Name)]
            if not targets:
                return None
            stale |= {k for k, (_, reads) in kernels.items() if set(targets) & reads}
    grown = True
    while grown:  # callers of stale kernels are stale
        more = {k for k, (calls, _) in kernels.items() if any(s[1] in calls for s in stale)}
        grown = not more <= stale
        stale |= more
    return stale


def _mutant_cache(tree: Path, source: str) -> tuple[str, bool]:
    """A numba cache folder for one mutant's run, and whether it is a private one to delete.

    The job's warm cache (compiled from the original sources) is linked into a private
    folder without the mutant's stale kernels, which recompile; when staleness cannot be
    told, the folder starts empty.
    """
    warm = WORK / f"numba-warm-{tree.name}-boundscheck"  # numba's cache key omits the flag
    stale = _stale_kernels(tree, source)
    if stale is not None and not stale and not warm.exists():
        warm.mkdir(parents=True)
        return str(warm), False  # the unmutated run: fill the warm cache
    private = Path(tempfile.mkdtemp(prefix="numba-mutant-"))
    if stale is not None and warm.exists():
        shutil.rmtree(private)
        shutil.copytree(warm, private, copy_function=os.link)  # numba replaces, never edits
        for module, function in stale:
            for path in private.rglob(f"{module}.{function}-*.nb*"):
                path.unlink()
    return str(private), True


def _contents_key(tree: Path, tests: list[str]) -> str:
    """A hash of the copy's tests and package: a baseline is reused only while both stay."""
    digest = hashlib.sha256()
    for path in sorted([*(tree / "tests").rglob("*.py"), *(tree / "original").rglob("*.py")]):
        digest.update(path.read_bytes())
    return f"{tree.name}|{' '.join(tests)}|{digest.hexdigest()[:16]}"


def _config(tree: Path, source: str, tests: list[str], timeout: float) -> Path:
    command = " ".join([sys.executable, str(REPO / "scripts" / "mutation.py"), "--pytest",
                        str(tree), source, *tests])
    path = WORK / "sessions" / f"{_session(source).stem}.{tree.name}.toml"
    path.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{tree / "sdnn_dask" / source}"\n'
        f"timeout = {timeout:.0f}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n"
        "[cosmic-ray.distributor]\nname = \"local\"\n"
        "[cosmic-ray.filters.operators-filter]\n"
        f'exclude-operators = ["core/(?!({KEEP})$)"]\n'
    )
    return path


def run_pytest(tree: Path, source: str, tests: list[str]) -> int:
    """One mutant's test run, in `tree`: a fresh numba cache, the module's doctests and tests."""
    cache, private = _mutant_cache(tree, source)
    # bounds checked: a mutant writing past an array's end fails instead of corrupting
    # memory silently (the unmutated kernels pass the tests with the checks on)
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=str(tree), SDNN_MUTATION_STABLE_STAMP=str(tree / "sdnn_dask"),
               NUMBA_BOUNDSCHECK="1")
    shared = REPO.parent / "shared" / "data" / "graphchallenge"  # the copies sit elsewhere
    if "SDNN_GRAPHCHALLENGE_DATA" not in env and shared.is_dir():
        env["SDNN_GRAPHCHALLENGE_DATA"] = str(shared)
    try:
        return subprocess.call(
            [*PYTEST, "--doctest-modules", f"sdnn_dask/{source}", *tests],
            env=env, cwd=tree, stdout=subprocess.DEVNULL if "-v" not in tests else None)
    finally:
        if private:
            shutil.rmtree(cache, ignore_errors=True)


def _cr(*args: str, cwd: Path) -> None:
    subprocess.run([str(Path(sys.executable).parent / args[0]), *args[1:]], cwd=cwd,
                   check=True, stdout=subprocess.DEVNULL)


def _follow_source(session: Path, timing: Path, source: str, log: list[str]) -> None:
    """Keep a session true to an edited source: mutants are found by position, so the
    results of mutants on changed lines are dropped (tested again); a source whose line
    count changed starts a new session."""
    if not session.exists():
        return
    info = json.loads(timing.read_text())
    now = (REPO / "sdnn_dask" / source).read_text()
    before = info.setdefault("source", now)
    if before != now:
        a, b = before.splitlines(), now.splitlines()
        if len(a) != len(b):
            log.append(f"{source}: lines added or removed since the session began; "
                       "starting a new one")
            session.unlink()
            timing.unlink()
            return
        changed = [i + 1 for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        with sqlite3.connect(session) as db:
            for line in changed:
                db.execute("DELETE FROM work_results WHERE worker_outcome != 'SKIPPED' AND "
                           "job_id IN (SELECT job_id FROM mutation_specs WHERE "
                           "start_pos_row = ?)", (line,))
        info["source"] = now
    timing.write_text(json.dumps(info))


def _sample(session: Path, size: int) -> None:
    """Keep at most ``size`` mutants of a session to test (a fixed random sample, seed 0);
    the others are marked skipped, "not in the sample". Mutants already tested stay."""
    import random

    with sqlite3.connect(session) as db:
        (tested,) = db.execute("SELECT COUNT(*) FROM work_results WHERE worker_outcome "
                               "!= 'SKIPPED'").fetchone()
        pending = sorted(r[0] for r in db.execute(
            "SELECT job_id FROM work_items WHERE job_id NOT IN "
            "(SELECT job_id FROM work_results)"))
        keep = set(random.Random(0).sample(pending, min(len(pending), max(0, size - tested))))
        for job_id in pending:
            if job_id not in keep:
                db.execute("INSERT INTO work_results (worker_outcome, output, test_outcome, "
                           "diff, job_id) VALUES ('SKIPPED', 'not in the sample', NULL, '', "
                           "?)", (job_id,))


def run_source(job: int, source: str, tests: list[str], log: list[str],
               sample: int | None = None) -> None:
    """Test every pending mutant of one source file in job `job`'s copy of the repo."""
    tree = _tree(job)
    session = _session(source)
    timing = session.with_suffix(".json")
    _follow_source(session, timing, source, log)
    if not session.exists():
        # the unmutated run: once per test selection and copy (it also fills the warm cache)
        baselines = WORK / "baselines.json"
        known = json.loads(baselines.read_text()) if baselines.exists() else {}
        key = _contents_key(tree, tests)
        if key not in known:
            start = time.perf_counter()
            code = run_pytest(tree, source, tests)
            if code != 0:
                raise SystemExit(f"the tests for {source} fail on unmutated code (exit "
                                 f"{code}): fix them before mutation testing")
            known[key] = time.perf_counter() - start
            baselines.write_text(json.dumps(known, indent=1))
        timing.write_text(json.dumps({"baseline_s": known[key],
                                      "source": (REPO / "sdnn_dask" / source).read_text()}))
        config = _config(tree, source, tests, _timeout(timing))
        _cr("cosmic-ray", "init", str(config), str(session), cwd=tree)
        _cr("cr-filter-operators", str(session), str(config), cwd=tree)
        _cr("cr-filter-pragma", str(session), cwd=tree)
        _skip_equivalent(session, REPO / "sdnn_dask" / source)
    config = _config(tree, source, tests, _timeout(timing))
    with sqlite3.connect(session) as db:  # sessions move between the jobs' copies
        db.execute("UPDATE mutation_specs SET module_path = ?",
                   (str(tree / "sdnn_dask" / source),))
    if sample is not None:
        _sample(session, sample)
    todo = _pending(session)
    log.append(f"[job {job}] {source}: {todo} mutants to test")
    if todo:
        _cr("cosmic-ray", "exec", str(config), str(session), cwd=tree)
    log.append(f"[job {job}] {source}: {summary(session)}")


def _annotation_spans(tree: ast.AST) -> list[tuple[int, int, int, int]]:
    nodes = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            nodes.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            nodes.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            nodes.append(node.annotation)
    return [(n.lineno, n.col_offset, n.end_lineno, n.end_col_offset) for n in nodes]


def _skip_equivalent(session: Path, source: Path) -> None:
    """Mark mutants that cannot change behaviour as skipped, so they do not count.

    Every module has ``from __future__ import annotations``: annotations are strings never
    evaluated, so ``float | None -> float & None`` is equivalent; so is the bare ``*`` that
    starts keyword-only parameters, which cosmic-ray reads as a multiplication.
    """
    text = source.read_text()
    lines = text.splitlines()
    spans = _annotation_spans(ast.parse(text))

    def inside(row: int, col: int) -> bool:
        return any((r0, c0) <= (row, col) < (r1, c1) for r0, c0, r1, c1 in spans)

    def star_marker(row: int, col: int) -> bool:
        rest = lines[row - 1][col:]
        return rest.startswith("*") and rest[1:].lstrip()[:1] in (",", ")", "")

    with sqlite3.connect(session) as db:
        specs = db.execute("SELECT job_id, operator_name, start_pos_row, start_pos_col "
                           "FROM mutation_specs WHERE job_id NOT IN "
                           "(SELECT job_id FROM work_results)").fetchall()
        for job_id, operator, row, col in specs:
            if inside(row, col) or ("Mul_" in operator and star_marker(row, col)):
                db.execute("INSERT INTO work_results (worker_outcome, output, test_outcome, "
                           "diff, job_id) VALUES ('SKIPPED', 'equivalent: annotation or *', "
                           "NULL, '', ?)", (job_id,))


def _timeout(timing: Path) -> float:
    """A mutant may take 3x the unmutated run (plus start-up) before it counts as killed."""
    return 3 * json.loads(timing.read_text())["baseline_s"] + 20


def _pending(session: Path) -> int:
    with sqlite3.connect(session) as db:
        (n,) = db.execute("SELECT COUNT(*) FROM work_items WHERE job_id NOT IN "
                          "(SELECT job_id FROM work_results)").fetchone()
    return n


def _outcomes(session: Path) -> list[tuple]:
    with sqlite3.connect(session) as db:
        return db.execute(
            "SELECT r.worker_outcome, r.test_outcome, m.operator_name, m.start_pos_row, "
            "m.start_pos_col, m.job_id, r.output FROM work_results r JOIN mutation_specs m "
            "ON r.job_id = m.job_id").fetchall()


def summary(session: Path) -> str:
    rows = _outcomes(session)
    tested = [r for r in rows if r[0] != "SKIPPED"]
    unsampled = sum(r[0] == "SKIPPED" and r[6] == "not in the sample" for r in rows)
    killed = sum(r[1] == "KILLED" for r in tested)
    survived = sum(r[1] == "SURVIVED" for r in tested)
    broken = sum(r[1] == "INCOMPETENT" for r in tested)
    score = killed / (killed + survived) if killed + survived else float("nan")
    sampled = f" (a sample: {unsampled} others not tested)" if unsampled else ""
    return (f"{killed} killed, {survived} survived, {broken} incompetent, "
            f"{_pending(session)} pending: {100 * score:.1f}% killed{sampled}")


def _diffs(session: Path) -> dict[str, str]:
    """Each mutant's changed line, as ``new`` (from cosmic-ray's diff)."""
    with sqlite3.connect(session) as db:
        rows = db.execute("SELECT job_id, diff FROM work_results").fetchall()
    out = {}
    for job_id, diff in rows:
        added = [line[1:].strip() for line in (diff or "").splitlines()
                 if line.startswith("+") and not line.startswith("+++")]
        out[job_id] = added[0][:110] if added else "?"
    return out


def rerun_survivors(source: str, unexplained_only: bool = False) -> int:
    """Make a session's survivors pending again (only those without a reason in
    docs/mutants.tsv, with ``unexplained_only``)."""
    session = _session(source)
    reasons = _reasons()
    with sqlite3.connect(session) as db:
        rows = db.execute("SELECT r.job_id, m.start_pos_row FROM work_results r JOIN "
                          "mutation_specs m ON r.job_id = m.job_id WHERE "
                          "r.test_outcome = 'SURVIVED'").fetchall()
        again = [job for job, row in rows
                 if not unexplained_only or (source, row) not in reasons]
        for job in again:
            db.execute("DELETE FROM work_results WHERE job_id = ?", (job,))
    return len(again)


def _reasons() -> dict[tuple[str, int], tuple[str, str]]:
    """(source, line) -> (kind, why) for surviving mutants, from docs/mutants.tsv: kind
    ``equivalent`` (no input can tell the mutant apart) or ``accepted`` (a real change the
    selected tests do not see, and why it is left)."""
    path = REPO / "docs" / "mutants.tsv"
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                source, row, kind, why = line.split("\t", 3)
                out[source, int(row)] = (kind, why)
    return out


def markdown(targets: list[str]) -> None:
    """Scores and every survivor with its reason, as markdown for docs/testing.md."""
    reasons = _reasons()
    table = ["| module | tested | killed | equivalent | accepted | unexplained | killed, "
             "raw | killed, of non-equivalent |", "|---|---|---|---|---|---|---|---|"]
    details = []
    for target in targets:
        counts = dict.fromkeys(["tested", "killed", "equivalent", "accepted", "unexplained"], 0)
        sampled = False
        for source in TARGETS[target][0]:
            session = _session(source)
            if not session.exists():
                continue
            diffs = _diffs(session)
            rows = _outcomes(session)
            sampled |= any(r[6] == "not in the sample" for r in rows)
            for r in sorted(rows, key=lambda r: (r[3], r[4])):
                if r[1] not in ("KILLED", "SURVIVED"):
                    continue
                counts["tested"] += 1
                if r[1] == "KILLED":
                    counts["killed"] += 1
                    continue
                kind, why = reasons.get((source, r[3]), ("unexplained", ""))
                counts[kind] += 1
                mutant = diffs.get(r[5], "?").replace("|", "\\|")
                details.append(f"| `{source}:{r[3]}` | `{mutant}` | {kind} | "
                               f"{why} |")
        if not counts["tested"]:
            continue
        alive = counts["accepted"] + counts["unexplained"]
        table.append(
            f"| {target}{' (sample)' if sampled else ''} | {counts['tested']} | "
            f"{counts['killed']} | {counts['equivalent']} | {counts['accepted']} | "
            f"{counts['unexplained']} | {100 * counts['killed'] / counts['tested']:.0f}% | "
            f"{100 * counts['killed'] / (counts['killed'] + alive):.0f}% |")
    print("\n".join(table))
    print("\n| where | mutant | kind | why |\n|---|---|---|---|")
    print("\n".join(details))


def report(targets: list[str], survivors: bool) -> None:
    for target in targets:
        files, _ = TARGETS[target]
        killed = survived = 0
        for source in files:
            session = _session(source)
            if not session.exists():
                print(f"{target}/{source}: not run")
                continue
            rows = _outcomes(session)
            killed += sum(r[1] == "KILLED" for r in rows if r[0] != "SKIPPED")
            survived += sum(r[1] == "SURVIVED" for r in rows if r[0] != "SKIPPED")
            print(f"{target}/{source}: {summary(session)}")
            if survivors:
                diffs = _diffs(session)
                for r in sorted(rows, key=lambda r: (r[3], r[4])):
                    if r[1] == "SURVIVED":
                        print(f"    {source}:{r[3]}:{r[4]} {r[2].removeprefix('core/')}: "
                              f"{diffs.get(r[5], '?')}")
        if killed + survived:
            print(f"== {target}: {killed}/{killed + survived} = "
                  f"{100 * killed / (killed + survived):.1f}% of tested mutants killed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*",
                        help=f"of {', '.join(TARGETS)} (default: all); TARGET:N tests a "
                             "sample of N mutants per file of that target")
    parser.add_argument("--jobs", type=int, default=2, help="sessions run at once (default 2)")
    parser.add_argument("--first-copy", type=int, default=0, metavar="J",
                        help="use copies J, J+1, ... (to run beside another run; default 0)")
    parser.add_argument("--report", action="store_true", help="print scores, run nothing")
    parser.add_argument("--survivors", action="store_true", help="with --report: list them")
    parser.add_argument("--markdown", action="store_true",
                        help="with --report: scores and survivors with their reasons "
                             "(docs/mutants.tsv), as markdown")
    parser.add_argument("--rerun-survivors", action="store_true",
                        help="test the surviving mutants again (after improving the tests)")
    parser.add_argument("--rerun-unexplained", action="store_true",
                        help="test again the survivors docs/mutants.tsv does not explain")
    parser.add_argument("--sample", type=int, metavar="N",
                        help="test at most N mutants per source file, a fixed random sample "
                             "(default: all)")
    parser.add_argument("--known-bugs", nargs="?", const="", metavar="SOURCE",
                        help="check that the bugs issues 13 and 43 found are caught (exit 1 "
                             "if not); SOURCE: only those in sources whose path contains it")
    parser.add_argument("--pytest", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pytest:
        return run_pytest(Path(args.pytest[0]), args.pytest[1], args.pytest[2:])
    if args.known_bugs is not None:
        return known_bugs(args.known_bugs or None)
    # a target may carry its own sample size: "io:120"
    samples = {t.split(":")[0]: int(t.split(":")[1]) for t in args.targets if ":" in t}
    args.targets = [t.split(":")[0] for t in args.targets]
    unknown = sorted(set(args.targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}: choose from {', '.join(TARGETS)}")
    targets = args.targets or list(TARGETS)
    if args.report:
        if args.markdown:
            markdown(targets)
        else:
            report(targets, args.survivors)
        return 0
    (WORK / "sessions").mkdir(parents=True, exist_ok=True)
    queue = [(s, TARGETS[t][1], samples.get(t, args.sample))
             for t in targets for s in TARGETS[t][0]]
    if args.rerun_survivors or args.rerun_unexplained:
        for source, _, _ in queue:
            if _session(source).exists():
                n = rerun_survivors(source, unexplained_only=not args.rerun_survivors)
                print(f"{source}: {n} survivors to test again")
    log: list[str] = []
    lock = threading.Lock()

    def worker(job: int) -> None:
        while True:
            with lock:
                if not queue:
                    return
                source, tests, sample = queue.pop(0)
            # a rerun tests again what was tested: no new sample, and none dropped
            rerun = args.rerun_survivors or args.rerun_unexplained
            run_source(job, source, tests, log, None if rerun else sample)
            with lock:
                print(log[-1], flush=True)

    threads = [threading.Thread(target=worker, args=(args.first_copy + j,))
               for j in range(args.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report(targets, survivors=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
