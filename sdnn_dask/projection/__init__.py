"""A cost model of run time, calibrated from records, and projections from it.

The model prices the work a run does, term by term, with coefficients fitted by
non-negative least squares on the per-layer, per-block and per-run records
(:mod:`sdnn_dask.records`), never on wall times alone. Its equations, units, what is
calibrated on what, the held-out errors and the published-network projection are in
``docs/projection.md``; in short (all times in seconds):

**One layer of the serial kernel** on one block (:func:`~sdnn_dask.core.kernels.forward_block`,
which runs rows in chunks of ``c = max(chunk_min_rows, chunk_bytes // (4 N))`` rows and
picks, per chunk, a dense tile or sparse rows by the chunk's density)::

    t_layer = a_fma * w * R_dense + a_tile * w * T_dense + a_dcall * steps_dense
            + a_edge * d * Z_sparse + a_scan * N * R_sparse + a_scall * steps_sparse
            + a_dense * N * R_to_dense
            + a_sparse * N * R_to_sparse + a_snnz * Z_to_sparse + a_stile * tiles_to_sparse

with ``w = nnz(W_k)`` (32 N), ``d = w / N`` weights per row (32), ``R`` rows of chunks
run dense or sparse, ``T`` their 256-row tiles, ``Z`` the nonzeros entering sparse
chunks (``d * Z`` is the number of edges actually processed), ``R_to_*`` rows whose chunk
changed form. A block adds ``b_0 + b_row * rows + b_pack * N * R_repacked`` and the
``to_sparse`` terms of its last tiles.

**One layer of a model-parallel part** (:func:`~sdnn_dask.parallel.slabs.part_layer_step`) is
priced with the same arithmetic coefficients on its share (``n_out = N / k`` outputs,
``n_in = n_out + f_l (N - n_out)`` inputs read, ``f_l`` the share of the other parts'
columns read in layer ``l``), plus ``p_entry * 2 n_out * rows`` (dense: copying the own
columns into the input tile, writing the output), ``p_foreign * (n_in - n_out) * rows``
(dense: zeroing the other parts' columns and scattering the pieces into them),
``p_nnz * (nonzeros read + written)`` (sparse) and ``p_step`` per part and layer.

**A run** (single-threaded workers)::

    kernel:  t_block
    data:    max over workers of the sum of its blocks' busy * t_block
             + o_run + o_task * tasks + o_gather * output nonzeros
    model, hybrid:  sum over layers of [(1 + imbalance) * mean part step
                                        * (1 + (m - 1) * shared_step)
                                        + latency + byte * bytes_l]
                    + m_run + m_gather * output nonzeros

where ``busy`` is the slow-down of compute while other workers compute too, ``tasks``
the blocks the busiest worker runs, ``m`` the parts sharing the busiest worker (with
``m > 1`` the ``shared_*`` exchange coefficients apply), ``bytes_l`` the bytes of the
pieces sent between workers for layer ``l`` (predicted from the level's rows and
nonzeros and the slab encoding: 8 bytes a row id, then 8 bytes a nonzero, or a dense
tile of 4 bytes an entry once half the entries are nonzero).

**Identical rows and neurons computed once** (``sdnn.kernel.dedup``, ``.classes``; a run's
``dedup``/``classes`` columns): every term counts a level's distinct rows
(:attr:`Survival.distinct`, the records' ``distinct_out``) in place of its live rows; with
classes a dense step works on ``N / 16`` classes (:data:`CLASS_SHARE`) and the first
layer's scatter into them is priced by ``class_edge``; a data-parallel run that joined
(``join``) steps its deep layers once, on one worker (:func:`join_layer`).

**The survival profile** (:class:`Survival`) supplies the rows and nonzeros alive at
every level, which is what the work depends on. Either per row (exact: the kernel's chunk
schedule is then replayed chunk by chunk, modes and form changes included), measured by
:meth:`Survival.measure` (one cheap serial pass, no timing used), or aggregated per level
from the layer records of a run (:meth:`Survival.from_records`; chunk counts, modes and
form changes are then estimated from the mean density of a level). Scaling to other row
counts assumes rows statistically like the measured ones; extending to more layers
assumes the last measured level repeats (the survivors plateau: on 1024-120 fewer than
1% of them die after layer 20).

The package, by concept: :mod:`.terms` (the terms and their units), :mod:`.survival` (the
survival profile), :mod:`.kernel_work` and :mod:`.part_work` (the work of a serial block and
of a model-parallel part, in the terms' units), :mod:`.replay` (a recorded run read back:
its settings and profiles), :mod:`.calibration` (fitting the coefficients on records),
:mod:`.cost_model` (the model and its predictions), :mod:`.backtest` (every recorded run
projected against its measurement), :mod:`.published_run` (the published 65536-neuron run,
and every recorded strategy placed on its 32 nodes) and :mod:`.report` (the table a
report shows, its held-out rule and backtest).
"""

from .backtest import projection_table
from .cost_model import CostModel, Prediction, join_layer
from .published_run import (
    PUBLISHED,
    format_placement,
    place_published,
    project_published,
    published_survival,
)
from .replay import generated_profiles
from .report import backtest_line, held_out_split, leave_one_out, report_projection
from .survival import Survival
from .terms import (
    ALL_TERMS,
    BLOCK_TERMS,
    CLASS_SHARE,
    EXCHANGE_TERMS,
    KERNEL_TERMS,
    PART_TERMS,
    RUN_TERMS,
    SHARING_TERMS,
)

__all__ = [
    "ALL_TERMS",
    "BLOCK_TERMS",
    "CLASS_SHARE",
    "EXCHANGE_TERMS",
    "KERNEL_TERMS",
    "PART_TERMS",
    "PUBLISHED",
    "RUN_TERMS",
    "SHARING_TERMS",
    "CostModel",
    "Prediction",
    "Survival",
    "backtest_line",
    "format_placement",
    "generated_profiles",
    "held_out_split",
    "join_layer",
    "leave_one_out",
    "place_published",
    "project_published",
    "projection_table",
    "published_survival",
    "report_projection",
]
