"""SVG figures and HTML helpers of the report: scales, escaping, masked cells."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from headscope.report import figures as F
from headscope.stats import bin_values
from headscope.report import html as H


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML, or this raises


def test_diverging_palette_is_centred_and_signed():
    assert F.diverging(0.0, 2.0) == "#f7f7f7"
    assert F.diverging(2.0, 2.0) == F.RDBU[-1] and F.diverging(-2.0, 2.0) == F.RDBU[0]
    assert F.diverging(5.0, 2.0) == F.RDBU[-1]  # clipped
    r, _, b = F._hex(F.diverging(1.0, 2.0))
    assert r > b  # positive is red
    r, _, b = F._hex(F.diverging(-1.0, 2.0))
    assert b > r  # negative is blue


def test_nice_ticks_cover_the_range():
    t = F.nice_ticks(0.013, 0.97)
    assert t[0] >= 0.013 - 1e-12 and t[-1] <= 0.97 + 1e-12 and 3 <= len(t) <= 8
    steps = {round(b - a, 9) for a, b in zip(t, t[1:])}
    assert len(steps) == 1


def test_heatmap_leaves_masked_cells_blank_and_escapes_labels():
    m = [[1.0, None, None], [0.5, 0.5, None], [0.2, 0.3, 0.5]]
    svg = F.heatmap(m, row_labels=["<|endoftext|>", "<script", " &"], col_labels=["a", "b", "c"])
    root = _parse(svg)
    cells = [e for e in root.iter("{http://www.w3.org/2000/svg}rect") if e.find("{http://www.w3.org/2000/svg}title") is not None]
    assert len(cells) == 6
    assert "<script" not in svg and "&lt;script" in svg and "&lt;|endoftext|&gt;" in svg


def test_line_plot_with_band_and_legend():
    svg = F.line_plot([F.Series([0, 1, 2], [1, 2, 3], "measured <b>")],
                      bands=[F.Band([0, 1, 2], [0.5, 1.5, 2.5], [1.5, 2.5, 3.5], "predicted")],
                      title="t", xlabel="x", ylabel="y")
    root = _parse(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert len(list(root.iter(ns + "polyline"))) == 1 and len(list(root.iter(ns + "polygon"))) == 1
    texts = [e.text for e in root.iter(ns + "text")]
    assert "measured <b>" in texts and "predicted" in texts


def test_histogram_counts_every_value():
    edges, counts = bin_values([0, 0.1, 0.5, 0.9, 1.0, float("nan")], bins=4)
    assert sum(counts) == 5 and len(edges) == 5
    _parse(F.histogram([1, 2, 2, 3], bins=3, markers=[(2, "median")]))
    _parse(F.bar_plot([1.0, -2.0], ["a", "<b>"]))
    _parse(F.spectrum_plot({"sym": [3, -2, 1], "skew": [1, 0.5]}))


def test_token_heatmap_and_tables_escape():
    out = F.token_heatmap(["<|endoftext|>", "<", "script", "\">"], [None, 1.0, -1.0, 0.0])
    assert "<script" not in out and out.count('<span class="tok') == 4
    t = H.table(["a", "b"], [("<i>", H.code("<x>")), (1.5, H.Safe("<em>ok</em>"))])
    assert "&lt;i&gt;" in t and "&lt;x&gt;" in t and "<em>ok</em>" in t and "<i>" not in t
    assert re.search(r"<td class=num>|<td>1.5</td>", t)
    assert H.rel("heads/L0H1.html", "index.html") == "../index.html"
    assert H.rel("index.html", "heads/L0H1.html") == "heads/L0H1.html"


def test_panels_tile_figures_into_one_svg():
    figs = [F.line_plot([F.Series([0, 1, 2], [1.0, 0.1, 0.01], "<b>k</b>")], log_y=True, width=200, height=150)
            for _ in range(5)]
    svg = F.panels(figs, cols=2, title="heads <i>")
    root = _parse(svg)
    ns = "{http://www.w3.org/2000/svg}"
    inner = root.findall(f"{ns}svg")
    assert len(inner) == 5
    assert [(float(e.get("x")), float(e.get("y"))) for e in inner][:3] == [(0, 28), (208, 28), (0, 186)]
    assert root.get("width") == "408" and root.get("height") == str(28 + 3 * 150 + 2 * 8)
    assert "<i>" not in svg and "<b>" not in svg and "&lt;i&gt;" in svg


def test_log_scale_ticks_stay_few_over_many_decades():
    svg = F.line_plot([F.Series(list(range(50)), [10.0 ** -k for k in range(50)])], log_y=True)
    labels = [t.text for t in _parse(svg).iter("{http://www.w3.org/2000/svg}text") if t.text and "e-" in t.text]
    assert 2 <= len(labels) <= 8                       # not one label per decade over 50 decades
    assert min(float(x) for x in labels) >= 1e-12      # at most LOG_DECADES decades below the maximum


def test_colour_ramps_interpolate_to_the_bit():
    """The precomputed segments give the colour of the plain formula (a linear blend of the two
    neighbouring stops, each channel rounded) at every t, the ends, and past them (clipped)."""
    def reference(stops, t):
        t = min(max(t, 0.0), 1.0) * (len(stops) - 1)
        i = min(int(t), len(stops) - 2)
        f = t - i
        (ar, ag, ab), (br, bg, bb) = stops[i], stops[i + 1]
        return "#%02x%02x%02x" % (round(ar + (br - ar) * f), round(ag + (bg - ag) * f), round(ab + (bb - ab) * f))

    ts = [k / 997 for k in range(-50, 1048)] + [0.0, -0.0, 1.0, 0.1, 0.3, 0.7, 1e-300, 1 - 1e-16]
    for stops, seg in ((F._RDBU_RGB, F._RDBU_SEG), (F._WHITE_TO_BLUE_RGB, F._WHITE_TO_BLUE_SEG)):
        assert [F._lerp(seg, t) for t in ts] == [reference(stops, t) for t in ts]
    assert F.sequential(0.25, 0.0, 1.0) == reference(F._WHITE_TO_BLUE_RGB, 0.25)


def test_heatmap_cell_markup():
    svg = F.heatmap([[0.5, -1.0]], row_labels=["r&"], col_labels=["<c", "d"], cell=10)
    assert re.findall(r"<rect[^>]*><title>.*?</title></rect>", svg) == [
        '<rect x="61.0" y="50.0" width="10" height="10" fill="#e58268"><title>r&amp; → &lt;c: 0.5</title></rect>',
        '<rect x="71.0" y="50.0" width="10" height="10" fill="#053061"><title>r&amp; → d: -1</title></rect>']


# -- the array forms: the scalar functions' strings, to the bit, on awkward values ---------------------


def _awkward(rng, n):
    """Values where rounding decides: exact halves of a channel step, stops, ends, tiny, huge, ints, -0.0."""
    import random as _r
    vals = [rng.uniform(-3, 3) for _ in range(n)] + [k / 20 for k in range(-25, 26)] + [k / 1000 for k in range(-1000, 1001, 7)]
    vals += [0.0, -0.0, 1e-300, -1e-300, 5e-324, 1e300, -1e300, 0.5, 1.0, -1.0, 2.0, 3, -2, 0, 7, 10 ** 15, 1e-3, 1e4,
             9999.9999, 0.00099999, 0.1 + 0.2, 1 / 3, 2 / 3]
    vals += [s / 255 for s in range(256)] + [(s + 0.5) / 255 for s in range(256)]
    return vals


def test_colour_ramps_over_arrays_are_the_scalar_colours():
    import random
    import numpy as np
    rng = random.Random(3)
    vals = _awkward(rng, 3000)
    a = np.array(vals, dtype=np.float64)
    for vmax in (1.0, 2.5, 3, 1e-9, 0.0, -1.0, 1e300):
        assert F.diverging_all(a, vmax) == [F.diverging(v, vmax) for v in vals]
    for vmin, vmax in ((0.0, 1.0), (-1.0, 3), (0, 1), (2.0, 2.0), (1.0, 0.0), (-1e300, 1e300), (0.25, 0.75)):
        assert F.sequential_all(a, vmin, vmax) == [F.sequential(v, vmin, vmax) for v in vals]
    b = np.array([0.5, float("nan"), -0.25, float("inf")])      # non-finite: the blank colour, as diverging gives
    assert F.diverging_all(b, 1.0) == [F.diverging(v, 1.0) for v in b.tolist()]
    assert F.sequential_all(b, 0.0, 1.0) == [F.sequential(v, 0.0, 1.0) for v in b.tolist()]
    f32 = np.float32(0.7)                                        # a numpy bound keeps its own precision
    assert F.diverging_all(a[:50], f32) == [F.diverging(v, f32) for v in vals[:50]]


def test_fmt_over_a_list_is_fmt():
    import random
    rng = random.Random(4)
    vals = [float(v) for v in _awkward(rng, 3000)] + [float("nan"), float("inf"), -float("inf")]
    vals += [rng.uniform(-1, 1) * 10 ** rng.randint(-8, 8) for _ in range(3000)]
    assert F.fmt_all(vals) == [F.fmt(v) for v in vals]
    assert F.fmt_all([1, 2.5, 12345, -0.0]) == ["1", "2.5", "1.2e4", "0"]          # not all floats: one by one


def _reference_cells(matrix, row_labels, col_labels, signed, vmin, vmax, cell, left, top, value_fmt=F.fmt):
    """Each shown cell's rect the plain way: one value at a time through diverging/sequential and fmt."""
    import math
    out = []
    for i, r in enumerate(matrix):
        for j, v in enumerate(r):
            if v is None or not math.isfinite(float(v)):
                continue
            fill = F.diverging(v, vmax) if signed else F.sequential(v, vmin, vmax)
            rl = F.esc(row_labels[i]) if row_labels is not None else str(i)
            cl = F.esc(col_labels[j]) if col_labels is not None else str(j)
            out.append(f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell}" height="{cell}" '
                       f'fill="{fill}"><title>{rl} → {cl}: {F.esc(value_fmt(v))}</title></rect>')
    return out


