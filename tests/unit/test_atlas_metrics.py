"""The atlas's metrics on tiny heads with known eigen-structure, and the low-rank identities they use.

Dimensions are all distinct: n tokens 29, d_model 11, d_head 3 (2e = 6), so a transposed
or mis-shaped product cannot pass.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from headscope.semantic.bilinear import bilinear_form

A = importlib.import_module("headscope.maps.atlas")   # the module (headscope.atlas itself is the function)

N, D, E = 29, 11, 3


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _orthonormal(d: int, k: int, seed: int = 0) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, k, generator=_gen(seed), dtype=torch.float64))
    return q                                                                      # [d k]


def _head_with_eigenvalues(lam: list[float], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """W_Q, W_K [D e] with W_Q W_Kᵀ = V diag(lam) Vᵀ exactly symmetric (V orthonormal)."""
    V = _orthonormal(D, len(lam), seed)
    lam_t = torch.tensor(lam, dtype=torch.float64)
    return V * lam_t.abs().sqrt(), V * (lam_t.sign() * lam_t.abs().sqrt())


# -- qk_symmetry ------------------------------------------------------------------------------


def test_form_norms_equal_the_direct_n_by_n_norms():
    q = torch.randn(N, E, generator=_gen(1), dtype=torch.float64)
    k = torch.randn(N, E, generator=_gen(2), dtype=torch.float64)
    B = q @ k.T                                                                   # [N N]
    sym, skew = A.form_norms(q, k)
    torch.testing.assert_close(sym, ((B + B.T) / 2).norm(), rtol=1e-12, atol=0)
    torch.testing.assert_close(skew, ((B - B.T) / 2).norm(), rtol=1e-12, atol=0)
    # batched over heads, as the atlas calls it
    sym2, skew2 = A.form_norms(torch.stack([q, k]), torch.stack([k, q]))
    torch.testing.assert_close(sym2, torch.stack([sym, sym]), rtol=1e-12, atol=0)
    torch.testing.assert_close(skew2, torch.stack([skew, skew]), rtol=1e-12, atol=0)


def test_symmetric_head_gives_symmetry_one_and_skew_head_zero():
    X = torch.randn(N, D, generator=_gen(3), dtype=torch.float64)
    W_Q, W_K = _head_with_eigenvalues([2.5, -1.5, 0.7])                          # W_QK symmetric
    sym, skew = A.form_norms(X @ W_Q, X @ W_K)
    assert float(skew) <= 1e-13 * float(sym)
    assert A.symmetry_ratio(float(sym), float(skew)) == pytest.approx(1.0, abs=1e-12)
    # W_QK = a bᵀ − b aᵀ is skew: no symmetric part
    a, b = torch.randn(D, 1, generator=_gen(4), dtype=torch.float64), torch.randn(D, 1, generator=_gen(5),
                                                                                  dtype=torch.float64)
    sym, skew = A.form_norms(X @ torch.cat([a, b], 1), X @ torch.cat([b, -a], 1))
    assert float(sym) <= 1e-13 * float(skew)
    assert A.symmetry_ratio(float(sym), float(skew)) == pytest.approx(0.0, abs=1e-12)
    # a generic head lies in between, and a vanishing form has no ratio
    q, k = torch.randn(N, E, generator=_gen(6), dtype=torch.float64), torch.randn(N, E, generator=_gen(7),
                                                                                  dtype=torch.float64)
    assert 0.2 < A.symmetry_ratio(*map(float, A.form_norms(q, k))) < 0.8
    assert A.symmetry_ratio(*map(float, A.form_norms(torch.zeros(N, E), torch.zeros(N, E)))) is None


def test_token_forms_equal_the_plain_norms_and_the_centred_eigenvalues():
    X = torch.randn(N, D, generator=_gen(40), dtype=torch.float64) + 3.0          # a large common mean
    W_Q, W_K = (torch.randn(2, D, E, generator=_gen(s), dtype=torch.float64) for s in (41, 42))
    q, k = X @ W_Q, X @ W_K                                                       # [2 N E]: two heads
    sym, skew, lam = A.token_forms(q, k)
    want_sym, want_skew = A.form_norms(q, k)
    torch.testing.assert_close(sym, want_sym, rtol=1e-12, atol=0)
    torch.testing.assert_close(skew, want_skew, rtol=1e-12, atol=0)
    torch.testing.assert_close(lam, A.weighted_eigenvalues(q - q.mean(1, keepdim=True), k - k.mean(1, keepdim=True)),
                               rtol=1e-12, atol=1e-12)
    # an exactly symmetric head: the skew part at rounding level, as form_norms keeps it
    V_Q, V_K = _head_with_eigenvalues([2.5, -1.5, 0.7])
    sym, skew, _ = A.token_forms(X @ V_Q, X @ V_K)
    assert float(skew) <= 1e-13 * float(sym)


# -- qk_negative_fraction ----------------------------------------------------------------------


def test_symmetric_eigenvalues_are_the_nonzero_eigenvalues_of_the_d_by_d_part():
    W_Q = torch.randn(D, E, generator=_gen(8), dtype=torch.float64)
    W_K = torch.randn(D, E, generator=_gen(9), dtype=torch.float64)
    W = W_Q @ W_K.T
    full = torch.linalg.eigvalsh((W + W.T) / 2)                                   # [D]
    full = full[torch.argsort(full.abs(), descending=True)]
    low = A.symmetric_eigenvalues(W_Q, W_K)                                       # [2e]
    assert low.shape == (2 * E,)
    torch.testing.assert_close(low.sort().values, full[: 2 * E].sort().values, rtol=1e-10, atol=1e-12)
    assert float(full[2 * E:].abs().max()) < 1e-12                                # the rest are zero


def test_known_eigenvalues_and_negative_fraction():
    W_Q, W_K = _head_with_eigenvalues([3.0, -2.0, 0.5])
    lam = A.symmetric_eigenvalues(W_Q, W_K)
    torch.testing.assert_close(lam[:3], torch.tensor([3.0, -2.0, 0.5], dtype=torch.float64), rtol=1e-12, atol=1e-12)
    assert float(lam[3:].abs().max()) < 1e-12
    assert A.negative_fraction(lam) == (1, 3, pytest.approx(1 / 3))
    assert A.negative_fraction(lam, top=2) == (1, 2, 0.5)                         # top by |λ|: 3, −2
    # the tolerance: |λ| ≤ rel_tol · max|λ| is zero
    assert A.negative_fraction(torch.tensor([5.0, -4.0, -1e-9, 0.0])) == (1, 2, 0.5)
    assert A.negative_fraction(torch.zeros(4)) == (0, 0, None)


def test_negative_fraction_matches_bilinear_form_on_the_tiny_model(tiny):
    """The low-rank route counts what headscope head's d × d decomposition counts."""
    from headscope.semantic.bilinear import qk_matrix

    W = tiny.weights()
    for l in range(tiny.cfg.n_layers):
        b = W.blocks[l]
        for h in range(tiny.cfg.n_heads):
            form = bilinear_form(qk_matrix(W, l, h), l, h)
            W_Q, W_K = b.W_Q[h].double(), b.W_K[h].double()
            lam = A.symmetric_eigenvalues(W_Q - W_Q.mean(0), W_K - W_K.mean(0))
            n_neg, n_top, _ = A.negative_fraction(lam, top=form.top)
            assert (n_neg, n_top) == (form.n_negative_top, min(form.top, len(form.eigenvalues)))
            torch.testing.assert_close(lam[:n_top], form.eigenvalues[:n_top], rtol=1e-9, atol=1e-12)


