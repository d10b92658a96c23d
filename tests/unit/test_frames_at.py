"""split.frames_at — every position's frame at once — equals split.frame at each position: the content
logits of a LayerNorm with its own weight and bias (not only a folded one), the positional logits up
to n and −inf beyond, under causal and local masks; and on a rotary model, whose frames it stacks."""

import dataclasses
import math

import torch

import headscope
from headscope.layer0 import split as S
from headscope.planted import rotary as P


def _with_ln1(w, seed: int = 3):
    """`w` with block 0's LayerNorm given a weight and bias of its own (fold_ln leaves 1 and 0)."""
    g = torch.Generator().manual_seed(seed)
    b = w.blocks[0]
    d = w.cfg.d_model
    ln1_w = 1 + 0.3 * torch.randn(d, generator=g, dtype=b.ln1_w.dtype)
    ln1_b = 0.2 * torch.randn(d, generator=g, dtype=b.ln1_b.dtype)
    return dataclasses.replace(w, blocks=[dataclasses.replace(b, ln1_w=ln1_w, ln1_b=ln1_b)])


def _check(w, token, ns, c, tokens, tol):
    lc, lp = S.frames_at(w, token, ns, c, tokens)
    k = int(ns.max()) + 1
    assert lc.shape == (len(ns), w.cfg.n_heads, len(tokens)) and lp.shape == (len(ns), w.cfg.n_heads, k)
    for i, n in enumerate(ns.tolist()):
        fr = S.frame(w, token, n, c)
        torch.testing.assert_close(lc[i], fr.content_logits(w, tokens), rtol=tol, atol=tol)
        torch.testing.assert_close(lp[i, :, :n + 1], fr.pos_logits, rtol=tol, atol=tol)
        assert bool((lp[i, :, n + 1:] == -math.inf).all())
        torch.testing.assert_close(torch.logsumexp(lp[i], -1), fr.log_Z, rtol=tol, atol=tol)


def test_frames_at_equals_the_frame_at_each_position(tiny):
    w0 = S.view(tiny)
    c = S.measure_c(w0)
    ns = torch.tensor([1, 4, 9, w0.cfg.n_ctx - 1])
    tokens = torch.tensor([0, 7, 7, 3, w0.cfg.d_vocab - 1, 11])               # a repeat and the last id
    cases = {"folded": w0, "own LN1": _with_ln1(w0),
             "local 5": dataclasses.replace(_with_ln1(w0), cfg=dataclasses.replace(w0.cfg, attn_windows=(5,)))}
    for name, w in cases.items():
        _check(w, 5, ns, c, tokens, 1e-12)
    # the identity is not the frame's arithmetic: a changed W_E must show in both
    lc0, _ = S.frames_at(cases["own LN1"], 5, ns, c, tokens)
    w = cases["own LN1"]
    lc1, _ = S.frames_at(dataclasses.replace(w, W_E=w.W_E * 1.5 + 0.1), 5, ns, c, tokens)
    assert not torch.allclose(lc0, lc1)


def test_frames_at_stacks_the_rotary_frames(tmp_path):
    m = headscope.load(P.build(tmp_path / "rot", seed=0, n_layers=2))
    w = S.view(m)
    _check(w, 5, torch.tensor([2, 6, 30]), 0.0, torch.tensor([1, 5, 9, 200]), 0.0)
