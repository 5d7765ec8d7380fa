"""What a problem is and how it is loaded: a network with its inputs and truth, generated or
read from challenge files or a network store (:func:`load_problem`, :func:`load_network`)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from .. import config
from ..core.check import BoundedReference, bounded_reference
from ..core.network import Network
from ..data import io, store
from ..data.streaming import StreamedNetwork, resident_bytes
from ..registry import ORDERS
from .sampling import SampledCheck
from .validation import StudyError, choice, digest, is_int, say, shown

#: Rows of a generated problem when not given (the challenge's 60000).
DEFAULT_ROWS = 60000


def check_input_size(rows: int, tile: int, nnz_per_row: float, what: str) -> None:
    """Refuse inputs that cannot fit in memory before they are made (a MemoryError
    traceback otherwise, or the machine swapping): ``rows x tile`` CSR rows of
    ``nnz_per_row`` nonzeros take 8 bytes a nonzero (column and value) and 8 a row.

    Parameters
    ----------
    rows, tile
        Input rows, and how many times they are repeated.
    nnz_per_row
        Their nonzeros per row (generated inputs: about N / 10).
    what
        How the message names the options (``--inputs 1000000000000``, ``inputs: ...``).

    Raises
    ------
    StudyError
        When they would take more than this machine's memory.
    """
    from dask.utils import format_bytes
    from distributed.system import MEMORY_LIMIT

    need = rows * tile * (8 + 8 * nnz_per_row)
    if need > MEMORY_LIMIT:
        raise StudyError(f"{what}: {rows * tile:,} input rows would take about "
                         f"{format_bytes(int(need))}, more than the "
                         f"{format_bytes(MEMORY_LIMIT)} of memory here")


@dataclass(frozen=True)
class ProblemSpec:
    """Which network and inputs: generated (``data=None``) or challenge files.

    Parameters
    ----------
    neurons, layers
        The network ``N`` and ``L``.
    inputs
        Input rows: generated count (default 60000), or the first rows of ``data``'s file.
    seed
        Seed of what is generated.
    data
        Challenge folder with ``neuron{N}/n{N}-l{k}.tsv[.gz]`` and the inputs.
    inputs_file, truth
        Override the inputs file and truth file found in ``data``.
    tile
        Repeat the inputs this many times (e.g. the official 1200 rows x 50).
    order
        Row order of generated inputs (:func:`sdnn_dask.data.images.make_inputs`):
        ``official-like`` (the default: survivors cluster along the rows as in the
        official inputs) or ``iid`` (every row drawn independently).
    check_rows
        Check each run on every one of its survivors (every row nonzero in its output)
        and this many of its other rows, drawn at random afresh for each run (the seed
        recorded), instead of on every row (:mod:`.sampling`): for networks whose float64
        reference of every row would take hours. ``None`` (the default) checks every
        row.
    """

    neurons: int = 1024
    layers: int = 120
    inputs: int | None = None
    seed: int = 0
    data: str | None = None
    inputs_file: str | None = None
    truth: str | None = None
    tile: int = 1
    order: str = "official-like"
    check_rows: int | None = None

    def __post_init__(self) -> None:
        choice("order", self.order, ORDERS)

        sizes = sorted(int(k) for k in config.get("bias"))
        if not is_int(self.neurons) or self.neurons not in sizes:
            raise StudyError(f"neurons must be one of {', '.join(map(str, sizes))} (the "
                             f"challenge's sizes), got {shown(self.neurons)}")
        for name in ("layers", "inputs", "tile", "check_rows"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or value < 1):
                raise StudyError(f"{name} must be a positive integer, got {shown(value)}")
        if not is_int(self.seed) or self.seed < 0:
            raise StudyError(f"seed must be an integer >= 0, got {shown(self.seed)}")

    def key(self) -> str:
        """A short stable id of the problem (its fields, hashed; ``check_rows`` only when
        set, so problems recorded before it existed keep their keys)."""
        fields = dataclasses.asdict(self)
        if fields["check_rows"] is None:
            del fields["check_rows"]
        return digest(fields)

    @property
    def label(self) -> str:
        rows = self.inputs or DEFAULT_ROWS
        where = f" from {self.data}" if self.data else ""
        tile = f" x{self.tile}" if self.tile > 1 else ""
        order = f" ({self.order})" if self.order != ORDERS[0] and not self.data else ""
        return f"{self.neurons}-{self.layers}, {rows} rows{order}{tile}{where}"


@dataclass
class Problem:
    """A network, its inputs, and the truth categories when known.

    Attributes
    ----------
    network, inputs
        The network and the ``rows x N`` float32 CSR inputs.
    truth
        0-based ids of the rows that survive every layer, or ``None``.
    source
        Where it came from, in words.
    spec
        What :func:`load_problem` was asked for (``None`` for a problem built by hand).
    """

    network: Network
    inputs: sp.csr_matrix
    truth: np.ndarray | None
    source: str
    spec: ProblemSpec | None = None
    _reference: BoundedReference | None = field(default=None, repr=False)
    _sampled: SampledCheck | None = field(default=None, repr=False)

    def key(self) -> str:
        """The spec's key; for a problem built by hand, a hash of the network's name and
        the inputs' pattern and values (two orderings of the same rows differ)."""
        if self.spec is not None:
            return self.spec.key()
        digest = hashlib.sha1(self.network.name.encode())
        y = self.inputs
        for array in (np.asarray(y.shape), y.indptr, y.indices, y.data):
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()[:12]

    @property
    def sampled(self) -> SampledCheck | None:
        """The sampled check of its runs when the spec asks for one (``check_rows``)."""
        if self.spec is None or self.spec.check_rows is None:
            return None
        if self._sampled is None:
            self._sampled = SampledCheck(self.network, self.inputs, self.spec.check_rows)
        return self._sampled

    def reference(self) -> BoundedReference:
        """The float64 reference with float32 rounding bounds (computed once)."""
        if self._reference is None:
            self._reference = bounded_reference(self.network, self.inputs)
        return self._reference


