"""The atlas on planted checkpoints (ground truth), against direct n × n computations, and on
checkpoints whose statistics were not chosen for it (hub-layout random weights, fuzzed scales)."""

from __future__ import annotations

import html
import importlib
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import headscope
from headscope.semantic import bilinear
from headscope._json import dumps
from headscope.semantic.prompts import prompts_for

A = importlib.import_module("headscope.maps.atlas")   # the module (headscope.atlas itself is the function)


@pytest.fixture(scope="module")
def planted_atlas(planted3_model):
    return A.atlas(planted3_model)                        # the defaults: every layer, N = 2000


def _rows(at, layer):
    return [r for r in at.rows if r.layer == layer]


# -- the planted mechanisms ------------------------------------------------------------------


@pytest.mark.slow
def test_every_head_of_every_layer(planted_atlas, planted3_model):
    cfg = planted3_model.cfg
    assert [(r.layer, r.head) for r in planted_atlas.rows] == [(l, h) for l in range(3) for h in range(cfg.n_heads)]
    assert planted_atlas.spec["n_tokens"] == A.DEFAULT_TOKENS and planted_atlas.layers == [0, 1, 2]
    d = json.loads(dumps(planted_atlas))
    assert d["rows"][0]["kernel_category"] is not None and d["rows"][12]["kernel_category"] is None


@pytest.mark.slow
def test_semantic_head_has_the_most_negative_self_score_of_its_layer(planted_atlas, planted3_manifest):
    sem = planted3_manifest["layer1"]["semantic_head"]
    layer = _rows(planted_atlas, sem["layer"])
    lowest = min(layer, key=lambda r: r.qk_self)
    assert (lowest.layer, lowest.head) == (sem["layer"], sem["head"])
    # planted: self / copy logit −6 against partners +12 — far below every random head
    others = [abs(r.qk_self) for r in planted_atlas.rows if (r.layer, r.head) != (sem["layer"], sem["head"])]
    assert lowest.qk_self < -10 * max(others)
    # the rows that count are the planted category words among the frequent tokens
    planted_ids = {i for c in planted3_manifest["layer1"]["categories"].values() for i in c["ids"]}
    freq = headscope.frequent_tokens(headscope.bundled_gpt2_tokenizer(), A.DEFAULT_TOKENS)
    assert lowest.n_self_rows == len(planted_ids & set(freq))


@pytest.mark.slow
@pytest.mark.parametrize("column", ["ov_copying_effective", "ov_copying_framework"])
def test_copy_heads_have_the_extreme_copying_scores(planted_atlas, planted3_manifest, column):
    heads = planted3_manifest["layer2"]["copy_heads"]
    value = lambda r: getattr(r, column)                                              # noqa: E731
    rows = [r for r in planted_atlas.rows if value(r) is not None]
    top, bottom = max(rows, key=value), min(rows, key=value)
    assert (top.layer, top.head) == (heads["copying"]["layer"], heads["copying"]["head"])
    assert (bottom.layer, bottom.head) == (heads["copy_suppression"]["layer"], heads["copy_suppression"]["head"])
    assert value(top) > 0.9 and value(bottom) < -0.9          # construction: eigenvalues of one sign
    planted = {(top.layer, top.head), (bottom.layer, bottom.head)}
    assert max(abs(value(r)) for r in rows if (r.layer, r.head) not in planted) < 0.5
    # layer-0 contextual heads carry only planted value dims that W_U cannot read: OV circuit 0
    # (to rounding: the centred W_U meets W_O·1 = 0 only to float precision)
    ctx = planted3_manifest["layer0"]["contextual_heads"]
    assert all(value(planted_atlas.row(0, h)) is None for h in ctx)


