"""Model parallelism's (and the hybrid's) rows in passes, on either transport.

A part holds its columns of every row of its group through a layer: at N = 65536 on 60000
rows, 7.8 GB a part (k = 2) in layer 1, so model parallelism, whose point is memory, did
not fit. Here each row group's rows go through the parts in passes of at most
:func:`~.slabs.row_passes.pass_rows_for` rows (``sdnn.store.pass-bytes`` a worker, as
data parallelism's streamed passes, over about ``24 N / k`` bytes a row and part), one
pass of every group at a time, each pass's level-0 slabs sent to the workers just before
it runs:

* the first pass of a group runs until a look for identical rows leaves few distinct
  rows (:func:`~.slabs.row_passes.stop_rows_for`; direct transport, where every part sees
  the same look), or :data:`GRAPH_PASS_LAYERS` layers (graph transport, whose tasks are
  built before they run); every later pass runs to that same layer;
* the passes' survivors are joined on each part's worker
  (:func:`~.slabs.row_passes.join_passes`) and go on together through the deep layers,
  which are then read and exchanged once, not once a pass. A pass whose survivors would
  take the joined ones past one pass's rows goes on alone, at once.

Without deduplication there are no looks, so every pass runs to the end alone. With one
pass (the rows fit) the run is what it was before passes: one phase of every layer.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from distributed import Client, Future

from .faults import gather_pinned
from .model_direct import run_part
from .model_graph import build_graph
from .slabs import PartPlan, PartRows, Slab
from .slabs.row_passes import join_passes, merge_traces, pass_ranges, stop_rows_for
from .transport.run import gather_direct

#: Layers a graph-transport pass runs before the passes join (its tasks are built before
#: any runs, so it cannot stop where the rows do; on the challenge's networks the distinct
#: rows are down to a few by layer 31).
GRAPH_PASS_LAYERS = 32


def _pack(slab: Slab, shared: PartRows | None, layer: int) -> dict[str, Any]:
    """On a part's worker: a graph pass's last slab as the direct transport returns it."""
    return {"slab": slab, "shared": shared, "layer": layer}


def _meta(result: dict[str, Any]) -> dict[str, Any]:
    """On a part's worker: what the client needs of a pass, without its slab."""
    shared = result["shared"]
    return {"layer": result["layer"], "rows": len(result["slab"].rows),
            "distinct": None if shared is None else shared.distinct,
            "timing": result.get("timing", []), "messages": result.get("messages", [])}


def _slab_of(result: dict[str, Any]) -> Slab:
    return result["slab"]


def _shared_of(result: dict[str, Any]) -> PartRows | None:
    return result["shared"]


@dataclass
class PassedRun:
    """What a run in passes left: every set of rows that reached the last layer together
    (``finals``: ``(group, slabs by part, groups)``), and per (group, part) the merged
    trace, the direct transport's timing and the messages."""

    finals: list[tuple[int, list[Slab], Any]] = field(default_factory=list)
    traces: dict[tuple[int, int], list[tuple]] = field(default_factory=dict)
    timing: dict[tuple[int, int], list[tuple]] = field(default_factory=dict)
    messages: list[tuple] = field(default_factory=list)
    passes: int = 1
    join_layer: dict[int, int] = field(default_factory=dict)


