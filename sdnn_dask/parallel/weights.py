"""Whether a data-parallel worker holds the weights in memory or streams them from a store.

One decision, made on the client from the workers' memory limit
(``sdnn.data-parallel.weights`` and ``resident-fraction``), and said in words: the
executor records it, the study layer asks it before loading a store
(:func:`sdnn_dask.study.store_weights`).
"""

from __future__ import annotations

from distributed import Client

from .. import config
from ..core.network import Network
from ..dask_workers import worker_info
from ..data.store import NetworkStore
from ..data.streaming import StreamedNetwork

#: How a data-parallel run holds the weights (``sdnn.data-parallel.weights``).
WEIGHTS = ("auto", "resident", "streamed")


def worker_memory_limit(client: Client, workers: list[str]) -> int | None:
    """The smallest memory limit of ``workers`` in bytes (``None`` if none has one)."""
    info = worker_info(client)
    limits = [int(info[w].get("memory_limit") or 0) for w in workers if w in info]
    limits = [m for m in limits if m > 0]
    return min(limits) if limits else None


def choose_weights(network: Network | NetworkStore | StreamedNetwork, weights: str,
                   memory_limit: int | None) -> tuple[str, str]:
    """Resident or streamed weights for ``network``, and why, in words.

    A :class:`~sdnn_dask.core.network.Network` is in memory already: resident. A store (or a
    streamed network) is ``weights`` if that is not ``"auto"``; with ``"auto"``, resident
    when a worker's copy (:func:`~sdnn_dask.data.streaming.resident_bytes`) fits in
    ``sdnn.data-parallel.resident-fraction`` of ``memory_limit``, else streamed.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
    if isinstance(network, Network):
        if weights == "streamed":
            raise ValueError("streamed weights need a network store (sdnn-dask convert, or "
                             "generate --store); this network is in memory")
        return "resident", "resident: the network is in memory"
    need = (network.resident_bytes() if isinstance(network, StreamedNetwork)
            else StreamedNetwork(network).resident_bytes())
    if weights != "auto":
        return weights, f"{weights}: as asked ({need / 1e9:.2f} GB per worker if resident)"
    fraction = float(config.get("data-parallel.resident-fraction"))
    if memory_limit is None:
        import psutil

        memory_limit = int(psutil.virtual_memory().total)
    budget = fraction * memory_limit
    if need <= budget:
        return "resident", (f"resident: a worker's copy ({need / 1e9:.2f} GB, weights and "
                            f"transpose) fits in {fraction:g} of its {memory_limit / 1e9:.1f} "
                            "GB memory limit")
    return "streamed", (f"streamed: a worker's copy would be {need / 1e9:.2f} GB (weights and "
                        f"transpose), over {fraction:g} of its {memory_limit / 1e9:.1f} GB "
                        "memory limit; each worker reads the store layer by layer")


def choose_part_weights(need: list[int], sharing: list[int], weights: str,
                        memory_limit: int | None) -> list[tuple[str, str]]:
    """Resident or streamed for every part of a model-parallel run on a store, and why.

    ``need[p]`` is the bytes part ``p`` holds with every layer resident
    (:func:`~sdnn_dask.parallel.slabs.sliced_plans.part_resident_bytes`), ``sharing[p]``
    the most parts that share one worker with it. ``weights`` as in
    :func:`choose_weights`; with ``"auto"`` a part is resident when its layers fit in
    ``sdnn.data-parallel.resident-fraction`` of the memory limit divided among the parts
    sharing its worker, else streamed (its slice read layer by layer, each run).
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
    if weights != "auto":
        return [(weights, f"{weights}: as asked ({bytes_ / 1e9:.2f} GB if resident)")
                for bytes_ in need]
    fraction = float(config.get("data-parallel.resident-fraction"))
    if memory_limit is None:
        import psutil

        memory_limit = int(psutil.virtual_memory().total)
    out = []
    for bytes_, shared in zip(need, sharing, strict=True):
        budget = fraction * memory_limit / max(1, shared)
        share = (f"{fraction:g} of its worker's {memory_limit / 1e9:.1f} GB memory limit"
                 + (f", shared by {shared} parts" if shared > 1 else ""))
        if bytes_ <= budget:
            out.append(("resident", f"resident: its slice ({bytes_ / 1e9:.2f} GB, weights "
                                    f"and transpose) fits in {share}"))
        else:
            out.append(("streamed", f"streamed: its slice would be {bytes_ / 1e9:.2f} GB "
                                    f"(weights and transpose), over {share}; the part "
                                    "reads it layer by layer"))
    return out
