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


def _products(W, toks, names, stop=None) -> list[tuple[int, ...]]:
    """The output shapes of every matrix product of one forward pass."""
    from torch.utils._python_dispatch import TorchDispatchMode

    shapes = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func._schema.name.split("::")[-1] in ("mm", "addmm", "bmm", "baddbmm"):
                shapes.append(tuple(out.shape))
            return out

    with Record():
        run_with_cache(W, toks, names=names, stop_at_layer=stop)
    return shapes


def test_qkv_alone_computes_only_the_parts_kept(tiny):
    """q, k or v asked for alone (nothing after them): only their columns of the fused product, no
    scores; patterns alone: q and k, no values. The values are bit for bit those of a full pass."""
    W = tiny.weights()
    cfg, toks = W.cfg, _tokens(W.cfg.d_vocab)
    he = cfg.n_heads * cfg.d_head
    cases = {("blocks.0.attn.hook_k",): [(18, he)], ("blocks.0.attn.hook_v",): [(18, he)],
             ("blocks.0.attn.hook_q", "blocks.0.attn.hook_k"): [(18, 2 * he)],
             ("blocks.0.attn.hook_q", "blocks.0.attn.hook_v"): [(18, 3 * he)],
             ("blocks.0.attn.hook_pattern",): [(18, 2 * he), (2 * cfg.n_heads, 9, 9)],
             ("blocks.0.attn.hook_denom", "blocks.0.attn.hook_v"): [(18, 3 * he), (2 * cfg.n_heads, 9, 9)]}
    for names, want in cases.items():
        names = list(names)
        assert _products(W, toks, names, stop=1) == want, names
        part = run_with_cache(W, toks, names=names, stop_at_layer=1)
        full = run_with_cache(W, toks, names=names + ["logits"])
        for n in names:
            torch.testing.assert_close(part[n], full[n], rtol=0, atol=0, msg=n)


def test_embedding_sum_in_place_leaves_a_kept_hook_embed(tiny):
    """The residual stream's first value is W_E[x] + W_pos (summed into the gathered rows unless
    hook_embed is kept): with hook_embed kept it stays W_E[x], and the stream is the same either way."""
    W = tiny.weights()
    toks = _tokens(W.cfg.d_vocab)
    p = toks.shape[1]
    both = run_with_cache(W, toks, names=["hook_embed", "blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre"])
    alone = run_with_cache(W, toks, names=["blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre"])
    assert torch.equal(both["hook_embed"], W.W_E[toks])
    assert torch.equal(both["blocks.0.hook_resid_pre"], W.W_E[toks] + W.W_pos[:p])
    for n in ("blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre"):
        assert torch.equal(alone[n], both[n]), n
    ref = W.W_E[toks].double() + W.W_pos[:p].double()                            # float64, the naive sum
    torch.testing.assert_close(alone["blocks.0.hook_resid_pre"].double(), ref, rtol=1e-6, atol=1e-6)
