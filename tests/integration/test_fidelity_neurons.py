"""Contribution variants and the robust neuron ranking (issue 16, items 2 and 8) on the planted
checkpoint and on the tiny random one: variants agree where the maths says they agree and
differ where it says they differ."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from headscope import shipped
from headscope._errors import HeadscopeError
from headscope.layer0.calibration import calibrate
from headscope.layer0.contextual import Circuit, build_circuit
from headscope.layer0.neurons import (VARIANTS, ContributionVariant, glitch_tokens, parse_variant, rank_neurons,
                               readout, scan_neurons, token_values)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def planted_circuit(planted_model):
    cal = calibrate(planted_model, shipped.calibration_text().text, window=256)
    return build_circuit(planted_model, cal)


@pytest.fixture(scope="module")
def tiny_circuit(tiny):
    cal = calibrate(tiny, shipped.calibration_text().text)
    return build_circuit(tiny, cal, heads=[0, 1, 2])


def scan(cc, model, variant=None, threshold=5.0):
    circuit, choice = cc
    return scan_neurons(circuit, choice, model.tokenizer, threshold=threshold, variant=variant)


@pytest.fixture(scope="module")
def planted_scan(planted_circuit, planted_model):
    """Today's scan (no variant, threshold 5.0) of the planted circuit, shared by the tests that compare with it."""
    return scan(planted_circuit, planted_model)


def test_parse_variant():
    assert parse_variant(None) == VARIANTS["paper"] == ContributionVariant()
    v = parse_variant("code,glitch=exclude")
    assert (v.position_part, v.ln2, v.max, v.glitch, v.position) == (False, "none", "abs", "exclude", 500)
    assert v.name == "code+glitch=exclude"
    v = parse_variant("ln2=1.2,max=abs,position=255")
    assert (v.ln2, v.ln2_constant, v.max, v.position, v.name) == ("constant", 1.2, "abs", 255, "paper+ln2=1.2,max=abs,position=255")
    assert parse_variant(v.spec()) == dataclasses.replace(v, name="paper+" + v.spec())
    for bad, msg in [("bogus", "expected one of paper, code"), ("ln2=-1", "positive number"), ("max=min", "got 'max=min'"),
                     ("position=x", "query position"), ("", "expected a name"), ("pos=maybe", "got 'pos=maybe'")]:
        with pytest.raises(HeadscopeError, match=msg):
            parse_variant(bad)


def test_default_variant_is_todays_scan(planted_circuit, planted_model, planted_scan):
    a, b = planted_scan, scan(planted_circuit, planted_model, "paper")
    assert a.max_all == b.max_all
    assert a.neurons == [{k: v for k, v in n.items() if k != "score"} for n in b.neurons]
    assert all(n["score"] == n["max_contribution"] for n in b.neurons)     # the selection score: max
    assert "variant" not in a.to_dict() and b.to_dict()["variant"]["spec"] == VARIANTS["paper"].spec()


def test_position_part_agrees_on_planted_differs_on_tiny(planted_circuit, planted_model, tiny_circuit, tiny):
    # planted: the contextual heads' W_V reads only the ctx_in block, where W_pos is 0, so
    # dropping w₁ ⊙ c(W_pos[n])/σ changes nothing; on random weights it changes every score
    circuit, choice = planted_circuit
    n = choice.position
    assert torch.allclose(token_values(circuit, n, torch.float64), token_values(circuit, n, torch.float64,
                                                                                position_part=False), atol=1e-12)
    circuit_t, choice_t = tiny_circuit
    a = token_values(circuit_t, choice_t.position, torch.float64)
    b = token_values(circuit_t, choice_t.position, torch.float64, position_part=False)
    assert (a - b).abs().max() > 1e-3
    # and the difference is exactly the W_pos[n] term's value, weighted by content/S̄ and 1/σ_t
    w, blk = circuit_t.weights, circuit_t.weights.blocks[0]
    t = torch.tensor([11, 262, 1000])
    x = w.W_E[t] + w.W_pos[choice_t.position]
    sigma = ((x - x.mean(-1, keepdim=True)).pow(2).mean(-1) + w.cfg.ln_eps).sqrt()            # [3]
    pc = (w.W_pos[choice_t.position] - w.W_pos[choice_t.position].mean()) * blk.ln1_w
    fr = circuit_t.frame(choice_t.position)
    weight = circuit_t.token_weights(fr, t)                                                     # [H 3]
    for k, h in enumerate(circuit_t.heads):
        want = weight[k][:, None] * (pc @ blk.W_V[h])[None, :] / sigma[:, None]                 # [3 e]
        e = w.cfg.d_head
        assert torch.allclose((a - b)[t, k * e:(k + 1) * e], want, atol=1e-10)


