"""The null machinery of the claims table (issue 32): every verdict must be one a random
component cannot earn. Each row with a null is fed a random component of realistic scale
(GPT-2 Small's d_model 768, d_head 64) and must not PASS; the planted-like component still does."""

from __future__ import annotations

import dataclasses
import importlib
import types

import pytest
import torch

from headscope.claims import null as N
from headscope.stats import null_tail, sign_flip_means
from headscope import shipped
from headscope.claims.work import Work
from headscope._errors import NotApplicable
from headscope.planted.build import read_manifest
from headscope.claims import seed000_heads as H, seed000_neurons as NR, seed002 as S2

R = importlib.import_module("headscope.reproduce")
CLAIMS = {c["id"]: c for c in R.seed_claims()["claims"]}
SEED = R.seed_reference(R.seed_claims())


def test_compare_margins_and_directions():
    draws = [float(x) for x in range(101)]                       # median 50, p95 95, p5 5
    assert null_tail(draws, "above") == (50.0, 95.0) and null_tail(draws, "below") == (50.0, 5.0)
    c = N.compare(96.0, draws, statistic="s", null="n", direction="above", margin=2.0)
    assert c.bar == 97.0 and not c.clears
    assert N.compare(97.0, draws, statistic="s", null="n", direction="above", margin=2.0).clears
    assert N.compare(2.0, draws, statistic="s", null="n", direction="below", margin=2.0, margin_kind="ratio").clears
    assert not N.compare(3.0, draws, statistic="s", null="n", direction="below", margin=2.0, margin_kind="ratio").clears
    frac = [0.94 + 0.0004 * i for i in range(101)]                # identity shares of random heads
    assert not N.compare(0.97, frac, statistic="s", null="n", direction="above", margin=2.0,
                         margin_kind="complement_ratio").clears
    assert N.compare(0.999, frac, statistic="s", null="n", direction="above", margin=2.0,
                     margin_kind="complement_ratio").clears
    with pytest.raises(ValueError, match="margin_kind"):
        N.compare(1.0, draws, statistic="s", null="n", direction="above", margin=1.0, margin_kind="x")


def test_sign_flip_null_is_exact_and_symmetric():
    d = torch.tensor([0.1, 0.2, 0.3])
    m = sign_flip_means(d)
    assert m.numel() == 8 and abs(float(m.sum())) < 1e-12 and float(m.max()) == pytest.approx(0.2)


def test_sym_eigenvalues_match_the_bilinear_form():
    from headscope.semantic.bilinear import bilinear_form

    g = torch.Generator().manual_seed(3)
    U, V = torch.randn(96, 8, generator=g, dtype=torch.float64), torch.randn(96, 8, generator=g, dtype=torch.float64)
    lam = N.sym_eigenvalues(U, V)
    f = bilinear_form(U @ V.T, 0, 0)
    torch.testing.assert_close(lam[:f.eigenvalues.numel()], f.eigenvalues)


def test_null_heads_match_norms_and_leave_the_rest(tiny):
    W = tiny.weights()
    a = N.null_heads(W, 1, 2, N.generator("t"))
    b, nb = W.blocks[1], a.blocks[1]
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        for h in range(tiny.cfg.n_heads):
            assert float(getattr(nb, name)[h].norm()) == pytest.approx(float(getattr(b, name)[2].norm()), rel=1e-5)
        assert not torch.equal(getattr(nb, name)[0], getattr(nb, name)[1])        # independent draws
    if W.reads_centred:
        assert float(nb.W_Q.mean(1).abs().max()) < 1e-5                            # readers of a centred residual
    assert a.blocks[0] is W.blocks[0] and tiny.weights().blocks[1] is b            # nothing else changed
    again = N.null_heads(W, 1, 2, N.generator("t")).blocks[1]
    assert torch.equal(again.W_Q, nb.W_Q)                                          # seeded
    m = tiny.with_weights(a)
    assert m.weights() is a and tiny.weights() is W


def test_semantic_head_rows_do_not_pass_a_random_head(planted_model):
    """The issue's case: a random layer-1 head scores ≈ 0.97 ≥ 0.90 on position independence; no
    row of the semantic head may PASS a Gaussian draw of its matrices (same norms) in its place."""
    W = planted_model.weights()
    rnd = planted_model.with_weights(N.null_heads(W, 1, 5, N.generator("test: a random 1.5")))
    w = Work(rnd, R.planted_reference(read_manifest(planted_model.directory)))
    out = S2._position(CLAIMS["position_independence"], w.ref, w)
    assert out[3] is True                                          # the old row passed it
    assert R.verdict(out[3], out[5]) == (False, R.RANDOM)
    assert out[5].n_draws == N.HEAD_DRAWS and out[5].null_passes == 1.0
    for rid in ("self_suppression", "bos_fallback", "semantic_pairs", "survey_top", "survey_outlier", "three_rules_by_category"):
        try:
            out = R.CHECKS[rid](CLAIMS[rid], w.ref, w)
        except NotApplicable:                                    # an undefined rate: no verdict, not a pass
            continue
        assert R.verdict(out[3], out[5])[0] is not True, (rid, out)
        assert out[5].n_draws >= N.HEAD_DRAWS, rid


