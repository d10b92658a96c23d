"""Gemma 2's post-attention norm in the OV readings (``core.weights.written_W_O``).

The branch output r = Σ_h z_h W_O[h] + b_O is RMS-normalised and scaled by ln1_post_w before the residual add,
so head h adds z_h (W_O[h] ⊙ w) / σ with σ = rms(r) one positive scalar per position shared by every head.
Tested against the forward's own per-head outputs (hook_z, hook_result) and attention output (hook_attn_out)
on a tiny Gemma 2; the atlas, composition and OV directions read that W_O.
"""

from __future__ import annotations

import pytest
import torch

import headscope
from headscope.core.applicability import branch_norm_caveat
from headscope.core.forward import run_with_cache
from headscope.core.weights import written_W_O
from headscope.maps import composition
from headscope.maps.atlas import atlas
from headscope.testing.tokenizers import write_family_tokenizer

transformers = pytest.importorskip("transformers")

N_TOKENS = 305


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.Gemma2Config(vocab_size=N_TOKENS, hidden_size=30, num_hidden_layers=2, num_attention_heads=3,
                                    num_key_value_heads=1, head_dim=14, intermediate_size=44,
                                    max_position_embeddings=41, sliding_window=7, query_pre_attn_scalar=11,
                                    rope_theta=400.0)
    hf = transformers.Gemma2ForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.copy_(p + 0.5 * torch.randn(p.shape, generator=g))     # a post-attention norm far from 1
    d = tmp_path_factory.mktemp("gemma2")
    hf.save_pretrained(d)
    write_family_tokenizer(d, "gemma2", N_TOKENS)
    return headscope.load(str(d))


def test_each_head_writes_through_the_branch_norm_as_the_forward_does(gemma):
    W = gemma.weights()
    x = gemma.to_tokens("the cat sat on the mat and the dog sat on the log")[None]
    for l in range(gemma.cfg.n_layers):
        names = [f"blocks.{l}.attn.{k}" for k in ("hook_z", "hook_result")] + [f"blocks.{l}.hook_attn_out"]
        c = run_with_cache(W, x, names=names)
        z, result, out = (c[n][0].double() for n in names)                        # [p h e], [p h d], [p d]
        b = W.blocks[l]
        r = result.sum(1) + b.b_O.double()                                         # the norm's input [p d]
        sigma = (r.pow(2).mean(-1, keepdim=True) + gemma.cfg.ln_eps).sqrt()        # [p 1], shared by the heads
        per_head = torch.einsum("phe,hed->phd", z, written_W_O(b, gemma.cfg).double()) / sigma[:, None]
        bias = b.b_O.double() * b.ln1_post_w.double() / sigma
        torch.testing.assert_close(per_head.sum(1) + bias, out, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(torch.einsum("phe,hed->phd", z, b.W_O.double()).sum(1), out, rtol=1e-2, atol=1e-2)
    assert "σ" in branch_norm_caveat(gemma.cfg)


def test_atlas_composition_and_directions_read_the_written_W_O(gemma):
    W = gemma.weights()
    res = atlas(gemma, kernels=False, n_tokens=40, logit_diff=(" the", " cat")).to_dict()
    assert any("post-attention" in n for n in res["notes"])
    assert any("soft-capped at 50" in n and "uncapped" in n for n in res["notes"])     # the caveat the README promises
    # composition: writer factor with W_O ⊙ w (scale-free ratio: exact whatever σ)
    sc = composition.composition_scores(W)
    Wo = written_W_O(W.blocks[0], gemma.cfg).double()
    A = torch.einsum("hde,hef->hdf", W.blocks[0].W_V.double(), Wo)                  # W_OV [h d d]
    QK = torch.einsum("hde,hfe->hdf", W.blocks[1].W_Q.double(), W.blocks[1].W_K.double())
    for a in range(3):
        for bh in range(3):
            num = (A[a] @ QK[bh]).norm()
            torch.testing.assert_close(sc["Q"][0, a, 1, bh], num / (A[a].norm() * QK[bh].norm()))