def test_ln2_variants_rescale_exactly(planted_circuit, planted_model, planted_scan):
    base = planted_scan                                               # paper: the seed's formula, no LN2 scale
    sigma = planted_circuit[0].calibration.ln2_scale
    scaled = scan(planted_circuit, planted_model, "scaled")           # max_all: every neuron, whatever the threshold
    const = scan(planted_circuit, planted_model, "ln2=2.5", threshold=math.inf)
    b = torch.tensor(base.max_all)
    assert base.variant is None and parse_variant(None).ln2 == "none"
    assert torch.allclose(torch.tensor(scaled.max_all), b / sigma, rtol=1e-4, atol=1e-6)
    assert torch.allclose(torch.tensor(const.max_all), b / 2.5, rtol=1e-4, atol=1e-6)
    # both units find exactly the planted neurons here (σ̄₂ ≈ 0.16: scaled scores are ≈ 6× larger)
    found = {n["neuron"] for n in scaled.neurons}
    assert found == {n["neuron"] for n in base.neurons}


def test_max_abs_selects_by_largest_magnitude(tiny_circuit, tiny):
    signed = scan(tiny_circuit, tiny, threshold=-1e9)
    hi, lo = torch.tensor(signed.max_all), torch.tensor(signed.min_all)
    thr = float(torch.maximum(hi, -lo).median())
    got = scan(tiny_circuit, tiny, "max=abs", threshold=thr)
    want = sorted(int(j) for j in (torch.maximum(hi, -lo) >= thr).nonzero().squeeze(1))
    assert sorted(n["neuron"] for n in got.neurons) == want
    only_signed = sorted(int(j) for j in (hi >= thr).nonzero().squeeze(1))
    assert want != only_signed          # some neurons pass on their most negative token only


def test_glitch_exclusion(tiny_circuit, tiny, tmp_path):
    """A token embedded at the centroid of W_E (never trained) is flagged by the robust norm
    rule, and excluded tokens do not count in any neuron's max or min (checked against the
    full [d_vocab d_mlp] score matrix of the tiny model)."""
    circuit, choice = tiny_circuit
    W = circuit.weights
    t0 = 30000
    W_E = W.W_E.clone()
    W_E[t0] = W_E.mean(0)
    c = Circuit(weights=dataclasses.replace(W, W_E=W_E), calibration=circuit.calibration, heads=circuit.heads)
    flagged = glitch_tokens(c)
    assert t0 in flagged and t0 not in glitch_tokens(circuit)
    keep = scan_neurons(c, choice, tiny.tokenizer, threshold=-1e9, variant="paper")
    drop = scan_neurons(c, choice, tiny.tokenizer, threshold=-1e9, variant="glitch=exclude")
    score = token_values(c, choice.position, torch.float64) @ readout(c, torch.float64, ln2_scale=1.0)   # [V m] (paper: no LN2)
    mask = torch.ones(score.shape[0], dtype=torch.bool)
    mask[flagged] = False
    assert drop.excluded_tokens == len(flagged)
    assert torch.allclose(torch.tensor(keep.max_all, dtype=torch.float64), score.amax(0), rtol=1e-4)
    assert torch.allclose(torch.tensor(drop.max_all, dtype=torch.float64), score[mask].amax(0), rtol=1e-4)
    assert torch.allclose(torch.tensor(drop.min_all, dtype=torch.float64), score[mask].amin(0), rtol=1e-4)
    assert all(not set(flagged) & set(n["top_ids"] + n["bottom_ids"]) for n in drop.neurons)
    # a listed token that is a neuron's argmax: excluding it lowers exactly that max
    argmax = score.argmax(0)                                                                    # [m]
    t1 = int(argmax[0])
    f = tmp_path / "one.json"
    f.write_text(json.dumps([tiny.tokenizer.decode([t1])]), encoding="utf-8")
    one = scan_neurons(c, choice, tiny.tokenizer, threshold=-1e9, variant=f"glitch={f}")
    assert one.excluded_tokens == 1
    for j in range(score.shape[1]):
        if int(argmax[j]) == t1:
            assert one.max_all[j] < keep.max_all[j]
        else:
            assert one.max_all[j] == pytest.approx(keep.max_all[j], rel=1e-6)


