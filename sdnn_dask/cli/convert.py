"""The ``convert`` command: challenge layer files into a binary network store, a Dask task
per file; or a network store rewritten in the current format version, layer by layer.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..data import io
from .common import Progress, UsageError, check_writable_folder, open_client

#: ``-N`` and ``-L`` for challenge files when not given.
DEFAULT_NEURONS, DEFAULT_LAYERS = 1024, 120


def cmd_convert(args: argparse.Namespace) -> int:
    from ..data import store

    progress = Progress(args.quiet)
    data: Path = args.source
    out: Path = args.out
    if (data / store.MANIFEST).is_file():
        return _convert_store(args, progress)
    n = DEFAULT_NEURONS if args.neurons is None else args.neurons
    n_layers = DEFAULT_LAYERS if args.layers is None else args.layers
    if not data.is_dir():
        raise UsageError(f"convert SOURCE {data}: no such folder")
    io.layer_paths(data, n, n_layers)  # every file there, before a cluster starts
    _check_out(out, args.overwrite)
    with open_client(args, progress) as client:
        with progress.step(f"converting {n_layers} layer files of the {n}-neuron network"):
            try:
                folder = store.convert_challenge(
                    data, out, n, n_layers, client=client, overwrite=args.overwrite,
                    progress=progress.counter("layer files"))
            except FileExistsError as error:  # appeared meanwhile
                raise UsageError(f"convert OUT: {error}") from None
    written = store.open_store(folder)
    print(f"wrote {written.n_layers} layers, {written.edges} edges, "
          f"{written.nbytes() / 1e6:.1f} MB: the network store {folder}")
    return 0


def _check_out(out: Path, overwrite: bool) -> None:
    from ..data import store

    try:
        store.check_destination(out, overwrite)
    except FileExistsError as error:
        hint = "; pass --overwrite to replace it" if "without overwrite" in str(error) else ""
        raise UsageError(f"convert OUT: {error}{hint}") from None
    check_writable_folder(out.absolute().parent, "convert OUT's parent folder")


def _convert_store(args: argparse.Namespace, progress: Progress) -> int:
    """SOURCE is a store: rewrite it in the current version, here, one layer at a time."""
    from ..data import store

    source = store.open_store(args.source)  # a store this release cannot read: exit 2
    if args.neurons is not None and args.neurons != source.n_neurons:
        raise UsageError(f"convert SOURCE {args.source}: a store of N = {source.n_neurons}, "
                         f"not {args.neurons}")
    n_layers = source.n_layers if args.layers is None else args.layers
    if n_layers > source.n_layers:
        raise UsageError(f"convert SOURCE {args.source}: the store holds layers "
                         f"1-{source.n_layers}, not {n_layers}")
    _check_out(args.out, args.overwrite)
    if args.cluster is not None or args.workers is not None:
        progress.say("a store is rewritten in this process: --cluster and --workers are not "
                     "used")
    was = source.nbytes()
    with progress.step(f"rewriting {n_layers} layers of the {source.n_neurons}-neuron store "
                       f"(version {source.version}) in version {store.VERSION}"):
        try:
            folder = store.convert_store(source.folder, args.out, n_layers=n_layers,
                                         overwrite=args.overwrite,
                                         progress=progress.counter("layers"))
        except FileExistsError as error:  # appeared meanwhile
            raise UsageError(f"convert OUT: {error}") from None
    written = store.open_store(folder)
    print(f"wrote {written.n_layers} layers, {written.edges} edges, "
          f"{written.nbytes() / 1e6:.1f} MB (from {was / 1e6:.1f} MB in version "
          f"{source.version}): the network store {folder}")
    return 0
