"""The report's HTML figures (spans and tables, not SVG): :func:`token_heatmap` (text as tokens on
coloured backgrounds), :func:`colour_scale` (a scale's legend) and :func:`head_grid` (a layer × head
grid of links). :mod:`headscope.report.figures` re-exports them with the SVG figures."""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from .colours import RDBU, _text_on, diverging, diverging_all
from .figtext import _finite, _float64, esc, fmt, fmt_all
from .html import Safe


def token_heatmap(tokens: Sequence[str], values: Sequence[float | None], *, vmax: float | None = None,
                  value_name: str = "value") -> Safe:
    """Text as tokens on RdBu backgrounds (blue < 0 < red); hover shows the value.

    Tokens are escaped; whitespace is kept visible (``white-space: pre-wrap``).
    ``None`` values (e.g. BOS) are shown uncoloured.
    """
    tokens, values = list(tokens), list(values)
    a = _float64(values)
    vals = a[np.isfinite(a)].tolist() if a is not None else _finite(values)
    vmax = vmax if vmax is not None else max((abs(v) for v in vals), default=1.0) or 1.0
    n = min(len(tokens), len(values))          # (the spans: as zip pairs them)
    tokens, values, a = tokens[:n], values[:n], a[:n] if a is not None else None
    # a span's tip is esc(f"{tok!r}: {value_name} = {fmt(v)}"): escaped piece by piece (per character),
    # each token's pieces once (a text repeats its tokens, and a page shows the same texts many times)
    if a is not None:
        ok = np.isfinite(a)
        shown = a[ok]
        fills = iter(diverging_all(shown, vmax))
        texts = iter(fmt_all(shown.tolist()))
        ok = ok.tolist()
    else:
        ok = [v is not None and math.isfinite(float(v)) for v in values]
        fills = iter([diverging(float(v), vmax) for v, k in zip(values, ok) if k])
        texts = iter([fmt(float(v)) for v, k in zip(values, ok) if k])
    name = f": {esc(value_name)} = "
    spans = []
    for tok, k in zip(tokens, ok):
        shown_tok, said = _token_texts(tok) if type(tok) is str else (esc(tok), esc(f"{tok!r}"))
        if not k:
            spans.append(f'<span class="tok tok-none" title="{said}: —">{shown_tok}</span>')
            continue
        fill = next(fills)
        tip = f"{said}{name}{next(texts)}"
        spans.append(f'<span class="tok" style="background:{fill};color:{_text_on(fill)}" '
                     f'title="{tip}" data-tip="{tip}">{shown_tok}</span>')
    scale = (f'<div class="tok-scale"><span style="background:{RDBU[1]};color:#fff">{esc(fmt(-vmax))}</span>'
             f'<span style="background:{RDBU[5]}">0</span>'
             f'<span style="background:{RDBU[9]};color:#fff">{esc(fmt(vmax))}</span> {esc(value_name)}</div>')
    return Safe('<div class="tokens">' + "".join(spans) + "</div>" + scale)


@functools.lru_cache(maxsize=1 << 16)
def _token_texts(tok: str) -> tuple[str, str]:
    """(esc(tok), esc(repr(tok))): a token as a token heatmap shows it and as its tooltip names it."""
    return esc(tok), esc(repr(tok))


def colour_scale(kind: str, *, vmin: float = 0.0, vmax: float = 1.0, label: str = "",
                 categories: Sequence[tuple[str, str]] = ()) -> Safe:
    """Legend of a colour scale: ``"diverging"`` on [−vmax, vmax], ``"sequential"`` on [vmin, vmax]
    (``"sequential-reversed"``: dark at vmin), or ``"categorical"`` (name, colour) swatches."""
    if kind == "categorical":
        items = "".join(f'<span style="background:{c};color:{_text_on(c)}">{esc(n)}</span>' for n, c in categories)
    elif kind == "diverging":
        items = (f'<span style="background:{RDBU[1]};color:#fff">{esc(fmt(-vmax))}</span>'
                 f'<span style="background:{RDBU[5]}">0</span>'
                 f'<span style="background:{RDBU[9]};color:#fff">{esc(fmt(vmax))}</span>')
    else:
        lo, hi = (RDBU[5], RDBU[0]) if kind == "sequential" else (RDBU[0], RDBU[5])
        items = (f'<span style="background:{lo};color:{_text_on(lo)}">{esc(fmt(vmin))}</span>'
                 f'<span style="background:{hi};color:{_text_on(hi)}">{esc(fmt(vmax))}</span>')
    return Safe(f'<div class="tok-scale">{items} {esc(label)}</div>')


def head_grid(values: Sequence[Sequence[object]], *, layers: Sequence[int], colour, href=None,
              tips: Sequence[Sequence[str]] | None = None, titles: bool = False, caption: str = "") -> Safe:
    """A layer × head grid of coloured cells (rows: layers, columns: heads), as an HTML table.

    `colour(value) -> "#rrggbb"` colours a cell (``None`` values: the blank colour).
    ``href(layer, head)`` makes each cell a link (a grid without it has plain cells);
    each cell carries ``data-head="L{l}H{h}"`` for the report's tooltip and an
    ``aria-label`` with its value. ``tips[l][h]`` (every figure of that head) also goes
    into ``title`` when `titles` is set (for pages without the report's script).
    """
    n_heads = max((len(r) for r in values), default=0)
    head = "<tr><th></th>" + "".join(f"<th>H{h}</th>" for h in range(n_heads)) + "</tr>"
    body = []
    for i, (l, row) in enumerate(zip(layers, values)):
        cells = []
        for hd, v in enumerate(row):
            name = f"L{l}H{hd}"
            shown = fmt(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else ("—" if v is None else str(v))
            attrs = (f' data-head="{esc(name)}" style="background:{colour(v)}" '
                     f'aria-label="{esc(f"{name}: {shown}")}"')
            if titles and tips is not None:
                attrs += f' title="{esc(tips[i][hd])}"'
            if href is not None:
                cells.append(f'<td><a class="cell" href="{esc(href(l, hd))}"{attrs}></a></td>')
            else:
                cells.append(f'<td><span class="cell"{attrs}></span></td>')
        body.append(f"<tr><th>L{l}</th>{''.join(cells)}</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return Safe(f'<table class="hgrid">{cap}<thead>{head}</thead><tbody>{"".join(body)}</tbody></table>')
