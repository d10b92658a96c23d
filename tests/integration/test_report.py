"""The HTML report of a planted checkpoint: structure, escaping, cache, interrupt and resume."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

import headscope
from headscope import HeadscopeError, escape_token
from headscope.report import ReportOptions, build_report, default_stages
from headscope.report.builtin.activations import ActivationsStage
from headscope.report.builtin.attention import AttentionStage
from headscope.report.builtin.model import ModelStage

MARKUP = "Breaking: <script>alert(1)</script> and <img src=x onerror=alert(2)> & \"quoted\" ></div><b>bold</b>\n"

#: every element the report's pages may contain (inline SVG included); anything else is injected markup
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "nav", "main", "footer", "section", "div",
    "span", "p", "a", "h1", "h2", "h3", "table", "caption", "thead", "tbody", "tr", "th", "td", "figure",
    "figcaption", "code", "svg", "rect", "line", "polyline", "polygon", "circle", "text",
}


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("samples")
    (d / "markup.txt").write_text(MARKUP + "The shop on the high street sells bread, milk and newspapers.\n")
    (d / "news.txt").write_text("The council approved the new budget on Tuesday after a long debate about "
                                "roads, schools and the local library, which will stay open on Sundays.\n")
    (d / "<i>odd&name.txt").write_text("Rain is expected tomorrow across the north, with sunshine later.\n")
    return [d / "markup.txt", d / "news.txt", d / "<i>odd&name.txt"]


def _options(samples, **kw) -> ReportOptions:
    return ReportOptions(samples=samples, progress=False, n_neurons=4, **kw)


@pytest.fixture(scope="module")
def report(planted_model, samples, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "r"
    result = build_report(planted_model, out, _options(samples))
    return out, result


def _html_files(out: Path) -> list[Path]:
    return sorted(out.rglob("*.html"))


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.hrefs, self.text = set(), [], []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.hrefs += [v for k, v in attrs if k in ("href", "src")]

    def handle_data(self, data):
        self.text.append(data)


def _parse(path: Path) -> _Tags:
    p = _Tags()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_report_pages_and_data(report, planted_model):
    out, result = report
    cfg = planted_model.cfg
    assert (out / "index.html").is_file()
    heads = sorted(p.name for p in (out / "heads").glob("*.html"))
    assert heads == sorted(f"L{l}H{h}.html" for l in range(2) for h in range(cfg.n_heads))
    assert len(list((out / "neurons").glob("n*.html"))) == 4
    assert sorted(result.data_files) == ["data/activations.json", "data/attention.json", "data/model.json"]
    for f in result.data_files:
        doc = json.loads((out / f).read_text())
        assert doc["key_parts"]["fingerprint"] == planted_model.fingerprint
        assert re.fullmatch(r"[0-9a-f]{64}", doc["key"])
    # numbers shown come from the data: attention rows sum to 1 (causal softmax)
    att = json.loads((out / "data/attention.json").read_text())["data"]
    for h in att["heads"]:
        for q, row in enumerate(h["example_pattern"]):
            assert len(row) == q + 1 and abs(sum(row) - 1) < 1e-5


def test_every_link_is_local_and_resolves(report):
    out, _ = report
    for page in _html_files(out):
        p = _parse(page)
        assert p.tags <= ALLOWED_TAGS, f"{page.name}: unexpected elements {p.tags - ALLOWED_TAGS}"
        text = page.read_text()
        assert "default-src 'none'" in text  # CSP: no scripts, no fetches
        for href in p.hrefs:
            assert not re.match(r"^[a-z]+:", href), f"{page.name}: non-local link {href}"
            target = href.split("#")[0]
            if target:
                assert (page.parent / target).resolve().is_file(), f"{page.name}: broken link {href}"


def test_every_token_string_is_escaped(report, planted_model, samples):
    out, _ = report
    ids = planted_model.to_tokens(samples[0].read_text())
    toks = planted_model.to_str_tokens(ids.tolist())
    markup = [t for t in toks if set(t) & set("<>&\"")]
    assert "<|endoftext|>" in markup and any("<" in t for t in markup[1:])  # the planted markup did tokenise
    pages = {p: p.read_text() for p in _html_files(out)}
    everything = "\n".join(pages.values())
    for t in ["<script", "<img", "<b>", "<i>", "<|endoftext|>"]:
        assert t not in everything, f"raw {t!r} in the report"
    neuron_page = next(iter(sorted((out / "neurons").glob("*.html"))))
    page = pages[neuron_page]
    for t in markup:  # each token is rendered, escaped, as its own span
        assert f">{escape_token(t)}</span>" in page, t
        assert f">{t}</span>" not in page or t == escape_token(t)
    # the text the browser would show contains the original tokens
    shown = "".join(_parse(neuron_page).text)
    assert "<script>alert(1)</script>" in shown
    # an odd sample file name is escaped too
    assert "&lt;i&gt;odd&amp;name" in pages[out / "index.html"]


def _counting(monkeypatch, calls: dict, fail_in: str | None = None):
    for cls in (ModelStage, AttentionStage, ActivationsStage):
        original = cls.compute

        def compute(self, ctx, _original=original, _name=cls.name):
            if _name == fail_in:
                raise KeyboardInterrupt
            calls[_name] = calls.get(_name, 0) + 1
            return _original(self, ctx)

        monkeypatch.setattr(cls, "compute", compute)


def _snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_interrupt_and_resume(report, planted_model, samples, tmp_path, monkeypatch):
    ref_out, _ = report
    reference = _snapshot(ref_out)
    out = tmp_path / "r"
    calls: dict = {}
    with monkeypatch.context() as m:
        _counting(m, calls, fail_in="activations")
        with pytest.raises(KeyboardInterrupt):
            build_report(planted_model, out, _options(samples))
    assert calls == {"model": 1, "attention": 1}
    assert (out / "data/model.json").is_file() and (out / "data/attention.json").is_file()
    assert not (out / "data/activations.json").exists() and not (out / "index.html").exists()
    assert not [p for p in out.rglob("*.tmp")]  # nothing half-written left behind

    calls.clear()
    with monkeypatch.context() as m:
        _counting(m, calls)
        result = build_report(planted_model, out, _options(samples))
    assert calls == {"activations": 1}, "finished stages were recomputed"
    assert [s.cached for s in result.stages] == [True, True, False]
    assert _snapshot(out) == reference  # JSON and HTML byte-identical to the uninterrupted run

    calls.clear()
    with monkeypatch.context() as m:
        _counting(m, calls)
        build_report(planted_model, out, _options(samples))                       # all cached
        assert calls == {}
        build_report(planted_model, out, _options(samples, max_positions=16))     # only attention's key changes
        assert calls == {"attention": 1}
        calls.clear()
        build_report(planted_model, out, _options(samples, use_cache=False))      # --no-cache
        assert calls == {"model": 1, "attention": 1, "activations": 1}
    assert _snapshot(out) == reference


def test_changed_sample_text_invalidates_its_stages(report, planted_model, samples, tmp_path, monkeypatch):
    ref_out, _ = report
    out = tmp_path / "r"
    for f in ref_out.rglob("*"):  # start from the finished report
        if f.is_file():
            (out / f.relative_to(ref_out)).parent.mkdir(parents=True, exist_ok=True)
            (out / f.relative_to(ref_out)).write_bytes(f.read_bytes())
    changed = tmp_path / "news.txt"
    changed.write_text("A different text about trains, buses and the weather in the spring.\n")
    calls: dict = {}
    _counting(monkeypatch, calls)
    build_report(planted_model, out, _options([samples[0], changed, samples[2]]))
    assert calls == {"model": 1, "attention": 1, "activations": 1}


def test_refuses_a_foreign_directory(planted_model, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(HeadscopeError, match="already holds other files"):
        build_report(planted_model, tmp_path, ReportOptions(progress=False))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_bad_inputs(planted_model, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9 au lait")
    with pytest.raises(HeadscopeError, match="expected UTF-8"):
        build_report(planted_model, tmp_path / "r1", ReportOptions(samples=[bad], progress=False))
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    with pytest.raises(HeadscopeError, match="empty"):
        build_report(planted_model, tmp_path / "r2", ReportOptions(calibration_text=empty, progress=False))
    with pytest.raises(HeadscopeError, match="neuron 99999 out of range"):
        build_report(planted_model, tmp_path / "r3", ReportOptions(neurons=[99999], stages=["activations"],
                                                                    progress=False))
    with pytest.raises(HeadscopeError, match="unknown report stage"):
        build_report(planted_model, tmp_path / "r4", ReportOptions(stages=["nope"], progress=False))


def test_cli_report(planted_dir, tmp_path, capsys):
    from headscope.cli import main

    out = tmp_path / "r"
    assert main(["report", str(planted_dir), "--out", str(out), "--stages", "model", "--no-progress", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"out_dir", "index", "fingerprint", "stages", "pages", "data_files"}
    assert [s["name"] for s in doc["stages"]] == ["model"] and doc["stages"][0]["cached"] is False
    assert (out / "index.html").is_file()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("x")
    assert main(["report", str(planted_dir), "--out", str(tmp_path / "other"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("headscope: error: ")


def test_default_inputs_ship_with_the_package():
    from headscope.report.inputs import default_calibration, default_samples

    cal = default_calibration()
    assert 1300 <= len(cal.text.split()) <= 1800
    names = [t.name for t in default_samples()]
    assert len(names) >= 4 and "french" in names
    assert [s.name for s in default_stages()][:3] == ["model", "attention", "activations"]
