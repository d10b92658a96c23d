"""Dependency-free inline SVG figures for the HTML report.

Every function returns an :class:`~headscope.report.html.Safe` string holding one
``<svg>`` element (or, for :func:`token_heatmap`, a ``<div>`` of coloured spans).
All text that reaches the markup — labels, titles, token strings — is escaped here,
so callers pass raw strings (``'<script'``, ``' colour'``).

Colours are colour-blind safe: line series use the Okabe–Ito palette; signed values
(token heatmaps, diverging heatmaps) use ColorBrewer's RdBu (blue = negative,
red = positive, white = 0); unsigned heatmaps use a white → blue ramp.

Figures:
  :func:`line_plot`     several curves, axes, legend, optional shaded bands (predicted intervals)
  :func:`histogram`     values binned, or precomputed (edges, counts)
  :func:`heatmap`       matrix with row/column labels; ``None``/NaN cells left blank (e.g. causal mask)
  :func:`bar_plot`      labelled bars (signed values coloured by sign)
  :func:`spectrum_plot` eigenvalues/singular values by rank, several series (e.g. sym vs skew)
  :func:`token_heatmap` text as tokens whose background encodes a signed value
  :func:`panels`        several figures tiled into one SVG (small multiples; standalone .svg files)
  :func:`head_grid`     layer × head grid of coloured cells (HTML), each a link with a tooltip
  :func:`colour_scale`  the legend of a diverging, sequential or categorical colour scale (HTML)

The HTML ones (token heatmaps, head grids, colour scales) live in :mod:`headscope.report.html_figures`,
the colour scales in :mod:`headscope.report.colours`, number labels and escaping in
:mod:`headscope.report.figtext`; all are re-exported here.

Hover: SVG cells and bars carry a ``<title>`` (the browser's own tooltip); token
heatmaps and head grids carry ``data-tip`` / ``data-head`` attributes that the report's
script (:data:`headscope.report.html.SCRIPT`) shows at once as a styled tooltip, with
``title`` kept as the fallback where scripts do not run (a notebook).
"""

from __future__ import annotations

import dataclasses
import math
import re
from itertools import chain
from typing import Sequence

import numpy as np

from ..stats import bin_values
from .colours import (OKABE_ITO, RDBU, _RDBU_RGB, _RDBU_SEG, _WHITE_TO_BLUE_RGB, _WHITE_TO_BLUE_SEG,  # noqa: F401
                      _exact_scalar, _hex, _lerp, _lerp_colour, _segments, _text_on, diverging, diverging_all,
                      sequential, sequential_all)
from .figtext import _finite, _float64, esc, fmt, fmt_all  # noqa: F401
from .html import Safe
from .html_figures import colour_scale, head_grid, token_heatmap  # noqa: F401

LOG_DECADES = 12  #: a log-scale plot shows at most this many decades below its largest value

FONT = "font-family=\"system-ui, -apple-system, 'Segoe UI', sans-serif\""


@dataclasses.dataclass
class Series:
    """One curve: y against x, drawn with a legend entry `label`."""

    x: Sequence[float]
    y: Sequence[float]
    label: str = ""
    dashed: bool = False
    markers: bool = False


@dataclasses.dataclass
class Band:
    """A shaded interval lo(x) ≤ y ≤ hi(x), e.g. a predicted range, with legend `label`."""

    x: Sequence[float]
    lo: Sequence[float]
    hi: Sequence[float]
    label: str = ""


