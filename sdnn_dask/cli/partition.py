"""The ``partition`` command: every layer's neurons split into k parts, with their km1
(communication) and balance.
"""

from __future__ import annotations

import argparse

from ..formatting import to_text
from .common import Progress, UsageError, load_network


def cmd_partition(args: argparse.Namespace) -> int:
    from ..partition import make_neuron_partition

    progress = Progress(args.quiet)
    network = load_network(args, progress)
    cache = False if args.no_partition_cache else True
    cached = False
    if args.method == "hypergraph" and cache:
        from ..partition.hypergraph import is_cached

        cached = is_cached(network, args.k, epsilon=args.epsilon, seed=args.seed)
    what = f"the neurons of {network.name} into {args.k} parts ({args.method})"
    try:
        if cached:
            progress.say(f"reading the cached partition of {what}")
            part = make_neuron_partition(network, args.k, args.method, seed=args.seed,
                                         epsilon=args.epsilon, cache=cache)
        else:
            with progress.step(f"partitioning {what}"):
                part = make_neuron_partition(
                    network, args.k, args.method, seed=args.seed, nbuckets=args.nbuckets,
                    epsilon=args.epsilon, cache=cache,
                    progress=progress.counter("layers partitioned")
                    if args.method == "hypergraph" else None)
    except ImportError as error:
        raise UsageError(str(error)) from error
    volume = part.volume(network)
    table = volume.assign(imbalance=part.imbalance(network))
    if args.per_layer:
        print(to_text(table))
        print()
    how = (f"read from the cache (computed in {part.seconds:.2f} s when made)" if cached
           else f"computed in {part.seconds:.2f} s")
    print(f"{args.method} partition of {network.name}, k={args.k}: "
          f"km1 {int(volume['km1'].sum()):,} activation columns over {network.n_layers} "
          f"layers (per layer: mean {volume['km1'].mean():.1f}, max {volume['km1'].max()}), "
          f"work imbalance max {table['imbalance'].max():.4f}, {how}")
    if args.out:
        part.save(args.out)
        print(f"wrote {args.out}")
    return 0
