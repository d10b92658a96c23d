"""Composition scores and the Framework's copying score against direct d × d / vocab × vocab computations."""

from __future__ import annotations

import math

import pytest
import torch

from headscope.maps import composition as C
from headscope.core.config import Config
from headscope.core.weights import Block, Weights


def _random_weights(seed: int, L=3, d=42, h=3, m=20, V=70, n_ctx=9) -> Weights:
    e = d // h
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    cfg = Config(n_layers=L, d_model=d, n_heads=h, d_mlp=m, d_vocab=V, n_ctx=n_ctx)
    blocks = [Block(ln1_w=r(d), ln1_b=r(d), W_Q=r(h, d, e), W_K=r(h, d, e), W_V=r(h, d, e), b_Q=r(h, e), b_K=r(h, e),
                    b_V=r(h, e), W_O=r(h, e, d), b_O=r(d), ln2_w=r(d), ln2_b=r(d), W_in=r(d, m), b_in=r(m),
                    W_out=r(m, d), b_out=r(d)) for _ in range(L)]
    return Weights(cfg=cfg, W_E=r(V, d), W_pos=r(n_ctx, d), blocks=blocks, ln_final_w=r(d), ln_final_b=r(d),
                   W_U=r(d, V), b_U=r(V))


def _direct(W: Weights, mode, la, ha, lb, hb) -> float:
    a, b = W.blocks[la], W.blocks[lb]
    left = a.W_V[ha] @ a.W_O[ha]                                                      # [d d]
    right = {"Q": b.W_Q[hb] @ b.W_K[hb].T, "K": b.W_K[hb] @ b.W_Q[hb].T, "V": b.W_V[hb] @ b.W_O[hb]}[mode]
    return float((left @ right).norm() / (left.norm() * right.norm()))


def test_composition_scores_equal_the_d_by_d_definition():
    W = _random_weights(0)
    s = C.composition_scores(W)
    for mode in C.MODES:
        assert s[mode].shape == (3, 3, 3, 3)
        for la in range(3):
            for lb in range(3):
                for ha in range(3):
                    for hb in range(3):
                        got = float(s[mode][la, ha, lb, hb])
                        if lb <= la:
                            assert got == 0.0
                        else:
                            assert got == pytest.approx(_direct(W, mode, la, ha, lb, hb), rel=1e-10)
    # Q and K differ (the reader's two sides), so a swap of conventions is caught
    assert not torch.allclose(s["Q"], s["K"])
    cores = C.composition_scores(W, path="cores")
    chunked = C.composition_scores(W, max_elements=1, path="cores")                  # one writer layer per product
    assert all(torch.equal(chunked[m], cores[m]) for m in C.MODES)


def test_a_planted_k_composition_is_the_strongest_edge_and_random_pairs_sit_at_one_over_root_d():
    W = _random_weights(1, L=2, d=256, h=4, V=50)            # d_head 64
    W.blocks[1].W_K[2] = W.blocks[1].W_K[2] + 3 * W.blocks[0].W_O[3].T            # head 1.2's key reads 0.3
    c = C.composition(W)
    top = c.edges["K"][0]
    assert (top.source, top.target) == ((0, 3), (1, 2))
    rest = [e.score for e in c.edges["K"][1:]]
    assert top.score > 2 * max(rest)                                      # 0.135 vs ≤ 0.065 measured
    q = torch.tensor(c.scores["Q"]).flatten()
    q = q[q > 0]
    assert float(q.mean()) == pytest.approx(1 / math.sqrt(256), rel=0.3) and c.baseline == 1 / math.sqrt(256)


def test_framework_copying_eigenvalues_are_those_of_the_vocab_by_vocab_ov_circuit():
    W = _random_weights(2, V=30, d=15, h=3)                  # d_head 5
    lam = C.framework_ov_eigenvalues(W, 1, gram=C.vocab_gram(W, chunk=7))            # chunks must not matter
    b = W.blocks[1]
    for h in range(3):
        full = torch.linalg.eigvals(W.W_E @ b.W_V[h] @ b.W_O[h] @ W.W_U)              # [V V]
        full = full[torch.argsort(full.abs(), descending=True)][:5]
        key = lambda z: (round(z.real, 7), round(z.imag, 7))                         # noqa: E731
        assert sorted(map(key, lam[h].tolist())) == sorted(map(key, full.tolist()))