def form_work(U, V, n_ref=33):
    from headscope.semantic.bilinear import bilinear_form

    w = types.SimpleNamespace(form=bilinear_form(U @ V.T, 1, 5, factors=(U, V)),
                              negative_null=N.form_null(U, V, "negative_eigenvalues", centred=False))
    return w, dataclasses.replace(SEED, n_negative_top64=n_ref)


def test_negative_eigenvalues_a_random_head_with_the_seed_count_does_not_pass():
    """Random heads give 30–34 of 64 negative: one with exactly 33 passed the count; its
    negative eigen-mass does not clear the null."""
    for s in range(200):
        g = torch.Generator().manual_seed(s)
        U, V = (torch.randn(768, 64, generator=g, dtype=torch.float64) for _ in range(2))
        w, ref = form_work(U, V)
        if w.form.n_negative_top == 33:
            break
    out = S2._negative(CLAIMS["negative_eigenvalues"], ref, w)
    assert out[3] is True and R.verdict(out[3], out[5]) == (False, R.RANDOM), out[4]
    assert "cannot separate" in out[4]
    # a self-suppressing form (its largest eigenvalues negative, the rest as random) clears it
    g = torch.Generator().manual_seed(1)
    Q, _ = torch.linalg.qr(torch.randn(768, 64, generator=g, dtype=torch.float64))
    lam = torch.cat([-torch.full((33,), 3.0), torch.full((31,), 1.0)]).double()
    w, ref = form_work(Q * lam, Q)                                                  # U Vᵀ = Q diag(λ) Qᵀ
    out = S2._negative(CLAIMS["negative_eigenvalues"], ref, w)
    assert R.verdict(out[3], out[5]) == (True, "PASS"), out[5]


def texts_work(dx, w_in, uk=1.0, us=0.5):
    w = types.SimpleNamespace()
    w.true_activation = lambda j, text: (uk, uk, 100) if "Commonwealth" in text or text == "uk" else (us, us, 100)
    w.text_readout_null = lambda j, texts: N.readout_null(dx, w_in, "readout", centred=True)
    return w


def test_neuron_texts_a_random_readout_is_indistinguishable(monkeypatch):
    """The issue's case: any positive difference passed (a random neuron 704: 0.354 vs 0.300)."""
    monkeypatch.setattr(shipped, "samples", lambda: [types.SimpleNamespace(name="british_news", text="uk"),
                                                        types.SimpleNamespace(name="american_news", text="us")])
    g = torch.Generator().manual_seed(0)
    dx = torch.randn(768, generator=g, dtype=torch.float64)
    dx -= dx.mean()
    rnd = N.random_readouts(dx, 1, torch.Generator().manual_seed(7), True)[:, 0]
    rnd = rnd if float(dx @ rnd) > 0 else -rnd                                     # a positive difference, by chance
    out = NR._neuron_texts(CLAIMS["neuron_704_texts"], SEED, texts_work(dx, rnd))
    assert out[3] is True and R.verdict(out[3], out[5]) == (False, R.RANDOM)
    aligned = dx / dx.norm() * rnd.norm()                                          # a readout of the difference
    out = NR._neuron_texts(CLAIMS["neuron_704_texts"], SEED, texts_work(dx, aligned))
    assert R.verdict(out[3], out[5]) == (True, "PASS")


def split(seed_w, crude_w, kernel_w=None):
    med = lambda xs: [float(torch.tensor([r[h] for r in xs]).median()) for h in range(12)]   # noqa: E731
    kernel_w = kernel_w or [[0.3] * 12 for _ in seed_w]
    return {"seed": med(seed_w), "crude": med(crude_w), "kernel": med(kernel_w), "c": 3.5, "n_windows": len(seed_w),
            "seed_w": seed_w, "crude_w": crude_w, "kernel_w": kernel_w}


def test_key_split_significance_is_enforced():
    """The issue's case: a 0.14 % improvement passed "significantly"."""
    ctx = types.SimpleNamespace(heads=[0, 2, 6, 8, 9, 10])
    c = CLAIMS["key_split_vs_crude"]
    tiny_gain = split([[0.1] * 12 for _ in range(7)], [[0.10014] * 12 for _ in range(7)])
    out = H._key_split_vs_crude(c, SEED, types.SimpleNamespace(split_tv=tiny_gain, circuit=(None, ctx)))
    assert out[3] is True and R.verdict(out[3], out[5]) == (False, R.RANDOM)
    big = split([[0.05 + 0.001 * k] * 12 for k in range(7)], [[0.1 + 0.002 * k] * 12 for k in range(7)])
    out = H._key_split_vs_crude(c, SEED, types.SimpleNamespace(split_tv=big, circuit=(None, ctx)))
    assert R.verdict(out[3], out[5]) == (True, "PASS")


