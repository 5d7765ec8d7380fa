"""Synthetic MNIST-like sparse input matrices for the Sparse DNN Graph Challenge.

The official inputs ``sparse-images-{N}.tsv`` are the 60000 MNIST training digits,
binarised and resized to ``s x s`` pixels (``N = s**2``). :func:`make_inputs` stands in
for them when they are not available: a seeded generator of binary handwritten-digit-like
images with the same layout, density and survival through the challenge networks.

Layout
------
Row ``r`` is one image; pixel ``(x, y)`` (``x`` the column, ``y`` the row from the top,
0-based) is neuron ``x * s + y`` -- the challenge's column-major flattening, so
``row.reshape(s, s, order="F")`` is the picture the right way up.  Values are 1.0
(``float32``); indices are sorted, unique and 0-based.

The images are drawn by :mod:`.glyphs` (the stroke model: digit templates, their random
deformation and the pen), a block of 1024 rows at a time; block ``b`` draws its numbers
from ``SeedSequence(seed, spawn_key=(b,))``, so row ``r`` depends only on ``(seed, r)``
(and ``N``, ``density``) and ``make_inputs(n)`` is a prefix of ``make_inputs(m)`` for
``m > n``.

Calibration
-----------
*Density.*  One global pen-radius multiplier is solved (regula falsi on a fixed sample of
rows, drawn with the size's pen spread, below) so that the mean density matches the
official files (:data:`CHALLENGE_DENSITY`), or ``density`` when given; the four challenge
sizes use a precomputed table (32768-row sample), anything else is solved once per
process (2048 rows, ~0.1-1 s).  Measured on 60000 independent rows, seed 0 (official in
brackets): N=1024 0.1041 (0.1037), 4096 0.1021 (0.1018), 16384 0.1009 (0.1006), 65536
0.1000 (0.0997) -- all +0.3%.  Pixels per row at N=1024:
mean 106.6, sd 46, 5/50/95% 44/100/193, min 20 (official rows 1-1200: 102.3, 38,
48/99/171, min 22).  Bounding box 16.0 x 22.7 px on average (official ~17 x 22).

*Survival* (the recurrence ``Y = clip(Y @ W + bias on nonzeros, 0, 32)``, bias -0.3, of the
official 1024-neuron, 120-layer network).  Weight ``W(i, j)`` depends only on ``i mod 64``
and ``j mod 64``, and ``i mod 64 = 32 * (x mod 2) + y``: the first layer just counts the
pixels on per image row and column parity, summed over pairs of neighbouring rows, and
keeps the counts above 4.8.  So what survives is decided by the amount of ink and how
much of it lies in the same image rows: bold digits with long strokes (thick 8s, 4s, 0s)
survive, thin ones and 1s die.  The knob that sets it is the spread of the pen radius
(log-sd 0.30 gives about 1.0% survival, 0.35 1.8%, 0.40 2.8%, 0.45 3.7%); 0.41 was
chosen.  Rows surviving (% of rows):

=================================  ====  ====  ====  ====  ===  ===  ===  ===  ====
after layer                          1     2     3     4    5    6    7    8    120
=================================  ====  ====  ====  ====  ===  ===  ===  ===  ====
official rows 1-1200                91.5  65.5  34.6  16.2  8.2  4.7  2.6  1.8  1.58
generated, seed 0, 60000 rows       92.9  64.4  33.8  16.5  8.9  5.6  4.0  3.2  2.84
=================================  ====  ====  ====  ====  ===  ===  ===  ===  ====

After 120 layers: 2.84%, 3.03%, 2.85% of 60000 rows for seeds 0, 1, 2 (official: 3.02% of
all 60000 rows, 1.58% of rows 1-1200).  Through a generated RadiX-Net 1024-120 network
(identical to the official one for layers 1-6, random row permutations per 6-layer block
after that) the survivors are the same rows to within one row per 60000.

*Row order* (``order="official-like"``, the default).  The official
survivors cluster along the row order (MNIST's training set was assembled from writers' forms): the
dispersion (var/mean) of survivors per block of 10 / 50 / 100 / 300 / 1000 rows is
1.4 / 3.4 / 5.0 / 8.1 / 9.6 (1.0 for independent rows), and the official rows 1-1200 show
the mechanism -- survivors are the rows with the most ink (all have >= 153 pixels, mean
195 against 102), and pixels per row are autocorrelated (0.07-0.10 at lags 10-50; means
of 100-row blocks vary 1.5x more than for independent rows).  Modelled by writer runs:
consecutive rows share a writer, runs have log-normal lengths (mean 150 rows, log-sd 0.4)
and each writer a standard-normal factor ``w``; a row's pen z-score is
``0.55 * w + sqrt(1 - 0.55**2) * own`` -- still standard normal, so the marginal density
and survival are unchanged, but bold and thin writers make survival vary along the
order (fitted to the dispersion above; measured on seeds 0-11 it is 1.4 / 3.3 / 5.1 / 8.0
/ 9.5 on average).  ``order="iid"`` draws every row independently (the generator before
this model existed; identical output).

*Survival at the larger sizes.*  Their official images are not here, but their truth
counts are (:data:`CHALLENGE_SURVIVORS`: 1801, 1918, 1994 of 60000 for 4096, 16384, 65536
with 1920 layers).  The digits are the same at every ``N`` (the geometry is
resolution-free), but each size's network asks a different question of them: layer 1
counts the ink on two neighbouring image rows at every ``s/16``-th column and keeps
counts of at least 5, 6, 7, 8 of 32 for N = 1024, 4096, 16384, 65536 (bias -0.3 .. -0.45),
and layers 2 .. R add rows 2, 4, ... pixels apart.  So survival again depends on how many
digits are bold, against a threshold that rises with ``N``, and the pen spread (log-sd)
is the knob; it is kept per size (``_PEN_SIGMA_BY_N``, interpolated in log2(side) for
other sizes): 0.41 at 1024, 4096 and 16384, 0.32 at 65536, where 0.41 gave the boldest
digits too often.  Survivors of 60000 official-like rows, seed 0, through the generated
RadiX-Net (its first 64 layers: at 65536 they leave the same rows as all 1920):

==========  ========  ======================  ===============================
network     official  pen log-sd 0.41         now
==========  ========  ======================  ===============================
1024-120    1812      1696 (-6.4%)            the same rows (0.41)
4096-1920   1801      1523 (-15.4%)           the same rows (0.41)
16384-1920  1918      1895 (-1.2%)            the same rows (0.41)
65536-1920  1994      2416 (+21.2%)           2003 (+0.5%, log-sd 0.32)
==========  ========  ======================  ===============================

At 65536 the survivors fall with the spread as 0.41 / 0.37 / 0.34 / 0.32 / 0.30: 2410 /
2204 / 2079 / 2001 / 1941 (pen scale solved on 2048 rows each).  4096 stays 15% short: it
would take a wider spread there, which would change every generated 4096 problem.
``python benchmarks/survivors_by_size.py`` prints the table's last column (~40 s).
Generating 60000 rows takes
about 1.5 s (N=1024), 2.5 s (4096), 6 s (16384) and 17 s with ~3.3 GB peak memory (65536,
393 M nonzeros) on one core.
"""

