"""Result objects render themselves in Jupyter (``_repr_html_``) with the report's figures."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser

import pytest

import headscope
from headscope.maps.atlas import METRICS
from headscope.report import html as H


class _Doc(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: dict[str, int] = {}
        self.titles: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.titles += [v for k, v in attrs if k == "title"]

    def handle_data(self, data):
        self.text.append(data)


def _check(html: str) -> _Doc:
    assert html.startswith("<style>") and '<div class="headscope">' in html
    assert "<script" not in html and "href=" not in html       # notebooks: no report script, no report pages
    doc = _Doc()
    doc.feed(html)
    return doc


@pytest.fixture(scope="module")
def tiny_atlas(tiny):
    return headscope.atlas(tiny, n_tokens=60)


def test_atlas_renders_its_grids_with_every_figure_in_each_cell(tiny_atlas, tiny):
    doc = _check(tiny_atlas._repr_html_())
    n = tiny.cfg.n_layers * tiny.cfg.n_heads
    n_grids = sum(any(getattr(r, m) is not None for r in tiny_atlas.rows) for m in METRICS)
    cells = [t for t in doc.titles if t.startswith("L")]
    assert len(cells) == n * n_grids + tiny.cfg.n_heads            # + the layer-0 kernel category grid
    r = tiny_atlas.row(1, 2)
    tip = next(t for t in cells if t.startswith("L1H2 "))
    assert f"self score z: {r.qk_self:.4g}" in tip and f"OV copying (effective): {r.ov_copying_effective:.4g}" in tip
    assert "QK symmetry" in tip and "positional share" in tip
    assert doc.tags["table"] == n_grids + 2                          # the grids and the table of every head


def test_every_main_result_type_renders(tiny, tmp_path):
    from headscope.layer0.calibration import calibrate
    from headscope.layer0.contextual import build_circuit
    from headscope.layer0.neurons import rank_neurons, scan_neurons
    from headscope.shipped import calibration_text

    kern = headscope.analyse_kernels(tiny)
    doc = _check(kern._repr_html_())
    assert doc.tags["svg"] >= 1 and re.search("local|slowly decaying|uniform", "".join(doc.text))
    surv = headscope.survey(tiny)
    doc = _check(surv._repr_html_())
    assert doc.tags["svg"] >= 2 and "semantic loss" in "".join(doc.text)
    head = headscope.analyse_head(tiny, 1, 0, headscope.HeadOptions(n_tokens=300, with_spectral=False))
    doc = _check(head._repr_html_())
    assert "Semantic deep dive" in "".join(doc.text) and doc.tags["svg"] >= 2
    st = headscope.steer(tiny, 1, 0, 0.0).result
    doc = _check(st._repr_html_())
    assert f"{st.self_attention_before:.4f} → {st.self_attention_after:.4f}" in "".join(doc.text)
    cal = calibrate(tiny, " ".join(calibration_text().text.split()[:300]))
    circuit, choice = build_circuit(tiny, cal)
    scan = scan_neurons(circuit, choice, tiny.tokenizer, threshold=0.0, top=5)
    doc = _check(scan._repr_html_())
    assert doc.tags["svg"] == 1 and f"n{scan.neurons[0]['neuron']}" in "".join(doc.text)
    ranking = rank_neurons(circuit, choice, tiny.tokenizer, k=3, n_random=4)
    doc = _check(ranking._repr_html_())
    best = ranking.order_robust[0]
    assert doc.tags["svg"] == 1 and f"n{best}" in "".join(doc.text) and "robust score" in "".join(doc.text)


def test_tokens_are_escaped_in_notebooks(tiny):
    from headscope.reproduce import ClaimRow, ReproduceResult

    rows = [ClaimRow(id="tokens", seed="002", claim="<b>bold</b>", measure="m", published=["</script>", "<|endoftext|>"],
                     measured="<img src=x onerror=alert(1)>", tolerance="&", passed=True),
            ClaimRow(id="none", seed="000", claim="c", measure="m", published=1.0, measured=None, tolerance="t",
                     passed=None, note="<i>note</i>")]
    res = ReproduceResult(rows=rows, source="memory:<x>", fingerprint="0" * 64, reference="seeds", notes=["<u>n</u>"],
                          details={})
    html = res._repr_html_()
    doc = _check(html)
    for raw in ("<b>", "</script>", "<|endoftext|>", "<img", "<u>", "<x>"):
        assert raw not in html
    text = "".join(doc.text)
    assert "<img src=x onerror=alert(1)>" in text and "PASS" in text and "n/a" in text


def test_other_objects_fall_back_to_escaped_text(tiny_atlas):
    from headscope.report.notebook import render_html

    html = render_html(dataclasses.replace(tiny_atlas.rows[0]))   # a row has no renderer of its own
    assert "<pre>" in html and "HeadRow(" in html
    for obj in ("<script>", H.Safe("<b>")):      # even trusted markup is shown as text here
        html = render_html(obj)
        assert "&lt;" in html and "<script>" not in html and "<b>" not in html
