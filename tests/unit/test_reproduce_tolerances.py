"""The seed rows' tolerances are tight enough to test headscope's conventions (issue 16,
item 9): each check function fed measurements it must pass and ones it must fail."""

from __future__ import annotations

import importlib
import types

import pytest
import torch

R = importlib.import_module("headscope.reproduce")
CLAIMS = {c["id"]: c for c in R.seed_claims()["claims"]}
SEED = R.seed_reference(R.seed_claims())


def work(**attrs):
    w = types.SimpleNamespace(**attrs)
    w._check_head = lambda: (1, 5)
    return w


def kernels(tv):
    heads = [types.SimpleNamespace(tv_median=tv, head=h) for h in range(12)]
    return types.SimpleNamespace(heads=heads)


@pytest.mark.parametrize("tv,ok", [(0.0, False), (0.01, False), (0.03, True), (0.05, True), (0.1, True), (0.2, False)])
def test_tv_band(tv, ok):
    assert R._tv(CLAIMS["tv_contextual"], SEED, work(kernels=kernels(tv)))[3] is ok


def form(n_neg, sym, skew):
    return types.SimpleNamespace(n_negative_top=n_neg, n_negative=n_neg, n_positive=64 - n_neg,
                                 sigma_sym=torch.tensor([sym]), sigma_skew=torch.tensor([skew]))


@pytest.mark.parametrize("n,ok", [(31, False), (32, False), (33, True), (34, False), (35, False), (29, False)])
def test_negative_eigenvalues_exact(n, ok):
    assert R._negative(CLAIMS["negative_eigenvalues"], SEED, work(form=form(n, 1.86, 1.34)))[3] is ok


@pytest.mark.parametrize("sym,skew,ok", [(1.86, 1.34, True), (1.86 * 1.019, 1.34 * 0.981, True),
                                         (1.86 * 1.03, 1.34, False), (1.86, 1.34 * 1.03, False),
                                         (1.86 / 8, 1.34 / 8, False)])               # the √d_head convention
def test_sigma_within_two_percent(sym, skew, ok):
    assert R._sigma(CLAIMS["sym_vs_skew"], SEED, work(form=form(33, sym, skew)))[3] is ok


@pytest.mark.parametrize("r,fvu,ok", [(0.95, 0.14, True), (0.92, 0.2, True), (0.9995, 0.004, False),
                                      (0.8, 0.4, False), (0.95, 0.5, False)])
def test_fidelity_band(r, fvu, ok):
    # measured near the scan's position (1023): a position far below it does not count
    f = types.SimpleNamespace(heads=[0, 2], positions=[8, 1016, 1023], correlation=[[0.1, r, r]],
                              fvu=[[0.9, fvu, fvu]])
    w = work(fidelity=f, scan=types.SimpleNamespace(position=1023),
             model=types.SimpleNamespace(cfg=types.SimpleNamespace(d_model=768)))
    row = R._fidelity(CLAIMS["circuit_fidelity"], SEED, w)
    assert row[3] is ok and "n = 1023" in row[4]


def test_fidelity_refuses_a_text_shorter_than_the_scan_position():
    f = types.SimpleNamespace(heads=[0], positions=[8, 16], correlation=[[0.9, 0.9]], fvu=[[0.1, 0.1]])
    w = work(fidelity=f, scan=types.SimpleNamespace(position=1023))
    with pytest.raises(R.NotApplicable, match="fewer than the scan's position 1023"):
        R._fidelity(CLAIMS["circuit_fidelity"], SEED, w)


def test_every_claim_names_its_source_and_the_convention_it_rejects():
    for c in R.seed_claims()["claims"]:
        assert c["source"] and c["rejects"] and c["tolerance"], c["id"]
    assert "no source found" in CLAIMS["circuit_fidelity"]["source"]
    assert set(CLAIMS) == set(R.CHECKS)


def neuron_work(top, bottom):
    w = work()
    w.neuron_tokens = lambda j: {"top": top, "bottom": bottom, "max_contribution": 9.0, "min_contribution": -9.0}
    return w