def test_heatmap_cells_are_the_plain_cells():
    """Ragged rows, masked (None, NaN, inf) cells, ints, signed and unsigned, labels that need escaping:
    every cell's rect is what the value-by-value formula gives, in order."""
    import random
    rng = random.Random(5)
    rows, cols = 7, 11
    for trial in range(12):
        m = []
        for i in range(rows):
            row = []
            for j in range(cols if trial % 3 else i + 1):            # lower-triangular (ragged) every third trial
                u = rng.random()
                row.append(None if u < 0.1 else float("nan") if u < 0.13 else float("inf") if u < 0.15 else
                           rng.randint(-3, 3) if u < 0.3 else rng.uniform(-2, 2) if trial % 2 else rng.uniform(0, 5))
            m.append(row)
        rl = [f"<r{i}&" for i in range(rows)] if trial % 4 else None
        cl = [f'"c{j}' for j in range(cols)] if trial % 4 else None
        signed = None if trial < 6 else bool(trial % 2)
        svg = F.heatmap(m, row_labels=rl, col_labels=cl, signed=signed, cell=9)
        vals = [float(v) for r in m for v in r if v is not None and abs(float(v)) != float("inf") and v == v]
        sg = signed if signed is not None else min(vals) < 0
        vmax = max(abs(v) for v in vals) if sg else max(vals)
        vmin = None if sg else min(vals)
        left = 40 + (0 if rl is None else min(max(len(s) for s in rl), 14) * 6.5 + 8) + (14 if rl is None else 0)
        top = 30 + (0 if cl is None else min(max(len(s) for s in cl), 14) * 6.0 + 8)
        got = re.findall(r"<rect [^>]*><title>.*?</title></rect>", svg)
        assert got == _reference_cells(m, rl, cl, sg, vmin, vmax, 9, left, top), trial
    # a custom value format, and numpy values (one at a time, as before)
    import numpy as np
    m = [[0.25, -0.5], [None, 1.0]]
    svg = F.heatmap(m, cell=9, value_fmt=lambda v: f"<{v:.2f}>")
    assert re.findall(r"<rect [^>]*><title>.*?</title></rect>", svg) == _reference_cells(
        m, None, None, True, None, 1.0, 9, 54, 30, value_fmt=lambda v: f"<{v:.2f}>")
    mn = [np.array([0.25, -0.5], dtype=np.float32), np.array([0.1, 1.0], dtype=np.float32)]
    assert re.findall(r"<rect [^>]*><title>.*?</title></rect>", F.heatmap(mn, cell=9)) == _reference_cells(
        mn, None, None, True, None, 1.0, 9, 54, 30)


