"""Synthetic MNIST-like sparse input images for the Sparse DNN Graph Challenge.

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

Stroke model
------------
Each image is one of ten digit templates (0-9, with a few variants such as open/closed
"4" or "7" with a bar; digits equally likely), written as 1-3 connected pen strokes:
Catmull-Rom curves and polylines through 2-9 control points.  Per image: every control
point is displaced by N(0, 0.045) (template height 1), the digit is slanted
(shear N(0.12, 0.15)), rotated (N(0, 0.08) rad) and squeezed (aspect ``exp(N(0, 0.15))``),
and drawn with a round pen whose radius is log-normal (median ``~0.043`` of the digit box,
i.e. about 1 px at s = 32 and strokes ~2-3 px wide like the official images; log-sd 0.41;
at least half a pixel unless the typical pen is thinner).  As in MNIST the inked bounding
box is scaled to fill the central 20/28 of the frame and the strokes' centre of mass is
moved to the centre.  The digit geometry is resolution-free: the same seed and row give
the same digit at every ``N``.
Rasterisation (pixel on iff its centre is within the pen radius of the pen path) is a
numba kernel; rows are built in blocks of 1024 and block ``b`` draws its numbers from
``SeedSequence(seed, spawn_key=(b,))``, so row ``r`` depends only on ``(seed, r)`` (and
``N``, ``density``) and ``make_inputs(n)`` is a prefix of ``make_inputs(m)`` for ``m > n``.

Calibration
-----------
*Density.*  One global pen-radius multiplier is solved (regula falsi on a fixed sample of
rows) so that the mean density matches the official files (:data:`CHALLENGE_DENSITY`), or
``density`` when given; the four challenge sizes use a precomputed table (32768-row
sample), anything else is solved once per process (2048 rows, ~0.1-1 s).  Measured on
60000 rows, seed 0 (official in brackets): N=1024 0.1041 (0.1037), 4096 0.1021 (0.1018),
16384 0.1009 (0.1006), 65536 0.1001 (0.0997) -- all +0.3%.  Pixels per row at N=1024:
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

For ``N > 1024`` there is no real data to calibrate survival against; the same stroke model
is scaled to the image side and only the density is matched.  Generating 60000 rows takes
about 1.5 s (N=1024), 2.5 s (4096), 6 s (16384) and 17 s with ~3.3 GB peak memory (65536,
393 M nonzeros) on one core.
"""

from __future__ import annotations

import math
import operator
from functools import lru_cache

import numpy as np
import scipy.sparse as sp
from numba import njit

from ..registry import ORDERS

__all__ = ["CHALLENGE_DENSITY", "CHALLENGE_NNZ", "make_inputs"]

#: Nonzeros of the official ``sparse-images-{N}.tsv`` files (60000 rows each).
CHALLENGE_NNZ: dict[int, int] = {
    1024: 6_374_505,
    4096: 25_019_051,
    16384: 98_858_913,
    65536: 392_191_985,
}
#: Mean fraction of pixels on in the official input files, by number of neurons.
CHALLENGE_DENSITY: dict[int, float] = {n: nnz / (60000 * n) for n, nnz in CHALLENGE_NNZ.items()}

# Rows are generated in blocks of this many rows; block ``b`` draws its random numbers from
# ``SeedSequence(seed, spawn_key=(b,))``, so row ``r`` depends only on ``(seed, r)``.
_BLOCK_ROWS = 1024
# Fraction of the frame taken by the digit's bounding box (MNIST: 20 of 28 pixels).
_BOX_FRACTION = 20.0 / 28.0
# Dense samples per unit of template length (template height is 1).
_SAMPLES_PER_UNIT = 48.0

