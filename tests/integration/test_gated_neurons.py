"""A SwiGLU neuron's contribution (headscope.layer0.token_neurons): the score is the forward's own
gated MLP on a token's embedding, and a neuron planted to fire for a few tokens ranks first."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_families import build  # noqa: E402

import headscope  # noqa: E402
from headscope.core.forward import mlp  # noqa: E402
from headscope.core.tokenizer import n_tokens  # noqa: E402
from headscope.layer0 import token_neurons as T  # noqa: E402


def test_score_is_the_forward_mlp_on_the_embedding_and_a_planted_neuron_ranks_first(tmp_path):
    _, d = build("llama", tmp_path)
    model = headscope.load(d)
    w = model.weights()
    cfg, b = w.cfg, w.blocks[0]
    ids = torch.arange(40)
    s = T.token_scores(w, ids)                                                        # [t m]
    post = mlp(b, w.W_E[ids], cfg)[4].double()                                          # act(gate) ⊙ up, [t m]
    torch.testing.assert_close(s, post * b.W_out.double().norm(dim=-1), rtol=1e-5, atol=1e-6)   # float32 forward
    # plant: neuron 7's gate and up read the direction of three tokens' normalised embeddings
    chosen = [50, 51, 52]
    x = T.normalised_embeddings(w, torch.tensor(chosen)).mean(0).float()
    b.W_gate[:, 7] = 6.0 * x / x.norm() ** 2
    b.W_in[:, 7] = 6.0 * x / x.norm() ** 2
    r = T.rank_token_neurons(w, k=3, n_tokens=n_tokens(model.tokenizer, cfg.d_vocab))
    assert r.neurons[0] == 7 and set(r.top_tokens[0]) == set(chosen)
    assert r.selectivity[0] > 3 * r.selectivity[1]
    assert all(torch.isfinite(torch.tensor(r.selectivity)))