# -- axes --------------------------------------------------------------------------------


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About `n` round tick values covering [lo, hi] (1, 2, 5 × 10^k steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks or [lo]


class _Frame:
    """Plot area geometry and data → pixel transforms."""

    def __init__(self, width, height, xlim, ylim, *, left=62, right=16, top=30, bottom=46, log_y=False):
        self.w, self.h = width, height
        self.l, self.r, self.t, self.b = left, width - right, top, height - bottom
        self.log_y = log_y
        self.x0, self.x1 = xlim
        self.y0, self.y1 = ylim
        if self.x1 <= self.x0:
            self.x1 = self.x0 + 1
        if self.y1 <= self.y0:
            self.y1 = self.y0 + 1

    def X(self, x):
        return self.l + (x - self.x0) / (self.x1 - self.x0) * (self.r - self.l)

    def Y(self, y):
        if self.log_y:
            y = max(math.log10(max(y, 1e-300)), self.y0)  # values below the floor sit on the axis
        return self.b - (y - self.y0) / (self.y1 - self.y0) * (self.b - self.t)

    def axes(self, title, xlabel, ylabel, xticks=None, yticks=None, xtick_labels=None) -> list[str]:
        out = [f'<rect x="{self.l}" y="{self.t}" width="{self.r - self.l}" height="{self.b - self.t}" '
               'fill="#ffffff" stroke="#c8c8c8"/>']
        for v in yticks if yticks is not None else nice_ticks(self.y0, self.y1):
            if not self.y0 - 1e-12 <= v <= self.y1 + 1e-12:
                continue
            y = self.b - (v - self.y0) / (self.y1 - self.y0) * (self.b - self.t)
            label = fmt(10 ** v) if self.log_y else fmt(v)      # (fmt's figures need no escaping)
            out.append(f'<line x1="{self.l}" x2="{self.r}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eeeeee"/>')
            out.append(f'<text x="{self.l - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#444">{label}</text>')
        xt = xticks if xticks is not None else nice_ticks(self.x0, self.x1)
        for i, v in enumerate(xt):
            if not self.x0 - 1e-12 <= v <= self.x1 + 1e-12:
                continue
            x = self.X(v)
            label = esc(xtick_labels[i]) if xtick_labels is not None else fmt(v)
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.b}" y2="{self.b + 4}" stroke="#888"/>')
            out.append(f'<text x="{x:.1f}" y="{self.b + 16}" text-anchor="middle" font-size="11" fill="#444">{label}</text>')
        if title:
            out.append(f'<text x="{self.l}" y="{self.t - 10}" font-size="13" font-weight="600" fill="#222">{esc(title)}</text>')
        if xlabel:
            out.append(f'<text x="{(self.l + self.r) / 2:.1f}" y="{self.h - 8}" text-anchor="middle" font-size="12" fill="#333">{esc(xlabel)}</text>')
        if ylabel:
            cy = (self.t + self.b) / 2
            out.append(f'<text x="14" y="{cy:.1f}" text-anchor="middle" font-size="12" fill="#333" '
                       f'transform="rotate(-90 14 {cy:.1f})">{esc(ylabel)}</text>')
        return out


def _svg(width, height, body: list[str], label: str) -> Safe:
    return Safe(f'<svg xmlns="http://www.w3.org/2000/svg" class="fig" viewBox="0 0 {width} {height}" '
                f'width="{width}" height="{height}" role="img" aria-label="{esc(label)}" {FONT}>'
                + "".join(body) + "</svg>")


def _legend(items: list[tuple[str, str, str]], x: float, y: float) -> list[str]:
    """items: (label, colour, kind in {'line', 'dash', 'band', 'box'}); drawn top-right, inside."""
    out = []
    items = [it for it in items if it[0]]
    if not items:
        return out
    wmax = max(len(it[0]) for it in items) * 6.4 + 34
    out.append(f'<rect x="{x - wmax:.1f}" y="{y}" width="{wmax:.1f}" height="{len(items) * 16 + 6}" '
               'fill="#ffffff" fill-opacity="0.85" stroke="#dddddd"/>')
    for i, (label, colour, kind) in enumerate(items):
        yy = y + 12 + i * 16
        x0 = x - wmax + 6
        if kind == "band" or kind == "box":
            op = "0.25" if kind == "band" else "1"
            out.append(f'<rect x="{x0:.1f}" y="{yy - 6}" width="20" height="10" fill="{colour}" fill-opacity="{op}"/>')
        else:
            dash = ' stroke-dasharray="5 3"' if kind == "dash" else ""
            out.append(f'<line x1="{x0:.1f}" x2="{x0 + 20:.1f}" y1="{yy - 1}" y2="{yy - 1}" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{x0 + 26:.1f}" y="{yy + 3}" font-size="11" fill="#222">{esc(label)}</text>')
    return out


