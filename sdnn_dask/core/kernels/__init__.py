"""Per-block layer maths, shared by every executor. Knows nothing of Dask.

* :mod:`.steps`: the compiled (numba) layer steps on a block's rows, sparse and dense, and
  their constants (:data:`~.steps.ROW_TILE`, :data:`~.steps.SETUP_ROWS`);
* :mod:`.chunks`: a chunk of a block's live rows (:class:`~.chunks.Chunk`), stepped one
  layer at a time and repacked as rows die, in buffers of a :class:`~.chunks.BufferPool`;
* :mod:`.forward`: the drivers of blocks through all layers (:func:`~.forward.forward_block`,
  :func:`~.forward.start_block` and :func:`~.forward.finish_blocks`,
  :func:`~.passes.stream_blocks`), their settings and outputs, and the warm-up;
* :mod:`.passes`: a streamed network's rows in passes, the deep layers read once.
"""

from .forward import (
    TRACE_COLUMNS,
    BlockOutput,
    BlockState,
    KernelSettings,
    begin_block,
    finish_blocks,
    forward_block,
    forward_blocks,
    start_block,
    warm_up_kernels,
)
from .passes import EarlyPasses, stream_blocks, stream_early, stream_finish
from .steps import (
    ROW_TILE,
    SETUP_ROWS,
    InputOrder,
    StoredLayer,
    UniformWeights,
    canonical,
    dense_step,
    dense_step_w,
    input_order,
    sparse_step,
    sparse_step_uniform,
)

__all__ = [
    "ROW_TILE",
    "SETUP_ROWS",
    "TRACE_COLUMNS",
    "BlockOutput",
    "BlockState",
    "EarlyPasses",
    "InputOrder",
    "KernelSettings",
    "StoredLayer",
    "UniformWeights",
    "begin_block",
    "canonical",
    "dense_step",
    "dense_step_w",
    "finish_blocks",
    "forward_block",
    "forward_blocks",
    "input_order",
    "sparse_step",
    "sparse_step_uniform",
    "start_block",
    "stream_blocks",
    "stream_early",
    "stream_finish",
    "warm_up_kernels",
]