# -- qk_self ------------------------------------------------------------------------------------


def _direct_z(q, k):
    S = q @ k.T                                                                   # [n n]
    return (S.diagonal() - S.mean(1)) / S.std(1, unbiased=False)


def test_self_scores_equal_the_direct_row_z_scores():
    X = torch.randn(N, D, generator=_gen(10), dtype=torch.float64)
    W_Q = torch.randn(D, E, generator=_gen(11), dtype=torch.float64)
    W_K = torch.randn(D, E, generator=_gen(12), dtype=torch.float64)
    b_Q, b_K = torch.randn(E, generator=_gen(13), dtype=torch.float64), torch.randn(E, generator=_gen(14),
                                                                                    dtype=torch.float64)
    q, k = X @ W_Q + b_Q, X @ W_K + b_K
    torch.testing.assert_close(A.self_scores(q, k), _direct_z(q, k), rtol=1e-10, atol=1e-12)


def test_self_suppression_and_self_attention_have_opposite_signs():
    X = torch.randn(N, D, generator=_gen(15), dtype=torch.float64)
    W_Q, W_K = _head_with_eigenvalues([-1.0, -1.0, -1.0])                         # W_QK = −Π: avoid yourself
    z_neg, n_neg = A.mean_self_score(A.self_scores(X @ W_Q, X @ W_K))
    W_Q, W_K = _head_with_eigenvalues([1.0, 1.0, 1.0])                            # W_QK = +Π: attend to yourself
    z_pos, n_pos = A.mean_self_score(A.self_scores(X @ W_Q, X @ W_K))
    assert n_neg == n_pos == N
    assert z_neg < -1.0 and z_pos > 1.0
    assert z_neg == pytest.approx(-z_pos, rel=1e-12)                              # s → −s flips every z


