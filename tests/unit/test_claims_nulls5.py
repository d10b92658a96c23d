"""Issue 32 §1, the last rows without a null (contextual_heads_auto, naive_bayes, neuron_topics,
sym_vs_skew): each fed random components of a checkpoint at GPT-2's initialisation scales
(headscope.testing.hub; small all-distinct widths) and seen to FAIL or be "indistinguishable from
random" — where the row without its null passed them — and the audit that keeps every row of
seed_claims.json against a null."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from headscope.claims import null as N
from headscope.claims.table import CHECKS, RANDOM, verdict
from headscope.claims.work import AUTO_NULL_ROUNDS, READOUT_NULL, Work
from headscope.reproduce import seed_claims, seed_reference

CLAIMS = {c["id"]: c for c in seed_claims()["claims"]}
SEED = seed_reference(seed_claims())
#: rows that may go without a null: none today; a row added here must say why in its JSON entry
NO_NULL: dict[str, str] = {}


def _verdict(out):
    return verdict(out[3], out[5] if len(out) > 5 else None)


@pytest.fixture(scope="module")
def auto_work(random_model):
    """The random layer-0 heads the automatic rule picks, taken as the published contextual heads
    (a claim that happens to match the rule on a random model), random head 1.2 as the semantic head."""
    heads = Work(random_model, SEED).auto_choice.heads
    ref = dataclasses.replace(SEED, contextual_heads=list(heads), semantic_head=(1, 2), neuron=7, neuron_label="7")
    return Work(random_model, ref), ref


def test_every_row_has_a_null():
    """A row added without a null (and not documented as a no-verdict row) fails here."""
    for c in seed_claims()["claims"]:
        if c["id"] in NO_NULL:
            continue
        spec = c.get("null")
        assert isinstance(spec, dict), f"row {c['id']} has no null"
        assert spec.get("margin_kind", "diff") in N.MARGINS and float(spec["margin"]) > 0 and spec["text"], c["id"]
        assert c["id"] in CHECKS, c["id"]


def test_contextual_heads_auto_random_choice_is_indistinguishable(auto_work):
    """The rule's choice on random heads equals the 'published' set (the row without a null passed);
    the same rule on null layer-0 draws of the same norms picks it as often."""
    w, ref = auto_work
    out = CHECKS["contextual_heads_auto"](CLAIMS["contextual_heads_auto"], ref, w)
    assert out[3] is True and _verdict(out) == (False, RANDOM), out
    assert out[5].n_draws == AUTO_NULL_ROUNDS and out[5].measured == 1.0 and out[5].null_passes > 0
    assert "commonest choice" in out[4]


def test_auto_null_is_the_rule_on_each_packed_draw(auto_work, random_model):
    """The packed null (one view of every draw) chooses what select_heads chooses on each draw alone."""
    from headscope import layer0
    from headscope.layer0.contextual import select_heads

    w, _ = auto_work
    cal, n, H = w.calibration, w.auto_choice.position, random_model.cfg.n_heads
    packed = N.null_layer(layer0.view(random_model), 0, "contextual_heads_auto", 2)
    for r in range(2):
        b = packed.blocks[0]
        one = dataclasses.replace(packed, blocks=[dataclasses.replace(b, **{k: getattr(b, k)[r * H:(r + 1) * H] for k in (
            "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")}), *packed.blocks[1:]])
        try:
            want = select_heads(one, cal.query_id, n, cal.c).heads
        except Exception:
            want = []
        assert w.auto_null[r] == want


def _sigmas(model, l, h):
    """(σ₁(sym), σ₁(skew)) of head l.h's W_QK in span(W_Q, W_K) (equal to the dense parts: tested below)."""
    from headscope.semantic import bilinear

    return tuple(float(x) for x in N.sym_skew_sigma(*bilinear.qk_factors(model.weights(), l, h)))


def test_sym_vs_skew_random_head_with_matching_figures_is_indistinguishable(random_model):
    """A random head whose σ's are taken as the published figures (the row without a null passed):
    its skew/sym ratio lies inside the null of its own W_Q, W_K with the pairing scrambled."""
    l, h = 1, next(h for h in range(5) if (lambda s: s[0] > s[1])(_sigmas(random_model, 1, h)))
    ref = dataclasses.replace(SEED, semantic_head=(l, h), sigma=tuple(round(x, 6) for x in _sigmas(random_model, l, h)))
    out = CHECKS["sym_vs_skew"](CLAIMS["sym_vs_skew"], ref, Work(random_model, ref))
    assert out[3] is True and _verdict(out) == (False, RANDOM), out
    assert out[5].n_draws == N.WEIGHT_DRAWS and 0.5 < out[5].median < 1.1


