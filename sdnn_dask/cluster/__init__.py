"""Where the work runs: a Dask cluster to hand to the executors.

One factory, :func:`make_cluster`, and one helper that also connects and waits for the
workers, :func:`cluster_client`, for four places:

``"local"`` (the default)
    A :class:`~distributed.LocalCluster` on this machine: one single-threaded worker process
    per core, listening on loopback only (scheduler, workers and dashboard), so nothing on
    the network can reach it, and with TLS (temporary credentials), so no other process
    of this machine can either.
``"slurm"``
    Dask workers started as SLURM jobs by :class:`dask_jobqueue.SLURMCluster` (extra
    ``slurm``); the scheduler runs in this process. :func:`slurm_job_script` shows the job
    script it submits.
``"slurm-batch"``
    A fixed allocation: every task of one ``srun`` runs the same program, and
    :class:`dask_jobqueue.SLURMRunner` makes task 0 the scheduler, task 1 the client (the
    only task in which :func:`make_cluster` returns) and every other task a worker. See
    ``studies/slurm-compare.sbatch``.
``"tcp://host:port"``, ``"tls://host:port"``
    A scheduler that is already running.

Options come from profiles in the Dask config (:mod:`.profiles`); every cluster that
listens on sockets uses TLS by default (:mod:`.security`).

* :mod:`.profiles`: the kind and options of a named cluster, :class:`ClusterError`;
* :mod:`.security`: TLS credentials, and the private directories that hold them;
* :mod:`.limits`: how many workers each kind may be asked for, refused before any starts;
* :mod:`.local`: the loopback :class:`~distributed.LocalCluster` (workers started with
  SIGINT blocked: Ctrl-C is the client's);
* :mod:`.quiet`: the workers' preload that drops the log records repeating a task's error;
* :mod:`.slurm`: workers as SLURM jobs (dask-jobqueue, imported only when needed);
* :mod:`.batch`: the slurm-batch cluster, one ``srun``'s tasks;
* :mod:`.client`: :func:`make_cluster`, :func:`cluster_client`, :func:`connect` and
  :func:`local_client`, the ways to a client.
"""

from .batch import start_slurm_runner
from .client import cluster_client, connect, local_client, make_cluster
from .local import make_local_cluster
from .profiles import KINDS, ClusterError, cluster_profile, is_address
from .security import cluster_security, private_directory
from .slurm import make_slurm_cluster, slurm_job_script

__all__ = [
    "KINDS",
    "ClusterError",
    "cluster_client",
    "cluster_profile",
    "cluster_security",
    "connect",
    "is_address",
    "local_client",
    "make_cluster",
    "make_local_cluster",
    "make_slurm_cluster",
    "private_directory",
    "slurm_job_script",
    "start_slurm_runner",
]
