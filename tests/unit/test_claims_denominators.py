"""Issue 32: the denominator rows' texts are genuinely different texts (shipped genre texts written for
headscope), not offsets of one text; their windows are disjoint and each of a different text."""

from __future__ import annotations

import tomllib
from pathlib import Path

from headscope import shipped
from headscope.claims.work import denominator_texts
from headscope.corpus import windows


def test_genre_texts_are_shipped_distinct_and_long_enough(planted_model):
    texts = shipped.genre_texts()
    assert [t.name for t in texts] == ["dialogue", "manual", "recipe", "report"]
    assert len({t.sha256 for t in texts}) == len(texts)
    for t in texts:                                   # one full GPT-2 window each
        assert len(planted_model.tokenizer.encode(t.text)) >= planted_model.cfg.n_ctx - 1, t.name
    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["headscope"]
    assert "data/**/*" in globs and (root / "src/headscope/data/genres/README.md").is_file()


def test_denominator_windows_come_from_distinct_texts(planted_model):
    n = planted_model.cfg.n_ctx
    texts = denominator_texts()
    assert len(texts) >= 6 and len({t for _, t in texts}) == len(texts)
    full = [x for x in windows(planted_model, texts, n_ctx=n) if len(x) == n]
    assert len(full) >= 6
    heads = [tuple(x[1:33].tolist()) for x in full]
    for i, h in enumerate(heads):                     # no window is an offset of another
        for j, x in enumerate(full):
            if i != j:
                body = x[1:].tolist()
                assert not any(tuple(body[k:k + 32]) == h for k in range(len(body) - 31))


def test_denominator_decay_random_heads_are_no_evidence(tiny):
    """A tiny random checkpoint read as the seed's contextual circuit: its heads' decay share is
    measured against null draws of the same heads, and never PASSes."""
    import importlib
    import types

    from headscope.claims.work import DENOMINATOR_NULL_ROUNDS, Work

    R = importlib.import_module("headscope.reproduce")
    claims = {c["id"]: c for c in R.seed_claims()["claims"]}
    ref = R.seed_reference(R.seed_claims())
    w = Work(tiny, ref)
    w.circuit = (None, types.SimpleNamespace(heads=[0, 1, 2]))
    w.denominator_windows = w.denominator_windows[:24]            # quick: 24 windows of 40 tokens
    out = R.CHECKS["denominator_decay"](claims["denominator_decay"], ref, w)
    assert len(out) == 6 and out[5].n_draws == 3 * DENOMINATOR_NULL_ROUNDS, out
    assert R.verdict(out[3], out[5]) in ((False, "FAIL"), (False, R.RANDOM)), (out[4], out[5])
    # a share the null draws reach as often is no evidence: every head and every draw "decays"
    import dataclasses

    w2 = Work(tiny, ref)
    w2.circuit = w.circuit
    w2.denominators = dataclasses.replace(w.denominators, trend_slope=[-1.0] * 3)
    w2.denominator_null = [dataclasses.replace(r, trend_slope=[-1.0] * 3) for r in w.denominator_null]
    out = R.CHECKS["denominator_decay"](claims["denominator_decay"], ref, w2)
    assert out[3] is True and R.verdict(out[3], out[5]) == (False, R.RANDOM), out[5]


def concentration_work(pred, meas):
    """A Work whose denominators hold the given predicted and measured relative std ([head][pos])."""
    import types

    import torch

    H, P = len(pred), len(pred[0])
    d = types.SimpleNamespace(heads=list(range(H)), positions=[16 * (k + 1) for k in range(P)], n_min=16, delta=0.1,
                              n_texts=6, predicted_rel_std=pred, measured_rel_std=meas, measured_rel_quantile=meas,
                              chebyshev_rel=[[3 * v for v in r] for r in pred], hoeffding_rel=[[5 * v for v in r] for r in pred],
                              sum_pos2=pred)
    # null layer-0 draws whose spreads the bound does not order (the row's null)
    g = torch.Generator().manual_seed(1)
    noise = [types.SimpleNamespace(**{**vars(d), "measured_rel_std": torch.rand(H, P, generator=g).tolist()})
             for _ in range(4)]
    return types.SimpleNamespace(denominators=d, denominator_null=noise)


def test_denominator_concentration_needs_the_bound_to_order_the_spreads():
    import importlib

    import torch

    R = importlib.import_module("headscope.reproduce")
    c = {x["id"]: x for x in R.seed_claims()["claims"]}["denominator_concentration"]
    ref = R.seed_reference(R.seed_claims())
    g = torch.Generator().manual_seed(0)
    pred = (torch.rand(12, 6, generator=g) + 0.01).tolist()
    ordered = R.CHECKS["denominator_concentration"](c, ref, concentration_work(pred, [[1.1 * v for v in r] for r in pred]))
    assert R.verdict(ordered[3], ordered[5]) == (True, "PASS"), ordered
    noise = (torch.rand(12, 6, generator=g) + 0.01).tolist()                       # spreads unrelated to the bound
    out = R.CHECKS["denominator_concentration"](c, ref, concentration_work(pred, noise))
    assert R.verdict(out[3], out[5])[1] in ("FAIL", R.RANDOM), out
    # one position's ordering shared by every head is not what the bound predicts per head
    by_pos = [[0.01 * (k + 1) for k in range(6)] for _ in range(12)]
    out = R.CHECKS["denominator_concentration"](c, ref, concentration_work([[v + 1e-3 * h for v in r] for h, r in enumerate(by_pos)], by_pos))
    assert out[3] is False and R.verdict(out[3], out[5])[1] == "FAIL", out     # the permutation null refuses it
    assert "predictions permuted per position: null median" in out[4]