def test_sym_vs_skew_symmetric_head_clears(random_model):
    """W_K = W_Q (a symmetric form): skew 0, far below the scrambled pairings' ratios."""
    W = random_model.weights()
    b = W.blocks[1]
    WK = b.W_K.clone()
    WK[2] = b.W_Q[2]
    m = random_model.with_weights(dataclasses.replace(W, blocks=[W.blocks[0], dataclasses.replace(b, W_K=WK)]))
    sym, skew = _sigmas(m, 1, 2)
    ref = dataclasses.replace(SEED, semantic_head=(1, 2), sigma=(sym, skew))
    out = CHECKS["sym_vs_skew"](CLAIMS["sym_vs_skew"], ref, Work(m, ref))
    assert out[5].clears and out[5].measured < 1e-6 and out[5].p95 > 0.5, out[5]
    assert out[1][0] == pytest.approx(sym, rel=1e-4) and skew < 1e-6 * sym        # the row's dense form agrees


def test_sym_skew_sigma_matches_the_dense_parts():
    g = torch.Generator().manual_seed(3)
    U, V = torch.randn(2, 23, 5, generator=g, dtype=torch.float64)
    W = U @ V.T
    s, a = N.sym_skew_sigma(U, V)
    assert float(s) == pytest.approx(float(torch.linalg.matrix_norm((W + W.T) / 2, ord=2)), rel=1e-10)
    assert float(a) == pytest.approx(float(torch.linalg.matrix_norm((W - W.T) / 2, ord=2)), rel=1e-10)
    r = N.pairing_null(U, V, "t", n_draws=7)
    assert len(r) == 7 and r == N.pairing_null(U, V, "t", n_draws=7) and all(0 < x < 3 for x in r)


def test_naive_bayes_random_neuron_fails_against_random_readouts(auto_work):
    w, ref = auto_work
    out = CHECKS["naive_bayes"](CLAIMS["naive_bayes"], ref, w)
    assert _verdict(out)[0] is False and out[5].n_draws == READOUT_NULL, out


def test_naive_bayes_a_classifying_neuron_clears_random_readouts(auto_work):
    """Token contributions +c on tokens only the Commonwealth texts use, −c on those only the
    American texts use (c: random neurons' largest contribution): both AUCs 1 and a per-token gap
    above random neurons'."""
    from headscope import shipped

    w0, ref = auto_work
    texts = shipped.spelling_texts()
    ids = {lab: set() for lab in ("commonwealth", "american")}
    for lab, t in texts:
        ids[lab] |= set(w0.model.tokenizer.encode(t))
    score = torch.zeros(w0.model.cfg.d_vocab, dtype=torch.float64)
    score[sorted(ids["commonwealth"] - ids["american"])] = 1.0
    score[sorted(ids["american"] - ids["commonwealth"])] = -1.0
    w = Work(w0.model, ref)
    w.__dict__.update({k: w0.__dict__[k] for k in ("circuit", "calibration", "readout_null")})
    w.neuron_scores = lambda j: score * float(w0.readout_null.abs().max())
    out = CHECKS["naive_bayes"](CLAIMS["naive_bayes"], ref, w)
    assert _verdict(out) == (True, "PASS"), (out[1], out[5])


def test_neuron_topics_random_neurons_fail_and_strong_topical_lists_clear(auto_work):
    """Random neurons labelled from their own token lists fail; lists all from one lexicon clear the
    null only when the neurons' contributions are also stronger than random neurons' (topical lists
    alone can come from the vocabulary, not the neuron)."""
    import types

    from headscope.layer0.topics import label_neuron

    w0, ref = auto_work
    S = w0.readout_null
    strong = 2 * float(torch.maximum(S.amax(0), -S.amin(0)).max())
    sport = [label_neuron(j, [" football", " goal", " match", " league"] * 12, []) for j in range(12)]
    mine = [label_neuron(j, *(lambda t: (t["top"], t["bottom"]))(w0.neuron_tokens(j))) for j in range(12)]
    for labels, score, ok in ((mine, strong, False), (sport, strong, True), (sport, 0.0, False)):
        w = Work(w0.model, ref)
        w.__dict__.update({k: w0.__dict__[k] for k in ("circuit", "calibration", "readout_null")})
        w.topic_labels = labels
        w.scan = types.SimpleNamespace(neurons=[{"neuron": j, "max_contribution": score, "min_contribution": 0.0}
                                                for j in range(12)])
        out = CHECKS["neuron_topics"](CLAIMS["neuron_topics"], ref, w)
        assert _verdict(out)[0] is ok and out[5].n_draws == READOUT_NULL, (out[1], out[5])
