"""The cluster factory: the loopback-only LocalCluster, profiles, SLURM job scripts, --cluster.

SLURM itself is exercised in test_slurm.py and TLS in test_security.py; nothing here needs a
running SLURM (a SLURMCluster submits nothing until it is scaled).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from urllib.parse import urlparse

import dask.config
import pytest


def test_local_cluster_is_loopback_only(client):
    info = client.scheduler_info()
    assert urlparse(info["address"]).hostname == "127.0.0.1"
    workers = client.nthreads()
    assert len(workers) == 2 and set(workers.values()) == {1}
    assert {urlparse(w).hostname for w in workers} == {"127.0.0.1"}
    dashboard = client.cluster.scheduler.http_server
    hosts = {sock.getsockname()[0] for sock in dashboard._sockets.values()}
    assert hosts == {"127.0.0.1"}


# --------------------------------------------------------------------------- the factory


def test_make_cluster_local_is_loopback_and_closes_with_its_client():
    from sdnn_dask.cluster import cluster_client

    with cluster_client("local", n_workers=1) as client:
        cluster = client.cluster
        assert urlparse(client.scheduler.address).hostname == "127.0.0.1"
        assert client.submit(sum, [1, 2]).result() == 3
    assert cluster.status.name == "closed"


def test_cluster_profiles_from_the_dask_config():
    from sdnn_dask.cluster import cluster_client, cluster_profile

    assert cluster_profile()[0] == "local"
    kind, options = cluster_profile("slurm")
    assert kind == "slurm" and options["security"] is True and options["n_workers"] == 2
    profile = {"kind": "local", "n-workers": 1, "threads-per-worker": 2}
    with dask.config.set({"sdnn.clusters.tiny": profile, "sdnn.cluster.default": "tiny"}):
        kind, options = cluster_profile()
        assert (kind, options["n_workers"], options["host"]) == ("local", 1, "127.0.0.1")
        with cluster_client() as client:  # the default cluster is now the profile
            assert list(client.nthreads().values()) == [2]


def test_unknown_clusters_are_clear_errors():
    from sdnn_dask.cluster import ClusterError, cluster_profile, make_cluster

    with pytest.raises(ClusterError, match=r"unknown cluster 'nowhere': expected 'local'"):
        make_cluster("nowhere")
    with dask.config.set({"sdnn.clusters.odd": {"memory": "1GiB"}}):
        with pytest.raises(ClusterError, match=r"sdnn.clusters.odd needs kind: one of local"):
            cluster_profile("odd")
    assert make_cluster("tls://10.0.0.1:8786") == "tls://10.0.0.1:8786"
    with pytest.raises(ClusterError, match="is a running scheduler"):
        make_cluster("tcp://127.0.0.1:8786", n_workers=2)


def test_slurm_batch_outside_srun_says_where_it_runs(monkeypatch):
    from sdnn_dask.cluster import ClusterError, make_cluster

    for var in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ClusterError, match="runs inside srun"):
        make_cluster("slurm-batch")
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    with pytest.raises(ClusterError, match="at least 3 tasks"):
        make_cluster("slurm-batch")


def test_missing_slurm_extra_names_it(monkeypatch):
    from sdnn_dask.cluster import make_cluster

    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # as if not installed
    with pytest.raises(ImportError, match=re.escape("pip install 'sdnn_dask[slurm]'")):
        make_cluster("slurm")


def test_missing_cryptography_names_the_extra(monkeypatch):
    from sdnn_dask.cluster import cluster_security

    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'sdnn_dask[slurm]'")):
        cluster_security(True, exposed=True)


# --------------------------------------------------------------------------- job scripts


def test_slurm_job_script_preview(tmp_path):
    pytest.importorskip("dask_jobqueue", reason="needs the slurm extra")
    from sdnn_dask.cluster import slurm_job_script

    script = slurm_job_script(cores=2, memory="3GiB", walltime="00:05:00", queue="short",
                              shared_directory=tmp_path)
    for line in ("#SBATCH -n 1", "#SBATCH --cpus-per-task=2", "#SBATCH --mem=3G",
                 "#SBATCH -t 00:05:00", "#SBATCH -p short", "#SBATCH -J sdnn-dask",
                 f"#SBATCH -o {tmp_path}/logs/sdnn-dask-%J.out"):
        assert line in script.splitlines(), line
    worker = script.splitlines()[-1]
    assert worker.startswith(f"{sys.executable} -m distributed.cli.dask_worker tls://")
    assert "--nthreads 2" in worker and "--tls-key" in worker
    assert "BEGIN" not in script
    assert list((tmp_path / "tls").iterdir()) == []  # the preview's credentials are gone


def test_cli_cluster_job_script_and_show(tmp_path):
    pytest.importorskip("dask_jobqueue", reason="needs the slurm extra")
    proc = subprocess.run(
        [sys.executable, "-m", "sdnn_dask", "cluster", "job-script"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "DASK_SDNN__SLURM__MEMORY": "5GiB",
             "DASK_SDNN__SLURM__SHARED_DIRECTORY": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!/usr/bin/env bash\n")
    assert "#SBATCH --mem=5G" in proc.stdout and "dask_worker tls://" in proc.stdout
    shown = subprocess.run([sys.executable, "-m", "sdnn_dask", "cluster", "show", "--cluster",
                            "slurm"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "kind: slurm" in shown.stdout and "security: true" in shown.stdout


def test_importing_jobqueue_keeps_ctrl_c(tmp_path):
    """dask_jobqueue replaces the SIGINT handler on import; we give it back."""
    pytest.importorskip("dask_jobqueue", reason="needs the slurm extra")
    code = ("import signal; from sdnn_dask.cluster import slurm_job_script; "
            f"slurm_job_script(shared_directory={str(tmp_path)!r}); "
            "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------- --cluster


def test_cli_infer_on_a_named_cluster(capsys):
    from sdnn_dask.cli import main

    code = main(["infer", "-L", "6", "-n", "300", "--strategy", "data", "--partition", "hash",
                 "--cluster", "local", "--workers", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "edges/s" in captured.out
    assert "starting a LocalCluster with 1 workers (loopback, TLS: on)" in captured.err


@pytest.mark.parametrize(("args", "message"), [
    (["--cluster", "nowhere"], "unknown cluster 'nowhere'"),
    (["--cluster", "tcp://127.0.0.1:9", "--workers", "2"], "is a running scheduler"),
    (["--cluster", "slurm-batch"], "runs inside srun"),
])
def test_cli_cluster_errors(args, message, monkeypatch):
    from sdnn_dask.cli import main

    monkeypatch.delenv("SLURM_PROCID", raising=False)
    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["infer", "-L", "2", "-n", "10", "--strategy", "data", "-q", *args])