# ---- stroke model knobs (see module docstring for how they were calibrated) ----
_PEN_SIGMA = 0.41  # log-normal spread of the pen radius across images
_PEN_MEDIAN = 0.044  # median pen radius relative to the digit box (rescaled to hit density)
_JITTER = 0.045  # std of control-point displacement, in template units
_SLANT_MEAN = 0.12
_SLANT_SD = 0.15
_ROT_SD = 0.08
_ASPECT_SD = 0.15
_CALIB_SEED = 20190101
# ---- writer model (order="official-like", the default; see make_inputs) ----
_WRITER_RHO = 0.55  # correlation of a row's pen z-score with its writer's factor
_WRITER_RUN_MEAN = 150.0  # mean rows per writer run (log-normal run lengths)
_WRITER_RUN_SD = 0.4  # log-sd of the run lengths
_WRITER_KEY = 0x57524954  # spawn-key tag of the writer stream (blocks use (b,))
_WRITER_CHUNK = 256  # runs drawn per SeedSequence(seed, spawn_key=(_WRITER_KEY, c))
# Pen multipliers reproducing CHALLENGE_DENSITY (from _calibrate_pen_scale with 32768 rows);
# other sizes and densities are calibrated on first use.
_PEN_SCALE: dict[int, float] = {1024: 0.98355, 4096: 0.96535, 16384: 0.95205, 65536: 0.94330}

# ---------------------------------------------------------------------------------------
# Digit templates. Coordinates are (x, y) with y pointing down, height ~1 and natural
# width.  A variant is (probability, control points, strokes); a stroke is
# (kind, control indices, closed) with kind "smooth" (Catmull-Rom) or "line" (polyline).
# ---------------------------------------------------------------------------------------
_Stroke = tuple[str, tuple[int, ...], bool]
_Variant = tuple[float, tuple[tuple[float, float], ...], tuple[_Stroke, ...]]


def _ellipse(cx: float, cy: float, rx: float, ry: float, n: int) -> tuple:
    ang = -np.pi / 2 + 2 * np.pi * np.arange(n) / n
    return tuple((cx + rx * math.cos(a), cy + ry * math.sin(a)) for a in ang)


_TEMPLATES: dict[int, tuple[_Variant, ...]] = {
    0: ((1.0, _ellipse(0.35, 0.5, 0.35, 0.5, 8), (("smooth", tuple(range(8)), True),)),),
    1: (
        (0.6, ((0.05, 0.0), (0.0, 1.0)), (("line", (0, 1), False),)),
        (0.3, ((-0.14, 0.16), (0.05, 0.0), (0.0, 1.0)), (("line", (0, 1, 2), False),)),
        (
            0.1,
            ((-0.14, 0.16), (0.05, 0.0), (0.0, 1.0), (-0.15, 1.0), (0.17, 1.0)),
            (("line", (0, 1, 2), False), ("line", (3, 4), False)),
        ),
    ),
    2: (
        (
            1.0,
            ((0.05, 0.22), (0.3, 0.0), (0.6, 0.08), (0.62, 0.35), (0.3, 0.7), (0.0, 1.0),
             (0.72, 0.97)),
            (("smooth", (0, 1, 2, 3, 4, 5), False), ("line", (5, 6), False)),
        ),
    ),
    3: (
        (
            1.0,
            ((0.02, 0.12), (0.3, 0.0), (0.58, 0.12), (0.55, 0.35), (0.25, 0.48), (0.6, 0.6),
             (0.62, 0.85), (0.35, 1.0), (0.0, 0.92)),
            (("smooth", (0, 1, 2, 3, 4), False), ("smooth", (4, 5, 6, 7, 8), False)),
        ),
    ),
    4: (
        (
            0.55,
            ((0.5, 0.0), (0.0, 0.65), (0.75, 0.65), (0.55, 0.25), (0.55, 1.0)),
            (("line", (0, 1, 2), False), ("line", (3, 4), False)),
        ),
        (
            0.45,
            ((0.05, 0.0), (0.0, 0.6), (0.75, 0.6), (0.6, 0.0), (0.6, 1.0)),
            (("line", (0, 1, 2), False), ("line", (3, 4), False)),
        ),
    ),
    5: (
        (
            1.0,
            ((0.65, 0.0), (0.1, 0.02), (0.06, 0.45), (0.35, 0.38), (0.62, 0.55), (0.6, 0.85),
             (0.32, 1.0), (0.0, 0.9)),
            (("line", (0, 1, 2), False), ("smooth", (2, 3, 4, 5, 6, 7), False)),
        ),
    ),
    6: (
        (
            1.0,
            ((0.6, 0.0), (0.28, 0.22), (0.06, 0.58), (0.12, 0.88), (0.35, 1.0), (0.58, 0.85),
             (0.55, 0.62), (0.3, 0.56), (0.08, 0.72)),
            (("smooth", tuple(range(9)), False),),
        ),
    ),
    7: (
        (0.8, ((0.0, 0.02), (0.7, 0.0), (0.25, 1.0)), (("line", (0, 1, 2), False),)),
        (
            0.2,
            ((0.0, 0.02), (0.7, 0.0), (0.25, 1.0), (0.22, 0.52), (0.65, 0.5)),
            (("line", (0, 1, 2), False), ("line", (3, 4), False)),
        ),
    ),
    8: (
        (
            1.0,
            ((0.35, 0.0), (0.06, 0.2), (0.35, 0.47), (0.65, 0.72), (0.35, 1.0), (0.05, 0.72),
             (0.35, 0.47), (0.62, 0.2)),
            (("smooth", tuple(range(8)), True),),
        ),
    ),
    9: (
        (
            1.0,
            ((0.6, 0.22), (0.35, 0.0), (0.08, 0.2), (0.25, 0.45), (0.58, 0.38), (0.55, 0.6),
             (0.45, 1.0)),
            (("smooth", (0, 1, 2, 3, 4), True), ("smooth", (0, 5, 6), False)),
        ),
    ),
}


