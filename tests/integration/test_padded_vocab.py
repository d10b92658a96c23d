"""Padding rows of a padded vocabulary (config vocab_size > the tokenizer's ids: Pythia, OLMo, Phi-3) are kept
out of every whole-vocabulary tensor (``Config.vocab``, set once at load from the tokenizer).

Two tiny Llama checkpoints, identical but for their 19 padding rows of W_E and lm_head (zeros in one, huge
outliers in the other): every analysis must give the same result on both, and no padding id may appear in
any list of tokens.
"""

from __future__ import annotations

import pytest
import torch

import headscope
from headscope.layer0 import relative as R, rotary_split as RS, split as S, token_neurons as TN
from headscope.maps import composition
from headscope.semantic import bilinear
from headscope.testing.tokenizers import write_family_tokenizer

transformers = pytest.importorskip("transformers")

N_TOKENS, ROWS = 301, 320      # ids 0..300; rows 301..319 are padding


def _build(tmp, outliers: bool):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=ROWS, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                                   num_key_value_heads=1, intermediate_size=44, max_position_embeddings=37,
                                   rope_theta=500.0, pad_token_id=0, eos_token_id=1, bos_token_id=0)
    hf = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for t in (hf.model.embed_tokens.weight, hf.lm_head.weight):
            g = torch.Generator().manual_seed(7)
            t[N_TOKENS:] = 300.0 * torch.randn(ROWS - N_TOKENS, t.shape[1], generator=g) if outliers else 0.0
    hf.save_pretrained(tmp)
    write_family_tokenizer(tmp, "llama", N_TOKENS)
    return headscope.load(str(tmp))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("quiet"), False), _build(tmp_path_factory.mktemp("loud"), True)


def test_the_real_token_count_is_read_once_at_load(pair):
    quiet, loud = pair
    assert loud.cfg.d_vocab == ROWS and loud.cfg.vocab == N_TOKENS and loud.cfg.to_dict()["n_tokens"] == N_TOKENS
    W = loud.weights()
    assert W.W_E[N_TOKENS:].norm(dim=-1).min() > 100 * W.W_E[:N_TOKENS].norm(dim=-1).max()   # the outliers are there
    emb, _ = W.embedding_norms()
    assert emb.shape == (N_TOKENS,) and torch.equal(emb, quiet.weights().embedding_norms()[0])


def test_no_statistic_changes_with_the_padding_rows(pair):
    quiet, loud = pair
    wq, wl = RS.view(quiet), RS.view(loud)
    # mean query/key over the vocabulary, the relative kernel and its categories
    for a, b in zip(R.mean_query_key(wq), R.mean_query_key(wl)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert R.relative_kernels(wq).to_dict() == R.relative_kernels(wl).to_dict()
    torch.testing.assert_close(RS.mean_key(wq), RS.mean_key(wl), rtol=0, atol=0)
    # content factors of the whole vocabulary
    lq, ll = S.log_content_factors(wq, 5, 9), S.log_content_factors(wl, 5, 9)
    assert lq.shape[1] == N_TOKENS
    torch.testing.assert_close(lq, ll, rtol=0, atol=0)
    # the OV copying score's W_U W_E, the QK/OV effective embeddings of the whole vocabulary
    Wq, Wl = quiet.weights(), loud.weights()
    torch.testing.assert_close(composition.vocab_gram(Wq), composition.vocab_gram(Wl), rtol=0, atol=0)
    torch.testing.assert_close(composition.framework_ov_eigenvalues(Wq, 1), composition.framework_ov_eigenvalues(Wl, 1))
    means = bilinear.mean_attn_outputs(Wq, quiet.to_tokens("a b c d e f")[None], 1)
    xq = bilinear.effective_embeddings(Wq, 1, attn_means=means)
    xl = bilinear.effective_embeddings(Wl, 1, attn_means=means)
    assert xq.shape[0] == N_TOKENS
    torch.testing.assert_close(xq, xl, rtol=0, atol=0)


def test_no_padding_id_in_any_token_list(pair):
    _, loud = pair
    W = loud.weights()
    rk = TN.rank_token_neurons(W, k=5)
    ids = [t for row in rk.top_tokens for t in row]
    assert ids and max(ids) < N_TOKENS
    w = RS.view(loud)
    means = bilinear.mean_attn_outputs(W, loud.to_tokens("a b c d e f")[None], 1)
    X = bilinear.effective_embeddings(W, 1, attn_means=means)
    Q = torch.einsum("nd,de->ne", X, W.blocks[1].W_Q[0])
    _, idx = bilinear.topk_targets(Q, torch.einsum("nd,de->ne", X, W.blocks[1].W_K[0]), 5)
    assert int(idx.max()) < N_TOKENS
    assert RS.log_content_factors(w, 5, 9).shape[1] == N_TOKENS
    quiet = pair[0]
    assert TN.rank_token_neurons(quiet.weights(), k=5).to_dict() == rk.to_dict()
