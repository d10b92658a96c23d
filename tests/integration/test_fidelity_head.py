"""The authors' clustering and effective embeddings as presets (issue 16, items 3 and 4):
each piece against an independent formula, and the presets on the planted checkpoint
(they agree on the planted categories, differ where their definitions differ)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from headscope.semantic import bilinear, clustering
from headscope._errors import HeadscopeError
from headscope.semantic.head import head_clusters
from headscope.semantic.options import PRESETS, ClusterOptions, HeadOptions

pytestmark = pytest.mark.slow


def test_authors_attn_means_match_a_by_hand_forward(tiny):
    """Token ids 0..n_ctx−1 as one sequence, no BOS, the mean position at every position."""
    W = tiny.weights()
    w = W.to(dtype=torch.float64)
    cfg, b = w.cfg, w.blocks[0]
    P = min(1024, cfg.n_ctx)
    x = w.W_E[:P] + w.W_pos.mean(0)                                                     # [P d]
    xc = x - x.mean(-1, keepdim=True)
    ln = xc / (xc.pow(2).mean(-1, keepdim=True) + cfg.ln_eps).sqrt() * b.ln1_w + b.ln1_b
    q = torch.einsum("pd,hde->hpe", ln, b.W_Q) + b.b_Q[:, None]
    k = torch.einsum("pd,hde->hpe", ln, b.W_K) + b.b_K[:, None]
    v = torch.einsum("pd,hde->hpe", ln, b.W_V) + b.b_V[:, None]
    s = q @ k.transpose(1, 2) / math.sqrt(cfg.d_head)
    s = s.masked_fill(~torch.ones(P, P, dtype=torch.bool).tril(), -math.inf)
    out = torch.einsum("hpe,hed->pd", torch.softmax(s, -1) @ v, b.W_O) + b.b_O           # [P d]
    got = bilinear.authors_attn_means(W, 1)[0]
    torch.testing.assert_close(got.double(), out.mean(0), rtol=1e-4, atol=1e-6)
    # headscope's means (category prompts, positions ≥ 1) are another vector
    from headscope.semantic.prompts import prompts_for
    ours = bilinear.attn_means_for(W, 1, "prompts", prompts_for(tiny, None, n_prompts=8, length=16)[0].tokens)[0]
    assert (ours - got).norm() > 1e-3 * got.norm()
    with pytest.raises(HeadscopeError, match="expected one of prompts, authors"):
        bilinear.attn_means_for(W, 1, "bogus")


def test_authors_graph_by_hand():
    g = torch.Generator().manual_seed(0)
    K, Q = torch.randn(9, 3, generator=g), torch.randn(9, 3, generator=g)
    G = clustering.authors_graph(K, Q, k=4)
    A = K.double() @ Q.double().T
    A = A - A.min(1).values / (A.max(1).values - A.min(1).values)        # the authors' per-row shift
    assert G.is_directed()
    for a in range(9):
        top = set(torch.topk(A[a], 4).indices.tolist())
        out = {e.target: e["weight"] for e in G.es.select(_source=a)}
        assert set(out) == {b for b in top if A[a, b] > 0}               # key a → its top-4 queries
        for b, wgt in out.items():
            assert wgt == pytest.approx(float(A[a, b]))


def test_leiden_modularity_caps_community_size():
    import igraph

    n = 600
    G = igraph.Graph(n=n, edges=[(i, (i + 1) % n) for i in range(n)] + [(i, (7 * i + 3) % n) for i in range(n)],
                     directed=True)
    G.es["weight"] = [1.0] * G.ecount()
    for cap in (20, 64):
        m = clustering.leiden_modularity(G, max_comm_size=cap, seed=0)
        assert np.bincount(m).max() <= cap
    assert np.array_equal(clustering.leiden_modularity(G, max_comm_size=64, seed=3),
                          clustering.leiden_modularity(G, max_comm_size=64, seed=3))


def test_wordfreq_tokens(planted_model):
    tok = planted_model.tokenizer
    ids = clustering.wordfreq_tokens(tok, 3000)
    assert len(ids) == len(set(ids)) == 3000 and ids[0] == tok.bos_token_id
    assert ids[1] == tok.encode(" the")[0]
    strs = set(planted_model.to_str_tokens(ids))
    assert {" Monday", " France", " color", " red"} <= strs        # capitalised single tokens are kept
    assert clustering.wordfreq_tokens(tok, 5, bos_first=False) == ids[1:6]


@pytest.fixture(scope="module")
def seed_clusters(planted_model):
    return head_clusters(planted_model, 1, 5, ClusterOptions(preset="seed", with_spectral=False))


def test_seed_preset_on_planted(seed_clusters, planted_model, planted_manifest):
    hc = seed_clusters
    assert PRESETS["seed"] == {"n_tokens": 3000, "k": 4, "frequency": "wordfreq", "graph": "authors",
                               "attn_mean": "authors"}
    assert hc.spec.graph == "authors" and hc.spec.max_comm_size == 512 and hc.spec.frequency == "wordfreq"
    assert len(hc.nodes) == 3000 and hc.nodes[0] == planted_model.bos_id
    sizes = [c.size for c in hc.leiden.clusters]
    assert max(sizes) <= 512
    # the planted categories among the nodes come out as clusters
    cats = planted_manifest["layer1"]["categories"]
    present = {k: [t for t in c["ids"] if t in hc.nodes] for k, c in cats.items()}
    assert sum(len(v) >= 4 for v in present.values()) >= 6
    assert hc.leiden.ari == pytest.approx(1.0)


def test_presets_differ_in_definition_agree_on_planted_neighbours(planted_model, planted_manifest, seed_clusters):
    """Attention means from token ids 0-1023 or from category prompts: different effective
    embeddings (layer 0 writes other blocks), same neighbours of every category word (the
    planted head reads only the sem block: x̂_t W x̂_s = sem_t W sem_s / (σ_t σ_s))."""
    W = planted_model.weights()
    from headscope.semantic.prompts import prompts_for
    words = [t for c in planted_manifest["layer1"]["categories"].values() for t in c["ids"]]
    ours = bilinear.attn_means_for(W, 1, "prompts", prompts_for(planted_model, None, n_prompts=32, length=16)[0].tokens)
    theirs = bilinear.attn_means_for(W, 1, "authors")
    assert (ours[0] - theirs[0]).norm() > 0.05 * theirs[0].norm()
    Xa = bilinear.effective_embeddings(W, 1, torch.tensor(words), attn_means=ours)
    Xb = bilinear.effective_embeddings(W, 1, torch.tensor(words), attn_means=theirs)
    assert (Xa - Xb).norm() > 1e-3 * Xa.norm()
    cat_of = {t: k for k, c in planted_manifest["layer1"]["categories"].items() for t in c["ids"]}
    scores = []
    for X in (Xa, Xb):
        Q, K = bilinear.head_qk(W, 1, 5, X)
        S = (Q @ K.T).double()                                                     # [w w]
        S.fill_diagonal_(-math.inf)
        scores.append(S)
        for i, t in enumerate(words):
            partners = {u for u in words if cat_of[u] == cat_of[t] and u != t}
            top = {words[j] for j in torch.topk(S[i], len(partners)).indices.tolist()}
            assert top == partners                                                  # the same partner set
    finite = torch.isfinite(scores[0])
    assert (scores[0][finite] - scores[1][finite]).abs().max() > 1e-6              # but not the same scores
    # the seed preset's node set is not headscope's (word frequencies vs BPE merge order)
    ours_nodes = set(clustering.frequent_tokens(planted_model.tokenizer, 3000))
    assert len(ours_nodes & set(seed_clusters.nodes)) < 2000


def test_seed_preset_examples_rank_their_own_keys(tiny):
    """With the authors' graph (edges key → query) each example's neighbours are its own top
    keys: over the vocabulary, or over the nodes for keys="nodes" (examples that are nodes)."""
    from headscope.semantic.head import analyse_heads

    W = tiny.weights()
    by_vocab, by_nodes = (analyse_heads(tiny, [(1, 2)], HeadOptions(preset="seed", keys=keys, with_spectral=False))[0]
                          for keys in ("vocab", "nodes"))
    nodes = by_nodes.clusters.nodes
    assert by_nodes.clusters.spec.keys == "nodes" and by_nodes.clusters.spec.graph == "authors"
    assert {n.token_id for n in by_nodes.neighbours} <= set(nodes) and len(by_nodes.neighbours) >= 1
    X = by_nodes.clusters.embeddings
    idx = {t: i for i, t in enumerate(nodes)}
    Q, K = bilinear.head_qk(W, 1, 2, X)
    for nb, ss in zip(by_nodes.neighbours, by_nodes.self_scores):
        s = (Q[idx[nb.token_id]] @ K.T).double()
        s[idx[nb.token_id]] = -math.inf                                          # self excluded
        assert nb.target_ids == [nodes[j] for j in torch.topk(s, len(nb.target_ids)).indices.tolist()]
        assert ss.top_target == nb.targets[0]
    # over the vocabulary: every example, and its top key need not be a node
    assert len(by_vocab.neighbours) >= len(by_nodes.neighbours)
    for nb, ss in zip(by_vocab.neighbours, by_vocab.self_scores):
        assert ss.token_id == nb.token_id and ss.top_target == nb.targets[0]
