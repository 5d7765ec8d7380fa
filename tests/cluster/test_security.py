"""Secure by default: loopback-only local clusters with TLS, TLS for anything reachable.

Real schedulers and workers throughout (no SLURM needed): a TLS LocalCluster refuses
clients without its credentials, with other credentials, or speaking plain TCP, and
computes for a client holding them.
"""

from __future__ import annotations

import gc
import os
import re
import stat
import subprocess
import sys
import threading
import warnings
from urllib.parse import urlparse

import dask.config
import pytest
from distributed import Client, Security

from sdnn_dask.cluster import (
    ClusterError,
    cluster_client,
    cluster_security,
    connect,
    make_cluster,
    private_directory,
)

pytest.importorskip("cryptography", reason="TLS credentials need cryptography (extra slurm)")


def _http_hosts(server) -> set[str]:
    return {sock.getsockname()[0] for sock in server._sockets.values()}


@pytest.fixture(scope="module")
def tls_client():
    """A LocalCluster with TLS forced on, and a client holding its credentials."""
    with cluster_client("local", n_workers=1, security=True) as client:
        yield client


def test_local_cluster_and_dashboard_listen_on_loopback_only():
    cluster = make_cluster("local", n_workers=1)
    try:
        address = urlparse(cluster.scheduler_address)
        assert (address.scheme, address.hostname) == ("tls", "127.0.0.1")  # TLS by default
        assert _http_hosts(cluster.scheduler.http_server) == {"127.0.0.1"}
        with Client(cluster, set_as_default=False) as client:
            client.wait_for_workers(1)
            assert {urlparse(w).hostname for w in client.nthreads()} == {"127.0.0.1"}
    finally:
        cluster.close()


def test_client_with_the_credentials_computes(tls_client):
    address = tls_client.scheduler.address
    assert address.startswith("tls://127.0.0.1:")
    assert all(w.startswith("tls://") for w in tls_client.nthreads())
    assert tls_client.submit(sum, [1, 2, 3]).result() == 6


def test_client_without_credentials_is_refused(tls_client):
    address = tls_client.scheduler.address
    with pytest.raises(ClusterError, match="uses TLS, and this client has no credentials"):
        connect(address, security=Security(require_encryption=False))
    # distributed itself refuses too, before sending anything
    with pytest.raises(TypeError, match="TLS expects a `ssl_context`"):
        Client(address, timeout=5, set_as_default=False)
    # finalise the half-built Client now (see sdnn_dask.cluster.connect): collected later,
    # inside another client's start, its __del__ would hang on distributed's loop lock
    gc.collect()


def test_client_with_other_credentials_is_refused(tls_client):
    address = tls_client.scheduler.address
    with pytest.raises(ClusterError, match=r"could not connect.*TLS certificate does not match"):
        connect(address, security=Security.temporary(), timeout=5)
    # the scheduler is unharmed
    assert tls_client.submit(sum, [4, 5]).result() == 9


def test_plain_tcp_to_a_tls_scheduler_is_refused(tls_client):
    plain = tls_client.scheduler.address.replace("tls://", "tcp://")
    expected = re.escape(f"could not connect to the scheduler at {plain}")
    with pytest.raises(ClusterError, match=expected):
        connect(plain, timeout=5)


def test_a_local_cluster_beyond_loopback_uses_tls_by_default():
    """Configured to listen on every interface, the LocalCluster turns TLS on by itself."""
    with dask.config.set({"sdnn.local.host": "0.0.0.0"}):
        cluster = make_cluster("local", n_workers=1)
    try:
        assert cluster.scheduler_address.startswith("tls://")
        assert cluster.security.require_encryption
        # the dashboard (plain HTTP) stays on loopback all the same
        assert _http_hosts(cluster.scheduler.http_server) == {"127.0.0.1"}
        with pytest.raises(ClusterError, match="no credentials"):
            connect(cluster.scheduler_address, security=Security(require_encryption=False))
        with Client(cluster, set_as_default=False) as client:  # the cluster's credentials
            client.wait_for_workers(1)
            assert client.submit(pow, 2, 10).result() == 1024
    finally:
        cluster.close()


#: A stranger: another process of this machine, with no credentials, that knows the
#: scheduler's address (a shared login node's other users can see it, e.g. in ``ss -lt``)
#: and tries to run code on every worker, as plain TCP and as TLS with credentials of its
#: own making.
STRANGER = """
import os, sys
from distributed import Client, Security
host_port = sys.argv[1].split("://", 1)[1]
marker = sys.argv[2]
ran = False
for scheme, security in (("tcp", None), ("tls", Security.temporary())):
    try:
        with Client(f"{scheme}://{host_port}", security=security, timeout=5,
                    set_as_default=False) as c:
            pids = c.run(os.getpid)
            c.run(lambda: open(marker, "a").close())
            print("RAN", scheme, sorted(pids.values()), flush=True)
            ran = True
    except Exception as error:
        print("REFUSED", scheme, type(error).__name__, flush=True)
sys.exit(0 if ran else 3)
"""


