"""The notebooks in studies/ run top to bottom through ``sdnn-dask study`` (they are thin
drivers of the package), on the cluster the command says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

STUDIES = Path(__file__).resolve().parents[2] / "studies"
NOTEBOOKS = sorted(STUDIES.glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_as_a_study(path, tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="needs the study extra (nbformat)")
    pytest.importorskip("nbclient", reason="needs the study extra (nbclient)")
    out = tmp_path / "executed.ipynb"
    proc = subprocess.run(
        [sys.executable, "-m", "sdnn_dask", "notebook", str(path), "--cluster", "local",
         "--workers", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=1200, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    notebook = nbformat.read(out, as_version=4)
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert len(outputs) >= sum(c.cell_type == "code" for c in notebook.cells)
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("PASS" in str(o.get("data", {})) for o in outputs)


def test_a_failing_study_says_which_cell(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="needs the study extra (nbformat)")
    pytest.importorskip("nbclient", reason="needs the study extra (nbclient)")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                               nbformat.v4.new_code_cell("1 / 0")])
    path = tmp_path / "broken.ipynb"
    nbformat.write(notebook, path)
    proc = subprocess.run([sys.executable, "-m", "sdnn_dask", "notebook", str(path), "-q"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1
    assert "ZeroDivisionError" in proc.stderr and "1 / 0" in proc.stderr
    # kept, to look at: in the results folder, like compare's outputs
    assert (tmp_path / "sdnn-results" / "notebooks" / "broken.executed.ipynb").is_file()
    proc = subprocess.run([sys.executable, "-m", "sdnn_dask", "notebook", "missing.ipynb"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0 and "missing.ipynb: no such notebook" in proc.stderr


def test_the_executed_notebook_goes_in_the_results_folder(tmp_path):
    """Not NAME.executed.ipynb where the command is run (an untracked file in a checkout):
    the working folder gets the results folder and nothing else."""
    nbformat = pytest.importorskip("nbformat", reason="needs the study extra (nbformat)")
    pytest.importorskip("nbclient", reason="needs the study extra (nbclient)")
    path = tmp_path / "studies" / "tiny.ipynb"
    path.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")]),
                   path)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "sdnn_dask", "notebook", str(path), "-q"],
                          capture_output=True, text=True, timeout=300, cwd=work)
    assert proc.returncode == 0, proc.stderr
    out = Path("sdnn-results") / "notebooks" / "tiny.executed.ipynb"
    assert proc.stdout == f"wrote {out}\n"
    assert [p.name for p in work.iterdir()] == ["sdnn-results"]
    assert [p.relative_to(work) for p in (work / "sdnn-results").rglob("*")] == [
        out.parent, out]
    assert "42" in str(nbformat.read(work / out, as_version=4).cells[0].outputs)