from __future__ import annotations

import math
import operator
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from ...registry import ORDERS
from .glyphs import BLOCK_ROWS, PEN_SIGMA, block_params, digit_shapes, render_shapes

__all__ = ["CHALLENGE_DENSITY", "CHALLENGE_NNZ", "CHALLENGE_SURVIVORS", "make_inputs"]

#: Nonzeros of the official ``sparse-images-{N}.tsv`` files (60000 rows each).
CHALLENGE_NNZ: dict[int, int] = {
    1024: 6_374_505,
    4096: 25_019_051,
    16384: 98_858_913,
    65536: 392_191_985,
}
#: Mean fraction of pixels on in the official input files, by number of neurons.
CHALLENGE_DENSITY: dict[int, float] = {n: nnz / (60000 * n) for n, nnz in CHALLENGE_NNZ.items()}

_CALIB_SEED = 20190101
# ---- writer model (order="official-like", the default; see make_inputs) ----
_WRITER_RHO = 0.55  # correlation of a row's pen z-score with its writer's factor
_WRITER_RUN_MEAN = 150.0  # mean rows per writer run (log-normal run lengths)
_WRITER_RUN_SD = 0.4  # log-sd of the run lengths
_WRITER_KEY = 0x57524954  # spawn-key tag of the writer stream (blocks use (b,))
_WRITER_CHUNK = 256  # runs drawn per SeedSequence(seed, spawn_key=(_WRITER_KEY, c))
#: Rows of the official 60000 that survive the official network, by N (L = 120 for 1024,
#: 1920 for the others): the truth files' row counts (1024-120 is in the shared data).
CHALLENGE_SURVIVORS: dict[int, int] = {1024: 1812, 4096: 1801, 16384: 1918, 65536: 1994}
# Log-sd of the pen radius across images, by N: the knob that sets survival (module
# docstring), fitted so that 60000 rows (seed 0) through the generated network leave the
# official number of survivors; 0.41 (fitted at 1024) held at 4096 and 16384, 65536 needs
# 0.32 (0.41 left 2416 survivors, +21%). Interpolated in log2(side) for other sizes.
_PEN_SIGMA_BY_N: dict[int, float] = {1024: PEN_SIGMA, 4096: PEN_SIGMA, 16384: PEN_SIGMA,
                                     65536: 0.32}
