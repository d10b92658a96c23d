"""The forward stops once every name asked for is kept: the values are those of a full pass."""

import torch

from headscope.core import forward
from headscope.core.forward import run_with_cache


def _tokens(n_vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, n_vocab, (2, 9), generator=g)                        # [batch pos]


def test_early_exit_equals_full_pass(tiny):
    W = tiny.weights()
    toks = _tokens(W.cfg.d_vocab)
    for names, stop in ([["blocks.0.attn.hook_k", "blocks.0.ln2.hook_scale"], 1],
                        [["blocks.0.ln2.hook_normalized"], None],
                        [["blocks.0.attn.hook_pattern"], None],
                        [["blocks.1.hook_resid_mid", "blocks.0.mlp.hook_post"], None],
                        [["blocks.0.mlp.hook_pre", "blocks.0.ln2.hook_scale"], 1],
                        [["blocks.1.mlp.hook_pre"], None]):
        part = run_with_cache(W, toks, names=names, stop_at_layer=stop)
        full = run_with_cache(W, toks, names=names + ["logits"])                  # every block runs
        assert set(part) == set(names)
        for n in names:
            torch.testing.assert_close(part[n], full[n], rtol=0, atol=0, msg=n)


def test_early_exit_skips_the_rest(tiny, monkeypatch):
    """Asking for layer 0's LN2 scale runs no MLP at all; asking for logits runs every one."""
    W = tiny.weights()
    toks = _tokens(W.cfg.d_vocab)
    calls = []
    real = forward._mlp
    monkeypatch.setattr(forward, "_mlp", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    run_with_cache(W, toks, names=["blocks.0.ln2.hook_scale"])
    assert calls == []
    run_with_cache(W, toks, names=["blocks.0.mlp.hook_pre"])          # the pre-activation: no GELU, no W_out
    assert calls == []
    run_with_cache(W, toks, names=["logits"])
    assert calls == list(range(W.cfg.n_layers))
