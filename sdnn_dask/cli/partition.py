"""The ``partition`` command: every layer's neurons split into k parts, with their km1
(communication) and balance, and (``--forecast``) the bytes a model-parallel run of the
inputs would move.
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext

from ..formatting import to_text
from .common import Progress, UsageError, load_network, load_problem


def cmd_partition(args: argparse.Namespace) -> int:
    from ..partition import make_neuron_partition
    from ..partition.hypergraph import TrafficSettings, is_cached

    progress = Progress(args.quiet)
    hypergraph = args.method == "hypergraph"
    traffic = hypergraph and args.objective == "traffic"
    if traffic or args.forecast:
        problem = load_problem(args, progress)
        network, inputs = problem.network, problem.inputs
    else:
        network, inputs = load_network(args, progress), None
    settings = TrafficSettings(**({} if args.sample is None else {"sample": args.sample}))
    weigh_by = inputs if traffic else None
    cache = not args.no_partition_cache
    cached = hypergraph and cache and is_cached(network, args.k, epsilon=args.epsilon,
                                                seed=args.seed, inputs=weigh_by,
                                                traffic=settings)
    what = f"the neurons of {network.name} into {args.k} parts ({args.method}"
    what += f", {args.objective})" if hypergraph else ")"
    stages = progress.stages({"sample": "sample rows through the layers",
                              "mtkahypar": "layers partitioned with Mt-KaHyPar"})
    try:
        if cached:
            progress.say(f"reading the cached partition of {what}")
        with progress.step(f"partitioning {what}") if not cached else nullcontext():
            part = make_neuron_partition(
                network, args.k, args.method, seed=args.seed, nbuckets=args.nbuckets,
                epsilon=args.epsilon, cache=cache, inputs=weigh_by, traffic=settings,
                progress=stages if hypergraph else None)
    except ImportError as error:
        raise UsageError(str(error)) from error
    volume = part.volume(network)
    table = volume.assign(imbalance=part.imbalance(network))
    if args.forecast:
        from ..parallel.exchange_forecast import forecast_exchange

        with progress.step("forecasting the bytes a model-parallel run moves"):
            forecast = forecast_exchange(network, part, inputs, sample=settings.sample)
        per_layer = forecast.groupby("layer", as_index=False).agg(
            distinct_rows=("distinct_rows", "first"),
            predicted_bytes=("predicted_bytes_in", "sum"))
        table = table.merge(per_layer, on="layer")
    if args.per_layer:
        print(to_text(table))
        print()
    how = (f"read from the cache (computed in {part.seconds:.2f} s when made)" if cached
           else f"computed in {part.seconds:.2f} s")
    print(f"{args.method} partition of {network.name}, k={args.k}: "
          f"km1 {int(volume['km1'].sum()):,} activation columns over {network.n_layers} "
          f"layers (per layer: mean {volume['km1'].mean():.1f}, max {volume['km1'].max()}), "
          f"work imbalance max {table['imbalance'].max():.4f}, {how}")
    if part.params.get("objective") == "traffic":
        print(f"traffic-weighted: Mt-KaHyPar on layers {part.params['partitioned']}, the "
              f"other layers carry the previous level's parts forward (sample of "
              f"{part.params['traffic_sample']} rows, {part.params['sample_seconds']:.1f} s); "
              f"levels: {part.params.get('levels', '')}")
    if args.forecast:
        print(f"forecast: {table['predicted_bytes'].sum() / 1e6:,.1f} MB moved between "
              f"{args.k} workers for {inputs.shape[0]} input rows")
    if args.out:
        part.save(args.out)
        print(f"wrote {args.out}")
    return 0