# Pen multipliers reproducing CHALLENGE_DENSITY at each size's pen spread (from
# _calibrate_pen_scale with 32768 rows); other sizes and densities are calibrated on
# first use.
_PEN_SCALE: dict[int, float] = {1024: 0.98355, 4096: 0.96535, 16384: 0.95205, 65536: 0.96651}


def _writer_factors(seed: int, n_rows: int) -> np.ndarray:
    """Per-row writer factor (standard normal, constant over runs of rows).

    Runs have log-normal lengths (mean :data:`_WRITER_RUN_MEAN` rows, log-sd
    :data:`_WRITER_RUN_SD`) and independent standard-normal factors.  They are drawn in
    chunks of :data:`_WRITER_CHUNK` runs, chunk ``c`` from
    ``SeedSequence(seed, spawn_key=(_WRITER_KEY, c))``, so the factor of row ``r`` depends
    only on ``(seed, r)`` and shorter outputs are prefixes of longer ones.
    """
    mu = math.log(_WRITER_RUN_MEAN) - 0.5 * _WRITER_RUN_SD**2
    lengths, factors = [], []
    total, chunk = 0, 0
    while total < n_rows:
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_WRITER_KEY, chunk)))
        ln = np.maximum(1, np.rint(rng.lognormal(mu, _WRITER_RUN_SD, _WRITER_CHUNK)))
        lengths.append(ln.astype(np.int64))
        factors.append(rng.standard_normal(_WRITER_CHUNK))
        total += int(lengths[-1].sum())
        chunk += 1
    if not lengths:
        return np.empty(0)
    return np.repeat(np.concatenate(factors), np.concatenate(lengths))[:n_rows]