def test_composition_cost_counts_the_products_it_forms():
    """Each path's cost formula equals its multiply-adds counted pair by pair and head by head."""
    for L, h, d in ((3, 3, 42), (4, 2, 30), (12, 12, 768)):
        cfg = Config(n_layers=L, d_model=d, n_heads=h, d_mlp=4 * d, d_vocab=50, n_ctx=8)
        e = cfg.d_head
        factors = sum(h * e * e * d + 3 * h * d * e * e for _ in range(L - 1))          # R_V W_O; W_Q R_Kᵀ…
        cores = sum(3 * (h * e) * d * (h * e) for lb in range(L) for la in range(lb))
        B = math.ceil(d / C.ROW_BLOCKS)
        n = sum((i1 - i0) * (d - i0) for i0 in range(0, d, B) for i1 in [min(d, i0 + B)])
        assert n >= d * (d + 1) // 2
        gram = sum(4 * h * e * n for _ in range(L - 1)) + sum(3 * h * h * n for lb in range(L) for la in range(lb))
        assert C.composition_costs(cfg) == {"cores": factors + cores, "gram": factors + gram}
        assert C.composition_cost(cfg) == C.composition_costs(cfg)[C.composition_path(cfg)]


def test_report_stage_leaves_large_models_to_the_command(tiny, monkeypatch):
    """Beyond the report's budget the stage says why in one line (not applicable), unless asked for by name."""
    from headscope._errors import NotApplicable
    from headscope.report import ReportOptions
    from headscope.report.builtin import composition as stage
    from headscope.report.stages import Context

    monkeypatch.setattr(stage, "REPORT_BUDGET", C.composition_cost(tiny.cfg) / 2)
    s = stage.CompositionStage()
    ctx = lambda names: Context(model=tiny, options=ReportOptions(stages=names), inputs=None, results={})  # noqa: E731
    with pytest.raises(NotApplicable, match="headscope composition MODEL"):
        s.compute(ctx(None))
    assert s.key_options(ReportOptions(stages=None)) != s.key_options(ReportOptions(stages=["composition"]))
    data = s.compute(ctx(["composition"]))
    assert data["edges"] and data == C.composition(tiny).to_dict()


def test_shared_inputs_change_no_bit():
    """What the atlas forms once per model or layer and hands in (the float64 head weights, the direction
    vocabulary with its norms) gives the bits each function gets converting for itself; vocab_gram's reused
    chunk buffers the bits of fresh float64 copies (float32 weights, a last chunk shorter than the rest)."""
    import dataclasses

    W = _random_weights(3, V=31, d=15, h=3)                                          # d_head 5
    W = dataclasses.replace(W, W_E=W.W_E.float(), W_U=W.W_U.float())
    fresh = sum(W.W_U[:, i:i + 7].double() @ W.W_E[i:i + 7].double() for i in range(0, 31, 7))
    assert torch.equal(C.vocab_gram(W, chunk=7), fresh)
    gram = C.vocab_gram(W)
    block = C.head_weights(W, 1)
    assert all(t.dtype == torch.float64 for t in block)
    assert torch.equal(C.framework_ov_eigenvalues(W, 1, gram, block=block), C.framework_ov_eigenvalues(W, 1, gram))
    ids = torch.tensor([4, 17, 0, 29, 8, 11, 23, 2])
    strs = lambda t: [f"t{i}" for i in t]                                             # noqa: E731
    E, U = W.W_E[ids].double(), W.W_U[:, ids].double()
    alone = C.head_directions(W, 1, ids, strs, n=3)
    assert alone == C.head_directions(W, 1, ids, strs, n=3, vocab=(E, U))
    assert alone == C.head_directions(W, 1, ids, strs, n=3, vocab=C.direction_vocab(E, U), block=block)
    assert alone[2]["ov_directions"][0]["reads"] != alone[2]["ov_directions"][0]["reads_neg"]
