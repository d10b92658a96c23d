"""Property tests (hypothesis) on the maths of the forward pass, processing and conversion.

Random tiny configs with distinct dimensions (n_heads, d_head, d_mlp drawn) and random
weights — every bias, LayerNorm weight and bias random too, so folding bugs cannot hide
behind HF's 1/0 initialisation.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headscope import Config, Processing, from_hf_state_dict, process, run_with_cache, to_hf_state_dict
from headscope.weights import Block, Weights

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def configs(draw) -> Config:
    n_heads = draw(st.integers(1, 4))
    d_head = draw(st.integers(2, 6))
    return Config(
        n_layers=draw(st.integers(1, 3)),
        d_model=n_heads * d_head,
        n_heads=n_heads,
        d_mlp=draw(st.integers(3, 17)),
        d_vocab=draw(st.integers(5, 29)),
        n_ctx=draw(st.integers(4, 12)),
        ln_eps=1e-5,
        act_fn=draw(st.sampled_from(["gelu_new", "gelu", "relu"])),
        scale_attn_by_inverse_layer_idx=draw(st.booleans()),
    )


def random_weights(cfg: Config, seed: int, dtype=torch.float64) -> Weights:
    """Raw GPT-2 weights (tied W_U = W_E.T, b_U = 0) with every tensor random."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.5, around=0.0):
        return around + scale * torch.randn(*shape, generator=g, dtype=dtype)

    h, d, e, m = cfg.n_heads, cfg.d_model, cfg.d_head, cfg.d_mlp
    blocks = [Block(
        ln1_w=r(d, around=1.0), ln1_b=r(d, scale=0.2),
        W_Q=r(h, d, e), W_K=r(h, d, e), W_V=r(h, d, e),
        b_Q=r(h, e, scale=0.2), b_K=r(h, e, scale=0.2), b_V=r(h, e, scale=0.2),
        W_O=r(h, e, d), b_O=r(d, scale=0.2),
        ln2_w=r(d, around=1.0), ln2_b=r(d, scale=0.2),
        W_in=r(d, m), b_in=r(m, scale=0.2), W_out=r(m, d), b_out=r(d, scale=0.2),
    ) for _ in range(cfg.n_layers)]
    W_E = r(cfg.d_vocab, d, scale=1.0)
    return Weights(cfg=cfg, W_E=W_E, W_pos=r(cfg.n_ctx, d), blocks=blocks,
                   ln_final_w=r(d, around=1.0), ln_final_b=r(d, scale=0.2),
                   W_U=W_E.T.contiguous(), b_U=torch.zeros(cfg.d_vocab, dtype=dtype)).validate()


@st.composite
def cases(draw):
    cfg = draw(configs())
    seed = draw(st.integers(0, 2**31 - 1))
    batch = draw(st.integers(1, 3))
    pos = draw(st.integers(1, cfg.n_ctx))
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, cfg.d_vocab, (batch, pos), generator=g)
    return cfg, random_weights(cfg, seed), tokens


@settings(max_examples=40, **SETTINGS)
@given(cases())
def test_patterns_are_causal_distributions_and_denominators_rebuild_them(case):
    cfg, w, tokens = case
    c = run_with_cache(w, tokens, names=["blocks.*.attn.hook_pattern", "blocks.*.attn.hook_attn_scores",
                                         "blocks.*.attn.hook_denom"])
    p = tokens.shape[1]
    for l in range(cfg.n_layers):
        pat = c[f"blocks.{l}.attn.hook_pattern"]
        assert pat.shape == (tokens.shape[0], cfg.n_heads, p, p)
        torch.testing.assert_close(pat.sum(-1), torch.ones(pat.shape[:-1], dtype=pat.dtype))
        assert torch.all(pat >= 0)
        assert torch.all(pat.triu(1) == 0), "a query attended to a later key"
        scores, denom = c[f"blocks.{l}.attn.hook_attn_scores"], c[f"blocks.{l}.attn.hook_denom"]
        torch.testing.assert_close(torch.exp(scores - denom[..., None]), pat)
        # the first query can only attend to itself
        torch.testing.assert_close(pat[..., 0, 0], torch.ones_like(pat[..., 0, 0]))


PROCESSINGS = [Processing(**{f.name: True}) for f in dataclasses.fields(Processing)] + [Processing.default()]


@pytest.mark.parametrize("processing", PROCESSINGS, ids=lambda p: p.label())
@settings(max_examples=12, **SETTINGS)
@given(case=cases())
def test_processing_keeps_log_probs(processing, case):
    cfg, w, tokens = case
    ref = run_with_cache(w, tokens, names=["logits"]).logits.log_softmax(-1)
    got = run_with_cache(process(w, processing), tokens, names=["logits"]).logits.log_softmax(-1)
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("processing", PROCESSINGS, ids=lambda p: p.label())
@settings(max_examples=6, **SETTINGS)
@given(case=cases())
def test_processing_keeps_patterns(processing, case):
    """Every processing option is exact for the attention patterns too."""
    cfg, w, tokens = case
    names = ["blocks.*.attn.hook_pattern"]
    ref = run_with_cache(w, tokens, names=names)
    got = run_with_cache(process(w, processing), tokens, names=names)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-9, atol=1e-9)


@settings(max_examples=30, **SETTINGS)
@given(cases())
def test_hf_state_dict_round_trip_is_identity(case):
    cfg, w, _ = case
    w = w.to(dtype=torch.float32)
    state = to_hf_state_dict(w)
    back = from_hf_state_dict(state, cfg)
    assert back.processing == Processing.none()
    names = dict(w.named_tensors())
    for name, t in back.named_tensors():
        assert torch.equal(t, names[name]), name
    # and the other way round: state dict → weights → state dict
    again = to_hf_state_dict(back)
    assert set(again) == set(state)
    for k in state:
        assert torch.equal(again[k], state[k]), k


def hf_model_of(w: Weights):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = w.cfg
    hf_cfg = GPT2Config(**{k: v for k, v in cfg.to_hf_dict().items() if k not in ("architectures", "model_type")})
    hf_cfg._attn_implementation = "eager"
    model = GPT2LMHeadModel(hf_cfg).eval()
    state = to_hf_state_dict(w)
    missing, unexpected = model.load_state_dict({**state, "lm_head.weight": state["transformer.wte.weight"]},
                                                strict=False)
    assert not unexpected, unexpected
    assert all(k.endswith(("attn.bias", "attn.masked_bias")) for k in missing), missing
    return model


@settings(max_examples=6, **SETTINGS)
@given(cases())
def test_forward_equals_hf_transformers(case):
    cfg, w, tokens = case
    w = w.to(dtype=torch.float32)
    hf = hf_model_of(w)
    with torch.no_grad():
        out = hf(tokens, output_attentions=True)
    c = run_with_cache(w, tokens, names=["logits", "blocks.*.attn.hook_pattern"])
    torch.testing.assert_close(c.logits, out.logits, rtol=1e-4, atol=1e-4)
    for l, att in enumerate(out.attentions):
        torch.testing.assert_close(c[f"blocks.{l}.attn.hook_pattern"], att, rtol=1e-4, atol=1e-5)

