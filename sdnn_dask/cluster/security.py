"""Cluster security: TLS credentials for every cluster whose processes listen on sockets.

A Dask scheduler runs whatever code its clients send, and workers run whatever the scheduler
sends. So every cluster that listens on sockets uses TLS with mutual authentication by
default, the local one on loopback too (on a shared machine anyone logged in can reach
loopback): temporary self-signed credentials made for that cluster
(:meth:`distributed.Security.temporary`, needs ``cryptography``, a core dependency). Only
processes holding them can connect. Where ``cryptography`` is missing all the same, a
loopback cluster asked for nothing in particular falls back to plain TCP with one warning
per process (:func:`cluster_security`'s ``default``); one reachable from the network, or
asked for TLS, raises instead. The credentials reach the SLURM jobs as files only
the user can read (mode 0600, in a 0700 directory of ``sdnn.slurm.shared-directory``, which
must be on a file system the compute nodes see, as the home directory usually is); job
scripts and command lines carry only their paths. The dashboard, which is plain HTTP, stays
on loopback unless configured otherwise. ``security=False`` (or ``sdnn.<kind>.security:
false``) turns TLS off, with a warning when the cluster is reachable from the network.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import threading
import warnings
from pathlib import Path

from distributed import Security

from .profiles import SLURM_EXTRA, ClusterError


def truthy(value: object) -> bool | None:
    """``True``/``False``/``None`` from a config value (``"false"`` from an env var too)."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ClusterError(f"security must be true, false or a distributed.Security, not {value!r}")


def temporary_security() -> Security:
    """New self-signed TLS credentials, or an ImportError naming the extra that makes them."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ImportError(
            "TLS for this cluster needs temporary credentials, made with the 'cryptography' "
            f"package, which is not installed: {SLURM_EXTRA} (or pip install cryptography)"
        ) from None
    return Security.temporary()


#: Whether this process has said that a loopback cluster went without TLS for want of
#: ``cryptography`` (said once, not for every cluster).
_SAID_NO_CRYPTOGRAPHY = threading.Event()


def cluster_security(
    security: Security | bool | str | None,
    *,
    exposed: bool,
    what: str = "this cluster",
    default: bool = False,
) -> Security | None:
    """The security of a new cluster: TLS by default when it is reachable from the network
    (or, with ``default``, whenever it listens on sockets).

    Parameters
    ----------
    security
        ``None``: TLS (temporary credentials) if ``exposed`` or ``default``, else none.
        ``True``: TLS with new temporary credentials. ``False``: none (warns if
        ``exposed``). A :class:`distributed.Security`: used as is.
    exposed
        Whether the cluster listens beyond loopback.
    what
        Names the cluster in the warnings.
    default
        TLS by default even on loopback. If ``cryptography`` is missing then, a loopback
        cluster asked for nothing in particular (``security`` None) goes without, with a
        warning once per process; an explicit ``True`` or an exposed cluster raises.

    Returns
    -------
    distributed.Security or None

    Raises
    ------
    ImportError
        TLS wanted (explicitly, or for an exposed cluster) without ``cryptography``.
    """
    if isinstance(security, Security):
        return security
    wanted = truthy(security)
    if wanted is None and default and not exposed:
        try:
            return temporary_security()
        except ImportError as error:
            if not _SAID_NO_CRYPTOGRAPHY.is_set():
                _SAID_NO_CRYPTOGRAPHY.set()
                warnings.warn(f"{what} runs without TLS: {error}. Any process on this "
                              "machine can then connect to it and run code as you (said "
                              "once)", UserWarning, stacklevel=3)
            return None
    if wanted is None:
        wanted = exposed
    if wanted:
        return temporary_security()
    if exposed:
        warnings.warn(
            f"{what} listens beyond loopback without TLS: anyone who can reach it can run "
            "code as you; keep security on unless the network is yours alone",
            UserWarning,
            stacklevel=3,
        )
    return None


def is_loopback(host: str | None) -> bool:
    """Whether a listening host is loopback only (``None``/``""`` mean every interface)."""
    if not host:
        return False
    host = host.split("://")[-1]
    if host.startswith("["):
        host = host[1 : host.index("]")]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def private_directory(path: str | os.PathLike[str]) -> Path:
    """Make (if needed) a directory only this user can read, write or list (mode 0700).

    Raises
    ------
    ClusterError
        If it exists and belongs to another user.
    """
    path = Path(os.path.expandvars(os.fspath(path))).expanduser()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise ClusterError(
            f"{path} belongs to uid {info.st_uid}, not you: cluster credentials and logs need "
            "a directory of your own (set sdnn.slurm.shared-directory)"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)
    return path


def shared_directory(configured: str | None) -> Path:
    """The private directory SLURM jobs share credentials and logs in (default under ~/.cache)."""
    return private_directory(configured or Path.home() / ".cache" / "sdnn_dask" / "slurm")