def _catmull_rom_weights(t: np.ndarray) -> np.ndarray:
    """Uniform Catmull-Rom basis weights for ``P[i-1], P[i], P[i+1], P[i+2]``."""
    t2, t3 = t * t, t * t * t
    return 0.5 * np.stack(
        [-t + 2 * t2 - t3, 2 - 5 * t2 + 3 * t3, t + 4 * t2 - 3 * t3, -t2 + t3], axis=1
    )


def _stroke_matrix(
    ctrl: np.ndarray, kind: str, idx: tuple[int, ...], closed: bool
) -> np.ndarray:
    """Linear map (samples x n_ctrl) from control points to dense samples of a stroke."""
    n_ctrl = len(ctrl)
    m = len(idx)
    spans = m if closed else m - 1
    rows = []
    for j in range(spans):
        a, b = idx[j], idx[(j + 1) % m]
        length = float(np.hypot(*(ctrl[b] - ctrl[a])))
        k = max(2, math.ceil(length * _SAMPLES_PER_UNIT))
        t = np.arange(k) / k
        mat = np.zeros((k, n_ctrl))
        if kind == "line":
            mat[:, a] += 1 - t
            mat[:, b] += t
        else:
            w = _catmull_rom_weights(t)
            for q, off in enumerate((-1, 0, 1, 2)):
                p = j + off
                if closed:
                    mat[:, idx[p % m]] += w[:, q]
                elif p < 0:  # phantom point 2*P0 - P1
                    mat[:, idx[0]] += 2 * w[:, q]
                    mat[:, idx[1]] -= w[:, q]
                elif p >= m:  # phantom point 2*P[m-1] - P[m-2]
                    mat[:, idx[m - 1]] += 2 * w[:, q]
                    mat[:, idx[m - 2]] -= w[:, q]
                else:
                    mat[:, idx[p]] += w[:, q]
        rows.append(mat)
    last = np.zeros((1, n_ctrl))
    last[0, idx[0] if closed else idx[-1]] = 1.0
    rows.append(last)
    return np.vstack(rows)