class PassRunner:
    """Runs one model-parallel (or hybrid) run's row groups in passes (see the module).

    Parameters
    ----------
    client, plans, plan_futures
        The cluster, every part's plan and its futures by ``(part, worker)``.
    slot
        ``slot(g, p)``: the worker of part ``p`` of row group ``g``.
    n_layers, token, strategy, transport, used
        The network's layers, the run's token (in every key), ``"model"``/``"hybrid"``,
        ``"direct"``/``"graph"``, and the workers the run uses.
    """

    def __init__(self, client: Client, plans: list[PartPlan],
                 plan_futures: dict[tuple[int, str], Future], slot: Callable[[int, int], str],
                 *, n_layers: int, token: str, strategy: str, transport: str,
                 used: set[str]):
        self.client, self.plans, self.plan_futures = client, plans, plan_futures
        self.slot, self.n_layers, self.token = slot, n_layers, token
        self.strategy, self.transport, self.used = strategy, transport, used
        self.k = len(plans)
        self._phases = itertools.count()

    # --- one phase: some groups' parts from a level to a layer --------------------------
    def _phase(self, starts: dict[tuple[int, int], Any], spans: dict[int, tuple[int, int]],
               dedup: dict[int, int], stops: dict[int, int], shared: dict[int, Any],
               keep: bool) -> dict[tuple[int, int], Any]:
        """Run every ``(g, p)`` of ``starts`` (a level-0 slab's future, or a pass result's
        future to go on from) over the layers ``spans[g]``; their results by ``(g, p)``:
        futures left on the workers (``keep``) or gathered."""
        token = f"{self.token}-{next(self._phases)}"
        if self.transport == "direct":
            hosted = Counter(self.slot(g, p) for g, p in starts)
            futures = {}
            for (g, p), start in starts.items():
                route = [self.slot(g, q) for q in range(self.k)]
                first, last = spans[g]
                futures[g, p] = self.client.submit(
                    run_part, self.plan_futures[p, route[p]], start, token=token, group=g,
                    route=route, expected=hosted[route[p]], n_layers=self.n_layers,
                    strategy=self.strategy, dedup=dedup[g], first_layer=first,
                    last_layer=last, stop_rows=stops.get(g, 0), key=f"part-{token}-g{g}-p{p}",
                    workers=[route[p]], allow_other_workers=False, pure=False)
            keys = list(futures)
            done = gather_direct(self.client, [futures[x] for x in keys], self.used,
                                 token=token, strategy=self.strategy, gather=not keep)
            return dict(zip(keys, done, strict=True))
        return self._graph_phase(starts, spans, dedup, shared, keep, token)

    def _graph_phase(self, starts: dict[tuple[int, int], Any],
                     spans: dict[int, tuple[int, int]], dedup: dict[int, int],
                     shared: dict[int, Any], keep: bool, token: str
                     ) -> dict[tuple[int, int], Any]:
        out: dict[tuple[int, int], Any] = {}
        for g in sorted({g for g, _ in starts}):  # groups' spans may differ: one graph each
            first, last = spans[g]
            slabs = {(g, p): self._as_slab(starts[g, p], g, p, first)
                     for p in range(self.k)}
            graph, last_shared = build_graph(
                self.plans, self.plan_futures, slabs, self.slot, self.n_layers, [dedup[g]],
                token, group_ids=[g], first_layer=first, last_layer=last,
                shared_in=[shared.get(g)])
            looked = [s for s in last_shared if s is not None and not isinstance(s, PartRows)]
            futures = self.client.compute([*graph, *looked], optimize_graph=False)
            futures = gather_pinned(self.client, futures, self.used, strategy=self.strategy,
                                    gather=False)
            state = futures[len(graph)] if looked else last_shared[0]
            for p in range(self.k):
                out[g, p] = self.client.submit(
                    _pack, futures[p], state, last, key=f"pack-{token}-g{g}-p{p}",
                    workers=[self.slot(g, p)], allow_other_workers=False, pure=False)
        done = gather_pinned(self.client, list(out.values()), self.used,
                             strategy=self.strategy, gather=not keep)
        return dict(zip(list(out), done, strict=True))

    def _as_slab(self, start: Any, g: int, p: int, first: int) -> Any:
        """A graph phase starts from slabs: a pass result's (going on from a layer past
        the first) gives its slab."""
        if first > 1:
            return self.client.submit(_slab_of, start, workers=[self.slot(g, p)],
                                      allow_other_workers=False, pure=False)
        return start

    def _metas(self, futures: dict[tuple[int, int], Future]) -> dict[tuple[int, int], dict]:
        keys = list(futures)
        metas = [self.client.submit(_meta, futures[x], workers=[self.slot(*x)],
                                    allow_other_workers=False, pure=False) for x in keys]
        return dict(zip(keys, gather_pinned(self.client, metas, self.used,
                                            strategy=self.strategy), strict=True))

    # --- the whole run ---------------------------------------------------------------------
    def first_pass(self, y: sp.csr_matrix, groups: list[np.ndarray], pass_rows: int
                   ) -> dict[tuple[int, int], Future]:
        """The level-0 slabs of every group's first pass, sent to the parts' workers (before
        the clock: :meth:`run` takes them)."""
        return self._scatter(y, groups, {g: pass_ranges(len(rows), pass_rows)[0]
                                         for g, rows in enumerate(groups)})

    def run(self, y: sp.csr_matrix, groups: list[np.ndarray], dedup: bool, pass_rows: int,
            first: dict[tuple[int, int], Future]) -> PassedRun:
        """Every row group's rows (``groups[g]``: rows of ``y``) through every layer, in
        passes of at most ``pass_rows`` rows, the first pass's slabs ``first``
        (:meth:`first_pass`); see the module."""
        n_groups = len(groups)
        ranges = {g: pass_ranges(len(rows), pass_rows) for g, rows in enumerate(groups)}
        deduped = {g: len(rows) if dedup else 0 for g, rows in enumerate(groups)}
        done = PassedRun(passes=max(len(r) for r in ranges.values()))
        every = self._record(done)
        shared_of: dict[int, Any] = {}

        if done.passes == 1:  # the rows fit: one phase of every layer, as ever
            starts, first = first, {}
            results = self._phase(starts, dict.fromkeys(range(n_groups), (1, self.n_layers)),
                                  deduped, {}, shared_of, keep=False)
            for g in range(n_groups):
                every(g, [results[g, p] for p in range(self.k)])
            return done

        join_at: dict[int, int] = {}  # layer where a group's passes join
        joined: dict[int, list[dict[tuple[int, int], Future]]] = {}
        held = dict.fromkeys(range(n_groups), 0)
        for i in range(done.passes):
            active = [g for g in range(n_groups) if i < len(ranges[g])]
            starts = first if i == 0 else self._scatter(y, groups,
                                                        {g: ranges[g][i] for g in active})
            first = {}
            spans, stops = {}, {}
            for g in active:
                first = join_at.get(g)
                spans[g] = (1, first if first is not None else
                            (min(self.n_layers, GRAPH_PASS_LAYERS)
                             if self.transport == "graph" else self.n_layers))
                if first is None and self.transport == "direct" and deduped[g]:
                    a, b = ranges[g][i]
                    stops[g] = stop_rows_for(pass_rows, len(ranges[g]), b - a)
            results = self._phase(starts, spans, deduped, stops, {}, keep=True)
            metas = self._metas(results)
            alone = {}
            for g in active:
                got = [metas[g, p] for p in range(self.k)]
                layers = {m["layer"] for m in got}
                if len(layers) != 1:
                    raise RuntimeError(f"the parts of row group {g} stopped pass {i} at "
                                       f"different layers: {sorted(layers)}")
                layer = layers.pop()
                join_at.setdefault(g, layer)
                for m in got:
                    done.messages += m["messages"]
                left = max(m["distinct"] if m["distinct"] is not None else m["rows"]
                           for m in got)
                mine = {(g, p): results[g, p] for p in range(self.k)}
                self._keep_timing(done, g, got)
                if layer >= self.n_layers:  # never few enough: this pass ran to the end
                    every(g, self.client.gather([mine[g, p] for p in range(self.k)]),
                          timed=False)
                elif held[g] + left <= pass_rows:
                    joined.setdefault(g, []).append(mine)
                    held[g] += left
                else:
                    alone.update(mine)
            if alone:  # too many survivors to join the others: to the end now, alone
                self._finish(done, every, alone, join_at, deduped)
            del results, starts
        starts = {}
        for g, sets in joined.items():
            for p in range(self.k):
                starts[g, p] = self.client.submit(
                    join_passes, *[s[g, p] for s in sets], key=f"join-{self.token}-g{g}-p{p}",
                    workers=[self.slot(g, p)], allow_other_workers=False, pure=False)
        joined.clear()  # the joins hold the passes now: released once joined
        if starts:
            self._finish(done, every, starts, join_at, deduped)
        done.join_layer = join_at
        return done

    def _finish(self, done: PassedRun, every: Callable, starts: dict[tuple[int, int], Any],
                join_at: dict[int, int], deduped: dict[int, int]) -> None:
        """The rows of ``starts`` (results at their groups' join layers) to the end."""
        groups = sorted({g for g, _ in starts})
        shared = {}
        if self.transport == "graph":  # the graph's tasks need the groups' rows now
            shared = {g: self.client.submit(_shared_of, starts[g, 0],
                                            workers=[self.slot(g, 0)],
                                            pure=False).result() for g in groups}
        results = self._phase(starts, {g: (join_at[g] + 1, self.n_layers) for g in groups},
                              deduped, {}, shared, keep=False)
        for g in groups:
            every(g, [results[g, p] for p in range(self.k)])

    def _record(self, done: PassedRun) -> Callable:
        def every(g: int, results: list[dict[str, Any]], timed: bool = True) -> None:
            """A set of rows of group ``g`` at the last layer: its slabs, traces, timing."""
            slabs = [r["slab"] for r in results]
            done.finals.append((g, slabs, _groups(results[0])))
            for p, r in enumerate(results):
                done.traces[g, p] = merge_traces([done.traces.get((g, p), []),
                                                  r["slab"].trace])
            if timed:
                self._keep_timing(done, g, results)
                for r in results:
                    done.messages += r.get("messages", [])
        return every

    @staticmethod
    def _keep_timing(done: PassedRun, g: int, results: list[dict[str, Any]]) -> None:
        for p, r in enumerate(results):
            if r.get("timing"):
                done.timing.setdefault((g, p), []).extend(r["timing"])

    def _scatter(self, y: sp.csr_matrix, groups: list[np.ndarray],
                 ranges: dict[int, tuple[int, int]]) -> dict[tuple[int, int], Future]:
        """Each part's level-0 slab of rows ``ranges[g]`` of each group, on its worker,
        its rows numbered by position in the group."""
        futures = {}
        for g, (a, b) in ranges.items():
            rows = groups[g][a:b]
            contiguous = len(rows) and rows[-1] - rows[0] == len(rows) - 1 and \
                bool((np.diff(rows) == 1).all())
            block = y[int(rows[0]):int(rows[-1]) + 1] if contiguous else y[rows]
            for p, plan in enumerate(self.plans):
                slab = Slab.from_rows(block, plan.inputs)
                slab.rows = slab.rows + a
                [futures[g, p]] = self.client.scatter([slab], workers=[self.slot(g, p)],
                                                      hash=False)
            del block
        return futures


def _groups(result: dict[str, Any]) -> Any:
    shared = result.get("shared")
    return None if shared is None else shared.groups
