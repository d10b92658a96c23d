"""Seed-000 key split and positional kernels, recovered on the planted checkpoint.

Bounds reached on the planted seed-0 checkpoint (sample corpus + test texts, measured c):
contextual heads' TV median ≈ 0.011, p90 ≈ 0.014; tested against 0.02 / 0.03.
"""

from __future__ import annotations

import json

import pytest
import torch

import headscope
from headscope.layer0 import kernels, split as layer0
from headscope.corpus import windows
from headscope.shipped import sample_corpus

pytestmark = pytest.mark.slow

EXTRA_TEXT = (
    "The team won the match after a late goal, and the coach praised the players. "
    "Meanwhile the council said the colour of the new centre would honour the labour movement, "
    "while in the kitchen the cook baked bread with butter, flour and a little salt. " * 3
)


@pytest.fixture(scope="module")
def corpus_windows(planted_model):
    return windows(planted_model, sample_corpus() + [("extra", EXTRA_TEXT)], n_ctx=300)


@pytest.fixture(scope="module")
def report(planted_model, corpus_windows):
    return kernels.analyse_kernels(planted_model, windows=corpus_windows)


@pytest.fixture(scope="module")
def w64(planted_model):
    return planted_model.weights().to(dtype=torch.float64)


def test_categories_match_manifest(report, planted_manifest):
    planted = {h["head"]: h for h in planted_manifest["layer0"]["heads"]}
    assert len(report.heads) == len(planted)
    for h in report.heads:
        assert h.category == planted[h.head]["category"], (h.head, h.width)


def test_decay_rate_recovers_planted_kappa(report, planted_manifest):
    for h, p in zip(report.heads, planted_manifest["layer0"]["heads"]):
        if p["kappa"] == 0:
            assert abs(h.decay_rate) < 0.005, (h.head, h.decay_rate)
        else:
            assert h.decay_rate == pytest.approx(p["kappa"], rel=0.1), (h.head, h.decay_rate)


def test_contextual_heads_share_a_broad_kernel_with_small_tv(report, planted_manifest):
    ctx = planted_manifest["layer0"]["contextual_heads"]
    widths = [report.heads[h].width for h in ctx]
    assert max(widths) / min(widths) < 1.05
    for h in ctx:
        assert report.heads[h].tv_median < 0.02 and report.heads[h].tv_p90 < 0.03, h
        assert report.heads[h].translation_tv < 0.02 and report.heads[h].query_tv < 0.03


def test_keyword_heads_have_the_strongest_content_dependence(report, planted_manifest):
    kw = set(planted_manifest["layer0"]["keyword_heads"])
    boosts = {h.head: h.content_boost for h in report.heads}
    assert min(boosts[h] for h in kw) > 1.5
    assert max(b for h, b in boosts.items() if h not in kw) < 0.5


def test_split_exact_at_i_equals_n(planted_model, w64, corpus_windows):
    tokens = corpus_windows[0][:120]
    cache = headscope.run_with_cache(w64, tokens[None], names=["blocks.0.attn.hook_k"], stop_at_layer=1)
    k = cache["blocks.0.attn.hook_k"][0]                                   # [p h e]
    c, _ = layer0.resolve_c(w64)
    for n in (0, 1, 17, 119):
        E, P = layer0.key_split(w64, tokens, n, c)                        # [h i e]
        torch.testing.assert_close(E[:, n] + P[:, n], k[n], rtol=1e-9, atol=1e-9)
        assert P[:, n].abs().max() == 0
    # …and only approximate elsewhere (the test can tell)
    E, P = layer0.key_split(w64, tokens, 119, c)
    assert (E[:, :100] + P[:, :100] - k[:100].transpose(0, 1)).abs().max() > 1e-3


def test_vectorised_scores_match_the_per_position_split(w64, corpus_windows):
    tokens = corpus_windows[0][:60]
    c = 3.0
    content, position = layer0.split_scores(w64, tokens, c)               # [h q k]
    q = layer0.queries(w64, tokens)                                        # [p h e]
    div = w64.cfg.d_head ** 0.5
    for n in (5, 59):
        E, P = layer0.key_split(w64, tokens, n, c)
        torch.testing.assert_close(content[:, n, : n + 1], torch.einsum("he,hie->hi", q[n], E) / div)
        torch.testing.assert_close(position[:, n, : n + 1], torch.einsum("he,hie->hi", q[n], P) / div)


