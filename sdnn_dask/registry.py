"""The names of strategies, partitions and transports, in one place.

Everything that takes a name by string (the executors, :mod:`sdnn_dask.study`, the CLI, a
study's YAML) checks it against these tuples, and every message listing the choices is
made from them.
"""

from __future__ import annotations

#: Strategies run in this process.
SERIAL_STRATEGIES = ("reference", "kernel")
#: Every strategy: serial, data parallelism, model parallelism and their hybrid.
STRATEGIES = (*SERIAL_STRATEGIES, "data", "model", "hybrid")
#: How data parallelism (and the hybrid's row groups) split the input rows.
ROW_PARTITIONS = ("block", "hash", "random")
#: How model parallelism splits every layer's neurons.
NEURON_PARTITIONS = ("block", "hash", "random", "hypergraph")
#: What a hypergraph partition minimises: the bytes a sample of the inputs sends
#: (``traffic``), or the activation columns sent whatever carries them (``km1``).
OBJECTIVES = ("traffic", "km1")
#: How model-parallel parts exchange activations.
TRANSPORTS = ("direct", "graph")
#: How data parallelism gives blocks to workers: pinned, or as workers free up.
PLACEMENTS = ("static", "dynamic")
#: Row orders of generated inputs (:func:`sdnn_dask.data.images.make_inputs`), the default first.
ORDERS = ("official-like", "iid")


def partitions_of(strategy: str) -> tuple[str, ...]:
    """The partition names ``strategy`` takes (``("none",)`` for the serial ones)."""
    if strategy in SERIAL_STRATEGIES:
        return ("none",)
    if strategy == "data":
        return ROW_PARTITIONS
    if strategy in ("model", "hybrid"):
        return NEURON_PARTITIONS
    raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
