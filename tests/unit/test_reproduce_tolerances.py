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


@pytest.mark.parametrize("n,ok", [(31, False), (32, True), (33, True), (34, True), (35, False), (29, False)])
def test_negative_eigenvalues_within_one(n, ok):
    assert R._negative(CLAIMS["negative_eigenvalues"], SEED, work(form=form(n, 1.86, 1.34)))[3] is ok


@pytest.mark.parametrize("sym,skew,ok", [(1.86, 1.34, True), (1.86 * 1.019, 1.34 * 0.981, True),
                                         (1.86 * 1.03, 1.34, False), (1.86, 1.34 * 1.03, False),
                                         (1.86 / 8, 1.34 / 8, False)])               # the √d_head convention
def test_sigma_within_two_percent(sym, skew, ok):
    assert R._sigma(CLAIMS["sym_vs_skew"], SEED, work(form=form(33, sym, skew)))[3] is ok


@pytest.mark.parametrize("r,fvu,ok", [(0.95, 0.14, True), (0.92, 0.2, True), (0.9995, 0.004, False),
                                      (0.8, 0.4, False), (0.95, 0.5, False)])
def test_fidelity_band(r, fvu, ok):
    f = types.SimpleNamespace(median_correlation=r, median_fvu=fvu, heads=[0, 2], positions=[8, 16], n_texts=5)
    w = work(fidelity=f, model=types.SimpleNamespace(cfg=types.SimpleNamespace(d_model=768)))
    assert R._fidelity(CLAIMS["circuit_fidelity"], SEED, w)[3] is ok


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
