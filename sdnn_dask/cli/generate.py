"""The ``generate`` command: a RadiX-Net network and inputs written in challenge format."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..data import io
from .common import Progress, check_writable_folder


def cmd_generate(args: argparse.Namespace) -> int:
    from ..core.kernels import forward_block
    from ..data.radixnet import make_inputs, make_network

    progress = Progress(args.quiet)
    out: Path = args.out
    n, layers = args.neurons, args.layers
    suffix = ".tsv.gz" if args.gzip else ".tsv"
    check_writable_folder(out, "generate OUT")
    if args.store_only:
        return _store_only(out, n, layers, args.seed, progress)
    with progress.step(f"generating RadiX-Net {n}-{layers}"):
        network = make_network(n, layers, seed=args.seed)
    rows = 60000 if args.inputs is None else args.inputs
    with progress.step(f"generating {rows} inputs"):
        inputs = make_inputs(rows, n, seed=args.seed, order=args.order)
    written = 0
    count = progress.counter("layer files")
    for k, layer in enumerate(network.layers, start=1):
        io.write_triples(out / f"neuron{n}" / f"n{n}-l{k}{suffix}", layer)
        count(k, layers)
        written += 1
    io.write_inputs(out / f"sparse-images-{n}{suffix}", inputs)
    store_folder = None
    if args.store:
        from ..data import store

        store_folder = store.write_network(
            out / store_name(n, layers), network, overwrite=True,
            source={"generated": "radixnet", "seed": args.seed},
            progress=progress.counter("store layers"))
    if not args.no_truth:
        with progress.step("computing the truth categories"):
            block = forward_block(network, inputs)
        io.write_categories(out / f"neuron{n}-l{layers}-categories{suffix}", block.rows)
        progress.say(f"{len(block.rows)} of {rows} rows survive all {layers} layers")
    print(f"wrote {written} layers, {rows} inputs"
          + ("" if args.no_truth else " and the categories") + f" under {out}"
          + ("" if store_folder is None else f"; the network store {store_folder}"))
    return 0


def store_name(n_neurons: int, n_layers: int) -> str:
    """Folder name of the network store ``generate --store`` writes beside the layers."""
    return f"neuron{n_neurons}-l{n_layers}.store"


def _store_only(out: Path, n: int, layers: int, seed: int, progress: Progress) -> int:
    """``generate --store-only``: the network straight into a store, layer by layer as it
    is generated (never whole in memory: 65536-1920 is 8 GB on disk, 33 GB in memory)."""
    from ..data import store
    from ..data.radixnet import iter_layers

    folder = out / store_name(n, layers)
    written = store.write_store(folder, iter_layers(n, layers, seed=seed), n_neurons=n,
                                name=f"radixnet-{n}-{layers}-s{seed}", n_layers=layers,
                                source={"generated": "radixnet", "seed": seed},
                                overwrite=True, progress=progress.counter("store layers"))
    held = store.open_store(written)
    print(f"wrote the network store {written}: {layers} layers, {held.edges} edges, "
          f"{held.nbytes() / 1e9:.2f} GB (no layer files, inputs or categories)")
    return 0