def test_silent_rows_are_left_out_of_the_mean():
    X = torch.randn(N, D, generator=_gen(16), dtype=torch.float64)
    W_Q, W_K = _head_with_eigenvalues([-2.0, 1.0, 0.5])
    q, k = X @ W_Q, X @ W_K
    q[5:] *= 1e-9                                                                 # the head barely reads these queries
    z = A.self_scores(q, k)
    assert torch.isnan(z[5:]).all() and torch.isfinite(z[:5]).all()
    mean, n = A.mean_self_score(z)
    assert n == 5 and mean == pytest.approx(float(_direct_z(q, k)[:5].mean()), rel=1e-10)
    assert A.mean_self_score(A.self_scores(torch.zeros(N, E), k)) == (None, 0)


# -- ov_copying --------------------------------------------------------------------------------


def test_low_rank_eigenvalues_are_the_nonzero_eigenvalues_of_the_n_by_n_product():
    a = torch.randn(N, E, generator=_gen(17), dtype=torch.float64)
    b = torch.randn(E, N, generator=_gen(18), dtype=torch.float64)
    full = torch.linalg.eigvals(a @ b)                                            # [N] complex
    full = full[torch.argsort(full.abs(), descending=True)]
    low = A.low_rank_eigenvalues(a, b)                                            # [e]
    assert low.shape == (E,)
    key = lambda z: (round(z.real, 8), round(z.imag, 8))                         # noqa: E731
    assert sorted(map(key, low.tolist())) == sorted(map(key, full[:E].tolist()))
    assert float(full[E:].abs().max()) < 1e-10


def test_copying_score_of_copying_suppressing_and_rotating_heads():
    Emb = torch.randn(N, D, generator=_gen(19), dtype=torch.float64)              # token embeddings, W_U = Embᵀ
    U = _orthonormal(D, E, 20)
    for sign in (1.0, -1.0):                                                      # W_V W_O = ±Π
        lam = A.low_rank_eigenvalues(Emb @ U, sign * U.T @ Emb.T)
        assert A.copying_score(lam) == pytest.approx(sign, abs=1e-12)
    # a rotation in a 2-d plane: eigenvalues ±iθ·(…) — no copying either way
    R = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
    V = _orthonormal(D, 2, 21)
    W_VO = V @ R @ V.T                                                            # [D D], skew
    lam = A.low_rank_eigenvalues(V, (R @ V.T) @ V @ V.T)                          # eig of W_VO restricted
    assert A.copying_score(lam) == pytest.approx(0.0, abs=1e-12)
    assert A.copying_score(A.low_rank_eigenvalues(Emb @ V, (R @ V.T) @ Emb.T)) == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(W_VO, -W_VO.T)
    assert A.copying_score(torch.zeros(E, dtype=torch.complex128)) is None


# -- positional_share --------------------------------------------------------------------------