@pytest.mark.slow
def test_negative_mass_separates_the_semantic_head(planted_atlas, planted3_manifest):
    """qk_negative_mass: the self-suppressing semantic head stands out; the negative-λ share cannot (inertia)."""
    sem = planted3_manifest["layer1"]["semantic_head"]
    r = planted_atlas.row(sem["layer"], sem["head"])
    others = [x.qk_negative_mass for x in planted_atlas.rows if x is not r]
    assert r.qk_negative_mass > max(others) + 0.08           # measured 0.631 against ≤ 0.512
    assert all(0.45 < x < 0.55 for x in others)


@pytest.mark.slow
def test_planted_k_composition_is_the_strongest_edge(planted3_model, planted3_manifest):
    from headscope.maps import composition

    edge = planted3_manifest["layer2"]["k_composition"]
    c = composition.composition(planted3_model)
    top = c.edges["K"][0]
    assert top.source == (edge["writer"]["layer"], edge["writer"]["head"])
    assert top.target == (edge["reader"]["layer"], edge["reader"]["head"])
    assert top.score > 1.5 * c.edges["K"][1].score             # measured 0.126 against 0.060
    for mode in ("Q", "V"):                                    # nothing planted there: no edge that strong
        assert c.edges[mode][0].score < 0.75 * top.score


@pytest.mark.slow
def test_exactly_symmetric_head(planted_atlas, planted3_manifest, planted3_model):
    sem = planted3_manifest["layer1"]["semantic_head"]
    form = planted3_manifest["layer1"]["bilinear_form"]
    r = planted_atlas.row(sem["layer"], sem["head"])
    assert r.qk_symmetry == pytest.approx(1.0, abs=1e-12) and r.qk_skew_rms < 1e-12 * r.qk_sym_rms
    assert (r.n_negative_top, r.n_eigen_top) == (form["n_negative"], form["rank"])
    assert r.qk_negative_fraction == pytest.approx(form["n_negative"] / form["rank"])
    s = planted3_model.cfg.attn_scale(1)
    lam = torch.tensor(r.qk_eigenvalues) * s                           # back to W_Q W_Kᵀ units
    assert torch.allclose(lam[lam > 0], torch.tensor(form["positive_eigenvalue"]), rtol=1e-4)
    assert torch.allclose(lam[lam < 0], torch.tensor(form["negative_eigenvalue"]), rtol=1e-4)
    assert max(x.qk_symmetry for x in planted_atlas.rows if x is not r) < 0.9   # random heads: about ½


@pytest.mark.slow
def test_kernel_categories_and_positional_share_of_layer_0(planted_atlas, planted3_manifest):
    planted = planted3_manifest["layer0"]["heads"]
    assert [r.kernel_category for r in _rows(planted_atlas, 0)] == [h["category"] for h in planted]
    for r, h in zip(_rows(planted_atlas, 0), planted):
        if h["category"] == "uniform":        # no position channel planted
            assert r.positional_share < 0.1, r
        else:                                 # position gains set for the kernel's decay rate
            assert r.positional_share > 0.5, r
    # deeper layers read no position block on purpose: content dominates
    assert all(r.positional_share < 0.1 for r in planted_atlas.rows if r.layer > 0)


@pytest.mark.slow
def test_low_rank_eigenvalues_match_the_d_by_d_decomposition(planted_atlas, planted3_model):
    W = planted3_model.weights()
    for l, h in [(0, 0), (0, 6), (1, 5), (2, 3), (2, 10)]:
        form = bilinear.bilinear_form(bilinear.qk_matrix(W, l, h), l, h)
        r = planted_atlas.row(l, h)
        assert (r.n_negative_top, r.n_eigen_top) == (form.n_negative_top, min(form.top, len(form.eigenvalues)))
        want = form.eigenvalues[: len(r.qk_eigenvalues)] / planted3_model.cfg.attn_scale(l)
        torch.testing.assert_close(torch.tensor(r.qk_eigenvalues, dtype=torch.float64), want, rtol=1e-6, atol=1e-9)


