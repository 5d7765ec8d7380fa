"""Checking a run on a sample of its rows, for problems too large to check whole.

The float64 reference (:func:`~sdnn_dask.core.check.bounded_reference`) steps every live
row through every layer, as the papers' codes do: at 65536-1920 x 60000 it would take
hours where the run takes a minute or two. A problem with ``check_rows`` (a study's
problem entry) is checked instead on ``check_rows`` input rows drawn at random (most of
them die early: they check that the run killed what it should) and up to an eighth as
many of the run's own survivors (they check the deep layers), against the float64
reference of those rows alone; and, where the run computed identical rows once, against
the kernel without that on the same rows (:class:`SampledCheck`). Both are run once per
sample: runs that leave the same survivors share them.
"""

from __future__ import annotations

import hashlib

import numpy as np
import scipy.sparse as sp

from ..core.check import BoundedReference, bounded_reference, check_result
from ..core.kernels import KernelSettings, forward_block, stream_blocks
from ..core.network import Network, as_csr32

#: What a sampled check says it was checked against (``check_against`` in the records).
SAMPLE = "sample"


class SampledCheck:
    """The sampled check of one problem's runs (see the module docstring).

    Parameters
    ----------
    network, inputs
        The problem's network (in memory or streamed from a store) and inputs.
    rows
        Input rows drawn at random; up to ``rows // 8`` (at least one) of a run's
        survivors are added.
    seed
        Seed of the draws.
    """

    def __init__(self, network: Network, inputs: sp.csr_matrix, rows: int, seed: int = 0):
        self.network, self.inputs = network, inputs
        self.rows, self.seed = int(rows), int(seed)
        self._references: dict[str, BoundedReference] = {}
        self._plain: dict[str, sp.csr_matrix] = {}

    def sample(self, output: sp.csr_matrix) -> np.ndarray:
        """Sorted ids of the rows a run with ``output`` is checked on."""
        n = self.inputs.shape[0]
        rng = np.random.default_rng(self.seed)
        drawn = rng.choice(n, size=min(self.rows, n), replace=False)
        survivors = np.flatnonzero(np.diff(as_csr32(output).indptr))
        picked = rng.choice(survivors, size=min(len(survivors), max(1, self.rows // 8)),
                            replace=False) if len(survivors) else survivors
        return np.union1d(drawn, picked).astype(np.int64)

    def _kernel(self, rows: np.ndarray) -> sp.csr_matrix:
        """The serial kernel without deduplication on ``rows`` of the inputs."""
        x = self.inputs[rows]
        settings = KernelSettings.resolve(dedup=False)
        if hasattr(self.network, "kernel_layers"):  # streamed from a store
            return stream_blocks(self.network, [x], settings)[0].to_csr()
        return forward_block(self.network, x, settings=settings).to_csr()

    def verify(self, output: sp.csr_matrix, dedup: bool) -> tuple[bool, float, int]:
        """Check ``output`` on its sample.

        Returns
        -------
        passed, max_abs_diff, rows
            PASS iff the sampled rows are within float32 rounding of the float64
            reference (:func:`~sdnn_dask.core.check.check_result`) and, where ``dedup``,
            the kernel without deduplication gives those rows the same categories and
            also passes; the largest difference from the reference; the rows checked.
        """
        rows = self.sample(output)
        key = hashlib.sha1(rows.tobytes()).hexdigest()
        if key not in self._references:
            self._references[key] = bounded_reference(self.network, self.inputs[rows])
        reference = self._references[key]
        mine = as_csr32(output)[rows]
        verdict = check_result(mine, reference)
        passed = verdict.passed
        if dedup and passed:
            if key not in self._plain:
                self._plain[key] = self._kernel(rows)
            plain = self._plain[key]
            same_rows = np.array_equal(np.diff(plain.indptr) > 0, np.diff(mine.indptr) > 0)
            passed = same_rows and check_result(plain, reference).passed
        return passed, verdict.max_abs_diff, len(rows)