# -- figures -----------------------------------------------------------------------------


def line_plot(series: Sequence[Series], *, title: str = "", xlabel: str = "", ylabel: str = "",
              bands: Sequence[Band] = (), width: int = 520, height: int = 300, log_y: bool = False,
              ylim: tuple[float, float] | None = None, legend_below: bool = False) -> Safe:
    """Curves y(x) with axes, gridlines and a legend; `bands` are shaded intervals behind them.

    The legend sits top-right inside the axes, or with ``legend_below`` under the x label (the
    figure grows by its height): for curves whose last points reach the top-right corner."""
    xs = _finite([x for s in series for x in s.x] + [x for b in bands for x in b.x])
    ys = _finite([y for s in series for y in s.y] + [y for b in bands for y in list(b.lo) + list(b.hi)])
    if log_y:
        ys = [math.log10(y) for y in ys if y > 0]
        if ys:  # at most LOG_DECADES decades below the largest value
            floor = max(ys) - LOG_DECADES
            ys = [max(y, floor) for y in ys]
    xlim = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if ylim is None:
        lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
        pad = 0.05 * (hi - lo or abs(hi) or 1.0)
        ylim = (lo - pad if not (lo >= 0 and lo - pad < 0 and not log_y) else 0.0, hi + pad)
    elif log_y:
        ylim = (math.log10(ylim[0]), math.log10(ylim[1]))
    f = _Frame(width, height, xlim, ylim, log_y=log_y)
    yticks = None
    if log_y:
        span = f.y1 - f.y0
        if span < 1.5:
            yticks = nice_ticks(f.y0, f.y1, 4)
        else:
            step = max(1, math.ceil(span / 6))
            yticks = [float(k) for k in range(math.floor(f.y0 / step) * step, math.ceil(f.y1) + 1, step)]
    body = f.axes(title, xlabel, ylabel, yticks=yticks)
    legend = []
    for i, b in enumerate(bands):
        colour = OKABE_ITO[(i + 4) % len(OKABE_ITO)]
        edges = _band_outline(f, b) if len(b.x) >= 48 else None     # (short: the loop is quicker)
        if edges is not None:
            if edges[0]:
                body.append(f'<polygon points="{" ".join(edges[0])} {" ".join(reversed(edges[1]))}" '
                            f'fill="{colour}" fill-opacity="0.22" stroke="none"/>')
        else:
            pts = [(x, lo, hi) for x, lo, hi in zip(b.x, b.lo, b.hi) if None not in (x, lo, hi)]
            if pts:
                up = " ".join(f"{f.X(x):.1f},{f.Y(hi):.1f}" for x, _, hi in pts)
                down = " ".join(f"{f.X(x):.1f},{f.Y(lo):.1f}" for x, lo, _ in reversed(pts))
                body.append(f'<polygon points="{up} {down}" fill="{colour}" fill-opacity="0.22" stroke="none"/>')
        legend.append((b.label, colour, "band"))
    X, Y, isfinite = f.X, f.Y, math.isfinite
    if not log_y:   # f.X and f.Y inlined (the same operations in the same order: the same pixels)
        l, x0, dx, w = f.l, f.x0, f.x1 - f.x0, f.r - f.l
        b, y0, dy, h = f.b, f.y0, f.y1 - f.y0, f.b - f.t

        def point(x, y):
            return f"{l + (float(x) - x0) / dx * w:.1f},{b - (float(y) - y0) / dy * h:.1f}"
    else:
        def point(x, y):
            return f"{X(float(x)):.1f},{Y(float(y)):.1f}"
    for i, s in enumerate(series):
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        runs = None if log_y or len(s.y) < 48 else _pixel_runs(f, s.x, s.y)    # (short: the loop is quicker)
        if runs is None:
            runs, run = [], []
            for x, y in zip(s.x, s.y):  # break the line at missing values
                if y is None or not isfinite(float(y)) or (log_y and y <= 0):
                    if run:
                        runs.append(run)
                    run = []
                else:
                    run.append(point(x, y))
            if run:
                runs.append(run)
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        for r in runs:
            body.append(f'<polyline points="{" ".join(r)}" fill="none" stroke="{colour}" stroke-width="1.8"{dash}/>')
            if s.markers or len(r) == 1:   # a circle per "x,y" pair: '<circle cx="x" cy="y" r="2.6" fill=…/>'
                end = f'" r="2.6" fill="{colour}"/>'
                body.append('<circle cx="' + (end + '<circle cx="').join(r).replace(",", '" cy="') + end)
        legend.append((s.label, colour, "dash" if s.dashed else "line"))
    labelled = [it for it in legend if it[0]]
    if legend_below and labelled:
        body += _legend(labelled, f.l + max(len(it[0]) for it in labelled) * 6.4 + 34, height)
        return _svg(width, height + len(labelled) * 16 + 10, body, title or ylabel)
    body += _legend(legend, f.r - 6, f.t + 6)
    return _svg(width, height, body, title or ylabel)


