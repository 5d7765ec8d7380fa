"""Cluster profiles: the kind and options of a cluster, from ``sdnn.*`` in the Dask config.

Options come from profiles in the Dask config: ``sdnn.local``, ``sdnn.slurm`` and
``sdnn.slurm-batch`` (defaults in ``sdnn.yaml``), and named profiles
``sdnn.clusters.<name>`` (a ``kind`` among those three and the options that differ from
it); keyword arguments override them.
"""

from __future__ import annotations

from typing import Any

from .. import config

KINDS = ("local", "slurm", "slurm-batch")
"""The kinds of cluster :func:`make_cluster` starts (besides scheduler addresses)."""

SLURM_EXTRA = "pip install 'sdnn_dask[slurm]'"
"""How to install the ``slurm`` extra, for the messages of a missing dependency."""


class ClusterError(RuntimeError):
    """A cluster could not be made or reached; the message says what was expected."""


def keyword_options(mapping: dict[str, Any] | None) -> dict[str, Any]:
    """Config keys (``n-workers``) as keyword names (``n_workers``)."""
    return {str(k).replace("-", "_"): v for k, v in (mapping or {}).items()}


def is_address(where: object) -> bool:
    """Whether ``where`` is a scheduler address (``tcp://host:port``, ``tls://...``)."""
    return isinstance(where, str) and "://" in where


def cluster_profile(name: str | None = None) -> tuple[str, dict[str, Any]]:
    """The kind and options of a cluster profile.

    Parameters
    ----------
    name
        ``"local"``, ``"slurm"``, ``"slurm-batch"`` (options ``sdnn.<name>``), or the name
        of a profile in ``sdnn.clusters`` (its ``kind``'s options, updated with its own).
        Default: ``sdnn.cluster.default``.

    Returns
    -------
    kind, options
        Options with keyword-style names (``n_workers``, not ``n-workers``).

    Raises
    ------
    ClusterError
        For an unknown name or a profile without a valid ``kind``.

    Examples
    --------
    >>> import dask.config
    >>> with dask.config.set({"sdnn.clusters.big": {"kind": "slurm", "memory": "64GiB"}}):
    ...     kind, options = cluster_profile("big")
    >>> kind, options["memory"], options["cores"]
    ('slurm', '64GiB', 1)
    """
    name = name or config.get("cluster.default") or "local"
    if name in KINDS:
        return name, keyword_options(config.get(name))
    profiles = config.get("clusters") or {}
    if name not in profiles:
        defined = ", ".join(sorted(profiles)) or "none defined"
        raise ClusterError(
            f"unknown cluster {name!r}: expected 'local', 'slurm', 'slurm-batch', a profile "
            f"of sdnn.clusters ({defined}), or a scheduler address such as "
            "tls://host:8786"
        )
    options = keyword_options(profiles[name])
    kind = options.pop("kind", None)
    if kind not in KINDS:
        raise ClusterError(
            f"cluster profile sdnn.clusters.{name} needs kind: one of {', '.join(KINDS)} "
            f"(found {kind!r})"
        )
    return kind, {**keyword_options(config.get(kind)), **options}