def test_tv_contextual_needs_the_content_term():
    """A split whose TV equals the content-free kernel's (a head that ignores content, or the
    split compared with a cruder one) is no evidence for the split."""
    c = CLAIMS["tv_contextual"]
    kern = types.SimpleNamespace(heads=[types.SimpleNamespace(tv_median=0.05, head=h) for h in range(12)])
    same = split([[0.05] * 12] * 7, [[0.06] * 12] * 7, kernel_w=[[0.05 + 0.001 * k] * 12 for k in range(7)])
    out = H._tv(c, SEED, types.SimpleNamespace(kernels=kern, split_tv=same))
    assert out[3] is True and R.verdict(out[3], out[5]) == (False, R.RANDOM)
    far = split([[0.05] * 12] * 7, [[0.06] * 12] * 7, kernel_w=[[0.2] * 12] * 7)
    out = H._tv(c, SEED, types.SimpleNamespace(kernels=kern, split_tv=far))
    assert R.verdict(out[3], out[5]) == (True, "PASS")


def kernel_work(pos):
    frame = types.SimpleNamespace(pos=pos)
    circuit = types.SimpleNamespace(frame=lambda n: frame)
    return types.SimpleNamespace(circuit=(circuit, types.SimpleNamespace(position=pos.shape[1] - 1)),
                                 model=types.SimpleNamespace(cfg=types.SimpleNamespace(n_heads=pos.shape[0])))


def test_contextual_heads_similarity_against_the_models_other_head_sets():
    """Random heads' kernels are all alike (near uniform): the published six are as similar as any
    six of them, so the row cannot credit them. Six shared kernels among other shapes pass."""
    c = CLAIMS["contextual_heads"]
    g = torch.Generator().manual_seed(0)
    n = 256
    rnd = torch.softmax(0.05 * torch.randn(12, n, generator=g, dtype=torch.float64), -1)   # random heads at n = 255
    out = H._contextual(c, SEED, kernel_work(rnd))
    assert out[3] is True and R.verdict(out[3], out[5]) == (False, R.RANDOM)
    d = torch.arange(n, 0, -1, dtype=torch.float64) - 1                             # distance to the query
    shapes = [torch.softmax(-d / L, -1) for L in (40.0, 1.0, 40.0, 8.0, 1.5, 1e9, 40.0, 0.7, 40.0, 40.0, 40.0, 1e9)]
    planted = torch.stack(shapes) + 1e-4 * torch.rand(12, n, generator=g, dtype=torch.float64)
    out = H._contextual(c, SEED, kernel_work(planted / planted.sum(-1, keepdim=True)))
    assert R.verdict(out[3], out[5]) == (True, "PASS") and "exclusivity (not claimed)" in out[4]


def test_query_dependence_is_over_every_kernel():
    """The seed's "they" is all kernels: query-dependent non-contextual heads fail the row."""
    def head_kernels(query_tv):
        return types.SimpleNamespace(heads=[types.SimpleNamespace(head=h, query_tv=v) for h, v in enumerate(query_tv)])

    tvs = [0.02 if h in (0, 2, 6, 8, 9, 10) else 0.4 for h in range(12)]             # 6 of 12 within 0.1
    tvs[1] = 0.4
    tvs[3] = 0.4
    shaped = [{"query_tv": 0.02, "shape_tv": 0.5}] * 12
    null = [{"head": k % 12, "query_tv": 0.01, "shape_tv": 0.01} for k in range(24)]
    w = types.SimpleNamespace(kernels=head_kernels(query_tv=tvs), kernel_shape=shaped, kernel_null=null,
                              circuit=(None, types.SimpleNamespace(heads=[0, 2, 6, 8, 9, 10])))
    tvs5 = tvs[:]
    tvs5[10] = 0.4                                                                   # 5 of 12 within 0.1
    w5 = types.SimpleNamespace(kernels=head_kernels(query_tv=tvs5), kernel_shape=shaped, kernel_null=null,
                               circuit=w.circuit)
    assert H._query_dependence(CLAIMS["query_dependence"], SEED, w)[3] is True
    assert H._query_dependence(CLAIMS["query_dependence"], SEED, w5)[3] is False


def test_nulls_are_seeded_and_never_write_a_non_finite_number():
    g = torch.Generator().manual_seed(5)
    U, V = (torch.randn(96, 8, generator=g, dtype=torch.float64) for _ in range(2))
    assert N.form_null(U, V, "k", centred=True) == N.form_null(U, V, "k", centred=True)
    assert N.form_null(U, V, "k", centred=True) != N.form_null(U, V, "other", centred=True)
    c = N.compare(float("inf"), [1.0, 2.0, float("inf")], statistic="loss", null="n", direction="below", margin=2.0,
                  margin_kind="ratio")
    assert not c.clears and c.to_dict()["measured"] is None and c.n_draws == 2
    with pytest.raises(NotApplicable, match="no finite draw"):
        N.compare(1.0, [float("nan")], statistic="s", null="n", direction="above", margin=0.1)
