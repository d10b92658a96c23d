"""Passes removed from the kernels and semantic stages leave every value bit for bit the same
(speed16): the split TV with one division by a power-of-two scale and the mask on the diagonal
block only, the queries and keys of a head from one product, the clusters' internal weights
summed by np.add.at in edge order."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from headscope.layer0 import split as L0
from headscope.semantic import bilinear, clustering


def _approx_tv_reference(weights, tokens, c, true, rows):
    """The split TV as it was computed before: each part divided by s, the mask on the whole block."""
    cfg, b = weights.cfg, weights.blocks[0]
    d, P_len = cfg.d_model, len(tokens)
    s, root_d, floor = cfg.attn_scale(0), math.sqrt(d), d * cfg.ln_eps
    Qh = L0.queries(weights, tokens).transpose(0, 1)
    e_x = L0.centred(weights.W_E[tokens])
    p = L0.centred(weights.W_pos[:P_len])
    eK = torch.einsum("kd,hde->hke", e_x, b.W_K)
    pK = torch.einsum("pd,hde->hpe", p, b.W_K)
    q_bK = torch.einsum("hqe,he->hq", Qh, b.b_K)
    e2, p2 = e_x.pow(2).sum(-1), p.pow(2).sum(-1)
    pos_norm = (p2 + c ** 2).clamp_min(floor).sqrt()
    out = torch.empty(cfg.n_heads, P_len, dtype=torch.float64)
    for a in range(0, P_len, rows):
        z = min(a + rows, P_len)
        q = Qh[:, a:z]
        q_eK = q @ eK[:, :z].transpose(1, 2)
        q_pK = q @ pK[:, :z].transpose(1, 2)
        q_pnK = torch.diagonal(q_pK[:, :, a:z], dim1=1, dim2=2).clone()
        norm2 = (e2[None, :z] + p2[a:z, None] + 2 * p[a:z] @ e_x[:z].T).clamp_min(0) + floor
        content = q_eK.add_(q_pnK[:, :, None]).mul_(root_d).div_(norm2.sqrt()).add_(q_bK[:, a:z, None]).div_(s)
        position = q_pK.sub_(q_pnK[:, :, None]).mul_(root_d).div_(pos_norm[None, None, :z]).div_(s)
        mask = L0.hidden(weights, torch.arange(a, z), z)
        approx = torch.softmax(content.add_(position).masked_fill_(mask, -math.inf), dim=-1)
        out[:, a:z] = 0.5 * approx.sub_(true[:, a:z, :z]).abs_().sum(-1)
    return out


@pytest.mark.parametrize("divisor", [None, 1.7])     # s = √4 = 2 (one division of the sum), s = 1.7 (two)
def test_split_tv_is_bitwise_the_two_division_form(tiny, divisor):
    import dataclasses

    w = L0.view(tiny)
    if divisor is not None:
        w = dataclasses.replace(w, cfg=dataclasses.replace(w.cfg, attn_divisor=divisor))
    assert (math.frexp(w.cfg.attn_scale(0))[0] == 0.5) == (divisor is None)
    tokens = torch.tensor([tiny.bos_id, 464, 3290, 318, 257, 1332, 13, 383, 262, 3797, 11, 290, 257, 1110, 13,
                           464, 1332, 286, 262, 1110, 373, 922, 13])
    true = L0.true_pattern(w, tokens)
    for rows in (1, 5, 64):
        got = L0.approx_tv(w, tokens, 0.7, true, rows=rows)
        ref = _approx_tv_reference(w, tokens, 0.7, true, rows)
        assert torch.equal(got, ref), float((got - ref).abs().max())


def test_head_qk_from_one_product_is_bitwise_the_two_products(tiny):
    W = tiny.weights()
    X = torch.randn(2051, W.cfg.d_model, generator=torch.Generator().manual_seed(3), dtype=W.dtype)
    for layer in range(W.cfg.n_layers):
        for head in range(W.cfg.n_heads):
            Q, K = bilinear.head_qk(W, layer, head, X)
            d = math.sqrt(W.cfg.attn_scale(layer))
            b = W.blocks[layer]
            assert torch.equal(Q, (X @ b.W_Q[head]).div_(d)) and torch.equal(K, (X @ b.W_K[head]).div_(d))


def test_cluster_internal_weight_is_the_edge_order_sum():
    import igraph

    rng = np.random.default_rng(7)
    n = 300
    vals = torch.tensor(rng.normal(size=(n, 6)))
    idx = torch.tensor(rng.integers(0, n, size=(n, 6)))
    g = clustering.knn_graph(vals, idx, n, torch.logsumexp(vals, 1) + 0.5)
    assert isinstance(g, igraph.Graph) and g.ecount() > 100
    membership = rng.integers(0, 9, size=n)
    got = clustering.describe(g, membership, list(range(n)), [str(i) for i in range(n)], "leiden", min_size=1)
    internal = np.zeros(membership.max() + 1)                      # the loop it replaces, edge by edge
    for e, w in zip(g.get_edgelist(), g.es["weight"]):
        if membership[e[0]] == membership[e[1]]:
            internal[membership[e[0]]] += 2 * w
    strength = np.asarray(g.strength(weights="weight"))
    want = {int(np.nonzero(membership == c)[0][0]): float(internal[c] / strength[membership == c].sum())
            for c in np.unique(membership)}
    assert {cl.token_ids[0]: cl.internal_weight for cl in got.clusters} == want
