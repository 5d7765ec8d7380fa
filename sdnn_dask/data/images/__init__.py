"""Synthetic MNIST-like sparse input images for the Sparse DNN Graph Challenge.

* :mod:`.inputs`: :func:`make_inputs`, the input matrix (layout, density calibration, row
  order) and :func:`generated_source`;
* :mod:`.glyphs`: the stroke model, digit glyphs drawn into pixels a block of rows at a time.
"""

from .inputs import (
    CHALLENGE_DENSITY,
    CHALLENGE_NNZ,
    CHALLENGE_SURVIVORS,
    generated_source,
    make_inputs,
)

__all__ = ["CHALLENGE_DENSITY", "CHALLENGE_NNZ", "CHALLENGE_SURVIVORS", "generated_source",
           "make_inputs"]
