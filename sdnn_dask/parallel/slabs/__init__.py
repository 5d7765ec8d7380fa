"""Column slabs and the per-part layer step of model parallelism. Knows nothing of Dask.

* :mod:`.layout`: a part's activations for some columns of a level (:class:`~.layout.Slab`,
  its values column-major as a :class:`~.layout.BlockCSC` or a dense tile) and the pieces
  cut from it for other parts (:func:`~.layout.take_columns`);
* :mod:`.tiles`: the compiled dense tiles of a part's layer: filled from the slabs it reads,
  stepped, and compressed back into nonzero runs (with an AVX-512 compress-store);
* :mod:`.plans`: every part's slices of the weights and index maps
  (:class:`~.plans.PartPlan`, :func:`~.plans.make_part_plans`), and what a part sends to
  others (:func:`~.plans.piece_for`);
* :mod:`.part_layer`: the per-part layer step (:func:`~.part_layer.part_layer_step`),
  every part in one process (:func:`~.part_layer.forward_parts`), joining the parts' last
  slabs (:func:`~.part_layer.assemble`) and the warm-up;
* :mod:`.shared_rows`: identical rows computed once, the parts agreeing on the groups
  (:class:`~.shared_rows.PartRows`).
"""

from .layout import BLOCK_ROWS, PART_TRACE_COLUMNS, BlockCSC, Slab, take_columns
from .part_layer import assemble, forward_parts, part_layer_step, warm_up_parts
from .plans import LayerPlan, PartPlan, make_part_plans, piece_for
from .shared_rows import PartRows, dedup_enabled, drop_rows, label_rows

__all__ = [
    "BLOCK_ROWS",
    "PART_TRACE_COLUMNS",
    "BlockCSC",
    "LayerPlan",
    "PartPlan",
    "PartRows",
    "Slab",
    "assemble",
    "dedup_enabled",
    "drop_rows",
    "forward_parts",
    "label_rows",
    "make_part_plans",
    "part_layer_step",
    "piece_for",
    "take_columns",
    "warm_up_parts",
]