# -- every metric against a direct n × n computation --------------------------------------------


def _direct(model, layer, head, ids):
    """qk_symmetry, qk_self, ov_copying_effective from the n × n matrices themselves (no identity used)."""
    W = model.weights()
    prompts, _ = prompts_for(model, None, n_prompts=A.PROMPTS, length=16, seed=A.SEED)
    means = bilinear.mean_attn_outputs(W, prompts.tokens, layer)
    X = bilinear.effective_embeddings(W, layer, ids, attn_means=means).double()    # [n d]
    b = W.blocks[layer]
    Q, K = X @ b.W_Q[head].double(), X @ b.W_K[head].double()
    B = Q @ K.T
    sym, skew = ((B + B.T) / 2).norm(), ((B - B.T) / 2).norm()
    S = (Q + b.b_Q[head].double()) @ (K + b.b_K[head].double()).T
    z = (S.diagonal() - S.mean(1)) / S.std(1, unbiased=False)
    M = X @ b.W_V[head].double() @ b.W_O[head].double() @ W.W_U[:, ids].double()  # [n n]
    lam = torch.linalg.eigvals(M)
    return float(sym / (sym + skew)), float(z.mean()), float(lam.real.sum() / lam.abs().sum())


def test_metrics_equal_direct_computation_on_the_tiny_model(tiny):
    n = 120
    at = A.atlas(tiny, n_tokens=n)
    ids = torch.tensor(headscope.frequent_tokens(tiny.tokenizer, n))
    for r in at.rows:
        symm, self_z, copying = _direct(tiny, r.layer, r.head, ids)
        assert r.qk_symmetry == pytest.approx(symm, rel=1e-9)
        assert r.qk_self == pytest.approx(self_z, rel=1e-8, abs=1e-10) and r.n_self_rows == n
        assert r.ov_copying_effective == pytest.approx(copying, rel=1e-7, abs=1e-9)
        assert 0 <= r.positional_share <= 1 and 0 <= r.qk_negative_fraction <= 1


def test_layer0_positional_share_is_the_seed_split(tiny):
    from headscope.layer0 import split as layer0

    at = A.atlas(tiny, [0], n_tokens=90)
    ids = torch.tensor(headscope.frequent_tokens(tiny.tokenizer, 90))
    P = min(A.WINDOW, tiny.cfg.n_ctx)
    win = ids[torch.from_numpy(np.random.default_rng(A.SEED).integers(0, 90, size=P))]
    view = layer0.view(tiny)
    content, position = layer0.split_scores(view, win, layer0.measure_c(view))
    for h, r in enumerate(at.rows):
        vp = vc = 0.0
        for q in range(1, P):
            vp += float(position[h, q, : q + 1].var(unbiased=False))
            vc += float(content[h, q, : q + 1].var(unbiased=False))
        assert r.positional_share == pytest.approx(vp / (vp + vc), rel=1e-9)


# -- checkpoints whose statistics headscope did not choose ---------------------------------------


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    """Hub-layout random GPT-2 (3 layers, 4 heads, d 48, heavy-tailed scales); layer 0's attention zeroed."""
    from headscope.testing.hub import write_hub_checkpoint

    out = write_hub_checkpoint(tmp_path_factory.mktemp("hub") / "fuzz", n_layer=3, n_embd=48, n_head=4, n_ctx=64,
                               seed=5, scales={"h.0.attn.c_attn.weight": 0.0, "h.0.attn.c_proj.weight": 0.0,
                                               "h.1.attn.c_attn.weight": 40.0, "h.2.mlp.c_fc.weight": 1e-3,
                                               "wte.weight": 7.0})
    return headscope.load(out)


