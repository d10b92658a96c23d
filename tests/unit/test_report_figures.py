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
