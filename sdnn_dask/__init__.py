"""sdnn_dask: run and compare parallel strategies for sparse DNN inference on Dask.

The HPEC/MIT Sparse DNN Graph Challenge, on Dask: read the challenge files or generate
RadiX-Net networks and MNIST-like inputs, run the serial reference and data-parallel
inference on any ``distributed`` cluster, check the results, and record every timing.
Studies (:mod:`sdnn_dask.study`): ``load_problem``, ``RunSpec``, ``compare`` and
``Study.from_yaml(path).run(client, results, resume=True)``.

Examples
--------
>>> from sdnn_dask import make_network, make_inputs, infer_reference
>>> net = make_network(1024, 12)
>>> result = infer_reference(net, make_inputs(100, 1024))
>>> result.output.shape
(100, 1024)
"""

from . import config  # noqa: F401  (registers the sdnn.* defaults in dask.config)
from .core.kernels import forward_block
from .core.network import Network
from .core.reference import check_categories, infer_reference
from .core.result import RunResult, compare_outputs
from .data.images import make_inputs
from .data.io import (
    ChallengeFormatError,
    read_categories,
    read_inputs,
    read_network,
    write_categories,
    write_inputs,
    write_weights,
)
from .data.radixnet import make_network
from .study import Problem, ProblemSpec, Records, RunSpec, Study, compare, load_problem
from .version import __version__ as __version__

__all__ = [
    "ChallengeFormatError",
    "Network",
    "Problem",
    "ProblemSpec",
    "Records",
    "RunResult",
    "RunSpec",
    "Study",
    "check_categories",
    "compare",
    "compare_outputs",
    "forward_block",
    "infer_reference",
    "load_problem",
    "make_inputs",
    "make_network",
    "read_categories",
    "read_inputs",
    "read_network",
    "write_categories",
    "write_inputs",
    "write_weights",
]
