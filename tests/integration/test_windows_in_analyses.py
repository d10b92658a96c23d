"""Local attention windows in the analyses' own masks (GPT-Neo's local layers, Mistral's sliding window).

Every analysis that builds layer scores or kernels from the weights masks keys through one primitive,
:meth:`Config.hidden_keys` (the forward's own mask). On tiny checkpoints whose layer-0 window (4) is
shorter than the sequence (14), the analyses' attention must be the model's own where it is exact
(fixed-query scores of a text made of the query token) and zero at exactly the keys the model does not see.
"""

from __future__ import annotations

import math

import pytest
import torch

import headscope
from headscope.core.forward import run_with_cache
from headscope.layer0 import split as S
from headscope.layer0 import relative as R
from headscope.maps.head_metrics import _positional_share_deep
from headscope.testing.tokenizers import write_family_tokenizer

transformers = pytest.importorskip("transformers")

WINDOW, P, N_TOKENS = 4, 14, 301


def _save(hf, tmp, flavour):
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name or "ln" in name or name.endswith("bias"):
                p.copy_(p + 0.1 * torch.randn(p.shape, generator=g))
    hf.save_pretrained(tmp)
    write_family_tokenizer(tmp, flavour, N_TOKENS)
    return headscope.load(str(tmp))


@pytest.fixture(scope="module")
def neo(tmp_path_factory):
    """GPT-Neo, layers local, local, global (learned positions)."""
    torch.manual_seed(0)
    cfg = transformers.GPTNeoConfig(vocab_size=N_TOKENS, max_position_embeddings=23, hidden_size=20, num_layers=3,
                                    num_heads=5, intermediate_size=36, window_size=WINDOW,
                                    attention_types=[[["local"], 2], [["global"], 1]], bos_token_id=0, eos_token_id=0)
    m = _save(transformers.GPTNeoForCausalLM(cfg), tmp_path_factory.mktemp("neo"), "gpt2")
    assert m.cfg.attn_windows == (WINDOW, WINDOW, 0)
    return m


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.MistralConfig(vocab_size=N_TOKENS, hidden_size=21, num_hidden_layers=2, num_attention_heads=7,
                                     num_key_value_heads=1, head_dim=6, intermediate_size=34,
                                     max_position_embeddings=29, sliding_window=WINDOW, rope_theta=300.0,
                                     pad_token_id=0, eos_token_id=2)
    m = _save(transformers.MistralForCausalLM(cfg), tmp_path_factory.mktemp("mistral"), "llama2")
    assert m.cfg.attn_windows == (WINDOW, WINDOW)
    return m


def _model_attention(w, x):
    c = run_with_cache(w, x, names=["blocks.0.attn.hook_k", "blocks.0.attn.hook_attn_scores",
                                    "blocks.0.attn.hook_pattern"], stop_at_layer=1)
    return c["blocks.0.attn.hook_k"], c["blocks.0.attn.hook_attn_scores"], c["blocks.0.attn.hook_pattern"]


@pytest.mark.parametrize("case", ["neo", "mistral"])
def test_fixed_query_attention_is_the_models_own_inside_the_window(case, request):
    """A text made of the query token: softmax of the fixed-query scores is the model's pattern."""
    m = request.getfixturevalue(case)
    w = S.view(m)
    t = 7
    k, scores, pattern = _model_attention(w, torch.full((1, P), t))
    mine = S.fixed_query_scores(w, k, t)
    assert torch.equal(torch.isfinite(mine), torch.isfinite(scores))
    torch.testing.assert_close(torch.softmax(mine, -1), pattern.to(mine.dtype), rtol=1e-9, atol=1e-9)
    for block in (3, 5, P):           # causal query blocks: the window's mask inside each block too
        torch.testing.assert_close(S.fixed_query_log_denominators(w, k, t, block=block), torch.logsumexp(mine, -1),
                                   rtol=1e-12, atol=1e-12)


