"""Tiny hand-written SVG charts (no plotting dependency): small-multiple line and bar panels.

Every label goes through :func:`html.escape`; numbers are formatted with fixed
precision so the same data gives byte-identical files.
"""

from __future__ import annotations

import html
import math
from typing import Sequence

PANEL_W, PANEL_H, PAD = 220, 150, 28


def _fmt(x: float) -> str:
    return f"{x:.2f}"


def _panel_frame(x0: float, y0: float, title: str) -> list[str]:
    return [
        f'<rect x="{_fmt(x0)}" y="{_fmt(y0)}" width="{PANEL_W}" height="{PANEL_H}" fill="white" stroke="#999"/>',
        f'<text x="{_fmt(x0 + 4)}" y="{_fmt(y0 + 12)}" font-size="11" font-family="sans-serif">{html.escape(title)}</text>',
    ]


def small_multiples(panels: Sequence[tuple[str, Sequence[float]]], kind: str = "line",
                    title: str = "", x_label: str = "", y_label: str = "", cols: int = 4,
                    log_y: bool = False) -> str:
    """One SVG with a panel per (title, values); `kind` "line" or "bar"; y from 0 to max (or log10)."""
    rows = max(1, math.ceil(len(panels) / cols))
    W = cols * (PANEL_W + PAD) + PAD
    H = rows * (PANEL_H + PAD) + 2 * PAD
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}">',
           f'<text x="{PAD}" y="18" font-size="14" font-family="sans-serif">{html.escape(title)}</text>',
           f'<text x="{PAD}" y="{H - 6}" font-size="11" font-family="sans-serif">'
           f'x: {html.escape(x_label)}   y: {html.escape(y_label)}{" (log10)" if log_y else ""}</text>']
    for k, (name, values) in enumerate(panels):
        x0 = PAD + (k % cols) * (PANEL_W + PAD)
        y0 = PAD + (k // cols) * (PANEL_H + PAD)
        out += _panel_frame(x0, y0, name)
        vals = [float(v) for v in values]
        if log_y:
            vals = [math.log10(max(v, 1e-12)) for v in vals]
        if not vals:
            continue
        lo = min(vals) if log_y else 0.0
        hi = max(vals)
        span = (hi - lo) or 1.0
        top, h_in = y0 + 18, PANEL_H - 24
        n = len(vals)
        if kind == "bar":
            bw = (PANEL_W - 8) / n
            for i, v in enumerate(vals):
                bh = h_in * (v - lo) / span
                out.append(f'<rect x="{_fmt(x0 + 4 + i * bw)}" y="{_fmt(top + h_in - bh)}" width="{_fmt(bw * 0.9)}" '
                           f'height="{_fmt(bh)}" fill="#4477aa"/>')
        else:
            pts = " ".join(f"{_fmt(x0 + 4 + (PANEL_W - 8) * i / max(n - 1, 1))},{_fmt(top + h_in - h_in * (v - lo) / span)}"
                           for i, v in enumerate(vals))
            out.append(f'<polyline fill="none" stroke="#4477aa" stroke-width="1.5" points="{pts}"/>')
        out.append(f'<text x="{_fmt(x0 + PANEL_W - 4)}" y="{_fmt(y0 + 12)}" font-size="9" text-anchor="end" '
                   f'font-family="sans-serif">max {hi:.3g}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