def _stranger(address: str, marker) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    return subprocess.run([sys.executable, "-c", STRANGER, address, str(marker)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_stranger_process_cannot_run_code_on_the_default_local_cluster(tmp_path):
    """The default LocalCluster (TLS, temporary credentials) refuses another process of
    this machine; with security off, the same stranger runs code on every worker (which
    is what the default prevents, and shows the stranger is able to)."""
    marker = tmp_path / "ran"
    with cluster_client("local", n_workers=2) as client:
        assert client.scheduler.address.startswith("tls://")
        out = _stranger(client.scheduler.address, marker)
        assert out.returncode == 3, out.stdout + out.stderr
        assert "RAN" not in out.stdout and out.stdout.count("REFUSED") == 2
        assert not marker.exists()
        assert client.submit(sum, [1, 2]).result() == 3  # unharmed
    with cluster_client("local", n_workers=2, security=False) as client:
        assert client.scheduler.address.startswith("tcp://")
        out = _stranger(client.scheduler.address, marker)
        assert out.returncode == 0 and "RAN tcp" in out.stdout, out.stdout + out.stderr
        assert marker.exists()


def test_a_client_of_the_same_process_connects_by_address_alone():
    """This process started the TLS cluster, so holds its credentials: ``connect`` (and
    ``--cluster tls://...`` in this process) uses them; closed, the cluster's are gone."""
    cluster = make_cluster("local", n_workers=1)
    address = cluster.scheduler_address
    try:
        assert address.startswith("tls://")
        with connect(address, timeout=10) as client:
            assert client.submit(pow, 3, 3).result() == 27
    finally:
        cluster.close()
    with pytest.raises(ClusterError, match="no credentials"):
        connect(address, timeout=2)


def test_worker_threads_get_no_tls():
    """A threaded LocalCluster's comms are in process: nothing listens, nothing to secure."""
    cluster = make_cluster("local", n_workers=1, processes=False)
    try:
        assert cluster.scheduler_address.startswith("inproc://")
        assert not getattr(cluster.security, "require_encryption", False)
    finally:
        cluster.close()


def test_without_cryptography_the_default_falls_back_once(monkeypatch):
    """cryptography missing (it is a core dependency, but a broken install may lack it):
    a loopback cluster asked for nothing goes without TLS, said once per process; TLS
    asked for, or a cluster beyond loopback, raises and names what to install."""
    from sdnn_dask.cluster import security as security_module

    monkeypatch.setitem(sys.modules, "cryptography", None)  # as if not installed
    monkeypatch.setattr(security_module, "_SAID_NO_CRYPTOGRAPHY", threading.Event())
    with pytest.warns(UserWarning, match="runs without TLS.*cryptography.*said once"):
        assert cluster_security(None, exposed=False, default=True) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cluster_security(None, exposed=False, default=True) is None
    for security, exposed in ((True, False), (None, True)):
        with pytest.raises(ImportError, match="pip install cryptography"):
            cluster_security(security, exposed=exposed, default=True)


def test_turning_tls_off_beyond_loopback_warns():
    with pytest.warns(UserWarning, match="beyond loopback without TLS"):
        assert cluster_security(False, exposed=True) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cluster_security(None, exposed=False) is None
        assert cluster_security("false", exposed=False) is None
    assert isinstance(cluster_security(None, exposed=True), Security)
    assert isinstance(cluster_security("true", exposed=False), Security)
    assert isinstance(cluster_security(None, exposed=False, default=True), Security)
    with warnings.catch_warnings():  # turned off on loopback: the user's choice, no warning
        warnings.simplefilter("error")
        assert cluster_security(False, exposed=False, default=True) is None
    with pytest.raises(ClusterError, match="security must be true, false"):
        cluster_security("maybe", exposed=True)


def test_plain_tcp_to_a_remote_scheduler_warns():
    with pytest.warns(UserWarning, match="plain TCP"), pytest.raises(ClusterError):
        connect("tcp://192.0.2.1:1", timeout=0.5)


def test_private_directory_is_0700(tmp_path):
    loose = tmp_path / "shared"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    assert private_directory(loose) == loose
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    nested = private_directory(tmp_path / "a" / "b")
    assert stat.S_IMODE(nested.stat().st_mode) == 0o700


def test_slurm_job_credentials_are_private_files(tmp_path):
    """The SLURM jobs' credentials: 0600 files in a 0700 directory, only paths in the script.

    No SLURM needed: a SLURMCluster submits nothing until it is scaled.
    """
    pytest.importorskip("dask_jobqueue", reason="needs the slurm extra")
    shared = tmp_path / "shared"
    tls = shared / "tls"
    with cluster_client("slurm", n_workers=0, shared_directory=shared) as client:
        cluster = client.cluster
        assert cluster.scheduler_address.startswith("tls://")
        assert _http_hosts(cluster.scheduler.http_server) == {"127.0.0.1"}
        script = cluster.job_script()
        files = sorted(tls.iterdir())
        assert len(files) == 3  # CA, certificate, key
        assert stat.S_IMODE(tls.stat().st_mode) == 0o700
        assert stat.S_IMODE(shared.stat().st_mode) == 0o700
        for path in files:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
            assert str(path) in script
        key = next(p for p in files if ".key." in p.name)
        assert "PRIVATE KEY" in key.read_text()
        assert "BEGIN" not in script and "PRIVATE" not in script
        for flag in ("--tls-ca-file", "--tls-cert", "--tls-key", "--protocol tls://",
                     "--dashboard-address 127.0.0.1:0"):
            assert flag in script
    assert list(tls.iterdir()) == []  # closing the client closed the cluster, removed them
