"""Row circuit_fidelity's null, packed (issue 32 §1, "enough draws for a stable 95th percentile"):
every null draw's heads in one layer-0 view, evaluated at once, must give what each draw gives
alone — the true summed output, the circuit's prediction (with and without content/S̄), the null
S̄ that denominator_stability measures, and the draws of null_layer itself."""

from __future__ import annotations

import dataclasses

import torch
from torch.testing import assert_close

from headscope import layer0
from headscope.claims.null import null_heads_packed, null_layer
from headscope.layer0.calibration import calibrate
from headscope.layer0.contextual import Circuit, grouped_predict, grouped_true_output
from headscope.layer0.denominators import denominator_stability, log_mean_S_at
from headscope.layer0.split import SEED_QUERY
from headscope.shipped import calibration_text

HEADS = [2, 0]                   # a group need not be sorted
KEYS = ["t:0", "t:1", "t:2"]
NAMES = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")


def _packed_view(model):
    """The model's layer-0 view with the draws of HEADS under KEYS packed in block 0 (as Work.fidelity_null)."""
    view = layer0.view(model)
    nb = null_heads_packed(model.weights(), 0, HEADS, KEYS).blocks[0]
    return view.with_blocks({0: dataclasses.replace(view.blocks[0], **{k: getattr(nb, k).double() for k in NAMES})})


def test_packed_draws_are_null_layers_heads(tiny):
    W = tiny.weights()
    nb = null_heads_packed(W, 0, HEADS, KEYS).blocks[0]
    for i, key in enumerate(KEYS):
        full = null_layer(W, 0, key, 1).blocks[0]
        kept = null_layer(W, 0, key, 1, keep=HEADS).blocks[0]
        for k in NAMES:
            assert torch.equal(getattr(kept, k), getattr(full, k)[HEADS]), k       # keep= leaves the streams alone
            assert torch.equal(getattr(nb, k)[i * 2:(i + 1) * 2], getattr(full, k)[HEADS]), k


def test_grouped_evaluation_equals_each_draw_alone(tiny):
    """grouped_true_output / grouped_predict over the packed draws = Circuit.true_output (a forward
    pass) / Circuit.predict of each draw's own null model; log_mean_S_at = denominator_stability's
    log mean S of that model at the positions."""
    cal = calibrate(tiny, calibration_text().text, query=SEED_QUERY)
    n_ctx = tiny.cfg.n_ctx
    tokens = tiny.to_tokens(calibration_text().text)[:n_ctx]
    wins = [tiny.to_tokens(calibration_text().text)[a:a + n_ctx] for a in (0, 40, 80)]
    pos = [7, 19, 30, n_ctx - 1]
    w = _packed_view(tiny)
    c_meas = layer0.measure_c(layer0.view(tiny))
    log_S = log_mean_S_at(w, wins, cal.query_id, pos, c_meas)                      # [6 P]
    groups = [[0, 1], [2, 3], [4, 5]]
    full = torch.full((6, n_ctx), float("nan"), dtype=torch.float64)
    full[:, pos] = log_S
    true = grouped_true_output(w, cal.query_id, cal.c, groups, tokens, pos)
    pred = grouped_predict(w, cal.query_id, cal.c, full, groups, tokens, pos)
    free = grouped_predict(w, cal.query_id, cal.c, full, groups, tokens, pos, content=False)
    assert true.shape == pred.shape == free.shape == (len(pos), 3, tiny.cfg.d_model)
    for i, key in enumerate(KEYS):
        alone = tiny.with_weights(null_layer(tiny.weights(), 0, key, 1))
        d = denominator_stability(alone, wins, window=n_ctx, n_min=4, stride=8)
        want = torch.tensor(d.log_mean, dtype=torch.float64)[HEADS][:, pos]
        assert_close(log_S[2 * i:2 * i + 2], want, rtol=1e-9, atol=1e-9)
        seed = cal.log_seed_denom.clone()
        seed[:, pos] = float("nan")
        seed[HEADS[0], pos], seed[HEADS[1], pos] = want[0], want[1]
        circ = Circuit(weights=layer0.view(alone), calibration=dataclasses.replace(cal, log_seed_denom=seed), heads=HEADS)
        assert_close(true[:, i], circ.true_output(tokens)[pos], rtol=1e-9, atol=1e-12)
        assert_close(pred[:, i], circ.predict(tokens, pos), rtol=1e-9, atol=1e-12)
        assert_close(free[:, i], circ.predict(tokens, pos, content=False), rtol=1e-9, atol=1e-12)
    assert not torch.allclose(pred[:, 0], pred[:, 1])                             # the draws differ
