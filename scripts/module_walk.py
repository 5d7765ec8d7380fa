"""Which of the package's modules one model-parallel training step walks through.

Counts the modules whose code runs (a Python function entered) while a direct-transport
``ModelParallelTrainer`` takes one step on a threaded LocalCluster (its workers are
threads of this process, so one profiler sees the client's side and every slot's), after
an untimed first step (placement, compilation). Each module is counted once however often
it is entered; the second column is how many distinct functions of it ran::

    python scripts/module_walk.py            # 1024-neuron 6-layer network, k = 2, 64 rows
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict

import numpy as np
from distributed import Client, LocalCluster

import sdnn_dask.training as training
from sdnn_dask.data.radixnet import make_network


def _trainer_class():
    for name in ("ModelParallelTrainer",):
        if hasattr(training, name):
            return getattr(training, name)
    from sdnn_dask.training.model_parallel import ModelParallelTrainer
    return ModelParallelTrainer


def main(argv: list[str] | None = None) -> int:
    steady = "--first" not in (sys.argv[1:] if argv is None else argv)
    network = make_network(1024, 6, seed=0)
    model = training.init_model(network, 10, seed=0)
    rng = np.random.default_rng(0)
    x = (rng.random((64, 1024)) < 0.1).astype(np.float32)
    labels = rng.integers(0, 10, 64)
    seen: dict[str, set[str]] = defaultdict(set)
    entries: set[tuple[tuple[str, str], tuple[str, str]]] = set()

    recording = threading.Event()

    def profile(frame, event, arg):
        if event == "call" and recording.is_set():
            name = frame.f_globals.get("__name__", "")
            if name.startswith("sdnn_dask"):
                seen[name].add(frame.f_code.co_name)
                back = frame.f_back
                caller = back.f_globals.get("__name__", "") if back is not None else ""
                if caller != name:
                    source = (caller, back.f_code.co_name) if back is not None else ("", "")
                    entries.add((source, (name, frame.f_code.co_name)))

    # set before any thread starts, so every worker thread and slot loop is profiled
    threading.setprofile(profile)
    sys.setprofile(profile)
    recording.set() if not steady else None
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        trainer = _trainer_class()(client, model, "block", k=2, lr=0.01, momentum=0.9,
                                   weight_decay=0.0, transport="direct")
        with trainer:
            if not steady:
                recording.set()
            trainer.step(x, labels)
            recording.set()
            trainer.step(x, labels)
            recording.clear()
    visits = defaultdict(int)
    for _, (name, _) in entries:
        visits[name] += 1
    print(f"{'module':50s} functions  entered from elsewhere")
    for name in sorted(seen):
        print(f"{name:50s} {len(seen[name]):9d}  {visits[name]:3d}")
    print(f"{len(seen)} modules, {sum(visits.values())} visits (distinct calls into a module"
          " from another)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