def _render_rows(
    seed: int,
    block: int,
    n: int,
    side: int,
    pen_scale: float,
    writer: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted column-major indices and per-row counts of the first ``n`` rows of a block.

    ``writer`` (the rows' writer factors, ``order="official-like"``) is mixed into the pen
    z-score as ``rho * writer + sqrt(1 - rho**2) * own``, which keeps it standard normal.
    """
    params = {k: v[:n] for k, v in block_params(seed, block).items()}
    if writer is not None:
        own = math.sqrt(1.0 - _WRITER_RHO**2)
        params["pen"] = _WRITER_RHO * writer + own * params["pen"]
    return render_shapes(digit_shapes(params), side, pen_scale, _pen_sigma(side * side))


def _pen_sigma(n_neurons: int) -> float:
    """Pen-radius log-sd for ``n_neurons``: :data:`_PEN_SIGMA_BY_N`, interpolated in
    log2(side) between the challenge sizes (and held beyond them)."""
    if n_neurons in _PEN_SIGMA_BY_N:
        return _PEN_SIGMA_BY_N[n_neurons]
    keys = sorted(_PEN_SIGMA_BY_N)
    return float(np.interp(0.5 * math.log2(n_neurons), [0.5 * math.log2(k) for k in keys],
                           [_PEN_SIGMA_BY_N[k] for k in keys]))


def _calibrate_pen_scale(n_neurons: int, density: float, n_rows: int = 2048) -> float:
    """Pen-radius multiplier that gives mean ``density`` on a fixed calibration sample.

    The sample is the first ``n_rows`` rows of a fixed seed, drawn with the size's pen
    spread (:func:`_pen_sigma`), so the result (and hence the generated images) does not
    depend on the caller's seed or chunking.
    """
    side = math.isqrt(n_neurons)
    sigma = _pen_sigma(n_neurons)
    n_blocks = -(-n_rows // BLOCK_ROWS)
    shapes = []
    for block in range(n_blocks):
        n = min(BLOCK_ROWS, n_rows - block * BLOCK_ROWS)
        params = {k: v[:n] for k, v in block_params(_CALIB_SEED, block).items()}
        shapes.append(digit_shapes(params))

    def excess(log_scale: float) -> float:
        total = 0
        for sh in shapes:
            _, counts = render_shapes(sh, side, math.exp(log_scale), sigma)
            total += int(counts.sum())
        return math.log(max(total, 1) / (n_rows * n_neurons)) - math.log(density)

    # bracket the root in log(scale), then Illinois regula falsi
    a, fa = 0.0, excess(0.0)
    step = -0.5 if fa > 0 else 0.5
    b, fb = a + step, excess(a + step)
    while fa * fb > 0:
        if abs(b) > 4.0:
            raise ValueError(
                f"density={density} cannot be reached with {n_neurons} neurons; "
                "use a value between about 0.01 and 0.3"
            )
        a, fa = b, fb
        b += step
        fb = excess(b)
    for _ in range(60):
        c = b - fb * (b - a) / (fb - fa)
        fc = excess(c)
        if abs(fc) < 2e-4 or abs(b - a) < 1e-9:
            return math.exp(c)
        if fc * fb < 0:
            a, fa = b, fb
        else:
            fa *= 0.5
        b, fb = c, fc
    return math.exp(b)


@lru_cache(maxsize=64)
def _pen_scale_for(side: int, density: float) -> float:
    n_neurons = side * side
    if density == CHALLENGE_DENSITY.get(n_neurons) and n_neurons in _PEN_SCALE:
        return _PEN_SCALE[n_neurons]
    return _calibrate_pen_scale(n_neurons, density)


def _target_density(n_neurons: int) -> float:
    """Official mean density, interpolated in log2(side) between the challenge sizes."""
    if n_neurons in CHALLENGE_DENSITY:
        return CHALLENGE_DENSITY[n_neurons]
    keys = sorted(CHALLENGE_DENSITY)
    xs = [0.5 * math.log2(k) for k in keys]
    ys = [CHALLENGE_DENSITY[k] for k in keys]
    return float(np.interp(0.5 * math.log2(n_neurons), xs, ys))


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def make_inputs(
    n_rows: int,
    n_neurons: int = 1024,
    *,
    seed: int = 0,
    density: float | None = None,
    order: str = "official-like",
) -> sp.csr_matrix:
    """Generate synthetic MNIST-like sparse input images.

    A stand-in for the challenge's ``sparse-images-{N}.tsv``: binary images of
    handwritten-digit-like pen strokes, one image per row, flattened column-major
    (pixel ``(x, y)`` is neuron ``x * s + y`` with ``s = sqrt(n_neurons)``).  See the
    module docstring for the stroke model and its calibration.

    Parameters
    ----------
    n_rows : int
        Number of images (rows), ``>= 0``.
    n_neurons : int, default 1024
        Pixels per image; a perfect square ``>= 64`` (the challenge uses 1024, 4096,
        16384 and 65536).
    seed : int, default 0
        Non-negative seed.  Row ``r`` depends only on ``seed``, ``r``, ``n_neurons`` and
        ``density``, so a smaller ``n_rows`` gives a prefix of a larger one.
    density : float, optional
        Target mean fraction of pixels on, between 0.01 and 0.3.  Default: the density
        of the official file for ``n_neurons`` (about 0.10; interpolated for other sizes).
    order : {"official-like", "iid"}, default "official-like"
        Row-order structure.  ``"official-like"``: rows come in runs by one "writer"
        (log-normal lengths, mean 150 rows) whose latent factor makes the pen thicker or
        thinner for the whole run (correlation 0.55 with each row's pen z-score), so, as
        in the official inputs, bold digits and hence survivors cluster along the row
        order (survivors per block of 300 rows: var/mean ~8, official 8.1).  ``"iid"``:
        every row independent (no clustering), bit-identical to the generator before
        ``order`` existed.  Both give the same marginal per-row distribution, density and
        overall survival (~3% through the 1024-120 network).

    Returns
    -------
    scipy.sparse.csr_matrix
        ``(n_rows, n_neurons)``, ``float32``, every stored value 1.0, sorted unique 0-based
        indices (``int32``; ``int64`` only beyond 2**31 - 1 nonzeros).

    Raises
    ------
    ValueError
        If an argument is not an integer where one is needed, is out of range,
        ``n_neurons`` is not a perfect square ``>= 64``, or ``order`` is unknown.

    Examples
    --------
    >>> y = make_inputs(100, 1024, seed=1)
    >>> y.shape, y.dtype
    ((100, 1024), dtype('float32'))
    >>> bool(0.08 < y.nnz / (100 * 1024) < 0.13)
    True
    >>> img = y[0].toarray().reshape(32, 32, order="F")  # img[y, x], upright
    >>> bool(img[:2].any() or img[-2:].any() or img[:, :2].any() or img[:, -2:].any())
    False
    >>> (make_inputs(10, seed=1) != y[:10]).nnz
    0
    """
    n_rows = _check_int("n_rows", n_rows)
    n_neurons = _check_int("n_neurons", n_neurons)
    seed = _check_int("seed", seed)
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    side = math.isqrt(n_neurons) if n_neurons >= 0 else 0
    if n_neurons < 64 or side * side != n_neurons:
        raise ValueError(
            f"n_neurons must be a perfect square >= 64 (e.g. 1024, 4096, 16384, 65536), "
            f"got {n_neurons}"
        )
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if density is None:
        target = _target_density(n_neurons)
    else:
        try:
            target = float(density)
        except (TypeError, ValueError):
            raise ValueError(f"density must be a number, got {density!r}") from None
        if not 0.01 <= target <= 0.3:
            raise ValueError(f"density must be between 0.01 and 0.3, got {density!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if n_rows == 0:
        return sp.csr_matrix((0, n_neurons), dtype=np.float32)
    pen_scale = _pen_scale_for(side, target)
    writer = _writer_factors(seed, n_rows) if order == "official-like" else None

    pieces = []
    counts = []
    for block in range(-(-n_rows // BLOCK_ROWS)):
        n = min(BLOCK_ROWS, n_rows - block * BLOCK_ROWS)
        start = block * BLOCK_ROWS
        wb = None if writer is None else writer[start : start + n]
        idx, cnt = _render_rows(seed, block, n, side, pen_scale, wb)
        pieces.append(idx)
        counts.append(cnt)
    row_counts = np.concatenate(counts)
    nnz = int(row_counts.sum())
    index_dtype = np.int32 if nnz <= np.iinfo(np.int32).max else np.int64
    indptr = np.zeros(n_rows + 1, dtype=index_dtype)
    np.cumsum(row_counts, out=indptr[1:])
    indices = np.concatenate(pieces, dtype=index_dtype)
    del pieces
    data = np.ones(nnz, dtype=np.float32)
    out = sp.csr_matrix((data, indices, indptr), shape=(n_rows, n_neurons), copy=False)
    out.has_sorted_indices = True
    return out


def generated_source(order: str | None = None) -> str:
    """The records' ``source`` of generated inputs in row ``order`` (default: the
    generator's, ``official-like``)."""
    return f"generated, {order or 'official-like'} order"
