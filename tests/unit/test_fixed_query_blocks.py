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
