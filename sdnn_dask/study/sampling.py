"""Checking a run on every survivor and a sample of the other rows, for problems too large
to check whole.

The float64 reference (:func:`~sdnn_dask.core.check.bounded_reference`) of every input row
takes hours at 65536-1920 x 60000 where the run takes a minute or two: most of that is
the rows that die in the early layers. A problem with ``check_rows`` (a study's problem
entry) is checked instead (:class:`SampledCheck`) on

- **every survivor of the run's result**: every row nonzero in its output, so a wrong
  value on any survivor, and a dead row wrongly revived, FAILs. Their float64 reference
  steps identical rows once (``bounded_reference(..., dedup=True)``): past the first
  20-30 challenge layers the survivors are one saturated row, so the deep layers cost
  about one row each. Runs that leave the same survivors share this reference;
- **``check_rows`` of the other rows**, drawn at random afresh for each run (a seed from
  the operating system's entropy, recorded with the run): a row the run wrongly killed is
  caught when drawn, so a run that kills ``m`` of ``n - s`` non-survivors wrongly is
  missed with probability about ``(1 - m / (n - s)) ** check_rows``, and repeats draw
  different rows;
- and, where the run computed identical rows once (``dedup``), the kernel without that on
  the sampled rows plus up to ``check_rows // 8`` survivors: the same categories, and
  within float32 rounding of the reference.

The verdict (:class:`SampleVerdict`) says how many survivors and other rows were checked,
and with which seed; the records keep them (``check_survivors``, ``check_others``,
``check_seed``), and the reports show ``N survivors + M others`` beside the verdict.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..core.check import BoundedReference, Verdict, bounded_reference, check_result
from ..core.kernels import KernelSettings, forward_block, stream_blocks
from ..core.network import Network, as_csr32

#: What a sampled check says it was checked against (``check_against`` in the records).
SAMPLE = "sample"

#: Bits of a drawn seed (exact in a float64, as the records' integer columns need).
SEED_BITS = 48


@dataclass(frozen=True)
class SampleVerdict:
    """The sampled check of one run.

    Attributes
    ----------
    passed
        Every survivor and every sampled other row within float32 rounding of the
        float64 reference (:func:`~sdnn_dask.core.check.check_result`), and, where the
        run deduplicated, the kernel without deduplication agreeing on the sample.
    max_abs_diff
        Largest difference from the float64 reference on the rows checked.
    survivors
        The run's survivors, all checked.
    others
        Other rows (not survivors of the run) drawn at random and checked.
    seed
        Seed of the draw of the other rows.
    undecided
        Rows checked that are undecided (:mod:`sdnn_dask.core.check`).
    """

    passed: bool
    max_abs_diff: float
    survivors: int
    others: int
    seed: int
    undecided: int = 0

    @property
    def rows(self) -> int:
        """Rows checked."""
        return self.survivors + self.others

    def __str__(self) -> str:
        return (f"{'PASS' if self.passed else 'FAIL'} (sampled: {self.survivors} survivors "
                f"+ {self.others} others, seed {self.seed})")


class SampledCheck:
    """The sampled check of one problem's runs (see the module docstring).

    Parameters
    ----------
    network, inputs
        The problem's network (in memory or streamed from a store) and inputs.
    rows
        Other rows (not survivors of the run) drawn at random for each run; up to
        ``rows // 8`` (at least one) survivors join them for the kernel without
        deduplication.
    """

    def __init__(self, network: Network, inputs: sp.csr_matrix, rows: int):
        if int(rows) < 1:
            raise ValueError(f"rows must be a positive integer, got {rows!r}")
        self.network, self.inputs = network, inputs
        self.rows = int(rows)
        # the latest survivors' reference (runs of a problem mostly share their survivors);
        # one only: at 65536 neurons it holds thousands of dense float64 rows
        self._kept: tuple[str, BoundedReference] | None = None

    def survivors(self, output: sp.csr_matrix) -> np.ndarray:
        """Sorted ids of the rows nonzero in ``output``: every one is checked."""
        if output.shape != self.inputs.shape:
            raise ValueError(f"the output is {output.shape[0]} x {output.shape[1]}, the "
                             f"inputs {self.inputs.shape[0]} x {self.inputs.shape[1]}")
        return np.flatnonzero(np.diff(as_csr32(output).indptr)).astype(np.int64)

    def others(self, survivors: np.ndarray, seed: int) -> np.ndarray:
        """Sorted ids of up to ``rows`` non-survivors, drawn with ``seed``."""
        rest = np.setdiff1d(np.arange(self.inputs.shape[0]), survivors)
        drawn = np.random.default_rng(seed).choice(len(rest), size=min(self.rows, len(rest)),
                                                   replace=False)
        return np.sort(rest[drawn]).astype(np.int64)

    def reference(self, rows: np.ndarray, *, keep: bool = False) -> BoundedReference:
        """The float64 reference of ``rows`` of the inputs, identical rows stepped once.

        With ``keep``, it is kept for the next call with the same rows (the survivors of
        the next run), in place of the one kept before."""
        key = hashlib.sha1(np.ascontiguousarray(rows, dtype=np.int64).tobytes()).hexdigest()
        if self._kept is not None and self._kept[0] == key:
            return self._kept[1]
        reference = bounded_reference(self.network, self.inputs[rows], dedup=True)
        if keep:
            self._kept = (key, reference)
        return reference

    def _kernel(self, rows: np.ndarray) -> sp.csr_matrix:
        """The serial kernel without deduplication on ``rows`` of the inputs."""
        x = self.inputs[rows]
        settings = KernelSettings.resolve(dedup=False)
        if hasattr(self.network, "kernel_layers"):  # streamed from a store
            return stream_blocks(self.network, [x], settings)[0].to_csr()
        return forward_block(self.network, x, settings=settings).to_csr()

    def verify(self, output: sp.csr_matrix, dedup: bool, seed: int | None = None
               ) -> SampleVerdict:
        """Check ``output`` on every survivor and ``rows`` other rows (module docstring).

        Parameters
        ----------
        output
            The run's ``rows x N`` result.
        dedup
            The run computed identical rows once: the kernel without that is run on the
            sampled rows too.
        seed
            Seed of the other rows' draw; default a fresh one from the operating system
            (:func:`secrets.randbits`), so every call draws different rows.
        """
        seed = secrets.randbits(SEED_BITS) if seed is None else int(seed)
        mine = as_csr32(output)
        if mine.shape != self.inputs.shape:  # not an answer to these inputs
            return SampleVerdict(False, float("inf"), 0, 0, seed)
        survivors = self.survivors(mine)
        others = self.others(survivors, seed)
        references = {"survivors": self.reference(survivors, keep=True),
                      "others": self.reference(others)}
        verdicts: list[Verdict] = [check_result(mine[rows], references[name])
                                   for name, rows in (("survivors", survivors),
                                                      ("others", others)) if len(rows)]
        passed = all(v.passed for v in verdicts)
        if dedup and passed:
            passed = self._agrees_without_dedup(mine, survivors, others, seed, references)
        return SampleVerdict(passed, max((v.max_abs_diff for v in verdicts), default=0.0),
                             len(survivors), len(others), seed,
                             sum(v.n_undecided for v in verdicts))

    def _agrees_without_dedup(self, mine: sp.csr_matrix, survivors: np.ndarray,
                              others: np.ndarray, seed: int,
                              references: dict[str, BoundedReference]) -> bool:
        """The kernel without deduplication, on ``others`` and up to ``rows // 8`` of the
        survivors: the same rows survive as in ``mine``, within rounding of the reference."""
        rng = np.random.default_rng([seed, 1])
        size = min(len(survivors), max(1, self.rows // 8))
        picked = np.sort(rng.choice(survivors, size=size, replace=False))
        for rows, among, name in ((picked, survivors, "survivors"), (others, others, "others")):
            if not len(rows):
                continue
            plain = self._kernel(rows)
            if not np.array_equal(np.diff(plain.indptr) > 0, np.diff(mine[rows].indptr) > 0):
                return False
            reference = _some_rows(references[name], np.searchsorted(among, rows))
            if not check_result(plain, reference).passed:
                return False
        return True


def _some_rows(reference: BoundedReference, where: np.ndarray) -> BoundedReference:
    """The rows ``where`` (sorted positions) of ``reference``, as a reference of their own."""
    hit = np.isin(reference.undecided, where)
    return BoundedReference(reference.output[where], reference.bound[where],
                            np.searchsorted(where, reference.undecided[hit]),
                            reference.undecided_layer[hit])
