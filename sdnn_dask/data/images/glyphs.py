"""Handwritten-digit-like glyphs: pen strokes drawn into binary images, a block of rows at a time.

Stroke model
------------
Each image is one of ten digit templates (0-9, with a few variants such as open/closed
"4" or "7" with a bar; digits equally likely), written as 1-3 connected pen strokes:
Catmull-Rom curves and polylines through 2-9 control points.  Per image: every control
point is displaced by N(0, 0.045) (template height 1), the digit is slanted
(shear N(0.12, 0.15)), rotated (N(0, 0.08) rad) and squeezed (aspect ``exp(N(0, 0.15))``),
and drawn with a round pen whose radius is log-normal (median ``~0.043`` of the digit box,
i.e. about 1 px at s = 32 and strokes ~2-3 px wide like the official images; log-sd 0.41,
calibrated per size in :mod:`.inputs`; at least half a pixel unless the typical pen is
thinner).  As in MNIST the inked bounding
box is scaled to fill the central 20/28 of the frame and the strokes' centre of mass is
moved to the centre.  The digit geometry is resolution-free: the same seed and row give
the same digit at every ``N``.
Rasterisation (pixel on iff its centre is within the pen radius of the pen path) is a
numba kernel. Rows are drawn in blocks of :data:`BLOCK_ROWS`: :func:`block_params` draws a
block's random numbers, :func:`digit_shapes` turns them into polylines and
:func:`render_shapes` draws those at a pen scale and image side.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

#: Rows are generated in blocks of this many rows; block ``b`` draws its random numbers from
#: ``SeedSequence(seed, spawn_key=(b,))``, so row ``r`` depends only on ``(seed, r)``.
BLOCK_ROWS = 1024
# Fraction of the frame taken by the digit's bounding box (MNIST: 20 of 28 pixels).
_BOX_FRACTION = 20.0 / 28.0
# Dense samples per unit of template length (template height is 1).
_SAMPLES_PER_UNIT = 48.0

# ---- stroke model knobs (see the docstring of .inputs for how they were calibrated) ----
PEN_SIGMA = 0.41  # log-normal spread of the pen radius across images (default; per size: .inputs)
_PEN_MEDIAN = 0.044  # median pen radius relative to the digit box (rescaled to hit density)
_JITTER = 0.045  # std of control-point displacement, in template units
_SLANT_MEAN = 0.12
_SLANT_SD = 0.15
_ROT_SD = 0.08
_ASPECT_SD = 0.15

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
def block_params(seed: int, block: int) -> dict[str, np.ndarray]:
    """Random parameters of every row of one block (independent of the output size)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(block,)))
    n = BLOCK_ROWS
    n_ctrl = max(len(v[2]) for v in _VARIANTS)
    return {
        "variant": rng.choice(len(_VARIANTS), size=n, p=_VARIANT_PROBS),
        "jitter": rng.standard_normal((n, n_ctrl, 2)),
        "slant": rng.standard_normal(n),
        "rot": rng.standard_normal(n),
        "aspect": rng.standard_normal(n),
        "pen": rng.standard_normal(n),
    }


def digit_shapes(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
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
    shapes: dict[str, np.ndarray], side: int, pen_scale: float, pen_sigma: float = PEN_SIGMA
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-image pen radius, scale and shift that put each digit into the pixel frame.

    Like MNIST, the inked bounding box is scaled (keeping the aspect ratio) to fill the
    central ``20/28`` of the frame and the strokes' centre of mass goes to the centre.
    ``pen_sigma`` is the log-sd of the pen radius across images.
    """
    xmin, xmax, ymin, ymax, cx, cy = shapes["stats"]
    box = _BOX_FRACTION * side
    median = _PEN_MEDIAN * pen_scale
    radius = np.minimum(median * np.exp(pen_sigma * shapes["pen_z"]), 0.4) * box
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


def render_shapes(
    shapes: dict[str, np.ndarray], side: int, pen_scale: float, pen_sigma: float = PEN_SIGMA
) -> tuple[np.ndarray, np.ndarray]:
    """Draw a block's shapes: sorted column-major pixel indices and per-image counts.

    ``pen_scale`` multiplies the median pen radius, ``pen_sigma`` is the log-sd of the
    radius across images (:data:`PEN_SIGMA` unless a size calibrates its own).
    """
    radius, scale, sx, sy = _place(shapes, side, pen_scale, pen_sigma)
    n = len(radius)
    cap = int(n * side * side * 0.12) + 1024
    return _render(side, shapes["pts"], shapes["pen"], shapes["ptr"], radius, scale, sx, sy, cap)