def test_learned_split_kernels_and_denominators_see_only_the_window(neo):
    """The W_pos split (approximate pattern, crude pattern, positional kernels, log Z) is zero / left out at
    exactly the keys layer 0 does not see."""
    w = S.view(neo)
    x = torch.tensor([(17 * i + 3) % 250 + 20 for i in range(P)])
    _, scores, _ = _model_attention(w, x[None])
    seen = torch.isfinite(scores[0, 0])                                               # [q k]
    c = S.measure_c(w)
    for A in (S.approx_pattern(w, x, c), S.crude_pattern(w, x, c)):
        assert torch.equal(A[0] > 0, seen)
        torch.testing.assert_close(A.sum(-1), torch.ones_like(A.sum(-1)))
    content, position = S.split_scores(w, x, c)
    assert torch.equal(torch.isfinite(content[0]), seen) and torch.equal(torch.isfinite(position[0]), seen)
    n = P - 1
    kern = S.positional_kernel(w, 5, n, c)                                            # [h n+1]
    assert torch.equal(kern[0] > 0, seen[n])
    fr = S.frame(w, 5, n, c)
    torch.testing.assert_close(fr.log_Z, torch.logsumexp(fr.pos_logits[:, seen[n]], -1))
    torch.testing.assert_close(S.log_Z(w, 5, P, c)[:, n], fr.log_Z)
    _, _, _, pos = S.query_frames(w, 5, torch.arange(P), c)                           # [m h k]
    assert torch.equal(pos[:, 0] > 0, seen)


def test_relative_kernel_is_zero_outside_the_window(mistral):
    w = S.view(mistral)
    rk = R.relative_kernels(w, n_ref=10)
    assert all(math.isfinite(v) for row in rk.kappa for v in row)                      # κ itself is reported whole
    kern = R.kernel_at(R.visible(w, torch.tensor(rk.kappa, dtype=torch.float64)), 10)                      # [h 11]
    assert (kern[:, : 11 - WINDOW] == 0).all() and (kern[:, 11 - WINDOW:] > 0).all()
    assert max(rk.peak_offset) < WINDOW
    assert all(abs(wd - 1 / (kern[h] ** 2).sum()) < 1e-9 for h, wd in enumerate(rk.widths))


def test_deep_positional_share_masks_the_local_layer(neo):
    """Layer 1 (local): the positional share's score matrices leave out the keys the layer does not see —
    the same share as with those keys' scores forced to −inf by hand."""
    from headscope.maps import head_metrics as HM

    torch.manual_seed(3)
    W = neo.weights()
    b = W.blocks[1]
    X = torch.randn(40, 20, dtype=torch.float64)
    sigma = torch.rand(40, dtype=torch.float64) + 0.5
    win = torch.randint(0, 40, (P,))
    pos = torch.arange(P)
    hidden = neo.cfg.hidden_keys(1, pos[:, None], pos[None, :])
    args = (X, sigma, win, HM.position_deviation(W.W_pos.double(), P), b.ln1_w.double(), b.W_Q.double(),
            b.b_Q.double(), b.W_K.double(), 1.0)
    windowed = _positional_share_deep(*args, hidden)
    full = _positional_share_deep(*args, ~torch.ones(P, P, dtype=torch.bool).tril())
    assert not torch.allclose(windowed, full)
    # by hand: content/position over visible keys only
    delta = W.W_pos[:P].double() - W.W_pos.double().mean(0)
    delta = delta - delta.mean(-1, keepdim=True)
    p_hat = b.ln1_w.double() * delta / sigma[win][:, None]
    per = lambda v, M: torch.einsum("pd,hde->hpe", v, M)                                # noqa: E731
    q = per(X[win] + p_hat, b.W_Q.double()) + b.b_Q.double()[:, None]
    c_ = (q @ per(X[win], b.W_K.double()).transpose(1, 2)).masked_fill(hidden, -math.inf)
    p_ = (q @ per(p_hat, b.W_K.double()).transpose(1, 2)).masked_fill(hidden, -math.inf)
    torch.testing.assert_close(windowed, HM.positional_share(c_, p_))