def _pixel_pairs(f: _Frame, xa: np.ndarray, ya: np.ndarray) -> list[str] | None:
    """``[f"{f.X(x):.1f},{f.Y(y):.1f}" for x, y in zip(xa, ya)]`` on a linear frame for float64 arrays
    (of Python floats, or ints within :data:`~headscope.report.colours.EXACT_INT`): the same float64
    operations in the same order, one ``%`` mapped over the pairs (NaN and ±inf spelled as Python does).
    None where the frame's numbers are not such floats or ints (Python's arithmetic would differ)."""
    l, x0, dx, w = f.l, f.x0, f.x1 - f.x0, f.r - f.l
    b, y0, dy, h = f.b, f.y0, f.y1 - f.y0, f.b - f.t
    if f.log_y or not all(map(_exact_scalar, (l, x0, dx, w, b, y0, dy, h))):
        return None
    with np.errstate(over="ignore", invalid="ignore"):     # (±inf and NaN, as Python's floats give them)
        px = l + (xa - x0) / dx * w                         # f.X, f.Y: (v − v0) / span × size from the axis
        py = b - (ya - y0) / dy * h
    return list(map("%.1f,%.1f".__mod__, zip(px.tolist(), py.tolist())))


def _pixel_runs(f: _Frame, xs: Sequence[float], ys: Sequence[float | None]) -> list[list[str]] | None:
    """The "x,y" pixel pairs of a curve (:func:`_pixel_pairs`), in runs broken at missing values
    (``None``, NaN, ±inf), as line_plot's loop over the points makes them. None where that would not be
    exact (values that are not Python floats or ints, a missing x, a log frame): the loop handles those."""
    xs, ys = list(xs), list(ys)
    n = min(len(xs), len(ys))
    xs, ys = xs[:n], ys[:n]
    if not set(map(type, xs)) <= {float, int}:
        return None
    xa, ya = _float64(xs), _float64(ys)
    if xa is None or ya is None:
        return None
    ok = np.isfinite(ya)
    pairs = _pixel_pairs(f, xa[ok], ya[ok])
    if pairs is None or ok.all():
        return pairs if pairs is None else [pairs] if pairs else []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], ok.view(np.int8), [0]))))   # run starts and ends
    runs, k = [], 0
    for length in (edges[1::2] - edges[::2]).tolist():
        runs.append(pairs[k:k + length])
        k += length
    return runs