def available_layers(data: str | os.PathLike, neurons: int) -> int:
    """How many consecutive layer files ``1, 2, ...`` of ``neurons`` ``data`` holds.

    Anything at a layer's name counts (a folder too): reading it then says what is wrong,
    where stopping the count there would run fewer layers without a word.
    """
    count = 0
    while True:
        path = io.layer_path(data, neurons, count + 1)
        if not (path.exists() or path.is_symlink()):
            return count
        count += 1


def load_network(spec: ProblemSpec, *, cache: bool = True,
                 progress: Callable[[str], None] | None = None,
                 layer_progress: Callable[[int, int], None] | None = None
                 ) -> tuple[Network, ProblemSpec]:
    """The problem's network alone: generated, or read from ``spec.data`` with ``layers``
    capped at the layers the folder holds (said through ``progress``).

    Returns
    -------
    Network, ProblemSpec
        The network, and ``spec`` with the layers it has.

    Raises
    ------
    StudyError
        A ``data`` folder that is missing or holds no layer of that ``N``.
    """
    from ..data.radixnet import make_network

    n, layers = spec.neurons, spec.layers
    if spec.data is None:
        say(progress, f"generating RadiX-Net {n}-{layers} (seed {spec.seed})")
        return make_network(n, layers, seed=spec.seed), spec
    data = Path(spec.data)
    if not data.is_dir():
        raise StudyError(f"data {data}: no such folder")
    if (data / store.MANIFEST).is_file():  # a network store (sdnn-dask convert/generate)
        return _store_network(data, spec, progress)
    held = available_layers(data, n)
    if held == 0:
        raise StudyError(f"data {data}: no layer file of N = {n} "
                         f"(looked for {io.layer_path(data, n, 1)})")
    if held < layers:
        say(progress, f"{data} holds layers 1-{held} of N = {n}, not {layers}: "
                      f"running {held} layers")
        spec = dataclasses.replace(spec, layers=held)
    say(progress, f"reading {n}-{spec.layers} weights from {data}")
    network = io.read_network(data, n, spec.layers, cache=cache, progress=layer_progress)
    return network, spec


def _store_network(folder: Path, spec: ProblemSpec,
                   progress: Callable[[str], None] | None) -> tuple[Network, ProblemSpec]:
    """The first ``spec.layers`` layers of the network store ``folder`` (capped at what it
    holds, said through ``progress``)."""
    held = store.open_store(folder)
    if held.n_neurons != spec.neurons:
        raise StudyError(f"data {folder}: a store of N = {held.n_neurons}, not "
                         f"{spec.neurons}")
    if held.n_layers < spec.layers:
        say(progress, f"{folder} holds layers 1-{held.n_layers}, not {spec.layers}: "
                      f"running {held.n_layers} layers")
        spec = dataclasses.replace(spec, layers=held.n_layers)
    if store_weights(held, spec.layers) == "streamed":
        say(progress, f"streaming {spec.neurons}-{spec.layers} weights from the store "
                      f"{folder}, layer by layer (in memory with their transpose they "
                      f"would take {resident_bytes(held, spec.layers) / 1e9:.1f} GB)")
        return StreamedNetwork(held, spec.layers), spec
    say(progress, f"reading {spec.neurons}-{spec.layers} weights from the store {folder}")
    return held.to_network(spec.layers), spec


