"""The forward's kept scores buffer (core.forward._take_scratch): the same values as fresh scores, reused
across passes, never handed out in a cache."""

import torch

from headscope.core import forward
from headscope.core.forward import run_with_cache
from headscope.layer0 import split


def _tokens(n_vocab: int, b: int, p: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_vocab, (b, p), generator=g)                        # [batch pos]


def test_scratch_values_equal_fresh_scores(tiny):
    for W in (tiny.weights(), split.view(tiny)):                                  # float32, float64 layer-0 view
        W.__dict__.pop("_scores_scratch", None)       # the session's `tiny` may hold a larger one from earlier tests
        consumed = ["blocks.0.attn.hook_k", "blocks.0.ln2.hook_scale"]
        stop = 1 if W.cfg.n_layers == 1 else None
        for b, p in ((2, 17), (1, 9), (3, 17), (1, 23)):
            toks = _tokens(W.cfg.d_vocab, b, p, seed=p)
            mine = run_with_cache(W, toks, names=consumed, stop_at_layer=stop)
            # the pattern kept: no scratch, fresh scores
            ref = run_with_cache(W, toks, names=consumed + ["blocks.0.attn.hook_pattern"], stop_at_layer=stop)
            for n in consumed:
                assert torch.equal(mine[n], ref[n]), n
        buf = W.__dict__["_scores_scratch"]                                       # the largest: [3 h 17 17]
        assert buf.numel() == 3 * W.cfg.n_heads * 17 * 17 and buf.dtype == W.W_E.dtype


def test_scratch_reused_and_never_in_a_cache(tiny):
    W = split.view(tiny)
    W.__dict__.pop("_scores_scratch", None)
    names = ["blocks.0.ln2.hook_scale"]
    run_with_cache(W, _tokens(W.cfg.d_vocab, 2, 15), names=names, stop_at_layer=1)
    ptr = W.__dict__["_scores_scratch"].data_ptr()
    run_with_cache(W, _tokens(W.cfg.d_vocab, 1, 11, seed=1), names=names, stop_at_layer=1)   # smaller: the same one
    assert W.__dict__["_scores_scratch"].data_ptr() == ptr
    toks = _tokens(W.cfg.d_vocab, 2, 15, seed=2)
    kept = run_with_cache(W, toks, names=["blocks.0.attn.hook_pattern"], stop_at_layer=1)["blocks.0.attn.hook_pattern"]
    snapshot = kept.clone()
    assert kept.data_ptr() != ptr
    run_with_cache(W, _tokens(W.cfg.d_vocab, 2, 15, seed=3), names=names, stop_at_layer=1)  # writes the buffer
    assert torch.equal(kept, snapshot)                                            # the cached pattern untouched


def test_scratch_cap(tiny, monkeypatch):
    W = split.view(tiny)
    W.__dict__.pop("_scores_scratch", None)
    monkeypatch.setattr(forward, "SCORES_SCRATCH_BYTES", 0)
    run_with_cache(W, _tokens(W.cfg.d_vocab, 2, 13), names=["blocks.0.ln2.hook_scale"], stop_at_layer=1)
    assert "_scores_scratch" not in W.__dict__