def test_approx_patterns_are_causal_distributions(planted_model, corpus_windows):
    W = planted_model.weights()
    A = layer0.approx_pattern(W, corpus_windows[0][:200], 3.0)
    torch.testing.assert_close(A.sum(-1), torch.ones(A.shape[:2]))
    assert (A >= 0).all()
    assert A.triu(1).abs().max() == 0
    # the seed's factorisation: attn_approx = pos · content / Σ_j pos · content
    pos = layer0.text_positional_kernels(W, corpus_windows[0][:200], 3.0)
    con = layer0.text_content_factors(W, corpus_windows[0][:200], 3.0)
    torch.testing.assert_close(A, pos * con / (pos * con).sum(-1, keepdim=True))


def test_tv_two_ways_agree(planted_model, planted_dir, corpus_windows):
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(planted_dir, attn_implementation="eager").eval()

    def hf_pattern(tokens):
        with torch.no_grad():
            return hf(tokens[None], output_attentions=True).attentions[0][0]

    W = planted_model.weights()
    wins = corpus_windows[:2]
    ours = kernels.corpus_tv(W, wins, 3.0)
    theirs = kernels.corpus_tv(W, wins, 3.0, patterns=hf_pattern)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=0)


def test_wrong_c_makes_tv_worse(planted_model, corpus_windows, report):
    """The TV bound is informative: c far from the token norm breaks the split."""
    bad = kernels.analyse_kernels(planted_model, c=1.0, windows=corpus_windows[:1])
    for h in (0, 3, 9):
        assert bad.heads[h].tv_median > 5 * report.heads[h].tv_median


def test_c_sources(planted_model):
    W = planted_model.weights()
    c, src = layer0.resolve_c(W)
    norms = (W.W_E - W.W_E.mean(-1, keepdim=True)).norm(dim=-1)
    assert src == "measured" and c == pytest.approx(float(norms.median()))
    assert layer0.resolve_c(W, "gpt2") == (3.5, "gpt2")
    assert layer0.resolve_c(W, 2.5) == (2.5, "given")
    with pytest.raises(headscope.HeadscopeError):
        layer0.resolve_c(W, -1)


def test_report_records_dependencies(report, planted_model):
    d = report.to_dict()
    assert d["fingerprint"] == planted_model.fingerprint
    assert d["processing"] == headscope.Processing.default().to_dict()
    assert d["c_source"] == "measured" and d["rule"]["local_max_width"] == kernels.LOCAL_MAX_WIDTH
    assert {"head", "category", "width", "tv_median", "tv_p90"} <= set(d["heads"][0])


# -- CLI ---------------------------------------------------------------------------------


def _cli(argv, capsys):
    from headscope.cli import main

    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_json_and_figures(planted_dir, planted_manifest, tmp_path, capsys):
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text(EXTRA_TEXT, encoding="utf-8")
    rc, out, err = _cli(["kernels", str(planted_dir), "--corpus", str(tmp_path / "texts"), "--json",
                         "--out", str(tmp_path / "k")], capsys)
    assert rc == 0, err
    d = json.loads(out)
    cats = [h["category"] for h in d["heads"]]
    assert cats == [h["category"] for h in planted_manifest["layer0"]["heads"]]
    assert all(h["tv_median"] is not None and h["tv_p90"] >= h["tv_median"] for h in d["heads"])
    assert json.loads((tmp_path / "k" / "kernels.json").read_text()) == d
    for f in ("kernels.svg", "tv_hist.svg", "tv_position.svg"):
        assert (tmp_path / "k" / f).read_text().startswith("<svg")


@pytest.mark.parametrize("case", ["empty", "non_utf8", "layer", "layer1", "query"])
def test_cli_bad_input(case, planted_dir, tmp_path, capsys):
    args = ["kernels", str(planted_dir)]
    if case == "empty":
        (tmp_path / "empty").mkdir()
        args += ["--corpus", str(tmp_path / "empty")]
    elif case == "non_utf8":
        (tmp_path / "bad.txt").write_bytes(b"caf\xe9 au lait")
        args += ["--corpus", str(tmp_path / "bad.txt")]
    elif case == "layer":
        args += ["--layer", "7"]
    elif case == "layer1":
        args += ["--layer", "1"]
    else:
        args += ["--query", " the cat"]
    rc, out, err = _cli(args, capsys)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headscope: error: ")
    expected = {"empty": "empty corpus", "non_utf8": "not UTF-8", "layer": "out of range",
                "layer1": "layer 0 only", "query": "single token"}[case]
    assert expected in lines[0]