def _band_outline(f: _Frame, b: Band) -> tuple[list[str], list[str]] | None:
    """The pixel pairs of a band's upper and lower edges (:func:`_pixel_pairs`), where every x, lo and
    hi is a Python float or int (no point left out); else None: line_plot's loop handles it."""
    xs, lo, hi = list(b.x), list(b.lo), list(b.hi)
    n = min(len(xs), len(lo), len(hi))
    if not set(map(type, xs[:n] + lo[:n] + hi[:n])) <= {float, int}:
        return None
    xa, la, ha = _float64(xs[:n]), _float64(lo[:n]), _float64(hi[:n])
    if xa is None or la is None or ha is None:
        return None
    up, down = _pixel_pairs(f, xa, ha), _pixel_pairs(f, xa, la)
    return None if up is None else (up, down)


def histogram(values: Sequence[float] | None = None, *, edges: Sequence[float] | None = None,
              counts: Sequence[float] | None = None, bins: int = 30, title: str = "", xlabel: str = "",
              ylabel: str = "count", width: int = 520, height: int = 280,
              markers: Sequence[tuple[float, str]] = ()) -> Safe:
    """Histogram of `values` (or of precomputed `edges`/`counts`); `markers` = (x, label) vertical lines."""
    if edges is None or counts is None:
        edges, counts = bin_values(values or [], bins)
    lo, hi = (edges[0], edges[-1]) if len(edges) > 1 else (0.0, 1.0)
    f = _Frame(width, height, (lo, hi), (0.0, max(max(counts, default=0), 1) * 1.08))
    body = f.axes(title, xlabel, ylabel)
    for a, b, c in zip(edges[:-1], edges[1:], counts):
        if c <= 0:
            continue
        x0, x1 = f.X(a), f.X(b)
        y = f.Y(c)
        body.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 0.6, 0.6):.1f}" height="{f.b - y:.1f}" '
                    f'fill="{OKABE_ITO[0]}" fill-opacity="0.8"><title>{esc(f"[{fmt(a)}, {fmt(b)}): {fmt(c)}")}</title></rect>')
    legend = []
    for i, (x, label) in enumerate(markers):
        colour = OKABE_ITO[(i + 1) % len(OKABE_ITO)]
        if lo <= x <= hi:
            body.append(f'<line x1="{f.X(x):.1f}" x2="{f.X(x):.1f}" y1="{f.t}" y2="{f.b}" stroke="{colour}" '
                        'stroke-width="1.8" stroke-dasharray="5 3"/>')
        legend.append((label, colour, "dash"))
    body += _legend(legend, f.r - 6, f.t + 6)
    return _svg(width, height, body, title or xlabel)