def _build_variants() -> list[tuple[int, float, np.ndarray, np.ndarray, np.ndarray]]:
    """Flatten the templates into (digit, prob, ctrl, sample matrix, pen-down mask)."""
    out = []
    for digit, variants in _TEMPLATES.items():
        for prob, pts, strokes in variants:
            ctrl = np.asarray(pts, dtype=np.float64)
            mats = [_stroke_matrix(ctrl, kind, idx, closed) for kind, idx, closed in strokes]
            mat = np.vstack(mats)
            # segment i joins sample i and i+1; it is pen-up across stroke boundaries
            pen = np.ones(len(mat), dtype=np.bool_)
            pen[np.cumsum([len(m) for m in mats]) - 1] = False
            out.append((digit, prob, ctrl, mat, pen))
    return out


_VARIANTS = _build_variants()
_VARIANT_SIZES = np.array([len(v[3]) for v in _VARIANTS])
_VARIANT_PROBS = np.array([0.1 * v[1] for v in _VARIANTS])
_VARIANT_PROBS /= _VARIANT_PROBS.sum()


# ---------------------------------------------------------------------------------------
# Rasteriser
# ---------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _render(side, pts, pen, ptr, radius, scale, sx, sy, cap):  # pragma: no cover - compiled
    """Draw each image's thick polyline and return its sorted column-major pixel indices."""
    n = ptr.shape[0] - 1
    bitmap = np.zeros(side * side, dtype=np.uint8)
    counts = np.zeros(n, dtype=np.int64)
    out = np.empty(max(cap, 16), dtype=np.int32)
    pos = 0
    for i in range(n):
        r = radius[i]
        r2 = r * r
        f = scale[i]
        ox = sx[i]
        oy = sy[i]
        xlo = side
        xhi = -1
        ylo = side
        yhi = -1
        for k in range(ptr[i], ptr[i + 1] - 1):
            if not pen[k]:
                continue
            ax = f * pts[k, 0] + ox
            ay = f * pts[k, 1] + oy
            dx = f * pts[k + 1, 0] + ox - ax
            dy = f * pts[k + 1, 1] + oy - ay
            ll = dx * dx + dy * dy
            x0 = max(0, math.ceil(min(ax, ax + dx) - r))
            x1 = min(side - 1, math.floor(max(ax, ax + dx) + r))
            y0 = max(0, math.ceil(min(ay, ay + dy) - r))
            y1 = min(side - 1, math.floor(max(ay, ay + dy) + r))
            if x0 > x1 or y0 > y1:
                continue
            xlo = min(xlo, x0)
            xhi = max(xhi, x1)
            ylo = min(ylo, y0)
            yhi = max(yhi, y1)
            for x in range(x0, x1 + 1):
                # the pen covers one y-interval of this pixel column: the hull of the
                # intervals cut from the end discs and from the band around the segment
                px = x - ax
                lo = math.inf
                hi = -math.inf
                h2 = r2 - px * px
                if h2 >= 0.0:
                    h = math.sqrt(h2)
                    lo = min(lo, ay - h)
                    hi = max(hi, ay + h)
                qx = px - dx
                h2 = r2 - qx * qx
                if h2 >= 0.0:
                    h = math.sqrt(h2)
                    lo = min(lo, ay + dy - h)
                    hi = max(hi, ay + dy + h)
                if ll > 0.0:
                    # 0 <= (px*dx + py*dy) <= ll and |py*dx - px*dy| <= r*sqrt(ll)
                    blo = -math.inf
                    bhi = math.inf
                    ok = True
                    if dy != 0.0:
                        a = -px * dx / dy
                        b = (ll - px * dx) / dy
                        blo = max(blo, min(a, b))
                        bhi = min(bhi, max(a, b))
                    elif not 0.0 <= px * dx <= ll:
                        ok = False
                    w = r * math.sqrt(ll)
                    if dx != 0.0:
                        a = (px * dy - w) / dx
                        b = (px * dy + w) / dx
                        blo = max(blo, min(a, b))
                        bhi = min(bhi, max(a, b))
                    elif abs(px * dy) > w:
                        ok = False
                    if ok and blo <= bhi:
                        lo = min(lo, ay + blo)
                        hi = max(hi, ay + bhi)
                if lo > hi:
                    continue
                ya = max(y0, math.ceil(lo))
                yb = min(y1, math.floor(hi))
                base = x * side
                for y in range(ya, yb + 1):
                    bitmap[base + y] = 1
        if xhi < 0:
            continue
        need = pos + (xhi - xlo + 1) * (yhi - ylo + 1)
        if need > out.shape[0]:
            grown = np.empty(max(need, 2 * out.shape[0]), dtype=np.int32)
            grown[:pos] = out[:pos]
            out = grown
        start = pos
        for x in range(xlo, xhi + 1):
            base = x * side
            for y in range(ylo, yhi + 1):
                if bitmap[base + y]:
                    out[pos] = base + y
                    pos += 1
                    bitmap[base + y] = 0
        counts[i] = pos - start
    return out[:pos], counts


