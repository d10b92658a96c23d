"""The small-factor primitives (`headscope.lowrank`) against the n × n forms they stand for.

Dimensions all distinct (n 11, e 3); one rank-deficient case (V = U, an exactly symmetric
form) where the span has fewer than 2e directions.
"""

from __future__ import annotations

import torch

from headscope.lowrank import (centred_column_factors, column_factor, factor_cores, pair_forms, span_basis,
                               stacked_columns, sym_core, sym_eigenvalues, sym_skew_cores, times_pair_form)
from headscope.semantic.bilinear import bilinear_form

N, E = 11, 3


def _uv(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, E, generator=g, dtype=torch.float64), torch.randn(N, E, generator=g, dtype=torch.float64)


def test_pair_forms_split_the_block_shift():
    M_S, M_A = pair_forms(E)
    E_ = torch.zeros(2 * E, 2 * E, dtype=torch.float64)
    E_[:E, E:] = torch.eye(E, dtype=torch.float64)
    torch.testing.assert_close(M_S + M_A, E_, rtol=0, atol=0)
    torch.testing.assert_close(M_S, M_S.T, rtol=0, atol=0)
    torch.testing.assert_close(M_A, -M_A.T, rtol=0, atol=0)


def test_cores_have_the_norms_and_eigenvalues_of_the_n_by_n_parts():
    U, V = _uv()
    W = U @ V.T                                                                   # [n n]
    S, A = (W + W.T) / 2, (W - W.T) / 2
    core_S, core_A = sym_skew_cores(U, V)                                         # [2e 2e] each
    assert core_S.shape == (2 * E, 2 * E)
    torch.testing.assert_close(core_S.norm(), S.norm(), rtol=1e-12, atol=0)
    torch.testing.assert_close(core_A.norm(), A.norm(), rtol=1e-12, atol=0)
    full = torch.linalg.eigvalsh(S)
    nonzero = full[full.abs() > 1e-9 * full.abs().max()]
    torch.testing.assert_close(sym_eigenvalues(U, V), torch.sort(nonzero).values, rtol=1e-10, atol=1e-12)


def test_span_basis_is_orthonormal_and_holds_both_factors_even_when_rank_deficient():
    U, V = _uv(1)
    for a, b in [(U, V), (U, U)]:
        B = span_basis(a, b)                                                      # [n 2e]
        assert B.shape == (N, 2 * E)
        torch.testing.assert_close(B.T @ B, torch.eye(2 * E, dtype=torch.float64), rtol=0, atol=1e-12)
        for X in (a, b):
            torch.testing.assert_close(B @ (B.T @ X), X, rtol=0, atol=1e-12)


