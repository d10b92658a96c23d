"""Text of the report's figures: numbers as their labels show them (:func:`fmt`, and :func:`fmt_all`
over a whole list at once), escaping, and the values a figure draws (:func:`_finite`, :func:`_float64`:
the Python floats and ints whose arithmetic numpy's float64 reproduces, so that figures drawn over
whole arrays are the value-by-value figures to the bit)."""

from __future__ import annotations

import math

import numpy as np

from ..core.tokenizer import escape_token
from .colours import EXACT_INT


def esc(s) -> str:
    return escape_token(str(s))


def fmt(v: float) -> str:
    """Short tick label."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4 or a < 1e-3:
        return f"{v:.1e}".replace("e+0", "e").replace("e-0", "e-")
    if float(v).is_integer():
        return str(int(v))
    return f"{v:.3g}"


_g3 = "%.3g".__mod__      # f"{v:.3g}" of a float


def fmt_all(values: list) -> list[str]:
    """``[fmt(v) for v in values]`` for a list of Python floats: the usual label (a non-integer of
    magnitude in [1e-3, 1e4): ``f"{v:.3g}"``) formatted by one ``%`` mapped over them, the others
    (0, whole numbers, the exponent forms, NaN, inf) by :func:`fmt` itself."""
    if set(map(type, values)) != {float}:
        return [fmt(v) for v in values]
    a = np.array(values, dtype=np.float64)
    m = np.abs(a)
    out = list(map(_g3, values))
    for k in np.flatnonzero((m < 1e-3) | (m >= 1e4) | (np.floor(a) == a) | np.isnan(a)).tolist():
        out[k] = fmt(values[k])
    return out


def _float64(values: list) -> np.ndarray | None:
    """`values` (Python floats, ints and Nones) as a float64 array (None → NaN), where Python's
    arithmetic on them is float64 arithmetic (ints within :data:`~headscope.report.colours.EXACT_INT`);
    else None (numpy scalars, huge ints, anything else: they are handled one by one)."""
    kinds = set(map(type, values))
    if not kinds <= {float, int, type(None)}:
        return None
    if int in kinds:
        ints = values if kinds == {int} else [v for v in values if type(v) is int]
        if min(ints) < -EXACT_INT or max(ints) > EXACT_INT:
            return None
    return np.array(values, dtype=np.float64)


def _finite(vals) -> list[float]:
    """The finite values of `vals` as floats (``None``, NaN and ±inf dropped)."""
    vals = vals if type(vals) is list else list(vals)
    a = _float64(vals) if len(vals) > 64 else None       # (numpy's overhead beats a short loop)
    if a is not None:
        return a[np.isfinite(a)].tolist()
    return [float(v) for v in vals if v is not None and math.isfinite(float(v))]
