"""The ``convert`` command: challenge layer files into a binary network store, a Dask task
per file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..data import io
from .common import Progress, UsageError, check_writable_folder, open_client


def cmd_convert(args: argparse.Namespace) -> int:
    from ..data import store

    progress = Progress(args.quiet)
    data: Path = args.challenge_dir
    out: Path = args.out
    n, n_layers = args.neurons, args.layers
    if not data.is_dir():
        raise UsageError(f"convert CHALLENGE_DIR {data}: no such folder")
    io.layer_paths(data, n, n_layers)  # every file there, before a cluster starts
    try:
        store.check_destination(out, args.overwrite)
    except FileExistsError as error:
        hint = "; pass --overwrite to replace it" if "without overwrite" in str(error) else ""
        raise UsageError(f"convert OUT: {error}{hint}") from None
    check_writable_folder(out.absolute().parent, "convert OUT's parent folder")
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