def test_unplanted_checkpoint_numbers_are_in_range_or_not_applicable(fuzzed):
    at = A.atlas(fuzzed, n_tokens=300)
    text = dumps(at)
    assert "NaN" not in text and "Infinity" not in text
    for r in at.rows:
        if r.layer == 0:   # W_Q = W_K = W_V = 0: no form, no OV circuit, scores constant in every row
            assert (r.qk_symmetry, r.qk_self, r.n_self_rows, r.qk_negative_fraction, r.ov_copying_effective,
                    r.positional_share) == (None, None, 0, None, None, None), r
            assert r.kernel_category is not None        # a uniform kernel is still a kernel
            continue
        assert 0 <= r.qk_symmetry <= 1 and 0 <= r.qk_negative_fraction <= 1 and 0 <= r.positional_share <= 1
        assert -1 <= r.ov_copying_effective <= 1 and math.isfinite(r.qk_self) and r.n_self_rows == 300
        assert 0.05 < r.qk_symmetry < 0.95                # random W_Q, W_K: neither symmetric nor skew
        # Sylvester's inertia: 2·d_head = 24 ≤ 64 nonzero eigenvalues, half of each sign
        assert r.qk_negative_fraction == 0.5 and r.n_eigen_top == 2 * fuzzed.cfg.d_head
    assert re.search(r"^\s+0\.0\s+n/a\s+n/a\s+n/a\s+n/a\s+n/a", at.render(), re.M)
    assert dumps(A.atlas(fuzzed, n_tokens=300)) == text   # deterministic, byte for byte


def test_symmetric_and_antisymmetric_edits_of_a_random_head(fuzzed):
    """W_K := W_Q makes W_QK = W_Q W_Qᵀ: symmetric, PSD (no negative eigenvalue), self score > 0."""
    import dataclasses

    W = fuzzed.weights()
    blocks = list(W.blocks)
    b = dataclasses.replace(blocks[1], W_K=blocks[1].W_Q.clone(), b_Q=torch.zeros_like(blocks[1].b_Q))
    blocks[1] = b
    model = dataclasses.replace(fuzzed, _processed={})
    model._processed[headscope.Processing.default()] = dataclasses.replace(W, blocks=blocks)
    at = A.atlas(model, [1], n_tokens=200)
    for r in at.rows:
        assert r.qk_symmetry == pytest.approx(1.0, abs=1e-12) and r.n_negative_top == 0
        assert r.qk_self > 0


# -- the command -----------------------------------------------------------------------------------


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "headscope", *args], capture_output=True, text=True, timeout=600)


