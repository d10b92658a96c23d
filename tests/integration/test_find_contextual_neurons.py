"""`reproduce --find`'s contextual neurons (issue 32 §3): none on random weights, exactly the planted ones.

A neuron's scan score (its largest token score) is compared with the tail of a random readout's,
family-wise over the layer's neurons (claims.find.neuron_null), not with 2× a median: a few tokens
of very large content weight carry the max, so the null's max is broad and its median is no bar."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch


def _work(model):
    from headscope.claims.work import Work
    from headscope.reproduce import seed_claims, seed_reference

    return Work(model, seed_reference(seed_claims()))


def test_union_tail_bounds_the_max_of_gaussians():
    """log Σ_t Φ̄(x/σ_t) is exact for one token and bounds P(max_t z_t ≥ x) of independent ones."""
    from headscope.stats import log_union_tail

    sigma = torch.tensor([1.0, 2.0, 0.5, 0.0], dtype=torch.float64)
    x = torch.tensor([3.0, 6.0, -1.0], dtype=torch.float64)
    tails = [[0.5 * math.erfc(v / (s * math.sqrt(2))) for s in sigma[:3].tolist()] for v in x.tolist()]
    exact = [1 - math.prod(1 - t for t in row) for row in tails]
    lp = log_union_tail(x, sigma).exp()
    assert lp[0] == pytest.approx(sum(tails[0]), rel=1e-9) and exact[0] <= float(lp[0])
    assert lp[1] == pytest.approx(sum(tails[1]), rel=1e-9) and exact[1] <= float(lp[1]) <= 1.1 * exact[1]
    assert float(lp[2]) == 1.0                                                  # x ≤ 0: capped at 1
    one = log_union_tail(torch.tensor([2.5]), torch.tensor([1.0])).exp()
    assert float(one) == pytest.approx(0.5 * math.erfc(2.5 / math.sqrt(2)), rel=1e-9)


def test_random_weights_have_no_contextual_neurons(random_model):
    """Random weights at realistic scales (2 layers, d_model 320, 448 neurons), the circuit of every
    layer-0 head: no neuron clears its family-wise null (2× the null's median found 106)."""
    from headscope.claims.find import find_contextual_neurons

    c, bar = find_contextual_neurons(_work(random_model), list(range(random_model.cfg.n_heads)))
    assert not c.found and c.why.startswith("not found: no MLP0 neuron clears its null"), c.why
    assert bar == math.inf and all(x["family_p"] > 0.05 for x in c.candidates)


def test_planted_neurons_of_unequal_strength_are_all_found(planted_model, planted_manifest):
    """One planted neuron's readout ×20: its score stands 18× above the other three, which a break in the
    scores' scale took for the end of the contextual ones; against the null all four are found, and
    no other neuron."""
    from headscope.claims.find import contextual_neurons
    from headscope.layer0.contextual import build_circuit

    planted = sorted(n["index"] for n in planted_manifest["layer0"]["neurons"])
    heads = sorted(planted_manifest["layer0"]["contextual_heads"])
    circuit, choice = build_circuit(planted_model, _work(planted_model).calibration, heads=heads)   # W_in: not in it
    W = circuit.weights
    b = W.blocks[0]
    W_in = b.W_in.clone()
    W_in[:, planted[0]] *= 20.0
    strong = dataclasses.replace(W, blocks=[dataclasses.replace(b, W_in=W_in), *W.blocks[1:]])
    c, bar = contextual_neurons(dataclasses.replace(circuit, weights=strong), choice, planted_model.tokenizer)
    assert c.found and c.neurons == planted, c
    scores = {x["neuron"]: x["score"] for x in c.candidates}
    assert scores[planted[0]] > 15 * max(scores[j] for j in planted[1:])    # the scale break the old rule took
    assert bar <= min(scores[j] for j in planted)