# ---------------------------------------------------------------------------------------
# Geometry
# ---------------------------------------------------------------------------------------
def _block_params(seed: int, block: int) -> dict[str, np.ndarray]:
    """Random parameters of every row of one block (independent of the output size)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(block,)))
    n = _BLOCK_ROWS
    n_ctrl = max(len(v[2]) for v in _VARIANTS)
    return {
        "variant": rng.choice(len(_VARIANTS), size=n, p=_VARIANT_PROBS),
        "jitter": rng.standard_normal((n, n_ctrl, 2)),
        "slant": rng.standard_normal(n),
        "rot": rng.standard_normal(n),
        "aspect": rng.standard_normal(n),
        "pen": rng.standard_normal(n),
    }


def _shapes(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Resolution-free digit polylines of one block of rows.

    Returns the concatenated polyline points (``pts``, in template units after the random
    deformation, slant, rotation and aspect change), the pen-down mask of the segment
    starting at each point (``pen``), per-image pointers (``ptr``) and per-image bounding
    box and stroke centre of mass, used to place the digit in the frame.
    """
    variant = params["variant"]
    n = len(variant)
    sizes = _VARIANT_SIZES[variant]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    pts = np.empty((int(ptr[-1]), 2))
    pen = np.empty(int(ptr[-1]), dtype=np.bool_)
    stats = np.empty((6, n))  # xmin, xmax, ymin, ymax, cx, cy
    slant = _SLANT_MEAN + _SLANT_SD * params["slant"]
    rot = _ROT_SD * params["rot"]
    aspect = np.exp(_ASPECT_SD * params["aspect"])
    cos, sin = np.cos(rot), np.sin(rot)
    for vi, (_digit, _p, ctrl, mat, vpen) in enumerate(_VARIANTS):
        rows = np.flatnonzero(variant == vi)
        m = rows.size
        if m == 0:
            continue
        n_ctrl = len(ctrl)
        c = ctrl[None] + _JITTER * params["jitter"][rows, :n_ctrl]
        d = (mat @ c.transpose(1, 0, 2).reshape(n_ctrl, 2 * m)).reshape(-1, m, 2)
        u = d[..., 0] - 0.5 * ctrl[:, 0].max()  # (samples, m)
        v = d[..., 1] - 0.5
        u = aspect[rows] * u - slant[rows] * v
        x = cos[rows] * u - sin[rows] * v
        y = sin[rows] * u + cos[rows] * v
        # centre of mass of the strokes (pen-down segments weighted by length)
        seg = np.hypot(np.diff(x, axis=0), np.diff(y, axis=0)) * vpen[:-1, None]
        wsum = np.maximum(seg.sum(axis=0), 1e-12)
        stats[0, rows] = x.min(axis=0)
        stats[1, rows] = x.max(axis=0)
        stats[2, rows] = y.min(axis=0)
        stats[3, rows] = y.max(axis=0)
        stats[4, rows] = (seg * (x[1:] + x[:-1])).sum(axis=0) / (2 * wsum)
        stats[5, rows] = (seg * (y[1:] + y[:-1])).sum(axis=0) / (2 * wsum)
        idx = ptr[rows][None, :] + np.arange(mat.shape[0])[:, None]
        pts[idx, 0] = x
        pts[idx, 1] = y
        pen[idx] = vpen[:, None]
    return {"pts": pts, "pen": pen, "ptr": ptr, "stats": stats, "pen_z": params["pen"]}


