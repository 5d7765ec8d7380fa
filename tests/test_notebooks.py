"""The notebooks in studies/ run top to bottom (they are thin drivers of the package)."""

from __future__ import annotations

from pathlib import Path

import pytest

STUDIES = Path(__file__).resolve().parents[1] / "studies"
NOTEBOOKS = sorted(STUDIES.glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="needs the test extra (nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="needs the test extra (nbclient)")
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("PASS" in str(o.get("data", {})) for o in outputs)