def test_glitch_file(tiny_circuit, tiny, tmp_path):
    f = tmp_path / "glitch.json"
    f.write_text('[" the", " SolidGoldMagikarp", "not one token at all"]', encoding="utf-8")
    s = scan(tiny_circuit, tiny, f"glitch={f}", threshold=-1e9)
    assert s.excluded_tokens == 2
    assert all(262 not in n["top_ids"] + n["bottom_ids"] for n in s.neurons)
    f.write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(HeadscopeError, match="expected a JSON list"):
        scan(tiny_circuit, tiny, f"glitch={f}")


def test_position_variant(planted_circuit, planted_model, planted_scan):
    circuit, choice = planted_circuit
    a = scan_neurons(circuit, choice, planted_model.tokenizer, position=100)
    b = scan(planted_circuit, planted_model, "position=100")
    assert a.max_all == b.max_all and b.position == 100 and a.max_all != planted_scan.max_all
    with pytest.raises(HeadscopeError, match="not calibrated"):
        scan(planted_circuit, planted_model, "position=5000")


def test_robust_rank_resists_one_outlier_token(planted_circuit, planted_model):
    """Give a non-contextual neuron j0 a readout that only one token reaches, through a spare
    value dimension of the contextual heads: its max beats the planted neurons', its robust
    score does not (it is not driven by a *context*)."""
    circuit, choice = planted_circuit
    man = __import__("headscope.planted.build", fromlist=["x"]).read_manifest(planted_model.directory)
    planted = sorted(n["index"] for n in man["layer0"]["neurons"])
    space = man["space"]
    W = circuit.weights
    blk = W.blocks[0]
    a_in, a_out = space["ctx_in"][1] - 2, space["ctx_out"][1] - 2            # spare zero-sum pairs
    v = torch.zeros(W.cfg.d_model, dtype=W.W_E.dtype)
    v[a_in], v[a_in + 1] = 2 ** -0.5, -(2 ** -0.5)
    u = torch.zeros_like(v)
    u[a_out], u[a_out + 1] = 2 ** -0.5, -(2 ** -0.5)
    t0, j0, dim = 40000, 7, W.cfg.d_head - 1
    W_E = W.W_E.clone()
    W_E[t0] += 3.0 * v
    new = {k: getattr(blk, k).clone() for k in ("W_V", "W_O", "W_in")}
    for h in circuit.heads:
        new["W_V"][h, :, dim] = v
        new["W_O"][h, dim, :] = u
    new["W_in"][:, j0] += 20.0 * u
    w = dataclasses.replace(W, W_E=W_E, blocks=[dataclasses.replace(blk, **new)])
    c = Circuit(weights=w, calibration=circuit.calibration, heads=circuit.heads)
    r = rank_neurons(c, choice, planted_model.tokenizer, k=10)
    assert r.order_max[0] == j0                                               # the outlier wins on max
    assert set(r.order_robust[:len(planted)]) == set(planted)                  # not on the robust score
    assert r.robust[j0] < min(r.robust[j] for j in planted)
    # unmodified: the planted neurons head both rankings; random neurons sit near the null
    r0 = rank_neurons(circuit, choice, planted_model.tokenizer, k=10)
    assert set(r0.order_robust[:len(planted)]) == set(planted) == set(r0.order_max[:len(planted)])
    others = torch.tensor([r0.robust[j] for j in range(len(r0.robust)) if j not in planted])
    assert float(others.median()) < 1.5 < min(r0.robust[j] for j in planted)
    assert r0.to_dict(top=5)["neurons"][0]["neuron"] in planted