def heatmap(matrix: Sequence[Sequence[float | None]], *, row_labels: Sequence[str] | None = None,
            col_labels: Sequence[str] | None = None, title: str = "", xlabel: str = "", ylabel: str = "",
            signed: bool | None = None, vmax: float | None = None, vmin: float | None = None,
            cell: int | None = None, max_width: int = 640, value_fmt=fmt, annotate: bool = False) -> Safe:
    """A matrix as coloured cells; ``None``/NaN cells are blank (e.g. above the causal diagonal).

    `signed` (default: any negative entry) picks the diverging RdBu scale on [-vmax, vmax],
    else a white → blue scale on [vmin, vmax]. Labels may be raw token strings.
    Hovering a cell shows its row, column and value.
    """
    rows = len(matrix)
    cols = max((len(r) for r in matrix), default=0)
    flat = list(chain.from_iterable(matrix))
    a = _float64(flat)
    vals = a[np.isfinite(a)].tolist() if a is not None else _finite(flat)
    if signed is None:
        signed = bool(vals) and min(vals) < 0
    if signed:
        vmax = vmax if vmax is not None else max((abs(v) for v in vals), default=1.0)
    else:
        vmin = vmin if vmin is not None else min(vals, default=0.0)
        vmax = vmax if vmax is not None else max(vals, default=1.0)
    label_w = 0 if row_labels is None else min(max((len(str(s)) for s in row_labels), default=0), 14) * 6.5 + 8
    label_h = 0 if col_labels is None else min(max((len(str(s)) for s in col_labels), default=0), 14) * 6.0 + 8
    if cell is None:
        cell = int(max(4, min(28, (max_width - 60 - label_w - 40) / max(cols, 1))))
    left, top = 40 + label_w + (14 if row_labels is None else 0), 30 + (label_h if col_labels is not None else 0)
    width = int(left + cols * cell + 70)
    height = int(top + rows * cell + (38 if xlabel else 18))
    body = []
    if title:
        body.append(f'<text x="8" y="18" font-size="13" font-weight="600" fill="#222">{esc(title)}</text>')
    # the cells shown (finite values): row, column, value, fill and the value's text, all at once where
    # the values are Python floats (the arrays' forms of the colour ramps and fmt), else one by one
    if a is not None:
        lens = np.array([len(r) for r in matrix], dtype=np.intp)
        shown = np.flatnonzero(np.isfinite(a))                          # indices into flat
        row_of = np.repeat(np.arange(rows), lens)[shown]
        col_of = shown - np.repeat(np.cumsum(lens) - lens, lens)[shown]  # minus the row's start in flat
        rows_l, cols_l = row_of.tolist(), col_of.tolist()
        vs = [flat[k] for k in shown.tolist()] if value_fmt is not fmt or annotate else None
        fills = (diverging_all(a[shown], vmax) if signed else sequential_all(a[shown], vmin, vmax))
        texts = fmt_all(a[shown].tolist()) if value_fmt is fmt else None   # fmt(int v) = fmt(float(v))
    else:
        cells = [(i, j, v) for i, r in enumerate(matrix) for j, v in enumerate(r)
                 if v is not None and math.isfinite(float(v))]
        rows_l, cols_l, vs = [c[0] for c in cells], [c[1] for c in cells], [c[2] for c in cells]
        fills = [diverging(v, vmax) if signed else sequential(v, vmin, vmax) for v in vs]
        texts = [fmt(v) for v in vs] if value_fmt is fmt else None
    if texts is None:
        texts = [esc(value_fmt(v)) for v in vs]
    # a cell's title is esc(f"{row} → {column}: {value}"); escaping is per character, so the labels are
    # escaped once each, and fmt's figures (digits, ".", "e", "+", "-") need none
    row_text = _label_texts(row_labels, rows)
    col_text = _label_texts(col_labels, cols)
    for i in set(rows_l):
        if row_text[i] is None:
            row_text[i] = esc(f"{row_labels[i]}")   # (IndexError as before)
    for j in set(cols_l):
        if col_text[j] is None:
            col_text[j] = esc(f"{col_labels[j]}")
    size = f'" width="{cell}" height="{cell}" fill="'     # what every cell's rect shares
    row_part = [f'{top + i * cell}{size}' for i in range(rows)]                        # y, size, fill="
    row_title = [f'"><title>{t} → ' for t in row_text]
    col_part = [f'<rect x="{left + j * cell}" y="' for j in range(cols)]
    col_title = [f"{t}: " for t in col_text]
    rects = [f"{col_part[j]}{row_part[i]}{fill}{row_title[i]}{col_title[j]}{text}</title></rect>"
             for i, j, fill, text in zip(rows_l, cols_l, fills, texts)]
    if annotate and cell >= 22:
        for k, (i, j, v, fill) in enumerate(zip(rows_l, cols_l, vs, fills)):
            x, y = left + j * cell, top + i * cell
            rects[k] += (f'<text x="{x + cell / 2}" y="{y + cell / 2 + 4}" text-anchor="middle" font-size="9" '
                         f'fill="{_text_on(fill)}">{esc(value_fmt(v))}</text>')
    body += rects
    body.append(f'<rect x="{left}" y="{top}" width="{cols * cell}" height="{rows * cell}" fill="none" stroke="#c8c8c8"/>')
    fs = max(7, min(11, cell - 2))
    step = max(1, math.ceil(9 / cell)) if cell < 9 else 1
    if row_labels is not None:
        for i, s in enumerate(row_labels):
            if i % step == 0:
                body.append(f'<text x="{left - 4}" y="{top + i * cell + cell / 2 + fs / 3:.1f}" text-anchor="end" '
                            f'font-size="{fs}" fill="#333" xml:space="preserve">{esc(_clip(s))}</text>')
    if col_labels is not None:
        for j, s in enumerate(col_labels):
            if j % step == 0:
                x = left + j * cell + cell / 2 + fs / 3
                body.append(f'<text x="{x:.1f}" y="{top - 4}" font-size="{fs}" fill="#333" xml:space="preserve" '
                            f'transform="rotate(-90 {x:.1f} {top - 4})">{esc(_clip(s))}</text>')
    if row_labels is None and rows > 1:
        for i in nice_ticks(0, rows - 1, 6):
            i = int(i)
            body.append(f'<text x="{left - 4}" y="{top + i * cell + cell / 2 + 4:.1f}" text-anchor="end" '
                        f'font-size="10" fill="#555">{i}</text>')
    if col_labels is None and cols > 1:
        for j in nice_ticks(0, cols - 1, 6):
            j = int(j)
            body.append(f'<text x="{left + j * cell + cell / 2:.1f}" y="{top + rows * cell + 12}" '
                        f'text-anchor="middle" font-size="10" fill="#555">{j}</text>')
    if ylabel:
        cy = top + rows * cell / 2
        body.append(f'<text x="14" y="{cy:.1f}" text-anchor="middle" font-size="12" fill="#333" '
                    f'transform="rotate(-90 14 {cy:.1f})">{esc(ylabel)}</text>')
    if xlabel:
        body.append(f'<text x="{left + cols * cell / 2:.1f}" y="{height - 6}" text-anchor="middle" '
                    f'font-size="12" fill="#333">{esc(xlabel)}</text>')
    # colour bar
    bx, by, bh = left + cols * cell + 14, top, max(rows * cell, 60)
    n = 24
    for k in range(n):
        t = 1 - k / (n - 1)
        v = (-vmax + 2 * vmax * t) if signed else (vmin + (vmax - vmin) * t)
        fill = diverging(v, vmax) if signed else sequential(v, vmin, vmax)
        body.append(f'<rect x="{bx}" y="{by + k * bh / n:.1f}" width="12" height="{bh / n + 0.5:.1f}" fill="{fill}"/>')
    top_label, bottom_label = (fmt(vmax), fmt(-vmax)) if signed else (fmt(vmax), fmt(vmin))
    body.append(f'<text x="{bx + 15}" y="{by + 9}" font-size="10" fill="#333">{esc(top_label)}</text>')
    body.append(f'<text x="{bx + 15}" y="{by + bh}" font-size="10" fill="#333">{esc(bottom_label)}</text>')
    return _svg(width, height, body, title)


