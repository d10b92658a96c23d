"""Issue 32 §2, seed 002's missing rows: the Leiden clusters of the semantic head and the scores its
weights explain. Each is fed a random semantic head of a realistic-scale checkpoint (the planted
GPT-2-Small-shaped model with head 1.5 a Gaussian draw of its W_Q, W_K, W_V, W_O norms) and must
FAIL or be "indistinguishable from random"; the planted head PASSes."""

from __future__ import annotations

import importlib

import pytest
import torch

from headscope.claims import null as N
from headscope.claims import seed002_clusters as S
from headscope.claims.work import Work

R = importlib.import_module("headscope.reproduce")
CLAIMS = {c["id"]: c for c in R.seed_claims()["claims"]}


@pytest.fixture(scope="module")
def random_head(planted_model):
    """The planted model whose layer-1 heads are all null draws of head 1.5 (the planted head among them)."""
    return planted_model.with_weights(N.null_heads(planted_model.weights(), 1, 5, N.generator("test: random 1.5")))


@pytest.fixture()
def small_graph(monkeypatch):
    """The cluster row on 600 nodes and 4 null heads: the statistic at a unit test's cost."""
    monkeypatch.setattr(S, "N_NODES", 600)
    monkeypatch.setattr(S, "CLUSTER_DRAWS", 4)


def test_semantic_clusters_planted_passes_random_head_fails(planted_model, random_head, small_graph):
    ref = R.reference_for(planted_model)
    c = CLAIMS["semantic_clusters"]
    out = S._semantic_clusters(c, ref, Work(planted_model, ref))
    assert R.verdict(out[3], out[5]) == (True, "PASS"), (out[1], out[4], out[5])
    assert out[1] > 0.9 and out[5].n_draws == 4 and out[5].p95 < 0.2 and "modularity" in out[4]
    out = S._semantic_clusters(c, ref, Work(random_head, ref))
    assert R.verdict(out[3], out[5])[0] is False and out[1] < 0.2, (out[1], out[5])


def test_explain_score_planted_passes_random_head_fails(planted_model, random_head):
    ref = R.reference_for(planted_model)
    c = CLAIMS["explain_score"]
    out = S._explain_score(c, ref, Work(planted_model, ref))
    assert R.verdict(out[3], out[5]) == (True, "PASS"), (out[1], out[4], out[5])
    assert out[1] > 0.99 and out[5].n_draws == 24
    out = S._explain_score(c, ref, Work(random_head, ref))
    assert R.verdict(out[3], out[5])[0] is False, (out[1], out[5])


def test_explained_r_is_the_sum_of_explain_scores_terms(planted_model):
    """The row's prediction is bilinear.explain_score's score (eigen-terms + skew) for every pair."""
    from headscope.semantic import bilinear

    W = planted_model.weights()
    U, V = bilinear.qk_factors(W, 1, 5)
    form = bilinear.bilinear_form(bilinear.qk_matrix(W, 1, 5), 1, 5)
    X = torch.randn(1, 3, W.cfg.d_model, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pred = S.predicted_scores(X, U, V, 8.0)
    for a in range(3):
        for b in range(3):
            want = bilinear.explain_score(form, X[0, a], X[0, b], divisor=8.0)["score"]
            assert float(pred[0, a, b]) == pytest.approx(want, rel=1e-6, abs=1e-9)
