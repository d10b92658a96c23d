"""Row naive_bayes on synthetic contributions: a neuron whose Commonwealth-only tokens score +1
and American-only tokens −1 classifies the shipped texts; the sign flipped, it fails."""

from __future__ import annotations

import importlib
import types

import torch

from headscope import shipped
from headscope.stats import roc_auc
from headscope.claims import seed000_neurons as NR

R = importlib.import_module("headscope.reproduce")


def test_roc_auc():
    assert roc_auc([3, 2, 1, 0], [True, True, False, False]) == 1.0
    assert roc_auc([0, 1], [True, False]) == 0.0
    assert roc_auc([1, 1], [True, False]) == 0.5 and roc_auc([1], [True]) is None


def test_naive_bayes_row(tiny):
    tok = tiny.tokenizer
    texts = shipped.spelling_texts()
    uk = {t for label, x in texts if label == "commonwealth" for t in tok.encode(x)}
    us = {t for label, x in texts if label == "american" for t in tok.encode(x)}
    score = torch.zeros(50257, dtype=torch.float64)
    score[sorted(uk - us)] = 1.0
    score[sorted(us - uk)] = -1.0
    c = dict({x["id"]: x for x in R.seed_claims()["claims"]}["naive_bayes"], k=2000)   # every marked token
    ref = R.seed_reference(R.seed_claims())

    def work(sign, bottom=True):
        s = sign * score if bottom else (sign * score).clamp_min(0)
        w = types.SimpleNamespace(model=types.SimpleNamespace(tokenizer=tok), neuron_scores=lambda j: s,
                                  readout_null=torch.randn(50257, 8, generator=torch.Generator().manual_seed(0)))
        w.true_activation = lambda j, text: (float(sum(s[t] for t in tok.encode(text))), 0.0, 0)
        return w

    row = NR._naive_bayes(c, ref, work(1.0))
    assert row[3] is True, row
    assert "AUC 1.000 (top+bottom)" in row[1] and "1.000 (bottom only)" in row[1] and "accuracy 1.00" in row[1]
    assert NR._naive_bayes(c, ref, work(1.0, bottom=False))[3] is False      # bottom tokens carry nothing
    assert NR._naive_bayes(c, ref, work(-1.0))[3] is False        # contributions of the wrong sign