def test_long_curves_are_the_plain_points():
    """A curve past the array threshold: the same "x,y" pixels as the point-by-point formula, broken at
    missing values; a short one and a log one go point by point."""
    import math
    import random
    rng = random.Random(6)
    n = 300
    xs = list(range(n))
    ys = [None if rng.random() < 0.05 else float("nan") if rng.random() < 0.02 else rng.uniform(-1e3, 1e3)
          for _ in range(n)]
    ys[0] = ys[-1] = 1.5
    svg = F.line_plot([F.Series(xs, ys, "a"), F.Series([x / 7 for x in xs], [3] * n, "b", markers=True)],
                      width=600, height=300)
    f = F._Frame(600, 300, (0.0, float(n - 1)), (0, 0))
    fin = [y for y in ys if y is not None and math.isfinite(y)] + [3.0]
    lo, hi = min(fin), max(fin)
    pad = 0.05 * (hi - lo)
    f = F._Frame(600, 300, (0.0, float(n - 1)), (lo - pad, hi + pad))
    runs, run = [], []
    for x, y in zip(xs, ys):
        if y is None or not math.isfinite(y):
            runs, run = (runs + [run] if run else runs), []
        else:
            run.append(f"{f.X(float(x)):.1f},{f.Y(float(y)):.1f}")
    runs += [run] if run else []
    got = re.findall(r'<polyline points="([^"]*)" fill="none" stroke="#0072B2"', svg)
    assert got == [" ".join(r) for r in runs] and len(got) > 3
    second = re.findall(r'<circle cx="([^"]*)" cy="([^"]*)" r="2.6" fill="#D55E00"/>', svg)
    assert second == [(f"{f.X(x / 7):.1f}", f"{f.Y(3.0):.1f}") for x in xs]


