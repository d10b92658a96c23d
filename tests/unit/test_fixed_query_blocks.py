"""The fixed-query log-denominators by causal query blocks equal the logsumexp of the full masked scores."""

import torch

from headscope.core.forward import run_with_cache
from headscope.layer0 import split as S


def _keys(w, b: int, p: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    toks = torch.randint(0, w.cfg.d_vocab, (b, p), generator=g)                   # [b p]
    return run_with_cache(w, toks, names=["blocks.0.attn.hook_k"], stop_at_layer=1)["blocks.0.attn.hook_k"]


def test_blocks_equal_the_full_logsumexp(tiny):
    w = S.view(tiny)
    t = 5
    for b, p in ((2, 17), (1, 1), (1, w.cfg.n_ctx)):
        k = _keys(w, b, p)                                                        # [b p head e]
        full = torch.logsumexp(S.fixed_query_scores(w, k, t), -1)                 # [b head p]
        queries: dict = {}
        for block in (1, 3, 16, 256):
            mine = S.fixed_query_log_denominators(w, k, t, queries, block=block)
            assert mine.shape == full.shape and mine.dtype == torch.float64
            torch.testing.assert_close(mine, full, rtol=1e-13, atol=1e-13)
        assert set(queries) == {p}                                                # the queries computed once


def _reference_blocks(w, k, t, block):
    """The blocks as first written: each block's scores divided by s, fully masked, torch.logsumexp'd."""
    p = k.shape[1]
    qh = S.fixed_queries(w, t, p).permute(1, 0, 2)                                # [head q e]
    kh = k.permute(0, 2, 3, 1)                                                    # [b head e k]
    out = []
    for a in range(0, p, block):
        z = min(a + block, p)
        s = torch.matmul(qh[:, a:z], kh[..., :z]).div_(w.cfg.attn_scale(0))      # [b head m z]
        s.masked_fill_(S.hidden(w, torch.arange(a, z), z), float("-inf"))
        out.append(torch.logsumexp(s, -1))
    return torch.cat(out, -1)                                                     # [b head p]


def test_blocks_bit_for_bit_under_every_scale_and_mask(tiny):
    """Scaled queries (s a power of two), the diagonal-only mask (causal) and the in-place logsumexp give
    the very bits of the first formulation; so do the general paths (s not a power of two: the scores
    divided; a local window: the full mask)."""
    import dataclasses

    w0 = S.view(tiny)
    cases = {"own": w0.cfg, "s=4": dataclasses.replace(w0.cfg, attn_divisor=4.0),
             "s=3": dataclasses.replace(w0.cfg, attn_divisor=3.0),
             "local 5": dataclasses.replace(w0.cfg, attn_windows=(5,))}
    for name, cfg in cases.items():
        w = dataclasses.replace(w0, cfg=cfg)
        for b, p in ((2, 23), (1, 1), (1, w.cfg.n_ctx), (5, 19)):       # window by window: b = 5 as b = 1
            k = _keys(w, b, p)
            for block in (1, 7, 16, 256):
                ref = _reference_blocks(w, k, 5, block)
                mine = S.fixed_query_log_denominators(w, k, 5, block=block)
                assert torch.equal(mine, ref), (name, b, p, block, (mine - ref).abs().max())
                assert torch.isfinite(mine).all()


def test_logsumexp_in_place_is_torch_logsumexp():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 7, 41, generator=g, dtype=torch.float64) * 30           # all-distinct dims
    x[0, 0, 0] = float("-inf")                                                    # a row no key is visible in
    x[0, 1, 2, 3] = float("inf")
    x[1, :, :, 20:] = float("-inf")                                               # masked tails
    ref = torch.logsumexp(x, -1)
    mine = S.logsumexp_(x.clone())
    assert torch.equal(mine.isnan(), ref.isnan()) and torch.equal(mine.nan_to_num(), ref.nan_to_num())
    assert mine[0, 0, 0] == float("-inf") and mine[0, 1, 2] == float("inf")
    view = x.clone()[:, 1:4, 2:6]                                                 # a non-contiguous view
    assert torch.equal(S.logsumexp_(view), torch.logsumexp(x[:, 1:4, 2:6], -1))
    y = torch.randn(4, 9, generator=g)                                            # float32 as well
    assert torch.equal(S.logsumexp_(y.clone()), torch.logsumexp(y, -1))
