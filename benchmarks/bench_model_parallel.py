"""Model parallelism against data parallelism, on both transports, in one process.

On the official 1024-120 weights with the official rows 1..1200 tiled (``--tile``, 50 by
default: 60000 inputs), on a LocalCluster of ``--workers`` workers, interleaved round by
round (medians of ``--repeat``):

- the per-layer latency probe: 20 rows through 120 layers, k = 2 and 4, direct and graph
  (milliseconds per layer: almost no arithmetic, so this is the exchange's cost);
- the serial kernel, data parallelism (hash rows, one block per worker), model parallelism
  at k = 2 with every ``--partitions`` method on both transports, and the hybrid 2 x 2
  (``--hybrid`` partition) on both transports;

and prints per configuration the seconds, edges/s, the parts' (or blocks') summed compute,
the parts' summed waiting and sending, the MB moved, and the ratios the direct-transport
issue set targets for. Every output is checked against the official truth's categories
and against the float64 reference with float32 rounding bounds (:mod:`sdnn_dask.core.check`),
never only against the serial kernel, which shares the part step. Run::

    pip install -e ".[partition]"
    python benchmarks/bench_model_parallel.py [--data ../shared/data/graphchallenge]
        [--tile 50] [--workers 2] [--repeat 3] [--partitions block,hash,hypergraph]

``--security`` measures instead what TLS costs (issue 43): on a generated 1024-120
network and ``--inputs`` rows (20000), three LocalClusters of ``--workers`` workers side
by side in this process, a plain ``tcp://`` one and two TLS ones (temporary
credentials), one of them with the wire off (``sdnn.transport.wire: false``: the pieces
go by the TLS comms, as before the wire ran TLS). Model parallelism k = 2 (``--security-
partition``, hash; direct) and data parallelism (hash) run round-robin over the clusters
for ``--repeat`` rounds, every output checked against the float64 reference with float32
bounds; it prints the medians and the TLS / tcp ratios.
``--wire-ring 0`` turns the wire's shared-memory ring off, so TLS carries every byte, as
between hosts::

    python benchmarks/bench_model_parallel.py --security [--inputs 20000] [--repeat 5]
        [--wire-ring 0]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sdnn_dask.cluster import local_client
from sdnn_dask.core.check import bounded_reference, check_result
from sdnn_dask.core.kernels import forward_block, warm_up_kernels
from sdnn_dask.core.reference import categories
from sdnn_dask.data import io
from sdnn_dask.parallel import TRANSPORTS, DataParallelExecutor, ModelParallelExecutor
from sdnn_dask.partition import make_neuron_partition

REPO = Path(__file__).resolve().parents[1]


def default_data() -> Path:
    env = os.environ.get("SDNN_GRAPHCHALLENGE_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data" / "graphchallenge"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--tile", type=int, default=50,
                        help="copies of the official 1200 rows (50: 60000 inputs)")
    parser.add_argument("--workers", type=int, default=2, help="LocalCluster workers (2)")
    has_kahypar = importlib.util.find_spec("mtkahypar") is not None
    parser.add_argument("--partitions",
                        default="block,hash,hypergraph" if has_kahypar else "block,hash")
    parser.add_argument("--hybrid", default="hypergraph" if has_kahypar else "hash",
                        help="neuron partition of the hybrid 2 x 2")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians are shown (3)")
    parser.add_argument("--probe-rows", type=int, default=20)
    parser.add_argument("--security", action="store_true",
                        help="measure TLS against tcp instead (see the module docstring)")
    parser.add_argument("--inputs", type=int, default=20000,
                        help="--security: generated input rows (20000)")
    parser.add_argument("--security-partition", default="hash",
                        help="--security: model parallelism's partition (hash)")
    parser.add_argument("--wire-ring", default=None,
                        help="--security: sdnn.transport.wire-ring for the clusters "
                             "(0: no ring, TLS carries every byte; default: the config's)")
    args = parser.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    if args.security:
        return security_ab(args)
    methods = [m for m in args.partitions.split(",") if m]

    if not (args.data / "neuron1024").is_dir():
        raise SystemExit(f"official data not found at {args.data} (--data or "
                         "$SDNN_GRAPHCHALLENGE_DATA)")
    net = io.read_network(args.data, 1024, 120)
    rows = io.read_inputs(args.data / "sparse-images-1024-rows1-1200.tsv.gz", 1024)
    truth = io.read_categories(args.data / "neuron1024-l120-categories.tsv.gz")
    truth = truth[truth < rows.shape[0]]
    inputs = sp.vstack([rows] * args.tile, format="csr")
    truth = np.concatenate([truth + i * rows.shape[0] for i in range(args.tile)])
    n = inputs.shape[0]
    print(f"network {net.name}: {net.edges:,} edges; inputs: official rows 1..1200 x "
          f"{args.tile} = {n:,}; {args.workers} workers; cores: {os.cpu_count()}", flush=True)

    warm_up_kernels()
    # Every output is checked against answers the executors share no code with: the
    # truth file's categories, and the float64 reference with rigorous float32 bounds
    # (sdnn_dask.core.check), not the serial kernel, whose step the parts reuse.
    reference = bounded_reference(net, inputs)
    if not np.array_equal(reference.categories, np.setdiff1d(truth, reference.undecided)):
        print("FAIL: the float64 reference's categories are not the truth", file=sys.stderr)
        return 1

    def verify(name: str, output: sp.spmatrix) -> bool:
        verdict = check_result(output, reference)
        if verdict.passed and np.array_equal(categories(output), truth):
            return True
        print(f"FAIL {name}: {verdict}", file=sys.stderr)
        return False

    if not verify("serial kernel", forward_block(net, inputs).to_csr()):
        return 1
    parts = {m: make_neuron_partition(net, 2, m, cache=True)
             for m in dict.fromkeys([*methods, args.hybrid])}
    for m, p in parts.items():
        print(f"k=2 {m}: km1 {int(p.volume(net)['km1'].sum()):,}, partitioned in "
              f"{p.seconds:.1f} s", flush=True)

    seconds: dict[str, list[float]] = defaultdict(list)
    stats: dict[str, list[dict[str, float]]] = defaultdict(list)
    with local_client(args.workers) as client:
        data = DataParallelExecutor(client, net)
        model = ModelParallelExecutor(client, net)
        probe = rows[: args.probe_rows]
        latency: dict[tuple[int, str], float] = {}
        for k in (2, 4):
            for transport in TRANSPORTS:
                model.run(probe, partition="block", k=k, transport=transport)  # warm
                runs = [model.run(probe, partition="block", k=k, transport=transport)
                        for _ in range(5)]
                latency[k, transport] = (statistics.median(r.wall_seconds for r in runs)
                                         / net.n_layers * 1e3)
                print(f"latency k={k} {transport:<6} {latency[k, transport]:6.2f} ms/layer",
                      flush=True)

        configs = [("data hash", lambda: data.run(inputs, partition="hash"))]
        for transport in TRANSPORTS:
            for m in methods:
                configs.append((f"model {m} {transport}",
                                lambda m=m, t=transport: model.run(inputs, partition=parts[m],
                                                                   transport=t)))
            configs.append((f"hybrid 2x2 {args.hybrid} {transport}",
                            lambda t=transport: model.run(inputs, partition=parts[args.hybrid],
                                                          row_groups=2, transport=t)))
        for _, run in configs:  # warm-up: place every plan, open every connection
            run()
        for r in range(args.repeat):
            start = time.perf_counter()
            forward_block(net, inputs)
            seconds["kernel"].append(time.perf_counter() - start)
            for name, run in configs:  # interleaved: the VM's drifts hit every one alike
                result = run()
                if not verify(name, result.output):
                    return 1
                seconds[name].append(result.wall_seconds)
                layers = result.layers
                stats[name].append({
                    "compute": float(result.blocks["compute_s"].sum()),
                    "wait": float(layers["wait_s"].sum()) if "wait_s" in layers else np.nan,
                    "send": float(layers["send_s"].sum()) if "send_s" in layers else np.nan,
                    "mb": (result.bytes_moved or 0) / 1e6,
                })
                print(f"  round {r + 1} {name:<28} {result.wall_seconds:7.3f} s", flush=True)

    med = {name: statistics.median(v) for name, v in seconds.items()}

    def stat(name: str, key: str) -> float:
        return statistics.median(s[key] for s in stats[name])

    dp = med["data hash"]
    print(f"\n{'configuration':<28} {'seconds':>8} {'edges/s':>9} {'compute':>8} "
          f"{'wait':>7} {'send':>7} {'MB moved':>9} {'vs data':>8} {'vs kernel':>9} "
          f"{'compute vs data':>15}")
    for name in ["kernel", *[c for c, _ in configs]]:
        s = med[name]
        row = f"{name:<28} {s:>8.3f} {n * net.edges / s:>9.3g}"
        if name == "kernel":
            print(row)
            continue
        compute = stat(name, "compute")
        print(f"{row} {compute:>8.3f} {stat(name, 'wait'):>7.3f} {stat(name, 'send'):>7.3f} "
              f"{stat(name, 'mb'):>9.1f} {s / dp:>8.2f} {med['kernel'] / s:>9.2f} "
              f"{compute / stat('data hash', 'compute'):>15.2f}")
    print("\ncompute, wait, send: seconds summed over the parts (data: over the blocks); "
          "vs data: seconds / data parallelism's (lower is better); vs kernel: serial "
          "kernel seconds / these; compute vs data: summed compute / data parallelism's.")

    print("\ntargets (issue: direct transport)")
    print(f"  latency, 20 rows, k=2: direct {latency[2, 'direct']:.2f} ms/layer (<= 1), graph "
          f"{latency[2, 'graph']:.2f}; k=4: direct {latency[4, 'direct']:.2f} (<= 2), graph "
          f"{latency[4, 'graph']:.2f}")
    best = "hypergraph" if "hypergraph" in methods else methods[-1]
    print(f"  model k=2 {best} direct / data: {med[f'model {best} direct'] / dp:.2f} (<= 1.25)")
    print(f"  hybrid 2x2 direct / data: {med[f'hybrid 2x2 {args.hybrid} direct'] / dp:.2f} "
          "(<= 1.5)")
    for m in methods:
        print(f"  graph / direct, model k=2 {m}: "
              f"{med[f'model {m} graph'] / med[f'model {m} direct']:.2f} (>= 3)")
    for m in methods:
        name = f"model {m} direct"
        print(f"  parts' compute / data blocks' compute, {m}: "
              f"{stat(name, 'compute') / stat('data hash', 'compute'):.2f} (<= 1.2)")
    if "block" in methods and best != "block":
        b, h = "model block direct", f"model {best} direct"
        saved = med[b] - med[h]
        k = 2
        d_compute = (stat(b, "compute") - stat(h, "compute")) / k
        d_comm = (stat(b, "wait") + stat(b, "send") - stat(h, "wait") - stat(h, "send")) / k
        print(f"  {best} vs block, direct: {med[b] / med[h]:.2f}x as fast ({saved:+.3f} s), "
              f"{stat(b, 'mb') / stat(h, 'mb'):.2f}x fewer bytes; per part "
              f"{d_comm:+.3f} s less waiting and sending, {d_compute:+.3f} s less compute")
    return 0


def security_ab(args: argparse.Namespace) -> int:
    """TLS against tcp, the wire on and off under TLS (``--security``)."""
    import contextlib

    import dask

    from sdnn_dask.study.problem import load_problem

    if args.repeat < 1 or args.inputs < 1:
        raise SystemExit("--repeat and --inputs must be at least 1")
    problem = load_problem(neurons=1024, layers=120, inputs=args.inputs)
    net, inputs = problem.network, problem.inputs
    reference = problem.reference()
    print(f"network {net.name}: {net.edges:,} edges; {inputs.shape[0]:,} generated inputs; "
          f"{args.workers} workers per cluster; cores: {os.cpu_count()}", flush=True)
    ring = {} if args.wire_ring is None else {"sdnn.transport.wire-ring": args.wire_ring}
    arms = {"tcp": {"security": False}, "tls": {"security": True},
            "tls, wire off": {"security": True}}
    wire_off = {"tls, wire off": {"sdnn.transport.wire": False}}
    seconds: dict[str, list[float]] = defaultdict(list)
    with contextlib.ExitStack() as stack:
        clients = {}
        for arm, options in arms.items():
            start = time.perf_counter()
            with dask.config.set(ring):  # the workers take the config they start with
                clients[arm] = stack.enter_context(local_client(args.workers, **options))
            print(f"cluster {arm}: started in {time.perf_counter() - start:.1f} s "
                  f"({next(iter(clients[arm].nthreads())).split('://')[0]}://)", flush=True)
        runs = {}
        for arm, client in clients.items():
            data, model = DataParallelExecutor(client, net), ModelParallelExecutor(client, net)
            runs[f"model {arm}"] = (arm, lambda m=model: m.run(
                inputs, partition=args.security_partition, k=2, transport="direct"))
            if arm != "tls, wire off":  # the wire carries no data-parallel piece
                runs[f"data {arm}"] = (arm, lambda d=data: d.run(inputs, partition="hash"))
        for r in range(args.repeat + 1):  # round 0 warms up: plans placed, wires opened
            for name, (arm, run) in runs.items():  # interleaved: drifts hit all alike
                with dask.config.set(wire_off.get(arm, {})):
                    result = run()
                verdict = check_result(result.output, reference)
                if not verdict.passed:
                    print(f"FAIL {name}: {verdict}", file=sys.stderr)
                    return 1
                if r:
                    seconds[name].append(result.wall_seconds)
                    print(f"  round {r} {name:<22} {result.wall_seconds:7.3f} s", flush=True)
    med = {name: statistics.median(v) for name, v in seconds.items()}
    print(f"\n{'configuration':<22} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name in runs:
        print(f"{name:<22} {med[name]:>9.3f} {min(seconds[name]):>7.3f} "
              f"{max(seconds[name]):>7.3f}")
    print(f"\nmodel k=2 {args.security_partition} direct, TLS wire / tcp: "
          f"{med['model tls'] / med['model tcp']:.2f} (target <= 1.15)")
    print(f"model, TLS wire off (comms, as before) / tcp: "
          f"{med['model tls, wire off'] / med['model tcp']:.2f}")
    print(f"model, TLS wire on / off: {med['model tls'] / med['model tls, wire off']:.2f}")
    print(f"data hash, TLS / tcp: {med['data tls'] / med['data tcp']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
