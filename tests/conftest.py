"""Shared fixtures. Planted checkpoints are built once per test session."""

from __future__ import annotations

import contextlib
import signal

import shutil
import socket
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def planted_dir(tmp_path_factory) -> Path:
    """A GPT-2-small-shaped planted checkpoint (seed 0, 2 layers), built once."""
    from headscope.planted import build

    return build(tmp_path_factory.mktemp("planted") / "seed0", seed=0)


@pytest.fixture(scope="session")
def planted_model(planted_dir):
    import headscope

    return headscope.load(planted_dir)


@pytest.fixture(scope="session")
def planted_manifest(planted_dir) -> dict:
    from headscope.planted.build import read_manifest

    return read_manifest(planted_dir)


@pytest.fixture(scope="session")
def planted3_dir(tmp_path_factory) -> Path:
    """The planted checkpoint with a third layer: layer 2 holds a copying (2.3) and a copy-suppression (2.7) head."""
    from headscope.planted import build

    return build(tmp_path_factory.mktemp("planted3") / "seed0", seed=0, n_layers=3)


@pytest.fixture(scope="session")
def planted3_model(planted3_dir):
    import headscope

    return headscope.load(planted3_dir)


@pytest.fixture(scope="session")
def planted3_manifest(planted3_dir) -> dict:
    from headscope.planted.build import read_manifest

    return read_manifest(planted3_dir)


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory) -> Path:
    """A tiny random HF GPT-2 with all-distinct dimensions, saved by save_pretrained.

    n_layers=2, n_heads=3, d_head=4, d_model=12, d_mlp=20, n_ctx=40, GPT-2's vocabulary.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    from headscope.core.tokenizer import gpt2_bpe_files

    torch.manual_seed(1234)
    cfg = GPT2Config(vocab_size=50257, n_positions=40, n_embd=12, n_layer=2, n_head=3, n_inner=20)
    model = GPT2LMHeadModel(cfg).eval()
    _randomise_biases_and_ln(model)
    out = tmp_path_factory.mktemp("tiny") / "tiny"
    model.save_pretrained(out)
    vocab, merges = gpt2_bpe_files()
    shutil.copyfile(vocab, out / "vocab.json")
    shutil.copyfile(merges, out / "merges.txt")
    return out


def _randomise_biases_and_ln(model) -> None:
    """HF initialises biases to 0 and LayerNorms to 1/0, which would hide bugs in folding."""
    g = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))


@pytest.fixture(scope="session")
def planted_hf(planted_dir):
    """The planted checkpoint in HF transformers (eager attention, so attentions are returned)."""
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(planted_dir, attn_implementation="eager").eval()


@pytest.fixture(scope="session")
def tiny(tiny_hf_dir):
    """headscope's view of the tiny all-distinct-dimensions checkpoint."""
    import headscope

    return headscope.load(tiny_hf_dir)


#: a sample text full of markup: the report must escape every token of it
REPORT_MARKUP = ("Breaking: <script>alert(1)</script> and <img src=x onerror=alert(2)> & \"quoted\" ></div><b>bold</b>\n")
#: the planted report's fast options (tests/integration/test_report.py, test_report_browser.py)
REPORT_FAST = dict(progress=False, n_neurons=4, deep_dives=1, semantic_tokens=1500, kernel_windows=4, atlas_tokens=500)


@pytest.fixture(scope="session")
def random_model(tmp_path_factory):
    """Random weights at realistic scales in the hub's layout (2 layers, d_model 320, 5 heads, n_ctx 128,
    d_mlp 448): the random component the claim rows' nulls must not let pass (test_claims_nulls*.py)."""
    import headscope
    from headscope.testing.hub import write_hub_checkpoint

    d = write_hub_checkpoint(tmp_path_factory.mktemp("random") / "r", n_layer=2, n_embd=320, n_head=5, n_ctx=128,
                             n_inner=448, seed=11)
    return headscope.load(d)