def test_positional_share_splits_the_row_variance():
    g = _gen(22)
    p, h = 13, 2
    causal = torch.ones(p, p, dtype=torch.bool).tril()
    pos = torch.randn(h, p, p, generator=g, dtype=torch.float64).masked_fill(~causal, -math.inf)
    row_const = torch.randn(h, p, 1, generator=g, dtype=torch.float64).expand(h, p, p).masked_fill(~causal, -math.inf)
    torch.testing.assert_close(A.positional_share(row_const, pos), torch.ones(h, dtype=torch.float64))
    torch.testing.assert_close(A.positional_share(pos, row_const), torch.zeros(h, dtype=torch.float64))
    # twice the spread in position: share 4 / (4 + 1)
    share = A.positional_share(pos, 2 * pos.masked_fill(~causal, 0).masked_fill(~causal, -math.inf))
    torch.testing.assert_close(share, torch.full((h,), 0.8, dtype=torch.float64))
    # direct: Σ_rows var_k over k ≤ q
    c = torch.randn(h, p, p, generator=g, dtype=torch.float64).masked_fill(~causal, -math.inf)
    vp = sum(pos[:, q, : q + 1].var(-1, unbiased=False) for q in range(p))
    vc = sum(c[:, q, : q + 1].var(-1, unbiased=False) for q in range(p))
    torch.testing.assert_close(A.positional_share(c, pos), vp / (vp + vc))
    assert torch.isnan(A.positional_share(row_const, row_const)).all()


# -- qk_negative_mass ----------------------------------------------------------------------------


def test_negative_mass_is_that_of_the_n_by_n_symmetric_form():
    X = torch.randn(N, D, generator=_gen(30), dtype=torch.float64)
    W_Q, W_K = (torch.randn(D, E, generator=_gen(s), dtype=torch.float64) for s in (31, 32))
    q, k = X @ W_Q, X @ W_K
    B = q @ k.T
    lam = torch.linalg.eigvalsh((B + B.T) / 2)                                     # [N], rank ≤ 2e
    want = float((-lam).clamp_min(0).sum() / lam.abs().sum())
    low = A.weighted_eigenvalues(q, k)
    assert low.shape == (2 * E,)
    assert A.negative_mass(low) == pytest.approx(want, rel=1e-10)
    # self-suppressing (W_K = −W_Q): every eigenvalue ≤ 0, mass 1; self-attending (W_K = W_Q): 0
    assert A.negative_mass(A.weighted_eigenvalues(q, -q)) == pytest.approx(1.0, abs=1e-12)
    assert A.negative_mass(A.weighted_eigenvalues(q, q)) == pytest.approx(0.0, abs=1e-12)
    assert A.negative_mass(torch.zeros(2 * E, dtype=torch.float64)) is None


def test_copying_score_at_rounding_level_of_its_bound_is_not_applicable():
    lam = torch.tensor([1e-20, 2e-20], dtype=torch.complex128)
    assert A.copying_score(lam) == 1.0                       # without a scale: the ratio of the noise
    assert A.copying_score(lam, scale=1.0) is None           # with the bound: rounding of a zero circuit
    assert A.copying_score(torch.tensor([-0.5, 0.25], dtype=torch.complex128), scale=1.0) == pytest.approx(-1 / 3)


def test_per_head_products_share_grouped_copies():
    """Grouped-query attention's expanded keys (3 groups of 4 identical heads) take one product per
    group, with every head's X @ W[h]; distinct heads (and a lone repeated pair) do not group."""
    g = torch.Generator().manual_seed(3)
    X = torch.randn(11, 7, dtype=torch.float64, generator=g)
    kv = torch.randn(3, 7, 5, dtype=torch.float64, generator=g)
    W = kv.repeat_interleave(4, dim=0)                                           # [12 7 5]
    assert A._groups(W) == 4
    direct = torch.einsum("nd,hde->hne", X, W)
    torch.testing.assert_close(A._per_head(X, W), direct)
    distinct = torch.randn(6, 7, 5, dtype=torch.float64, generator=g)
    distinct[3] = distinct[2]                                                    # one copy, not a grouping
    assert A._groups(distinct) == 1
    torch.testing.assert_close(A._per_head(X, distinct), torch.einsum("nd,hde->hne", X, distinct))
    # one layout for many products (the atlas's HeadColumns per layer): each product as a fresh layout gives it
    cols, other = A.HeadColumns(W), torch.randn(4, 7, dtype=torch.float64, generator=g)
    assert cols.g == 4 and cols.cols.shape == (7, 3 * 5)
    for Y in (X, other):
        assert torch.equal(cols(Y), A._per_head(Y, W)) and torch.equal(A._per_head(Y, cols), cols(Y))
    assert A.HeadColumns(distinct).g == 1
