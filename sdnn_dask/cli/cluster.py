"""The ``cluster`` command: a SLURM job script previewed, or a cluster profile shown."""

from __future__ import annotations

import argparse

from .common import UsageError


def cmd_cluster(args: argparse.Namespace) -> int:
    import yaml

    from ..cluster import ClusterError, cluster_profile, slurm_job_script

    try:
        if args.action == "job-script":
            print(slurm_job_script(profile=args.cluster), end="")
        else:
            kind, options = cluster_profile(args.cluster)
            shown = {"kind": kind, **{k.replace("_", "-"): v for k, v in options.items()}}
            print(yaml.safe_dump(shown, sort_keys=False), end="")
    except (ClusterError, ImportError) as error:
        raise UsageError(str(error)) from error
    return 0