@pytest.fixture(scope="session")
def report_inputs(tmp_path_factory) -> dict:
    """The planted report's inputs: three sample texts (one full of markup, one with an odd file
    name) and, in ``options``, a short calibration text (the first 450 words of the shipped one:
    it keeps the tests fast) with :data:`REPORT_FAST`."""
    from headscope.shipped import calibration_text

    d = tmp_path_factory.mktemp("samples")
    (d / "markup.txt").write_text(REPORT_MARKUP + "The shop on the high street sells bread, milk and newspapers.\n")
    (d / "news.txt").write_text("The council approved the new budget on Tuesday after a long debate about "
                                "roads, schools and the local library, which will stay open on Sundays.\n")
    (d / "<i>odd&name.txt").write_text("Rain is expected tomorrow across the north, with sunshine later.\n")
    cal = tmp_path_factory.mktemp("calibration") / "calibration.txt"
    cal.write_text(" ".join(calibration_text().text.split()[:450]) + "\n")
    return {"samples": [d / "markup.txt", d / "news.txt", d / "<i>odd&name.txt"], "markup": REPORT_MARKUP,
            "options": {"calibration_text": cal, **REPORT_FAST}}


@pytest.fixture(scope="session")
def planted_report(planted_model, report_inputs, tmp_path_factory):
    """(directory, ReportResult) of the planted checkpoint's report on :func:`report_inputs`, built
    once for the test_report and the browser tests. Read it; write to a copy."""
    from headscope.report import ReportOptions, build_report

    out = tmp_path_factory.mktemp("report") / "r"
    return out, build_report(planted_model, out, ReportOptions(samples=report_inputs["samples"],
                                                               **report_inputs["options"]))


@pytest.fixture()
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""
    def refuse(*a, **k):
        raise AssertionError("headscope tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


# -- checks of what headscope writes (robustness tests) ----------------------------------------

#: HTML elements that never have a closing tag
_VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col", "area", "base", "source"}
#: a number attribute of SVG/HTML that holds NaN or inf (a figure drawn from an undefined value)
_BAD_NUMBER_ATTR = r'\b(?:x|y|x1|x2|y1|y2|cx|cy|r|width|height|points|transform|viewBox)="[^"]*(?:nan|inf)'


def _check_html(path: Path) -> None:
    import re
    from html.parser import HTMLParser

    class Balanced(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.stack, self.errors = [], []

        def handle_starttag(self, tag, attrs):
            if tag not in _VOID:
                self.stack.append(tag)

        def handle_endtag(self, tag):
            if not self.stack or self.stack[-1] != tag:
                self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else '(nothing)'}>")
            else:
                self.stack.pop()

    text = path.read_text(encoding="utf-8")
    p = Balanced()
    p.feed(text)
    p.close()
    assert not p.errors and not p.stack, f"{path}: unbalanced HTML ({p.errors[:3]}, open {p.stack[-3:]})"
    bad = re.search(_BAD_NUMBER_ATTR, text, flags=re.IGNORECASE)
    assert bad is None, f"{path}: a figure drawn from a non-finite value: {text[bad.start():bad.start() + 120]!r}"


def _reject_constant(name):
    raise AssertionError(f"JSON holds {name}")


def check_report_dir(out: Path) -> dict[str, dict]:
    """Every data/*.json of a report parses without NaN/Infinity and holds a null only where its stage
    declares one (``Stage.nullable``); every page is balanced HTML with finite figure coordinates.
    Returns {stage: data}."""
    import json

    from headscope._json import assert_finite_json
    from headscope.report import default_stages

    stages = {s.name: s for s in default_stages()}
    out = Path(out)
    datas = {}
    for f in sorted((out / "data").glob("*.json")):
        doc = json.loads(f.read_text(encoding="utf-8"), parse_constant=_reject_constant)
        assert_finite_json(doc["data"], stages[f.stem].nullable, what=f"data/{f.name}")
        datas[f.stem] = doc["data"]
    pages = sorted(out.rglob("*.html"))
    assert (out / "index.html") in pages
    for page in pages:
        _check_html(page)
    return datas


@pytest.fixture(scope="session")
def check_report():
    """:func:`check_report_dir`: the finiteness and HTML checks of a written report."""
    return check_report_dir


@contextlib.contextmanager
def _time_limit(seconds: int, what: str = "the block"):
    """Fail with TimeoutError instead of hanging if the block runs longer than `seconds`
    (a FIFO opened, /dev/zero read)."""
    def fire(signum, frame):
        raise TimeoutError(f"{what}: still running after {seconds} s (it hangs)")
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="session")
def alarm():
    """``with alarm(seconds, what):`` — the block fails instead of hanging."""
    return _time_limit
