"""The ``notebook`` command: a notebook executed top to bottom, its clusters made where
``--cluster`` says.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..files import write_text_atomic
from .common import Progress, UsageError, check_writable_folder

NOTEBOOK_MISSING = "running a notebook needs nbclient: pip install 'sdnn_dask[study]'"
#: The results folder's subfolder for executed notebooks (``--results``).
NOTEBOOKS_DIR = "notebooks"


def cmd_notebook(args: argparse.Namespace) -> int:
    """Execute a notebook top to bottom, its clusters made where ``--cluster`` says."""
    try:
        import nbclient
        import nbformat
    except ImportError as error:
        raise UsageError(NOTEBOOK_MISSING) from error
    progress = Progress(args.quiet)
    path: Path = args.notebook
    if not path.is_file():
        raise UsageError(f"{path}: no such notebook")
    if args.cluster == "slurm-batch":
        raise UsageError("a notebook runs its clusters from its kernel; use "
                         "--cluster slurm, or run it inside an allocation with "
                         "--cluster <the scheduler's address>")
    if args.cluster:  # an unknown profile fails here, not in the notebook's first cell
        from ..cluster import ClusterError, cluster_profile, is_address

        try:
            if not is_address(args.cluster):
                cluster_profile(args.cluster)
        except ClusterError as error:
            raise UsageError(str(error)) from error
    # The kernel is a new process: the notebook's cluster_client() reads these on import.
    if args.cluster:
        os.environ["DASK_SDNN__CLUSTER__DEFAULT"] = args.cluster
    if args.workers:
        os.environ["DASK_SDNN__LOCAL__N_WORKERS"] = str(args.workers)
        os.environ["DASK_SDNN__SLURM__N_WORKERS"] = str(args.workers)
    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as error:  # nbformat raises several kinds for a bad file
        raise UsageError(f"{path}: not a readable notebook ({error})") from error
    # in the results folder, as compare's outputs: not an untracked file where it is run
    out: Path = args.out or args.results / NOTEBOOKS_DIR / f"{path.stem}.executed.ipynb"
    check_writable_folder(out.parent, "--out" if args.out else "--results")
    cells = sum(c.cell_type == "code" for c in notebook.cells)
    client = nbclient.NotebookClient(notebook, timeout=args.timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(Path.cwd())}})
    failed = None
    with progress.step(f"running {path} ({cells} code cells, cluster: "
                       f"{args.cluster or 'the default'})"):
        try:
            client.execute()
        except nbclient.exceptions.CellExecutionError as error:
            failed = error
    write_text_atomic(out, nbformat.writes(notebook))
    print(f"wrote {out}")
    if failed is not None:
        print(f"error: a cell of {path} failed:\n{failed}", file=sys.stderr)
        return 1
    return 0
