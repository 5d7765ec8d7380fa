"""Data, model and hybrid parallelism on a real SLURM: workers as SLURM jobs, and the
batch script.

Needs a running SLURM whose jobs can run this interpreter (``.ci/slurm-up`` starts a
single-node one, as root, on Debian); skips with the reason otherwise. Every job these tests
start is cancelled on the way out, and checked gone from ``squeue``.
"""

from __future__ import annotations

import itertools
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import slurm_unavailable
from distributed import Security

from sdnn_dask.cluster import ClusterError, cluster_client, connect
from sdnn_dask.data.images import make_inputs
from sdnn_dask.data.radixnet import make_network
from sdnn_dask.parallel import DataParallelExecutor, ModelParallelExecutor
from sdnn_dask.parallel.serial import run_serial
from sdnn_dask.testing import assert_same_result

REPO = Path(__file__).resolve().parents[2]
REASON = slurm_unavailable()
pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600),
              pytest.mark.skipif(REASON is not None, reason=REASON or "")]


def queued(job_ids) -> dict[str, str]:
    """State in squeue of those of ``job_ids`` still there (pending, running, completing)."""
    proc = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True,
                          timeout=30, check=True)
    states = dict(line.split(maxsplit=1) for line in proc.stdout.splitlines() if line.strip())
    return {j: states[j] for j in map(str, job_ids) if j in states}


