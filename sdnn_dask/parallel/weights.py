"""Whether a data-parallel worker holds the weights in memory or streams them from a store.

One decision, made on the client from the workers' memory limit and every host's memory
(``sdnn.data-parallel.weights`` and ``resident-fraction``), and said in words: the
executor records it, the study layer asks it before loading a store
(:func:`sdnn_dask.study.store_weights`). Resident, every worker holds a copy, and so does
the client if it keeps one: the copies of the processes that share a host must fit that
host's memory together (:class:`Host`), not each alone.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Host:
    """A machine of a run and the processes on it that would hold a copy of the weights.

    Attributes
    ----------
    name
        The host (a worker address's host, ``"127.0.0.1"`` for a LocalCluster).
    workers
        The run's workers on it.
    client
        Whether the client runs on it and holds a copy too.
    memory
        Its memory in bytes.
    """

    name: str
    workers: int
    client: bool
    memory: int

    @property
    def copies(self) -> int:
        """Copies of the weights on this host when they are resident."""
        return self.workers + int(self.client)


def _host_memory(dask_worker: object = None) -> int:  # run on a worker by client.run
    import psutil

    return int(psutil.virtual_memory().total)


def _is_here(host: str) -> bool:
    """Whether ``host`` (a name or address) is this machine."""
    if host in ("127.0.0.1", "::1", "localhost"):
        return True
    try:
        mine = {socket.gethostname(), *socket.gethostbyname_ex(socket.gethostname())[2]}
    except OSError:
        mine = {socket.gethostname()}
    return host in mine


def run_hosts(client: Client, workers: list[str], client_copy: bool) -> list[Host]:
    """The hosts of ``workers``: each host's workers, whether the client (with a copy of
    the weights, ``client_copy``) runs there too, and its memory (asked of one of its
    workers)."""
    info = worker_info(client)
    by_host: dict[str, list[str]] = {}
    for w in workers:
        host = str(info.get(w, {}).get("host") or w.rsplit(":", 1)[0].split("//")[-1])
        by_host.setdefault(host, []).append(w)
    memory = client.run(_host_memory, workers=[ws[0] for ws in by_host.values()])
    return [Host(host, len(ws), client_copy and _is_here(host), int(memory[ws[0]]))
            for host, ws in sorted(by_host.items())]


def choose_weights(network: Network | NetworkStore | StreamedNetwork, weights: str,
                   memory_limit: int | None, hosts: list[Host] | None = None
                   ) -> tuple[str, str]:
    """Resident or streamed weights for ``network``, and why, in words.

    A :class:`~sdnn_dask.core.network.Network` is in memory already: resident. A store (or a
    streamed network) is ``weights`` if that is not ``"auto"``; with ``"auto"``, resident
    when a worker's copy (:func:`~sdnn_dask.data.streaming.resident_bytes`) fits in
    ``sdnn.data-parallel.resident-fraction`` of ``memory_limit`` and, on every one of
    ``hosts``, its copies (:attr:`Host.copies`: its workers', and the client's if it
    holds one) fit in that fraction of the host's memory; else streamed.
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
    for host in hosts or []:
        if host.copies * need > fraction * host.memory:
            who = f"{host.workers} worker(s)" + (" and the client" if host.client else "")
            return "streamed", (
                f"streamed: {who} on {host.name} would hold {host.copies} copies of "
                f"{need / 1e9:.2f} GB (weights and transpose), over {fraction:g} of its "
                f"{host.memory / 1e9:.1f} GB of memory; each worker reads the store layer "
                "by layer")
    if need <= budget:
        most = max(hosts or [], key=lambda h: h.copies, default=None)
        also = (f", and the {most.copies} copies on {most.name} in {fraction:g} of its "
                f"{most.memory / 1e9:.1f} GB" if most is not None else "")
        return "resident", (f"resident: a worker's copy ({need / 1e9:.2f} GB, weights and "
                            f"transpose) fits in {fraction:g} of its {memory_limit / 1e9:.1f} "
                            f"GB memory limit{also}")
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