def test_neuron_lists_are_rank_aware():
    c = CLAIMS["neuron_704_top"]
    want = list(SEED.top_tokens)
    bottom = list(SEED.bottom_tokens)
    assert R._neuron_side(c, SEED, neuron_work(want, bottom))[3] is True
    # the same 50 tokens in the wrong order: every token found, the ranks reversed → FAIL
    assert R._neuron_side(c, SEED, neuron_work(want[::-1], bottom))[3] is False
    # the code's convention: a thresholded selection in token-id order (here: sorted strings) → FAIL
    assert R._neuron_side(c, SEED, neuron_work(sorted(want), bottom))[3] is False
    # a neighbouring swap keeps the verdict
    near = want[:]
    near[3], near[4] = near[4], near[3]
    assert R._neuron_side(c, SEED, neuron_work(near, bottom))[3] is True
    a = R.list_agreement(want, want[::-1])
    assert a["overlap"] == 50 and a["overlap_top_k"] == 0 and a["spearman"] == -1.0


def test_neuron_count_rejects_another_unit():
    c = CLAIMS["n_contextual_neurons"]
    from headscope.layer0.neurons import parse_variant

    circuit = types.SimpleNamespace(calibration=types.SimpleNamespace(ln2_scale=0.5))
    for n, ok in ((100, True), (60, True), (640, False), (16, False)):      # 640: scores × 1/σ̄₂ ≈ 6.4
        maxes = [6.0] * n + [3.0] * 50                                     # ÷ 0.5: the 50 at 3.0 pass 5.0 too
        w = work(scan=types.SimpleNamespace(neurons=[{"neuron": j} for j in range(n)], max_all=maxes),
                 variant=parse_variant(None), circuit=(circuit, None))
        row = R._n_neurons(c, SEED, w)
        assert row[3] is ok and f"under 'scaled' (÷ σ̄₂ = 0.500): {n + 50} neurons" in row[4]


def head_kernels(**per_head):
    n = len(next(iter(per_head.values())))
    return types.SimpleNamespace(heads=[types.SimpleNamespace(head=h, **{k: v[h] for k, v in per_head.items()})
                                        for h in range(n)])


def test_categories_exactly_three_and_contextual_heads_together():
    c = CLAIMS["kernel_categories"]
    base = ["slowly_decaying", "local", "slowly_decaying", "local", "local", "uniform",
            "slowly_decaying", "local", "slowly_decaying", "slowly_decaying", "slowly_decaying", "uniform"]
    mk = lambda cats: work(kernels=head_kernels(category=cats, width=[1.0] * 12,   # noqa: E731
                                                shape_decay_rate=[[0.1]] * 12))
    assert R._categories(c, SEED, mk(base))[3] is True
    inc = base[:]
    inc[5] = "increasing"                                      # a fourth category is a finding, not a pass
    assert R._categories(c, SEED, mk(inc))[3] is False
    split = base[:]
    split[9] = "uniform"                                       # contextual heads across two categories
    assert R._categories(c, SEED, mk(split))[3] is False
    no_uniform = [x if x != "uniform" else "local" for x in base]
    assert R._categories(c, SEED, mk(no_uniform))[3] is False


def test_kernel_share_rows_reject_their_wrong_conventions():
    heads = list(range(12))
    ctx = types.SimpleNamespace(heads=[0, 2, 6, 8, 9, 10])
    ok_tv = [0.02] * 12
    bad_tv = [0.4] * 12                                        # kernels indexed by absolute position
    for rid, key in (("translation_equivariance", "translation_tv"), ("query_dependence", "query_tv")):
        for tvs, ok in ((ok_tv, True), (bad_tv, False)):
            w = work(kernels=head_kernels(**{key: tvs}), circuit=(None, ctx))
            assert R.CHECKS[rid](CLAIMS[rid], SEED, w)[3] is ok, rid
    local = [[0.9 / 32] * 32 + [0.0] * 96] * 12
    uniform = [[1 / 256] * 128] * 12                          # 32/256 = 0.125 on the nearest eighth
    for k, ok in ((local, True), (uniform, False)):
        assert R._mostly_local(CLAIMS["mostly_local"], SEED, work(kernels=head_kernels(kernel=k)))[3] is ok
    assert len(heads) == 12


def denominators(spread, slope):
    return types.SimpleNamespace(median_rel_spread=spread, trend_slope=slope, n_texts=8, window=1024, n_min=16)


