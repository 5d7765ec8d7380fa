"""Package defaults, kept in ``dask.config`` under the ``sdnn`` namespace.

The defaults live in ``sdnn.yaml`` beside this module. Users override them the usual Dask
way: a YAML file in ``~/.config/dask/``, environment variables such as
``DASK_SDNN__YMAX=16``, or ``dask.config.set({"sdnn.ymax": 16})``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dask.config
import yaml

_DEFAULTS_FILE = Path(__file__).with_name("sdnn.yaml")

with _DEFAULTS_FILE.open() as _f:
    _DEFAULTS = yaml.safe_load(_f)

dask.config.update_defaults(_DEFAULTS)


def get(key: str, default: Any = None) -> Any:
    """Return ``sdnn.<key>`` from ``dask.config`` (``default`` when unset)."""
    return dask.config.get(f"sdnn.{key}", default=default)


def default_bias(n_neurons: int) -> float:
    """Return the challenge bias for a network of ``n_neurons`` neurons.

    Raises
    ------
    ValueError
        If the challenge defines no bias for that size; pass ``bias=`` explicitly then.
    """
    table = {int(k): float(v) for k, v in get("bias").items()}
    if n_neurons not in table:
        sizes = ", ".join(str(k) for k in sorted(table))
        raise ValueError(
            f"the challenge defines a bias only for N in {{{sizes}}}, not N={n_neurons}; "
            "pass bias= explicitly"
        )
    return table[n_neurons]


def cache_dir() -> Path:
    """Folder for binary caches of parsed challenge files."""
    configured = get("cache-dir")
    if configured:
        return Path(configured).expanduser()
    env = os.environ.get("SDNN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "sdnn_dask"
