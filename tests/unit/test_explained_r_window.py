"""Row explain_score on a layer with a local window (GPT-Neo's local layers, Mistral's and Qwen2's sliding
windows, Gemma 2's alternate layers): the keys the window hides have score −inf in hook_attn_scores. They are
left out with the causal ones; counted, they made the correlation NaN, which the row reported as r = 0
(and every null draw too) — a FAIL for the wrong reason."""

from __future__ import annotations

import math

import pytest
import torch

from headscope.claims.seed002_clusters import explained_r
from headscope.core.config import Config


def _naive_r(scores, pred, visible) -> float:
    """Pearson r over the (prompt, query, key) cells with query q ≥ 2 and key 1 ≤ k ≤ q visible, each query's
    row centred over its visible keys: loops in float64."""
    xs, ys = [], []
    b, p, _ = scores.shape
    for i in range(b):
        for q in range(2, p):
            ks = [k for k in range(1, q + 1) if visible[q][k]]
            if not ks:
                continue
            ms = sum(float(scores[i, q, k]) for k in ks) / len(ks)
            mp = sum(float(pred[i, q, k]) for k in ks) / len(ks)
            xs += [float(scores[i, q, k]) - ms for k in ks]
            ys += [float(pred[i, q, k]) - mp for k in ks]
    sxy = sum(x * y for x, y in zip(xs, ys))
    return sxy / math.sqrt(sum(x * x for x in xs) * sum(y * y for y in ys))


def test_explained_r_leaves_out_the_keys_a_local_window_hides():
    b, p, window = 3, 11, 4
    cfg = Config(n_layers=2, d_model=14, n_heads=2, d_mlp=19, d_vocab=23, n_ctx=p + 6,
                 attn_windows=[0, window])
    pos = torch.arange(p)
    hidden = cfg.hidden_keys(1, pos[:, None], pos[None, :])                              # [q k]
    assert hidden.sum() > (pos[:, None] < pos[None, :]).sum()                            # the window hides some
    g = torch.Generator().manual_seed(5)
    pred = torch.randn(b, p, p, generator=g, dtype=torch.float64)
    scores = (0.7 * pred + 0.5 * torch.randn(b, p, p, generator=g, dtype=torch.float64)).masked_fill(hidden, -math.inf)
    r = explained_r(scores, pred, hidden)
    assert math.isfinite(r) and 0.5 < r < 0.99
    assert r == pytest.approx(_naive_r(scores, pred, ~hidden), abs=1e-12)
    assert explained_r(scores, pred) == 0.0                                     # without the window: NaN, reported 0
    # a causal layer (no window): the mask changes nothing, to the bit
    causal = cfg.hidden_keys(0, pos[:, None], pos[None, :])
    full = (0.7 * pred + 0.5 * torch.randn(b, p, p, generator=g, dtype=torch.float64)).masked_fill(causal, -math.inf)
    assert explained_r(full, pred, causal) == explained_r(full, pred)
    assert explained_r(full, pred, causal) == pytest.approx(_naive_r(full, pred, ~causal), abs=1e-12)
