"""Each row with a null fails when its statistic is computed under a wrong convention (issue 32:
wrong scale, transposed W, BOS in or out, texts or indices swapped): the rows of
test_reproduce_tolerances.py's kind for the rows it does not cover, and for the rows of
claims/seed000_context.py and claims/seed002_clusters.py."""

from __future__ import annotations

import dataclasses
import importlib
import types

import pytest
import torch

from headscope.claims import seed000_context as C
from headscope.claims import seed002_clusters as S
from headscope.claims.work import Work

R = importlib.import_module("headscope.reproduce")
CLAIMS = {c["id"]: c for c in R.seed_claims()["claims"]}
SEED = R.seed_reference(R.seed_claims())


def survey_row(**kw):
    base = dict(self_attention=0.02, copy_attention=0.03, same_category=0.6, bos_fallback=0.7)
    return types.SimpleNamespace(**{**base, **kw})


def survey_work(row, null_rows):
    w = types.SimpleNamespace(survey_null=null_rows, survey_row=lambda res=None: row)
    w._check_head = lambda: (1, 5)
    return w


#: null heads: no preference for partners, attention spread (BOS 0.2)
NULL_ROWS = [survey_row(self_attention=0.1, copy_attention=0.1, same_category=0.1 + 0.001 * i, bos_fallback=0.2)
             for i in range(24)]


def test_bos_fallback_rejects_bos_excluded_attention():
    """BOS attention read after renormalising without BOS (or from the key after it) is not the rule."""
    c = CLAIMS["bos_fallback"]
    ok = R.CHECKS["bos_fallback"](c, SEED, survey_work(survey_row(), NULL_ROWS))
    assert R.verdict(ok[3], ok[5]) == (True, "PASS")
    bad = R.CHECKS["bos_fallback"](c, SEED, survey_work(survey_row(bos_fallback=0.05), NULL_ROWS))
    assert R.verdict(bad[3], bad[5])[0] is False


def test_self_suppression_rejects_copies_counted_as_partners():
    """Copies of the query counted as same-category partners: copy attention is high and the row fails."""
    c = CLAIMS["self_suppression"]
    ok = R.CHECKS["self_suppression"](c, SEED, survey_work(survey_row(), NULL_ROWS))
    assert R.verdict(ok[3], ok[5]) == (True, "PASS")
    bad = R.CHECKS["self_suppression"](c, SEED, survey_work(survey_row(copy_attention=0.5), NULL_ROWS))
    assert R.verdict(bad[3], bad[5])[0] is False


def test_position_independence_rejects_a_share_without_reordering():
    """Scores that move with position (the share measured on one fixed order) fail the 0.90 bar."""
    c = CLAIMS["position_independence"]
    for share, ok in ((0.99, True), (0.7, False)):
        w = types.SimpleNamespace(position=types.SimpleNamespace(identity_fraction=share, within_pair_std=0.1, n_pairs=9),
                                  position_null=[0.5 + 0.01 * i for i in range(24)])
        w._check_head = lambda: (1, 5)
        out = R.CHECKS["position_independence"](c, SEED, w)
        assert R.verdict(out[3], out[5])[0] is ok


def test_neuron_texts_reject_the_texts_swapped():
    """Commonwealth − American, not American − Commonwealth: the swapped order fails."""
    c = CLAIMS["neuron_704_texts"]
    acts = {"british": (1.0, 0.9, 300), "american": (0.2, 0.1, 300)}

    def work(swapped):
        w = types.SimpleNamespace()
        w.true_activation = lambda j, text: acts["american" if (text == BRIT) == swapped else "british"]
        w.text_readout_null = lambda j, texts: ((-0.8 if swapped else 0.8), [0.01 * i - 0.3 for i in range(64)])
        return w

    from headscope import shipped

    by = {t.name: t.text for t in shipped.samples()}
    BRIT = by[c["texts"][0]]
    out = R.CHECKS["neuron_704_texts"](c, SEED, work(False))
    assert R.verdict(out[3], out[5]) == (True, "PASS")
    out = R.CHECKS["neuron_704_texts"](c, SEED, work(True))
    assert R.verdict(out[3], out[5])[0] is False


# -- the rows of issue 32 §2 ------------------------------------------------------------------------


def test_explain_score_rejects_the_transposed_form_and_ignores_scale_and_bos():
    """Keys read as queries (W_QK transposed) fail; the scale (1/√d_head or not) and BOS's key-only
    term do not enter r (softmax does not see per-query constants, BOS is left out)."""
    g = torch.Generator().manual_seed(1)
    X = torch.randn(4, 12, 40, generator=g, dtype=torch.float64)                 # [b p d]
    U, V = torch.randn(40, 6, generator=g, dtype=torch.float64), torch.randn(40, 6, generator=g, dtype=torch.float64)
    true = S.predicted_scores(X, U, V, 8.0)
    true = true + 5.0 * torch.randn(4, 12, 1, generator=g, dtype=torch.float64)   # per-query constants
    true[:, :, 0] += 30.0                                                         # BOS's key-only term
    assert S.explained_r(true, S.predicted_scores(X, U, V, 8.0)) == pytest.approx(1.0, abs=1e-9)
    assert S.explained_r(true, S.predicted_scores(X, U, V, 1.0)) == pytest.approx(1.0, abs=1e-9)
    assert S.explained_r(true, S.predicted_scores(X, V, U, 8.0)) < CLAIMS["explain_score"]["min_r"]


def test_semantic_clusters_reject_another_heads_form(planted_model):
    """The clusters of head 1.4 (an index off by one) do not follow the planted categories."""
    from headscope.semantic import bilinear, clustering

    ref = R.reference_for(planted_model)
    inp = S.inputs(Work(planted_model, ref))
    freq = clustering.wordfreq_tokens(planted_model.tokenizer, 400, bos_first=True)
    nodes = list(dict.fromkeys(freq + [t for ids in inp.cat_ids.values() for t in ids]))
    X = S.embeddings(inp, nodes)
    right = S.cluster_quality(X, *bilinear.qk_factors(inp.W, 1, 5), nodes, inp.cat_ids)
    wrong = S.cluster_quality(X, *bilinear.qk_factors(inp.W, 1, 4), nodes, inp.cat_ids)
    assert right["ari"] > 0.9 and wrong["ari"] < CLAIMS["semantic_clusters"]["min_ari"]


def test_broad_context_rejects_neuron_indices_off_by_one(planted_model):
    c = CLAIMS["broad_context"]
    ref = R.reference_for(planted_model)
    shifted = dataclasses.replace(ref, neuron_indices=[j + 1 for j in ref.neuron_indices])
    out = C._broad_context(c, shifted, Work(planted_model, shifted))
    assert R.verdict(out[3], out[5])[0] is False