def test_denominator_rows_reject_their_wrong_conventions():
    ctx = types.SimpleNamespace(heads=[0, 2, 6, 8, 9, 10])
    cats = ["slowly_decaying", "local", "slowly_decaying", "local", "local", "uniform",
            "slowly_decaying", "local", "slowly_decaying", "slowly_decaying", "slowly_decaying", "uniform"]
    kern = head_kernels(category=cats)
    spread = [0.05, 0.5, 0.05, 0.4, 0.6, 0.01, 0.12, 0.45, 0.11, 0.05, 0.04, 0.01]
    c = CLAIMS["denominator_vs_local"]
    assert R._denominator_vs_local(c, SEED, work(denominators=denominators(spread, [0] * 12), kernels=kern,
                                                 circuit=(None, ctx)))[3] is True
    same = [0.3 if cats[h] == "local" else s for h, s in enumerate(spread)]
    same[6] = 0.3                                              # a local head as unstable as head 6
    assert R._denominator_vs_local(c, SEED, work(denominators=denominators(same, [0] * 12), kernels=kern,
                                                 circuit=(None, ctx)))[3] is False
    c = CLAIMS["denominator_decay"]
    falling, flat = [-1e-3] * 12, [1e-5] * 12                  # −1.0 nat vs +0.01 nat over n 16–1023
    for slope, ok in ((falling, True), (flat, False)):
        w = work(denominators=denominators(spread, slope), circuit=(None, ctx))
        assert R._denominator_decay(c, SEED, w)[3] is ok


def survey_rows(losses):
    rows = [types.SimpleNamespace(layer=1 if i == 0 else 2, head=5 if i == 0 else i, semantic_loss=x, rank=i + 1)
            for i, x in enumerate(losses)]
    return types.SimpleNamespace(rows=rows, prompts={"n_prompts": 1, "length": 255})


def test_survey_outlier_needs_more_than_rank_one():
    c = CLAIMS["survey_outlier"]
    others = [2.0 + 0.05 * i for i in range(20)]
    clear = survey_rows([0.5] + others)
    barely = survey_rows([1.9] + others)                      # rank 1, but within the spread
    for res, ok in ((clear, True), (barely, False)):
        w = work(seed_survey=res)
        w.survey_row = lambda r=None, res=res: res.rows[0]
        assert R._survey_outlier(c, SEED, w)[3] is ok


def test_steer_sweep_verdicts():
    c = CLAIMS["steer_alpha_sweep"]

    def steer(after):
        res = {a: types.SimpleNamespace(alpha=a, self_attention_before=0.05, self_attention_after=x, rebuild_error=0.0)
               for a, x in after.items()}
        return work(steer=lambda a: res[a])

    assert R._steer_sweep(c, SEED, steer({1.1: 0.03, 0.0: 0.4, -0.5: 0.6}))[3] is True
    assert R._steer_sweep(c, SEED, steer({1.1: 0.2, 0.0: 0.4, -0.5: 0.6}))[3] is False     # 1.1 raised it
    assert R._steer_sweep(c, SEED, steer({1.1: 0.03, 0.0: 0.1, -0.5: 0.6}))[3] is False    # 0 did not restore
    assert R._steer_sweep(c, SEED, steer({1.1: 0.03, 0.0: 0.4, -0.5: 0.3}))[3] is False    # −0.5 below 0
    text = R._steer_sweep(c, SEED, steer({1.1: 0.2, 0.0: 0.4, -0.5: 0.6}))[1]
    assert text.startswith("α 1.1: 0.200 FAIL") and text.count("PASS") == 2


def test_resolve_heads():
    assert R.resolve_heads(None, SEED, 12) == [0, 2, 6, 8, 9, 10]
    assert R.resolve_heads("code", SEED, 12) == [0, 2, 6, 8, 9, 10, 11]
    assert R.resolve_heads("auto", SEED, 12) is None
    assert R.resolve_heads("10,2,2", SEED, 12) == [2, 10]
    for bad in ("12", "a,b", ""):
        with pytest.raises(R.HeadscopeError, match="--heads"):
            R.resolve_heads(bad, SEED, 12)