def _place(
    shapes: dict[str, np.ndarray], side: int, pen_scale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-image pen radius, scale and shift that put each digit into the pixel frame.

    Like MNIST, the inked bounding box is scaled (keeping the aspect ratio) to fill the
    central ``20/28`` of the frame and the strokes' centre of mass goes to the centre.
    """
    xmin, xmax, ymin, ymax, cx, cy = shapes["stats"]
    box = _BOX_FRACTION * side
    median = _PEN_MEDIAN * pen_scale
    radius = np.minimum(median * np.exp(_PEN_SIGMA * shapes["pen_z"]), 0.4) * box
    # thin pens draw at least one-pixel-wide lines (so strokes do not vanish between pixel
    # centres), unless the typical pen itself is thinner than that (low ``density``)
    radius = np.maximum(radius, min(0.5, 0.5 * median * box))
    extent = np.maximum(np.maximum(xmax - xmin, ymax - ymin), 1e-9)
    scale = (box - 2 * radius) / extent
    centre = (side - 1) / 2.0
    # shift the centre of mass to the centre, but keep the inked box inside the frame
    sx = np.minimum(np.maximum(centre - scale * cx, radius - scale * xmin),
                    side - 1 - radius - scale * xmax)
    sy = np.minimum(np.maximum(centre - scale * cy, radius - scale * ymin),
                    side - 1 - radius - scale * ymax)
    return radius, scale, sx, sy


def _render_shapes(
    shapes: dict[str, np.ndarray], side: int, pen_scale: float
) -> tuple[np.ndarray, np.ndarray]:
    radius, scale, sx, sy = _place(shapes, side, pen_scale)
    n = len(radius)
    cap = int(n * side * side * 0.12) + 1024
    return _render(side, shapes["pts"], shapes["pen"], shapes["ptr"], radius, scale, sx, sy, cap)


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
    params = {k: v[:n] for k, v in _block_params(seed, block).items()}
    if writer is not None:
        own = math.sqrt(1.0 - _WRITER_RHO**2)
        params["pen"] = _WRITER_RHO * writer + own * params["pen"]
    return _render_shapes(_shapes(params), side, pen_scale)


def _calibrate_pen_scale(n_neurons: int, density: float, n_rows: int = 2048) -> float:
    """Pen-radius multiplier that gives mean ``density`` on a fixed calibration sample.

    The sample is the first ``n_rows`` rows of a fixed seed, so the result (and hence the
    generated images) does not depend on the caller's seed or chunking.
    """
    side = math.isqrt(n_neurons)
    n_blocks = -(-n_rows // _BLOCK_ROWS)
    shapes = []
    for block in range(n_blocks):
        n = min(_BLOCK_ROWS, n_rows - block * _BLOCK_ROWS)
        params = {k: v[:n] for k, v in _block_params(_CALIB_SEED, block).items()}
        shapes.append(_shapes(params))

    def excess(log_scale: float) -> float:
        total = 0
        for sh in shapes:
            _, counts = _render_shapes(sh, side, math.exp(log_scale))
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
    for block in range(-(-n_rows // _BLOCK_ROWS)):
        n = min(_BLOCK_ROWS, n_rows - block * _BLOCK_ROWS)
        start = block * _BLOCK_ROWS
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
