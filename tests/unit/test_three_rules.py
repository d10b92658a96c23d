"""rules_by_category (row three_rules_by_category) on patterns built to follow the three rules
and to break them."""

from __future__ import annotations

import importlib

import torch

from headscope.semantic.prompts import make_prompts
from headscope.semantic.survey import target_masks

R = importlib.import_module("headscope.reproduce")


def patterns(prompts, how):
    m = target_masks(prompts.tokens, prompts.labels)
    b, p = prompts.tokens.shape
    if how == "rules":                       # partners when there are any, else BOS
        A = m["target"].double()
    else:                                    # every query on itself
        A = torch.eye(p, dtype=torch.float64).expand(b, p, p).clone()
    A[:, 0, 0] = 1.0
    return A / A.sum(-1, keepdim=True)


def test_rules_by_category():
    ids = {"colours": [10, 11, 12, 13], "verbs": [20, 21, 22], "logic": [30, 31, 32, 33]}
    prompts = make_prompts(ids, 0, n_prompts=16, length=12, cats_per_prompt=2, seed=1)
    good = R.rules_by_category(patterns(prompts, "rules"), prompts)
    assert set(good) == set(ids)
    for r in good.values():
        assert r["same_category"] == 1.0 and r["bos_fallback"] == 1.0 and r["self"] == 0.0 and r["n_queries"] > 0
    bad = R.rules_by_category(patterns(prompts, "self"), prompts)
    for r in bad.values():
        assert r["self"] == 1.0 and r["same_category"] == 0.0 and r["bos_fallback"] == 0.0