def cancel_and_check_gone(job_ids, timeout: float = 60) -> None:
    """Cancel the jobs (again: harmless if gone) and wait until squeue shows none of them."""
    job_ids = [str(j) for j in job_ids if j]
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, timeout=30)
    deadline = time.monotonic() + timeout
    while (left := queued(job_ids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"SLURM jobs still in squeue after scancel: {left}"


def test_batch_script_runs_the_study_in_one_allocation(tmp_path):
    """``sbatch --wait studies/slurm-compare.sbatch`` on a tiny problem (4 tasks: 2 workers)."""
    shared = tmp_path / "shared"
    results = tmp_path / "results"
    env = {**os.environ, "SDNN_PYTHON": sys.executable,
           "DASK_SDNN__SLURM_BATCH__SHARED_DIRECTORY": str(shared)}
    cmd = ["sbatch", "--wait", "--parsable", "--ntasks=4", "--cpus-per-task=1",
           "--mem-per-cpu=1G", "--time=00:10:00", f"--chdir={tmp_path}",
           f"--output={tmp_path}/compare-%j.out", str(REPO / "studies" / "slurm-compare.sbatch"),
           "-L", "12", "-n", "600", "--results", str(results)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=420)
    except subprocess.TimeoutExpired as timeout:
        job = (timeout.stdout or b"").decode().strip().split(";")[0]
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %R"], capture_output=True,
                               text=True, timeout=30).stdout.strip() if job else "?"
        cancel_and_check_gone([job] if job else [])
        pytest.fail(f"the batch job {job or '(no id)'} did not end within 420 s (squeue: "
                    f"{state or 'gone'})")
    job = proc.stdout.strip().split(";")[0]
    outputs = list(tmp_path.glob("compare-*.out"))
    log = outputs[0].read_text() if outputs else "(no output file)"
    try:
        assert proc.returncode == 0, f"{proc.stderr}\n{log}"
        assert outputs == [tmp_path / f"compare-{job}.out"]
        assert f"job {job}, 4 tasks (2 workers)" in log
        assert "waiting for the 2 workers of this allocation" in log
        for partition in ("block", "hash", "random"):
            assert any(line.split()[:3] == ["data", partition, "2"] and line.endswith("PASS")
                       for line in log.splitlines()), log
        table = pd.read_csv(results / "records.csv")
        data = table[table["strategy"] == "data"]
        assert set(data["check"]) == {"PASS"} and set(data["workers"]) == {2}
        assert data["worker"].str.startswith("tls://").all()  # the workers spoke TLS
        assert set(table["check"]) == {"PASS"}
        assert not any(shared.glob("batch-*")), "task 0 left credentials behind"
    finally:
        cancel_and_check_gone([job] if job else [])


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """Two Dask workers as two SLURM jobs (1 core, 1 GiB each), TLS, scheduler here."""
    shared = tmp_path_factory.mktemp("slurm-shared")
    job_ids: list[str] = []
    client = None
    try:
        client = cluster_client("slurm", n_workers=2, cores=1, processes=1, memory="1GiB",
                                walltime="00:15:00", shared_directory=shared, timeout=240)
        cluster = client.cluster
        job_ids = [job.job_id for job in cluster.workers.values()]
        yield client, cluster, job_ids, shared
    finally:
        if client is not None:
            if not job_ids:
                job_ids = [j.job_id for j in client.cluster.workers.values()]
            client.close()  # closes the cluster: scancel of every job
        cancel_and_check_gone(job_ids)


def test_workers_run_inside_slurm_jobs(slurm):
    client, _, job_ids, _ = slurm
    assert len(job_ids) == 2 and all(job_ids)
    env = client.run(lambda: (os.environ.get("SLURM_JOB_ID"), sys.executable))
    assert len(env) == 2
    assert sorted(job for job, _ in env.values()) == sorted(job_ids)
    # the jobs run this project's interpreter (the venv's python by default)
    assert {python for _, python in env.values()} == {sys.executable}
    assert set(queued(job_ids).values()) == {"RUNNING"}


def test_data_parallel_inference_on_slurm_workers(slurm):
    client, _, _, _ = slurm
    network = make_network(1024, 12, seed=2)
    inputs = make_inputs(1000, 1024, seed=2)
    reference = run_serial(network, inputs, "reference")
    result = DataParallelExecutor(client, network).run(inputs, partition="hash")
    assert_same_result(result, reference)
    assert result.n_workers == 2
    # every block ran on a SLURM worker, and both workers had blocks
    assert set(result.blocks["worker"]) == set(client.nthreads())


def test_model_parallel_inference_on_slurm_workers(slurm):
    """Model parallelism (k = 2) and the hybrid (2 row groups x 2 parts) on the two jobs:
    right on both transports, with activations really crossing between the jobs (over
    TLS: the direct transport's worker-to-worker connections use the jobs' credentials)."""
    client, _, _, _ = slurm
    network = make_network(1024, 12, seed=2)
    inputs = make_inputs(1000, 1024, seed=2)
    reference = run_serial(network, inputs, "kernel")  # the parts' summation order
    executor = ModelParallelExecutor(client, network)
    workers = set(client.nthreads())
    for (row_groups, strategy), transport in itertools.product(
            [(1, "model"), (2, "hybrid")], ["direct", "graph"]):
        result = executor.run(inputs, partition="hash", k=2, row_groups=row_groups,
                              transport=transport)
        assert_same_result(result, reference)
        assert result.strategy == strategy and result.row_groups == row_groups
        assert result.transport == transport
        assert result.n_workers == 2 and len(result.blocks) == 2 * row_groups
        # the parts ran on both SLURM workers, and Dask moved activations between them
        assert set(result.blocks["worker"]) == workers
        assert result.bytes_moved > 0


def test_slurm_cluster_is_secure(slurm):
    client, cluster, _, shared = slurm
    address = client.scheduler.address
    assert address.startswith("tls://")
    assert all(w.startswith("tls://") for w in client.nthreads())
    with pytest.raises(ClusterError, match="no credentials"):
        connect(address, security=Security(require_encryption=False))
    with pytest.raises(ClusterError, match="TLS certificate does not match"):
        connect(address, security=Security.temporary(), timeout=5)
    # the HTTP servers (plain) of the scheduler and of the workers listen on loopback only
    http = cluster.scheduler.http_server
    assert {s.getsockname()[0] for s in http._sockets.values()} == {"127.0.0.1"}
    hosts = client.run(lambda dask_worker: sorted(
        {s.getsockname()[0] for s in dask_worker.http_server._sockets.values()}))
    assert set(map(tuple, hosts.values())) == {("127.0.0.1",)}
    # the jobs' credentials: files only the user can read, in a directory only the user lists
    tls = shared / "tls"
    assert stat.S_IMODE(tls.stat().st_mode) == 0o700
    files = list(tls.iterdir())
    assert len(files) == 3
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert "PRIVATE KEY" not in cluster.job_script()


def test_study_runs_its_notebook_on_slurm_workers(tmp_path):
    """``sdnn-dask study NOTEBOOK --cluster slurm``: the notebook's cluster_client() starts
    its workers as SLURM jobs, and they are gone when it ends."""
    nbformat = pytest.importorskip("nbformat", reason="needs the study extra (nbformat)")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\n"
        "from sdnn_dask.cluster import cluster_client\n"
        "from sdnn_dask.parallel import DataParallelExecutor, run_serial\n"
        "from sdnn_dask.data.radixnet import make_inputs, make_network\n"
        "from sdnn_dask.testing import assert_same_result\n"
        "net, x = make_network(1024, 6), make_inputs(300, 1024)\n"
        "with cluster_client() as client:\n"
        "    jobs = sorted(client.run(lambda: os.environ.get('SLURM_JOB_ID')).values())\n"
        "    result = DataParallelExecutor(client, net).run(x, partition='hash')\n"
        "assert_same_result(result, run_serial(net, x, 'kernel'))\n"
        "print('JOBS', ' '.join(jobs), 'PASS')")])
    path = tmp_path / "slurm_study.ipynb"
    nbformat.write(notebook, path)
    out = tmp_path / "done.ipynb"
    proc = subprocess.run(
        [sys.executable, "-m", "sdnn_dask", "notebook", str(path), "--cluster", "slurm",
         "--workers", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = "".join(o.get("text", "") for o in nbformat.read(out, as_version=4).cells[0].outputs)
    assert "PASS" in text, text
    jobs = text.split("JOBS", 1)[1].split("PASS")[0].split()
    assert jobs and all(j.isdigit() for j in jobs), text  # every worker ran in a SLURM job
    deadline = time.monotonic() + 60
    while (left := queued(jobs)) and time.monotonic() < deadline:
        time.sleep(0.5)
    try:
        assert not left, f"the study left SLURM jobs behind: {left}"
    finally:
        cancel_and_check_gone(jobs)
