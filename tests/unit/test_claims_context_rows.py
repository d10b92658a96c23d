"""Issue 32 §2, seed 000's missing rows: keyword density of the worst denominator heads and the
broad context of the contextual neurons. Each is fed a random component of a realistic-scale
checkpoint (the planted GPT-2-Small-shaped model with the component replaced by Gaussian draws
of its norms) and must FAIL or be "indistinguishable from random"; the planted component PASSes."""

from __future__ import annotations

import importlib

import pytest
import torch

from headscope.claims import null as N
from headscope.claims import seed000_context as C
from headscope.claims.work import Work
from headscope.layer0.denominators import denominator_stability

R = importlib.import_module("headscope.reproduce")
CLAIMS = {c["id"]: c for c in R.seed_claims()["claims"]}
WINDOW = 192                 #: short windows: the row's statistic on 6 distinct texts at a unit test's cost


def short_denominators(model, w):
    """Work.denominators and its null on WINDOW-token windows of the same six texts (the row's
    windows are n_ctx long; the statistic is the same)."""
    from headscope.corpus import windows

    wins = [windows(model, [t], n_ctx=WINDOW)[0] for t in texts()]                     # one per text
    run = lambda m: denominator_stability(m, wins, window=WINDOW, n_min=16, stride=WINDOW // 8)   # noqa: E731
    W = model.weights()
    w.denominator_windows = wins
    w.denominators = run(model)
    w.denominator_null = [run(model.with_weights(N.null_layer(W, 0, "denominators:0", 1)))]       # one null layer
    return w


def texts():
    """The six denominator texts (the calibration text, the held-out samples, four genres)."""
    from headscope.claims.work import denominator_texts

    return denominator_texts()


@pytest.fixture(scope="module")
def random_layer0(planted_model):
    return planted_model.with_weights(N.null_layer(planted_model.weights(), 0, "test: random layer 0", 1))


@pytest.fixture(scope="module")
def planted_work(planted_model):
    return short_denominators(planted_model, Work(planted_model, R.reference_for(planted_model)))


def test_keyword_density_planted_passes_and_random_heads_fail(planted_model, planted_work, random_layer0):
    ref = R.reference_for(planted_model)
    assert ref.worst_heads == [6, 8]
    c = CLAIMS["keyword_density"]
    out = C._keyword_density(c, ref, planted_work)
    assert R.verdict(out[3], out[5]) == (True, "PASS"), (out[1], out[4], out[5])
    assert out[1] > 0.9 and "head 6: r 0.9" in out[4] and "head 8: r 0.9" in out[4]
    assert out[5].n_draws == len(ref.contextual_heads)
    # a random layer 0 at the planted norms: no e-fold keyword, no density to follow
    out = C._keyword_density(c, ref, short_denominators(random_layer0, Work(random_layer0, ref)))
    assert R.verdict(out[3], out[5])[0] is False, (out[1], out[4])


def test_keyword_density_rejects_a_head_without_keywords(planted_model, planted_work):
    """A manifest naming contextual head 9 (no keywords) as a worst head fails."""
    import dataclasses

    ref = dataclasses.replace(R.reference_for(planted_model), worst_heads=[6, 9])
    out = C._keyword_density(CLAIMS["keyword_density"], ref, planted_work)
    assert out[3] is False and out[1] == 0.0 and "head 9: r 0.000, 0 keywords" in out[4]


def test_broad_context_planted_neurons_pass_and_random_ones_fail(planted_model):
    import dataclasses

    ref = R.reference_for(planted_model)
    c = CLAIMS["broad_context"]
    out = C._broad_context(c, ref, Work(planted_model, ref))
    assert R.verdict(out[3], out[5]) == (True, "PASS"), (out[1], out[4], out[5])
    assert out[5].n_draws == N.READOUT_DRAWS and out[5].p95 < 0.2
    # random neurons (the planted model's unplanted columns: Gaussian readouts) read the token and its neighbours
    other = dataclasses.replace(ref, neuron_indices=[0, 1, 2, 3, 100, 2000])
    out = C._broad_context(c, other, Work(planted_model, other))
    assert R.verdict(out[3], out[5])[0] is False and out[1] < 0.2, (out[1], out[5])

