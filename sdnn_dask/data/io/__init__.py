"""Read and write the challenge's files: weights, inputs and categories.

* :mod:`.text`: the text format (1-based triples and row ids, plain or gzipped), parsed
  and written, and :class:`ChallengeFormatError`;
* :mod:`.challenge`: where a challenge folder keeps its files, and its weight layers and
  inputs read and written;
* :mod:`.cache`: :func:`read_network`, a whole network read through an optional binary
  ``.npz`` cache (:class:`CacheWarning`).
"""

from ...core.network import as_csr32  # in the namespace of io.py before the split
from .cache import CacheWarning, read_network
from .challenge import (
    categories_path,
    inputs_path,
    layer_path,
    layer_paths,
    read_inputs,
    read_layer,
    read_weights,
    write_inputs,
    write_weights,
)
from .text import (
    ChallengeFormatError,
    PathLike,
    read_categories,
    read_triples,
    write_categories,
    write_triples,
)

__all__ = [
    "CacheWarning",
    "ChallengeFormatError",
    "PathLike",
    "as_csr32",
    "categories_path",
    "inputs_path",
    "layer_path",
    "layer_paths",
    "read_categories",
    "read_inputs",
    "read_layer",
    "read_network",
    "read_triples",
    "read_weights",
    "write_categories",
    "write_inputs",
    "write_triples",
    "write_weights",
]