def test_bilinear_form_in_the_span_equals_the_full_decomposition():
    U, V = _uv(2)
    W = U @ V.T
    full, small = bilinear_form(W, 0, 0, top=4), bilinear_form(W, 0, 0, top=4, factors=(U, V))
    torch.testing.assert_close(small.eigenvalues, full.eigenvalues, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(small.sigma_skew, full.sigma_skew, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(small.sym, full.sym, rtol=1e-10, atol=1e-12)
    assert small.n_negative == full.n_negative and small.n_positive == full.n_positive


def test_centred_column_factors_are_factors_of_the_centred_and_the_plain_columns():
    U, V = _uv(3)
    C = torch.cat([U + 4.0, V - 2.5], dim=1)                 # a mean row far from 0: the update carries it
    Cc = C - C.mean(0)
    R_c, R = centred_column_factors(C)                      # [2e 2e] each
    torch.testing.assert_close(R_c.T @ R_c, Cc.T @ Cc, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(R.T @ R, C.T @ C, rtol=1e-12, atol=1e-12)
    assert torch.equal(R_c, torch.linalg.qr(Cc, mode="r")[1])          # the centred factor is the QR's own
    # batched, as the atlas calls it (heads first)
    R_c2, R2 = centred_column_factors(torch.stack([C, 2 * C]))
    torch.testing.assert_close(R2[1].T @ R2[1], 4 * C.T @ C, rtol=1e-12, atol=1e-12)
    # an exactly symmetric (V = ±U) form keeps its skew core at rounding level ε, not √ε
    for sign in (1.0, -1.0):
        W = torch.cat([U + 3.0, sign * (U + 3.0)], dim=1)
        for R_ in centred_column_factors(W):
            S, A = factor_cores(R_)
            assert float(A.norm()) <= 1e-14 * float(S.norm())


def test_times_pair_form_is_the_product_with_the_pair_forms_bit_for_bit():
    """R M_S and R M_A without the product: the same bits as ``R @ M`` (signed zeros included), so the
    cores too, for a general factor, an exactly symmetric / antisymmetric one and one with zero columns."""
    U, V = _uv(4)
    M_S, M_A = pair_forms(E)
    Z = torch.cat([U, torch.zeros_like(V)], dim=1)                           # [n 2e], key half zero
    for C in (torch.cat([U, V], 1), torch.cat([U, U], 1), torch.cat([U, -U], 1), Z, -Z):
        for R in (column_factor(C), column_factor(torch.stack([C, 3 * C])), C[:5]):   # [2e 2e], batched, [5 2e]
            for M, skew in ((M_S, False), (M_A, True)):
                got, want = times_pair_form(R, skew), R @ M
                assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())
            S, A = factor_cores(R)
            Rt = R.transpose(-1, -2)
            assert torch.equal(S, R @ M_S @ Rt) and torch.equal(A, R @ M_A @ Rt)
            assert torch.equal(sym_core(R), S)
    W = U @ V.T                                                                # sym_core against the n × n form
    torch.testing.assert_close(torch.linalg.eigvalsh(sym_core(column_factor(torch.cat([U, V], 1)))).abs().sum(),
                               torch.linalg.eigvalsh((W + W.T) / 2).abs().sum(), rtol=1e-12, atol=0)


def _heads_view(seed: int, h: int = 5, n: int = 13, e: int = 4, shift: float = 1.5):
    """[h n e] as the atlas's per-head products come: a permuted view of one [n h·e] product."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, h * e, generator=g, dtype=torch.float64) + shift).view(n, h, e).permute(1, 0, 2)


def test_stacked_columns_is_the_cat_bit_for_bit_in_column_major_layout():
    q, k = _heads_view(5), _heads_view(6, shift=-0.5)                              # [h n e] views
    C = stacked_columns([q, k])
    assert torch.equal(C, torch.cat([q, k], -1)) and C.dtype == torch.float64
    assert C.mT.is_contiguous()                                                    # each matrix stored by columns
    shifts = [q.mean(-2, keepdim=True), k.mean(-2, keepdim=True)]
    assert torch.equal(stacked_columns([q, k], shifts), torch.cat([q - shifts[0], k - shifts[1]], -1))
    assert torch.equal(stacked_columns([q.float()]), q.float().double())           # float32 parts: converted
    # the QR reads the same matrix: the same factor, bit for bit, from either layout
    assert torch.equal(column_factor(C), column_factor(torch.cat([q, k], -1)))


def test_centred_column_factors_factor_the_centred_and_plain_columns_of_head_views():
    """As the atlas calls it: the cat of two permuted [h n e] views. The centred factor is the QR's own
    of C − 1 c̄ᵀ formed row-major (the same bits), and both against float64 Grams formed directly."""
    q, k = _heads_view(7), _heads_view(8, shift=-3.0)
    C = torch.cat([q, k], -1)                                                      # [h n 2e]
    R_c, R = centred_column_factors(C)
    Cc = C - C.mean(-2, keepdim=True)
    assert torch.equal(R_c, torch.linalg.qr(Cc, mode="r")[1])
    T = lambda x: x.transpose(-1, -2)  # noqa: E731
    torch.testing.assert_close(T(R_c) @ R_c, T(Cc) @ Cc, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(T(R) @ R, T(C) @ C, rtol=1e-12, atol=1e-12)


def test_centred_sym_eigenvalues_are_those_of_the_projected_form():
    """``centre=True``: the nonzero eigenvalues of sym(P U Vᵀ P) (P = I − 11ᵀ/n), the n × n form built
    and decomposed naively in float64; bit for bit those of the explicitly centred factors."""
    U, V = _uv(9)
    U, V = U + 2.0, V - 1.0                                                        # far from centred
    P = torch.eye(N, dtype=torch.float64) - 1.0 / N
    W = P @ U @ V.T @ P
    full = torch.linalg.eigvalsh((W + W.T) / 2)
    nonzero = full[full.abs() > 1e-9 * full.abs().max()]
    lam = sym_eigenvalues(U, V, centre=True)
    torch.testing.assert_close(lam, torch.sort(nonzero).values, rtol=1e-10, atol=1e-12)
    assert torch.equal(lam, sym_eigenvalues(U - U.mean(0), V - V.mean(0)))
    assert not torch.allclose(sym_eigenvalues(U, V), lam)                          # centring matters here
