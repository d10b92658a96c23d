"""Colour scales of the report's figures: palettes, the RdBu and white → blue ramps, the text
colour readable on a fill, and the ramps over whole arrays (a heatmap's cells at once).

Colours are colour-blind safe: line series use the Okabe–Ito palette; signed values use
ColorBrewer's RdBu (blue = negative, red = positive, white = 0); unsigned values a white → blue
ramp. A ramp's colour at t ∈ [0, 1] is the linear blend of its two neighbouring stops, each
channel rounded half to even (:func:`_lerp`); :func:`diverging_all` and :func:`sequential_all`
do the same float64 operations elementwise, so every colour is the scalar one to the bit.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

#: Okabe & Ito (2008), colour-blind safe qualitative palette (black last).
OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")

#: ColorBrewer RdBu, 11 classes, from strongest negative (blue) to strongest positive (red).
RDBU = ("#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7",
        "#fddbc7", "#f4a582", "#d6604d", "#b2182b", "#67001f")

def _hex(c: str) -> tuple[int, int, int]:
    return int(c[1:3], 16), int(c[3:5], 16), int(c[5:7], 16)


def _lerp_colour(stops: Sequence[tuple[int, int, int]], t: float) -> str:
    """The colour at `t` ∈ [0, 1] along `stops` (RGB triples), linearly between neighbours."""
    return _lerp(_segments(stops), t)


def _segments(stops: Sequence[tuple[int, int, int]]) -> tuple:
    """`stops` as what :func:`_lerp` reads: the last index (len − 1) and, per pair of neighbours,
    (ar, br − ar, ag, bg − ag, ab, bb − ab) — integer differences, exact."""
    return len(stops) - 1, tuple((a[0], b[0] - a[0], a[1], b[1] - a[1], a[2], b[2] - a[2])
                                 for a, b in zip(stops, stops[1:]))


def _lerp(segments: tuple, t: float) -> str:
    """:func:`_lerp_colour` on precomputed :func:`_segments` (a heatmap colours tens of thousands of
    cells): the same arithmetic, so the same colour to the bit."""
    n, seg = segments
    if t < 0.0:         # min(max(t, 0.0), 1.0), NaN kept
        t = 0.0
    elif t > 1.0:
        t = 1.0
    t *= n
    i = int(t)
    if i > n - 1:
        i = n - 1
    f = t - i
    ar, dr, ag, dg, ab, db = seg[i]
    return "#%02x%02x%02x" % (round(ar + dr * f), round(ag + dg * f), round(ab + db * f))


_RDBU_RGB = tuple(_hex(c) for c in RDBU)
_WHITE_TO_BLUE_RGB = _RDBU_RGB[5::-1]
_RDBU_SEG = _segments(_RDBU_RGB)
_WHITE_TO_BLUE_SEG = _segments(_WHITE_TO_BLUE_RGB)
_isfinite = math.isfinite


def diverging(value: float, vmax: float) -> str:
    """RdBu colour of `value` on the symmetric scale [-vmax, vmax] (0 → white)."""
    if vmax <= 0 or not _isfinite(value):
        return RDBU[5]
    return _lerp(_RDBU_SEG, 0.5 + 0.5 * value / vmax)


def sequential(value: float, vmin: float, vmax: float) -> str:
    """White → dark blue colour of `value` on [vmin, vmax]."""
    if vmax <= vmin or not _isfinite(value):
        return RDBU[5]
    return _lerp(_WHITE_TO_BLUE_SEG, (value - vmin) / (vmax - vmin))


@functools.lru_cache(maxsize=4096)     # a colour ramp has a few hundred distinct fills
def _text_on(fill: str) -> str:
    r, g, b = _hex(fill)
    return "#ffffff" if 0.299 * r + 0.587 * g + 0.114 * b < 140 else "#111111"


#: ints up to this magnitude, and their differences, are exact in float64: Python's arithmetic on them
#: (int − int exact, then int / int correctly rounded) gives what float64 arithmetic gives
EXACT_INT = 2**52


def _exact_scalar(x) -> bool:
    """Whether Python's arithmetic on `x` is float64 arithmetic (a float, or an int within :data:`EXACT_INT`)."""
    return type(x) is float or (type(x) is int and -EXACT_INT <= x <= EXACT_INT)


def _lerp_all(segments: tuple, t: np.ndarray) -> list[str]:
    """``[_lerp(segments, x) for x in t]`` for a float64 array `t`: the same operations elementwise
    (clip to [0, 1], scale by n, truncate, blend each channel, round half to even). A NaN in `t`
    goes through :func:`_lerp` itself (which raises, as ``int(nan)`` does)."""
    if np.isnan(t).any():
        return [_lerp(segments, x) for x in t.tolist()]
    n, seg = segments
    t = np.where(t < 0.0, 0.0, np.where(t > 1.0, 1.0, t)) * n
    i = np.minimum(t.astype(np.intp), n - 1)                        # int(t): t ≥ 0
    f = t - i
    s = np.asarray(seg, dtype=np.float64)[i]                        # [cell, (ar, dr, ag, dg, ab, db)]
    rgb = np.rint(s[:, 0::2] + s[:, 1::2] * f[:, None]).astype(np.int64)   # [cell, 3], each in 0..255
    packed = (rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]
    codes, which = np.unique(packed, return_inverse=True)          # a ramp has a few hundred distinct fills
    names = ["#%06x" % c for c in codes.tolist()]                   # = "#%02x%02x%02x" % (r, g, b)
    return [names[k] for k in which.tolist()]


def diverging_all(values: np.ndarray, vmax) -> list[str]:
    """``[diverging(v, vmax) for v in values]`` for a float64 array of Python floats (or of ints
    within :data:`EXACT_INT`), in one pass: ``0.5 + 0.5 * v / vmax`` elementwise, then :func:`_lerp_all`."""
    if not _exact_scalar(vmax):     # (a numpy scalar keeps its own precision in Python's arithmetic)
        return [diverging(v, vmax) for v in values.tolist()]
    if vmax <= 0:
        return [RDBU[5]] * len(values)
    ok = np.isfinite(values)
    with np.errstate(over="ignore"):           # (an overflow is ±inf, then clipped, as in Python)
        fills = _lerp_all(_RDBU_SEG, 0.5 + 0.5 * values[ok] / vmax)
    return fills if ok.all() else _blank_where_not(ok, fills)


def sequential_all(values: np.ndarray, vmin, vmax) -> list[str]:
    """``[sequential(v, vmin, vmax) for v in values]`` for a float64 array of Python floats (or of ints
    within :data:`EXACT_INT`), in one pass: ``(v − vmin) / (vmax − vmin)`` elementwise, then :func:`_lerp_all`."""
    if not (_exact_scalar(vmin) and _exact_scalar(vmax)):
        return [sequential(v, vmin, vmax) for v in values.tolist()]
    if vmax <= vmin:
        return [RDBU[5]] * len(values)
    ok = np.isfinite(values)
    with np.errstate(over="ignore", invalid="ignore"):   # (±inf, or NaN from inf / inf: as in Python)
        fills = _lerp_all(_WHITE_TO_BLUE_SEG, (values[ok] - float(vmin)) / float(vmax - vmin))
    return fills if ok.all() else _blank_where_not(ok, fills)


def _blank_where_not(ok: np.ndarray, fills: list[str]) -> list[str]:
    """`fills` (of the cells where `ok`) spread over all cells, the blank colour (RdBu's white) elsewhere."""
    it = iter(fills)
    return [next(it) if k else RDBU[5] for k in ok.tolist()]