def test_command(tiny_hf_dir, tmp_path, capsys):
    """``python -m headscope atlas`` (a process); its text output and the refusals through the same
    main() in this process (one line on stderr, exit status 2: an exception here would fail the test
    as a traceback would)."""
    from headscope.cli import main

    p = _cli("atlas", str(tiny_hf_dir), "--layers", "1", "--tokens", "50", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["layers"] == [1] and [r["head"] for r in d["rows"]] == [0, 1, 2] and d["spec"]["n_tokens"] == 50
    capsys.readouterr()
    assert main(["atlas", str(tiny_hf_dir), "--tokens", "50"]) == 0
    text = capsys.readouterr()
    assert re.search(r"layer 1: most negative self score L1H\d", text.out) and "Traceback" not in text.err
    for args, msg in [(["--tokens", "1"], "--tokens: expected ≥ 2"), (["--layers", "2"], "layer 2 out of range"),
                      (["--layers", "x"], "invalid int value")]:
        try:
            code = main(["atlas", str(tiny_hf_dir), *args])
        except SystemExit as e:                        # argparse's own refusals exit
            code = e.code
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("headscope: error:") and msg in err and err.count("\n") == 1, err
    code = main(["report", str(tiny_hf_dir), "--out", str(tmp_path / "r"), "--atlas-tokens", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "headscope: error: --atlas-tokens: expected ≥ 2, got 1" in err
    assert not (tmp_path / "r").exists()


# -- the report's atlas page --------------------------------------------------------------------


@pytest.fixture(scope="module")
def atlas_report(planted3_model, tmp_path_factory):
    from headscope.report import ReportOptions, build_report

    out = tmp_path_factory.mktemp("atlas-report") / "r"
    build_report(planted3_model, out, ReportOptions(stages=["atlas"], progress=False, atlas_tokens=400))
    return out


def _json_block(page: str, id: str):
    m = re.search(rf'<script type="application/json" id="{id}">([^<]*)</script>', page)
    assert m, id
    return json.loads(m.group(1))


@pytest.mark.slow
def test_atlas_page_grids_tooltips_and_links(atlas_report, planted3_model):
    out = atlas_report
    cfg = planted3_model.cfg
    names = [f"L{l}H{h}" for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
    assert sorted(p.stem for p in (out / "heads").glob("*.html")) == sorted(names)    # a page for every head
    page = (out / "atlas.html").read_text()
    data = json.loads((out / "data/atlas.json").read_text())["data"]
    cells = re.findall(r'<a class="cell" href="heads/(L\d+H\d+)\.html" data-head="(L\d+H\d+)"', page)
    assert cells and all(a == b for a, b in cells)
    n_grids = len(re.findall(r'<div class="gridfig" id="grid-', page))
    assert n_grids == 7 and len(cells) == n_grids * len(names)      # no survey / kernels stage ran: 7 metrics
    tips = _json_block(page, "hs-atlas-data")
    assert sorted(tips) == sorted(names)
    row = next(r for r in data["rows"] if (r["layer"], r["head"]) == (2, 7))
    assert f"OV copying (effective): {row['ov_copying_effective']:.4g}" in tips["L2H7"] and tips["L2H7"].startswith("L2H7 (layer 2, head 7)")
    search = _json_block(page, "hs-search-data")
    assert ["L2H3", search[names.index("L2H3")][1], "heads/L2H3.html"] in search
    head = (out / "heads/L2H7.html").read_text()
    assert "Atlas: the head from its weights" in head and 'href="../atlas.html#grid-qk_self"' in head
    # the head's singular directions, read through the vocabulary: the copying head reads and writes the same
    # tokens, the copy-suppression head writes (−) what it reads (+)
    for name, writes in (("L2H3", "writes"), ("L2H7", "writes_neg")):
        d = next(r for r in data["rows"] if f"L{r['layer']}H{r['head']}" == name)["directions"]["ov_directions"][0]
        assert d["reads"] == d[writes], (name, d)
        page = (out / f"heads/{name}.html").read_text()
        assert "reads (+)" in page and "queries (+)" in page and html.escape(repr(d["reads"][0])) in page
    index = (out / "index.html").read_text()
    assert 'href="atlas.html"' in index and len(re.findall(r'class="cell"', index)) == 2 * len(names)


@pytest.mark.slow
def test_atlas_stage_is_cached_and_deterministic(atlas_report, planted3_model, tmp_path):
    from headscope.report import ReportOptions, build_report

    before = {p.relative_to(atlas_report): p.read_bytes() for p in atlas_report.rglob("*") if p.is_file()}
    res = build_report(planted3_model, atlas_report, ReportOptions(stages=["atlas"], progress=False, atlas_tokens=400))
    assert [s.cached for s in res.stages] == [True]
    fresh = tmp_path / "fresh"
    build_report(planted3_model, fresh, ReportOptions(stages=["atlas"], progress=False, atlas_tokens=400,
                                                      use_cache=False))
    after = {p.relative_to(fresh): p.read_bytes() for p in fresh.rglob("*") if p.is_file()}
    assert after == before                                        # recomputed: byte-identical JSON and HTML
    res = build_report(planted3_model, atlas_report, ReportOptions(stages=["atlas"], progress=False, atlas_tokens=300))
    assert [s.cached for s in res.stages] == [False]              # the token count is part of the key


@pytest.mark.slow
def test_random_gpt2_small_shaped_heads_sit_at_one_half(tmp_path):
    """At GPT-2 small's shape (d 768, 12 heads of 64) random heads give qk_negative_mass ≈ 0.5 — the value the
    semantic head is measured against — and a negative-λ share near 0.5 (2·d_head = 128 > TOP: not exactly)."""
    from headscope.testing.hub import write_hub_checkpoint

    model = headscope.load(write_hub_checkpoint(tmp_path / "rand", n_layer=2, n_embd=768, n_head=12, n_ctx=64, seed=11))
    at = A.atlas(model, n_tokens=500, kernels=False)
    mass = [r.qk_negative_mass for r in at.rows]
    frac = [r.qk_negative_fraction for r in at.rows]
    assert all(0.45 < m < 0.55 for m in mass), mass
    assert all(0.4 < f < 0.6 for f in frac), frac


def test_logit_diff_column_is_the_direct_computation(tiny):
    n = 80
    at = A.atlas(tiny, n_tokens=n, logit_diff=(" Mrs", " Mr"))
    ids = torch.tensor(headscope.frequent_tokens(tiny.tokenizer, n))
    W = tiny.weights()
    a, b = tiny.tokenizer.encode(" Mrs")[0], tiny.tokenizer.encode(" Mr")[0]
    u = W.W_U[:, a].double() - W.W_U[:, b].double()
    prompts, _ = prompts_for(tiny, None, n_prompts=A.PROMPTS, length=16, seed=A.SEED)
    for l in range(tiny.cfg.n_layers):
        means = bilinear.mean_attn_outputs(W, prompts.tokens, l)
        X = bilinear.effective_embeddings(W, l, ids, attn_means=means).double()
        for h in range(tiny.cfg.n_heads):
            blk = W.blocks[l]
            v = X @ blk.W_V[h].double() @ blk.W_O[h].double() @ u                          # [n]
            r = at.row(l, h)
            assert r.dla_logit_diff == pytest.approx(float(v.mean()), rel=1e-6, abs=1e-9)
            assert r.dla_top_token == int(ids[int(v.argmax())])
    assert at.spec["logit_diff"] == {"tokens": [" Mrs", " Mr"], "ids": [a, b]}
    assert A.atlas(tiny, [0], n_tokens=n).rows[0].dla_logit_diff is None          # on demand only
    with pytest.raises(headscope.HeadscopeError, match="logit diff"):
        A.atlas(tiny, [0], n_tokens=n, logit_diff=(" Mrs", "Mrs. Smith's"))


def test_composition_and_logit_diff_commands(tiny_hf_dir, tiny, capsys):
    from headscope.cli import main
    from headscope.maps import composition

    p = _cli("composition", str(tiny_hf_dir), "--edges", "4", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    want = composition.composition(tiny, k=4)
    got = [(e["source"], e["target"], e["score"]) for e in d["edges"]["K"]]
    assert [list(g[:2]) for g in got] == [[list(e.source), list(e.target)] for e in want.edges["K"]]
    assert [g[2] for g in got] == pytest.approx([e.score for e in want.edges["K"]], rel=1e-6)
    assert len(d["edges"]["V"]) == 4 and d["scores"]["Q"][1][0][0][0] == 0.0     # no layer-1 → layer-0 edge
    p = _cli("atlas", str(tiny_hf_dir), "--layers", "1", "--tokens", "50", "--logit-diff", " Mrs", " Mr")
    assert p.returncode == 0 and "DLA A−B" in p.stdout, p.stderr
    # the refusals through the same main() in this process: one line on stderr, exit status 2
    assert main(["atlas", str(tiny_hf_dir), "--tokens", "50", "--logit-diff", " Mrs", "Mr s"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("headscope: error: logit diff") and err.count("\n") == 1, err
    assert main(["composition", str(tiny_hf_dir), "--edges", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("headscope: error: --edges") and err.count("\n") == 1, err