def _label_texts(labels, n: int) -> list[str | None]:
    """Escaped ``f"{label}"`` of indices 0..n-1 (the index itself without labels; None past the labels' end)."""
    if labels is None:
        return [str(i) for i in range(n)]
    return [esc(f"{labels[i]}") if i < len(labels) else None for i in range(n)]


def _clip(s, n: int = 14) -> str:
    s = str(s)
    return s if len(s) <= n else s[: n - 1] + "…"


def bar_plot(values: Sequence[float], labels: Sequence[str], *, title: str = "", xlabel: str = "",
             ylabel: str = "", width: int = 520, height: int = 280) -> Safe:
    """Labelled vertical bars; negative bars blue, positive red (RdBu ends)."""
    vals = [float(v) if v is not None else 0.0 for v in values]
    lo, hi = min(vals + [0.0]), max(vals + [0.0])
    pad = 0.06 * (hi - lo or 1.0)
    n = max(len(vals), 1)
    f = _Frame(width, height, (-0.5, n - 0.5), (lo - (pad if lo < 0 else 0), hi + pad), bottom=62)
    body = f.axes(title, "", ylabel, xticks=[])
    bw = (f.r - f.l) / n * 0.75
    y0 = f.Y(0.0)
    for i, (v, label) in enumerate(zip(vals, labels)):
        x = f.X(i) - bw / 2
        y = f.Y(v)
        colour = RDBU[8] if v >= 0 else RDBU[2]
        body.append(f'<rect x="{x:.1f}" y="{min(y, y0):.1f}" width="{bw:.1f}" height="{abs(y0 - y):.1f}" fill="{colour}">'
                    f'<title>{esc(f"{label}: {fmt(v)}")}</title></rect>')
        cx = f.X(i)
        body.append(f'<text x="{cx:.1f}" y="{f.b + 12}" font-size="10" fill="#333" text-anchor="end" xml:space="preserve" '
                    f'transform="rotate(-45 {cx:.1f} {f.b + 12})">{esc(_clip(label))}</text>')
    body.append(f'<line x1="{f.l}" x2="{f.r}" y1="{y0:.1f}" y2="{y0:.1f}" stroke="#888"/>')
    if xlabel:
        body.append(f'<text x="{(f.l + f.r) / 2:.1f}" y="{height - 4}" text-anchor="middle" font-size="12" fill="#333">{esc(xlabel)}</text>')
    return _svg(width, height, body, title or ylabel)