def test_page_links_are_the_plain_relative_links(tmp_path, monkeypatch):
    """Navigation bars and relative links, worked out once per folder, are each link's relpath; paths
    that climb or are absolute (the working directory counts) are not cached across working directories."""
    import posixpath
    nav = [("Overview", "index.html"), ("<Heads>", "index.html#pages-heads"), ("Atlas", "atlas.html"),
           (H.Safe("<b>x</b>"), "data/x.json"), ("up", "../outside.html")]
    for path in ("index.html", "heads/L0H3.html", "a/b/c.html", "heads/L1H0.html"):
        want = "".join(str(H.link(posixpath.relpath(p, posixpath.dirname(path) or "."), label)) for label, p in nav)
        assert H._links(path, nav) == want
        assert H._links(path, nav[:3]) == want[:len(H._links(path, nav[:3]))]
        assert H.rel(path, "data/atlas.json") == posixpath.relpath("data/atlas.json", posixpath.dirname(path) or ".")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    for cwd in (tmp_path, deep):          # a climbing path's link depends on the working directory: never cached
        monkeypatch.chdir(cwd)
        assert H.rel("x.html", "../../../../../../../../../../../y") == posixpath.relpath(
            "../../../../../../../../../../../y", ".")
        assert H.rel("index.html", "/abs/page.html") == posixpath.relpath("/abs/page.html", ".")
