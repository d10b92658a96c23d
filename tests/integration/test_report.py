"""The HTML report of a planted checkpoint: structure, escaping, cache, interrupt and resume."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

import headscope
from headscope import HeadscopeError, escape_token
from headscope.report import REGISTRY, ReportOptions, build_report, default_stages
from headscope.report.lanes import lanes_for

#: the stages the issue asks for; the report may have more
EXPECTED_STAGES = {"model", "attention", "kernels", "denominators", "calibration", "neurons", "activations",
                   "survey", "semantic", "steering"}

#: every element the report's pages may contain (inline SVG included); anything else is injected markup
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "nav", "main", "footer", "section", "div",
    "span", "p", "a", "h1", "h2", "h3", "table", "caption", "thead", "tbody", "tr", "th", "td", "figure",
    "figcaption", "code", "svg", "rect", "line", "polyline", "polygon", "circle", "text",
    "script", "input", "ul",   # the report's one hashed script, its JSON data blocks, the search box
}


@pytest.fixture(scope="module")
def samples(report_inputs) -> list[Path]:
    """The report's sample texts; its calibration text and fast options go to :func:`_options`
    (tests/conftest.py: report_inputs)."""
    OPTIONS.update(report_inputs["options"])
    return report_inputs["samples"]


OPTIONS: dict = {}


def _options(samples, **kw) -> ReportOptions:
    return ReportOptions(samples=samples, **{**OPTIONS, **kw})


@pytest.fixture(scope="module")
def report(planted_report, samples):
    return planted_report


def _html_files(out: Path) -> list[Path]:
    return sorted(out.rglob("*.html"))


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.hrefs, self.text, self.scripts = set(), [], [], []
        self._script = None

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.hrefs += [v for k, v in attrs if k in ("href", "src")]
        if tag == "script":
            self._script = (dict(attrs), [])

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script[0], "".join(self._script[1])))
            self._script = None

    def handle_data(self, data):
        if self._script is not None:
            self._script[1].append(data)
        else:
            self.text.append(data)


#: our own script elements: the hashed inline script and JSON data blocks (removed before looking for markup)
OWN_SCRIPTS = re.compile(r'<script>.*?</script>|<script type="application/json" id="hs-[a-z-]+">[^<]*</script>', re.S)


def _parse(path: Path) -> _Tags:
    p = _Tags()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_report_pages_and_data(report, planted_model, planted_manifest):
    out, result = report
    cfg = planted_model.cfg
    assert (out / "index.html").is_file()
    heads = sorted(p.name for p in (out / "heads").glob("*.html"))
    assert heads == sorted(f"L{l}H{h}.html" for l in range(2) for h in range(cfg.n_heads))
    neuron_pages = sorted(p.name for p in (out / "neurons").glob("n*.html"))
    assert len(neuron_pages) == 4
    names = {s.name for s in default_stages() if not s.optional}      # what a plain report runs
    assert names >= EXPECTED_STAGES
    assert set(result.data_files) == {f"data/{n}.json" for n in names}
    # the planted mechanisms are what the report shows
    planted = planted_manifest
    kern = json.loads((out / "data/kernels.json").read_text())["data"]
    assert [h["category"] for h in kern["heads"]] == [h["category"] for h in planted["layer0"]["heads"]]
    neu = json.loads((out / "data/neurons.json").read_text())["data"]
    assert neu["heads"] == planted["layer0"]["contextual_heads"]
    planted_neurons = {n["index"] for n in planted["layer0"]["neurons"]}
    shown = [n["neuron"] for n in neu["neurons"]]
    assert set(shown) <= planted_neurons and neuron_pages == sorted(f"n{j}.html" for j in shown)
    act = json.loads((out / "data/activations.json").read_text())["data"]
    assert [n["neuron"] for n in act["neurons"]] == shown        # activations show the contextual neurons
    sem_head = planted["layer1"]["semantic_head"]
    top = json.loads((out / "data/survey.json").read_text())["data"]["rows"][0]
    assert (top["layer"], top["head"]) == (sem_head["layer"], sem_head["head"])
    deep = json.loads((out / "data/semantic.json").read_text())["data"]["heads"][0]
    assert deep["n_negative_top64"] > 0 and deep["leiden"]["ari"] > 0.9
    steer = json.loads((out / "data/steering.json").read_text())["data"]
    assert steer["self_attention_after"] > steer["self_attention_before"] + 0.2
    assert steer["prompt_self_after"] > steer["prompt_self_before"]
    page = (out / "heads" / f"L{sem_head['layer']}H{sem_head['head']}.html").read_text()
    assert "Semantic deep dive" in page and "Attention on the sample texts" in page   # sections merged
    assert "Positional kernel and key split" in (out / "heads/L0H0.html").read_text()
    assert "Softmax denominator" in (out / "heads/L0H0.html").read_text()
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
        assert "default-src 'none'" in text  # CSP: no fetches; the one script allowed by its hash
        from headscope.report.html import CSP, SCRIPT, SCRIPT_HASH
        assert f'content="{CSP}"' in text and "unsafe-inline" not in CSP.split("script-src")[1]
        for attrs, body in p.scripts:   # only the hashed script and JSON data, which parses and holds no markup
            if attrs.get("type") == "application/json":
                assert not set(body) & set("<>&") and json.loads(body) is not None
            else:
                assert attrs == {} and body == SCRIPT
                assert SCRIPT_HASH == "sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert text.count("<script>") == 1, f"{page.name}: the script once per page"
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
    everything = "\n".join(OWN_SCRIPTS.sub("", t) for t in pages.values())
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


def _counting(monkeypatch, calls: dict, fail_in: str | None = None, done: set | None = None):
    default_stages()
    for cls in REGISTRY.values():
        original = cls.compute

        def compute(self, ctx, _original=original, _name=cls.name):
            if _name == fail_in:
                raise KeyboardInterrupt
            calls[_name] = calls.get(_name, 0) + 1
            out = _original(self, ctx)
            if done is not None:
                done.add(_name)
            return out

        monkeypatch.setattr(cls, "compute", compute)


def _snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("lanes", [1, 2])
def test_interrupt_and_resume(report, planted_model, samples, tmp_path, monkeypatch, lanes):
    ref_out, _ = report                               # built side by side (the default on ≥ 2 threads)
    if lanes_for(torch.get_num_threads()) != lanes:   # a stage's bits may depend on its torch thread count
        ref_out = tmp_path / "reference"
        build_report(planted_model, ref_out, _options(samples, lanes=lanes))
    reference = _snapshot(ref_out)
    names = [st.name for st in default_stages() if not st.optional]
    stop = names.index("neurons")                     # interrupted in the middle of the report
    out = tmp_path / "r"
    calls: dict = {}
    done: set = set()
    with monkeypatch.context() as m:
        _counting(m, calls, fail_in="neurons", done=done)
        with pytest.raises(KeyboardInterrupt):
            build_report(planted_model, out, _options(samples, lanes=lanes))
    if lanes == 1:                                    # one at a time, in order: exactly the stages before it
        assert calls == {n: 1 for n in names[:stop]}
    else:                   # exclusive stages first (calibration, survey, atlas): what had started finished too
        assert "calibration" in calls and set(calls.values()) == {1}
    assert done == set(calls) and "neurons" not in done
    before, rest = [n for n in names if n in done], [n for n in names if n not in done]
    assert all((out / f"data/{n}.json").is_file() for n in before)   # every finished stage is kept
    assert not any((out / f"data/{n}.json").exists() for n in rest) and not (out / "index.html").exists()
    assert not [p for p in out.rglob("*.tmp")]  # nothing half-written left behind

    calls.clear()
    with monkeypatch.context() as m:
        _counting(m, calls)
        result = build_report(planted_model, out, _options(samples, lanes=lanes))
    assert calls == {n: 1 for n in rest}, "finished stages were recomputed"
    assert [s.cached for s in result.stages] == [n in before for n in names]
    assert _snapshot(out) == reference  # JSON and HTML byte-identical to the uninterrupted run

    calls.clear()
    with monkeypatch.context() as m:
        _counting(m, calls)
        build_report(planted_model, out, _options(samples))                       # all cached
        assert calls == {}
        build_report(planted_model, out, _options(samples, max_positions=16))     # only attention's key changes
        assert calls == {"attention": 1}
        calls.clear()
        build_report(planted_model, out, _options(samples))                       # back to the reference options
        assert calls == {"attention": 1}
        calls.clear()
        nc = tmp_path / "nc"
        nc.mkdir()
        for f in ("model", "attention"):
            (nc / "data").mkdir(exist_ok=True)
            (nc / f"data/{f}.json").write_bytes((out / f"data/{f}.json").read_bytes())
        for f in (".headscope-report", ".headscope-manifest.json"):   # an earlier report's marker and manifest
            (nc / f).write_bytes((out / f).read_bytes())
        build_report(planted_model, nc, _options(samples, use_cache=False, stages=["model", "attention"]))
        assert calls == {"model": 1, "attention": 1}                              # --no-cache recomputes them
    assert _snapshot(out) == reference
    for f in ("data/model.json", "data/attention.json"):
        assert (nc / f).read_bytes() == reference[f]                              # … to identical JSON


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
    run = [st for st in default_stages() if not st.optional]
    reads_samples = {st.name for st in run if "samples" in st.inputs}
    downstream = {st.name for st in run if set(st.requires) & reads_samples}
    assert reads_samples >= {"model", "attention", "kernels", "neurons"}
    assert calls == {n: 1 for n in reads_samples | downstream}


def test_refuses_a_foreign_directory(planted_model, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(HeadscopeError, match="already holds other files"):
        build_report(planted_model, tmp_path, ReportOptions(progress=False))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_bad_inputs(planted_model, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9 au lait")
    with pytest.raises(HeadscopeError, match="is not UTF-8"):
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
    from headscope import shipped

    cal = shipped.calibration_text()
    assert 1300 <= len(cal.text.split()) <= 1800
    names = [t.name for t in shipped.samples()]
    assert len(names) >= 4 and "french" in names
    names = [s.name for s in default_stages()]
    assert set(names) >= EXPECTED_STAGES and names[:2] == ["model", "attention"]
    assert names.index("calibration") < names.index("neurons") < names.index("activations")


def test_a_stage_in_a_lane_gives_the_numbers_of_its_own_thread_count(planted_model, samples, tmp_path):
    """Two lanes on two torch threads: the exclusive stages (here the survey) run alone on both threads,
    the others (kernels, semantic) side by side on one each. Each stage's data are byte for byte those of
    a run one stage at a time on its own thread count, whatever ran beside it, and two side-by-side runs
    give the same bytes: the plan, not timing, fixes them."""
    names = ["kernels", "survey", "semantic"]
    old = torch.get_num_threads()
    outs = {}
    try:
        for label, threads, lanes in (("lanes", 2, 2), ("again", 2, 2), ("one", 1, 1), ("two", 2, 1)):
            torch.set_num_threads(threads)
            run = names if label != "two" else ["kernels", "survey"]      # (the semantic deep dive is the slow one)
            build_report(planted_model, tmp_path / label, _options(samples, lanes=lanes, stages=run, kernel_windows=4,
                                                                   semantic_tokens=1000, deep_dives=1))
            outs[label] = {n: (tmp_path / label / f"data/{n}.json").read_bytes() for n in run}
    finally:
        torch.set_num_threads(old)
    assert outs["lanes"] == outs["again"]
    by_name = {s.name: s for s in default_stages()}
    for n in names:
        assert outs["lanes"][n] == outs["two" if by_name[n].exclusive else "one"][n], n
    assert [n for n in names if by_name[n].exclusive] == ["survey"]


def test_lanes_by_default_only_where_they_pay(planted_dir, samples, tmp_path, monkeypatch):
    """Two lanes by default on two threads for a model at most LANES_MAX_D_MODEL wide whose blocks are all
    held; one lane when asked, for a wider model, or when a byte budget drops blocks (ReportResult.lanes)."""
    import headscope.report.build as B

    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model = headscope.load(planted_dir)
        opts = dict(stages=["model", "attention"], use_cache=False)
        assert build_report(model, tmp_path / "a", _options(samples, **opts)).lanes == 2
        assert build_report(model, tmp_path / "b", _options(samples, lanes=1, **opts)).lanes == 1
        with monkeypatch.context() as m:
            m.setattr(B, "LANES_MAX_D_MODEL", model.cfg.d_model - 1)
            assert build_report(model, tmp_path / "c", _options(samples, **opts)).lanes == 1
            assert build_report(model, tmp_path / "d", _options(samples, lanes=2, **opts)).lanes == 2
        with monkeypatch.context() as m:
            m.setenv("HEADSCOPE_BLOCK_BUDGET", "1")
            assert build_report(headscope.load(planted_dir), tmp_path / "e", _options(samples, **opts)).lanes == 1
        torch.set_num_threads(1)
        assert build_report(model, tmp_path / "f", _options(samples, **opts)).lanes == 1
    finally:
        torch.set_num_threads(old)