def spectrum_plot(spectra: dict[str, Sequence[float]], *, title: str = "", ylabel: str = "value",
                  xlabel: str = "rank", width: int = 520, height: int = 300, top: int | None = None) -> Safe:
    """Several spectra (eigen- or singular values) against their rank, as stems with markers.

    Each series is plotted in its given order (sort it first, e.g. by |λ| descending);
    `top` keeps the first `top` values. Use it for "symmetric vs skew part".
    """
    series = []
    for label, vals in spectra.items():
        vals = list(vals)[:top] if top else list(vals)
        series.append(Series(list(range(1, len(vals) + 1)), vals, label, markers=True))
    return line_plot(series, title=title, xlabel=xlabel, ylabel=ylabel, width=width, height=height)


_SIZE = re.compile(r'<svg [^>]*?width="(\d+(?:\.\d+)?)" height="(\d+(?:\.\d+)?)"')


def panels(figs: Sequence[Safe], *, cols: int = 4, title: str = "", gap: int = 8) -> Safe:
    """Tile figures made by this module into one ``<svg>`` (row-major, `cols` per row).

    Each figure keeps its own axes and labels; it is nested as an ``<svg>`` element at
    its cell's offset. Used for small multiples and for standalone ``.svg`` files
    (``headscope kernels --out``).
    """
    sizes = []
    for f in figs:
        m = _SIZE.match(str(f))
        if not m:
            raise ValueError("panels: expected figures made by headscope.report.figures (an <svg> with width/height)")
        sizes.append((float(m.group(1)), float(m.group(2))))
    cols = max(1, min(cols, len(figs) or 1))
    cw = max((w for w, _ in sizes), default=100.0)
    ch = max((h for _, h in sizes), default=100.0)
    top = 28 if title else 0
    rows = -(-len(figs) // cols)
    width, height = int(cols * cw + (cols - 1) * gap), int(top + rows * ch + max(rows - 1, 0) * gap)
    body = []
    if title:
        body.append(f'<text x="4" y="19" font-size="15" font-weight="600" fill="#222">{esc(title)}</text>')
    for k, f in enumerate(figs):
        x, y = (k % cols) * (cw + gap), top + (k // cols) * (ch + gap)
        body.append(str(f).replace("<svg ", f'<svg x="{x:g}" y="{y:g}" ', 1))
    return _svg(width, height, body, title)
