"""The challenge's folder: where its files are, and its weights and inputs read and written.

Layout of a challenge folder::

    neuron1024/n1024-l1.tsv ... n1024-l120.tsv      weights, one file per layer
    sparse-images-1024.tsv                           inputs (60000 x N)
    neuron1024-l120-categories.tsv                   truth: surviving 1-based row ids

Each name may carry ``.gz``. The files are parsed and written by :mod:`.text`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import scipy.sparse as sp

from .text import PathLike, read_triples, write_triples

# --------------------------------------------------------------------------- paths


def _existing(path: Path) -> Path | None:
    """``path`` or ``path.gz`` (or, given a ``.gz`` name, the plain one), whichever exists."""
    candidates = [path]
    if path.suffix == ".gz":
        candidates.append(path.with_suffix(""))
    else:
        candidates.append(path.with_name(path.name + ".gz"))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None


def layer_path(directory: PathLike, n_neurons: int, layer: int) -> Path:
    """Where layer ``layer`` (1-based) of an ``n_neurons`` network lives under ``directory``.

    ``directory`` may be the challenge folder or its ``neuron{N}`` subfolder. Returns the
    existing ``.tsv`` or ``.tsv.gz`` file, or the plain ``.tsv`` name if neither exists.
    """
    directory = Path(directory)
    name = f"n{n_neurons}-l{layer}.tsv"
    for folder in (directory / f"neuron{n_neurons}", directory):
        found = _existing(folder / name)
        if found is not None:
            return found
    return directory / f"neuron{n_neurons}" / name


def inputs_path(directory: PathLike, n_neurons: int) -> Path:
    """The inputs file ``sparse-images-{N}.tsv[.gz]`` under ``directory``."""
    path = Path(directory) / f"sparse-images-{n_neurons}.tsv"
    return _existing(path) or path


def categories_path(directory: PathLike, n_neurons: int, n_layers: int) -> Path:
    """The truth file ``neuron{N}-l{L}-categories.tsv[.gz]`` under ``directory``."""
    path = Path(directory) / f"neuron{n_neurons}-l{n_layers}-categories.tsv"
    return _existing(path) or path


# --------------------------------------------------------------------------- weights


def read_layer(path: PathLike, n_neurons: int) -> sp.csr_matrix:
    """Read one weight layer, ``n_neurons x n_neurons``."""
    return read_triples(path, (n_neurons, n_neurons))


def layer_paths(directory: PathLike, n_neurons: int, n_layers: int) -> list[Path]:
    """The files of layers ``1..n_layers`` (see :func:`layer_path`), every one existing.

    Raises
    ------
    FileNotFoundError
        Naming every missing layer file (the first three, and how many more).
    """
    paths = [layer_path(directory, n_neurons, k) for k in range(1, n_layers + 1)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3
                                           else "")
        raise FileNotFoundError(
            f"{len(missing)} of {n_layers} layer files of the {n_neurons}-neuron network are "
            f"missing under {directory}: {shown}"
        )
    return paths


def read_weights(
    directory: PathLike,
    n_neurons: int,
    n_layers: int,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> list[sp.csr_matrix]:
    """Read layers ``1..n_layers`` of the ``n_neurons`` network under ``directory``.

    Raises
    ------
    FileNotFoundError
        Naming every missing layer file (all are checked before any is parsed).
    """
    paths = layer_paths(directory, n_neurons, n_layers)
    layers = []
    for k, path in enumerate(paths, start=1):
        layers.append(read_layer(path, n_neurons))
        if progress is not None:
            progress(k, n_layers)
    return layers


def write_weights(directory: PathLike, layers: Iterable[sp.spmatrix], *,
                  compress: bool = False) -> list[Path]:
    """Write ``layers`` as ``directory/neuron{N}/n{N}-l{k}.tsv[.gz]``; returns the paths."""
    written = []
    for k, layer in enumerate(layers, start=1):
        n = layer.shape[0]
        name = f"n{n}-l{k}.tsv" + (".gz" if compress else "")
        written.append(write_triples(Path(directory) / f"neuron{n}" / name, layer))
    return written


# --------------------------------------------------------------------------- inputs


def read_inputs(path: PathLike, n_neurons: int, n_rows: int | None = None) -> sp.csr_matrix:
    """Read input images (``sparse-images-{N}.tsv``) as a ``rows x n_neurons`` CSR.

    Parameters
    ----------
    path
        The inputs file, or the challenge folder holding ``sparse-images-{N}.tsv[.gz]``.
    n_neurons
        Width of the network the inputs are for.
    n_rows
        Declared number of rows (60000 in the challenge); by default the largest row id.

    Raises
    ------
    ChallengeFormatError
        As :func:`read_triples`; a column beyond ``n_neurons`` is reported as inputs that
        do not fit the network.
    """
    path = Path(path)
    if path.is_dir():
        path = inputs_path(path, n_neurons)
    note = f": the inputs are wider than the network's {n_neurons} neurons"
    return read_triples(path, (n_rows, n_neurons), width_note=note)


def write_inputs(path: PathLike, inputs: sp.spmatrix) -> Path:
    """Write inputs as ``sparse-images`` triples (1-based); ``.gz`` names are gzipped."""
    return write_triples(path, inputs)