def store_weights(held: store.NetworkStore, n_layers: int | None = None) -> str:
    """``"resident"`` or ``"streamed"``: how a run here holds a store's weights.

    ``sdnn.data-parallel.weights`` if it is not ``auto``; with ``auto``, streamed when the
    weights and their transpose (:func:`~sdnn_dask.data.streaming.resident_bytes`) exceed
    ``sdnn.data-parallel.resident-fraction`` of this machine's memory.
    """
    from ..parallel.weights import choose_weights

    try:  # no memory limit given: this machine's memory
        mode, _ = choose_weights(StreamedNetwork(held, n_layers),
                                 config.get("data-parallel.weights"), None)
    except ValueError as error:
        raise StudyError(f"sdnn.data-parallel.{error}") from None
    return mode


def is_streamed(network: Any) -> bool:
    """Whether ``network`` is streamed from a store (no layers in memory)."""
    return isinstance(network, StreamedNetwork)


def load_problem(spec: ProblemSpec | None = None, *, cache: bool = True,
                 progress: Callable[[str], None] | None = None,
                 layer_progress: Callable[[int, int], None] | None = None,
                 **fields: Any) -> Problem:
    """Generate, or read from challenge files, a network with its inputs and truth.

    Parameters
    ----------
    spec
        The problem; or give its fields as keywords (``neurons=1024, layers=24, ...``).
    cache
        Keep a binary cache of parsed challenge files (:func:`sdnn_dask.data.io.read_network`).
    progress
        Called with a message for each step (e.g. ``print``).
    layer_progress
        Called as ``(done, total)`` while layer files are parsed.

    Returns
    -------
    Problem
        With the truth restricted to the rows kept (and tiled with them). When ``data``
        holds fewer layers than asked, the problem has the layers it holds (said through
        ``progress``).

    Raises
    ------
    StudyError
        A ``data`` folder that is missing or holds no layer of that ``N``, a missing
        inputs or truth file.
    FileNotFoundError, sdnn_dask.data.io.ChallengeFormatError
        From reading the files.
    """
    from ..data.images import make_inputs

    spec = spec or ProblemSpec(**fields)
    network, spec = load_network(spec, cache=cache, progress=progress,
                                 layer_progress=layer_progress)
    n, layers = spec.neurons, spec.layers
    # a network store holds weights only: without an inputs file, the inputs are generated
    store_only = (spec.data is not None and not spec.inputs_file
                  and (Path(spec.data) / store.MANIFEST).is_file())
    if spec.data is None or store_only:
        if store_only and spec.truth:
            raise StudyError("truth goes with an inputs file: a network store holds the "
                             "weights only")
        if spec.data is None and (spec.inputs_file or spec.truth):
            raise StudyError("inputs_file and truth go with data (a challenge folder)")
        rows = DEFAULT_ROWS if spec.inputs is None else spec.inputs
        check_input_size(rows, spec.tile, n / 10, f"inputs {rows} x tile {spec.tile}")
        say(progress, f"generating {rows} synthetic inputs")
        inputs = make_inputs(rows, n, seed=spec.seed, order=spec.order)
        truth = None
        source = (f"generated RadiX-Net {n}-{layers}, seed {spec.seed}" if spec.data is None
                  else f"the network store {spec.data}, layers 1-{layers}")
        source += f", {spec.order} row order"
    else:
        data = Path(spec.data)
        path = Path(spec.inputs_file) if spec.inputs_file else io.inputs_path(data, n)
        if not path.exists():
            raise StudyError(f"inputs file {path}: no such file")
        if path.is_dir():  # read_inputs would look inside it for the inputs file
            raise io.ChallengeFormatError(path, "is a folder; expected the inputs file")
        say(progress, f"reading inputs {path}")
        inputs = io.read_inputs(path, n)
        if spec.inputs is not None:
            inputs = inputs[: spec.inputs]
        truth_path = Path(spec.truth) if spec.truth else io.categories_path(data, n, layers)
        truth = None
        if spec.truth and not truth_path.exists():
            raise StudyError(f"truth file {truth_path}: no such file")
        # anything at the name is read: a folder (or a broken link) there is an error
        # naming it, where skipping it gave a run with no verdict
        if truth_path.exists() or truth_path.is_symlink():
            truth = io.read_categories(truth_path)
            truth = truth[truth < inputs.shape[0]]
            say(progress, f"truth: {truth_path} ({len(truth)} categories among "
                          f"{inputs.shape[0]} rows)")
        source = f"challenge files in {data}"
    if spec.tile > 1:
        rows = inputs.shape[0]
        check_input_size(rows, spec.tile, inputs.nnz / max(rows, 1),
                         f"tile {spec.tile} of {rows} rows")
        inputs = sp.vstack([inputs] * spec.tile, format="csr")
        if truth is not None:
            truth = np.concatenate([truth + k * rows for k in range(spec.tile)])
        source += f", inputs tiled x{spec.tile}"
    return Problem(network, inputs, truth, source, spec)
