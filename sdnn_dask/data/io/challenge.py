"""The challenge's folder: where its files are, and its weights and inputs read and written.

Layout of a challenge folder::

    neuron1024/n1024-l1.tsv ... n1024-l120.tsv      weights, one file per layer
    sparse-images-1024.tsv                           inputs (60000 x N)
    neuron1024-l120-categories.tsv                   truth: surviving 1-based row ids

Each name may carry ``.gz``. The files are parsed and written by :mod:`.text`.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable
from pathlib import Path

import scipy.sparse as sp

from .text import (
    GZIP_ERRORS,
    ChallengeFormatError,
    PathLike,
    read_triples,
    unreadable,
    write_triples,
)

# --------------------------------------------------------------------------- paths


def _present(path: Path) -> bool:
    """Whether anything is at ``path``: a file, a folder, a broken link (``exists()`` says
    no to the last: then the ``.gz`` next to it would be read in its place, silently)."""
    return path.exists() or path.is_symlink()


def _existing(path: Path) -> Path | None:
    """``path`` or ``path.gz`` (or, given a ``.gz`` name, the plain one), whichever is there.

    Whatever is at the name counts, a folder too: the reader then says what is wrong with
    it, where skipping it would read the other name, or nothing, without a word. When both
    names hold files they must hold the same text (``gunzip -k`` leaves such a pair): then
    ``path`` is the one returned.

    Raises
    ------
    ChallengeFormatError
        Both names are taken and the two differ, or one of them is not a file.
    """
    plain = path.with_suffix("") if path.suffix == ".gz" else path
    packed = plain.with_name(plain.name + ".gz")
    there = [p for p in ((path, packed) if path == plain else (path, plain)) if _present(p)]
    if len(there) == 2:
        _check_same_text(plain, packed)
    return there[0] if there else None


# (plain, packed) with their stat signatures -> why they differ, or None: a pair is compared
# once per process, not at every look-up of the name (a run resolves each layer's name
# several times)
_COMPARED: dict[tuple, str | None] = {}


def _signature(path: Path) -> tuple:
    st = path.stat()
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def _check_same_text(plain: Path, packed: Path) -> None:
    """Raise unless ``plain`` holds the text ``packed`` decompresses to."""
    for path, other in ((plain, packed), (packed, plain)):
        if not path.is_file():
            what = ("a folder" if path.is_dir() else "a broken link" if not path.exists()
                    else "not a regular file")
            raise ChallengeFormatError(path, f"is {what}, and {other} is there too; expected "
                                       "one file under one of the two names")
    key = (plain, packed, _signature(plain), _signature(packed))
    if key not in _COMPARED:
        _COMPARED[key] = _difference(plain, packed)
    if _COMPARED[key] is not None:
        raise ChallengeFormatError(
            plain, f"differs from {packed}, which is there too ({_COMPARED[key]}); expected "
            "one file, or two with the same text: which one holds the data is not for the "
            "reader to guess, so remove or rename the other")


def _difference(plain: Path, packed: Path) -> str | None:
    """Where the text of ``plain`` and the decompressed ``packed`` first differ, or ``None``."""
    lines = 0
    try:
        with plain.open("rb") as a, gzip.open(packed, "rb") as b:
            while True:
                x, y = a.read(1 << 20), b.read(1 << 20)
                if x != y:
                    # the first differing byte; the shorter's end if one is a prefix
                    same = next((i for i, (p, q) in enumerate(zip(x, y, strict=False))
                                 if p != q), min(len(x), len(y)))
                    line = lines + x[:same].count(b"\n") + 1
                    return f"from line {line} on"
                if not x:
                    return None
                lines += x.count(b"\n")
    except GZIP_ERRORS as error:
        return f"{packed.name} is not valid gzip data: {error}"
    except OSError as error:
        raise unreadable(Path(error.filename) if error.filename else plain, error) from None


def layer_path(directory: PathLike, n_neurons: int, layer: int) -> Path:
    """Where layer ``layer`` (1-based) of an ``n_neurons`` network lives under ``directory``.

    ``directory`` may be the challenge folder or its ``neuron{N}`` subfolder. Returns the
    ``.tsv`` or ``.tsv.gz`` there (whatever it is: a folder at the name is returned, for
    the reader to refuse), or the plain ``.tsv`` name if neither is there.

    Raises
    ------
    ChallengeFormatError
        Both the ``.tsv`` and the ``.tsv.gz`` are there and their text differs.
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
    ChallengeFormatError
        A layer's name holds a folder (or anything else that is not a file): named, rather
        than taken for the end of the network; or its ``.tsv`` and ``.tsv.gz`` differ.
    """
    paths = [layer_path(directory, n_neurons, k) for k in range(1, n_layers + 1)]
    for k, path in enumerate(paths, start=1):
        if path.exists() and not path.is_file():
            what = "a folder" if path.is_dir() else "not a regular file"
            raise ChallengeFormatError(path, f"is {what}; expected the file of layer {k} of "
                                       f"the {n_neurons}-neuron network")
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
        Declared number of rows (60000 in the challenge); by default the largest row id,
        which may be at most the larger of 2**20 and 4 per line of the file (rows with no
        nonzero have no line; see :func:`~.text.justified_ids`). Declared or not, the
        matrix must fit in the memory available.

    Raises
    ------
    ChallengeFormatError
        As :func:`read_triples`; a column beyond ``n_neurons`` is reported as inputs that
        do not fit the network, a row id beyond what the file justifies (or ``n_rows``)
        as such, naming the line, before the matrix is allocated.
    """
    path = Path(path)
    if path.is_dir():
        if path.name in (f"sparse-images-{n_neurons}.tsv", f"sparse-images-{n_neurons}.tsv.gz"):
            # the inputs file's own name: a folder where the file should be, not the
            # challenge folder to look in
            raise ChallengeFormatError(path, "is a folder; expected the inputs file")
        path = inputs_path(path, n_neurons)
    note = f": the inputs are wider than the network's {n_neurons} neurons"
    return read_triples(path, (n_rows, n_neurons), width_note=note)


def write_inputs(path: PathLike, inputs: sp.spmatrix) -> Path:
    """Write inputs as ``sparse-images`` triples (1-based); ``.gz`` names are gzipped."""
    return write_triples(path, inputs)
