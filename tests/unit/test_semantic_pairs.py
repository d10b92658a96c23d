"""Row semantic_pairs fed attention patterns: on the partners it passes; spread evenly (or on the
fillers, BOS or itself) it fails."""

from __future__ import annotations

import importlib
import types

import torch
from headscope.claims import seed002 as S2

R = importlib.import_module("headscope.reproduce")
C = {x["id"]: x for x in R.seed_claims()["claims"]}["semantic_pairs"]
SEED = R.seed_reference(R.seed_claims())


def run(tiny, monkeypatch, how):
    def fake(W, tokens, names, stop_at_layer):
        seq = tokens[0].tolist()
        k = len(seq)
        targets = {tiny.tokenizer.encode(t)[0] for ex in C["examples"] for t in ex["targets"]}
        if how == "partners":
            row = torch.tensor([1.0 if x in targets else 0.0 for x in seq])
        else:
            row = torch.ones(k)
        pat = torch.zeros(1, 12, k, k)
        pat[0, 5, -1] = row / row.sum()
        return {names[0]: pat}

    monkeypatch.setattr(S2, "run_with_cache", fake)
    w = types.SimpleNamespace(model=types.SimpleNamespace(tokenizer=tiny.tokenizer, bos_id=tiny.bos_id,
                                                          weights=lambda: None))
    w._check_head = lambda: (1, 5)
    w.semantic_null = [w.model]          # the null draws: the other 11 heads of the fake pattern (no attention)
    return S2._semantic_pairs(C, SEED, w)


def test_semantic_pairs(tiny, monkeypatch):
    row = run(tiny, monkeypatch, "partners")
    assert row[3] is True and row[1] == "cat: 1.000; red: 1.000; Monday: 1.000"
    assert R.verdict(row[3], row[5]) == (True, "PASS") and row[5].n_draws == 12
    assert run(tiny, monkeypatch, "uniform")[3] is False
