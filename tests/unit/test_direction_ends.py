"""The atlas's direction lists from one product per side (`composition._direction_ends`) are those of
one matrix-vector product per direction, stably sorted (the lists `head_directions` always gave):
clean directions straight from the product, ties and rounding-noise directions recomputed.

Dimensions all distinct: 37 tokens, d 11, 7 directions, 5 listed at each end.
"""

from __future__ import annotations

import torch

from headscope.maps.composition import _direction_ends

N, D, M, K = 37, 11, 7, 5


def _reference(T, Dirs, j):
    o = torch.argsort(T @ Dirs[j], descending=True, stable=True)
    return o[:K], o.flip(0)[:K]


def _check(T, Dirs):
    calls = []

    def exact(j):
        calls.append(j)
        return T @ Dirs[j]

    top, bottom = _direction_ends(T, Dirs, K, exact)
    for j in range(len(Dirs)):
        t, b = _reference(T, Dirs, j)
        assert torch.equal(top[j], t) and torch.equal(bottom[j], b), j
    return calls


def test_clean_directions_come_from_the_product_alone():
    g = torch.Generator().manual_seed(0)
    T, Dirs = torch.randn(N, D, generator=g, dtype=torch.float64), torch.randn(M, D, generator=g, dtype=torch.float64)
    assert _check(T, Dirs) == []                    # no direction recomputed: well-separated scores


def test_ties_and_noise_directions_are_recomputed_exactly():
    g = torch.Generator().manual_seed(1)
    T = torch.randn(N, D, generator=g, dtype=torch.float64)
    T[:, -3:] = 0.0                                 # the tokens span the first 8 coordinates only
    T[20] = T[3]                                    # a tie: two tokens with one embedding
    Dirs = torch.randn(M, D, generator=g, dtype=torch.float64)
    Dirs[2, :-3] = 0.0                              # reads nothing: every score 0
    Dirs[4, :-3] = 1e-17 * torch.randn(D - 3, generator=g, dtype=torch.float64)   # rounding noise only
    Dirs[5] = T[3] * 1e3                            # tokens 3 and 20 tie at the top
    calls = _check(T, Dirs)
    assert {2, 4, 5} <= set(calls) and len(calls) < M


def test_low_rank_svd_forms_the_leading_singular_vectors_only():
    from headscope.maps.composition import _low_rank_svd

    g = torch.Generator().manual_seed(2)
    L, R = torch.randn(2, D, 4, generator=g, dtype=torch.float64), torch.randn(2, D, 4, generator=g, dtype=torch.float64)
    U, sig, V = _low_rank_svd(L, R, 3)                                          # [2 D 3], [2 4], [2 D 3]
    assert U.shape == V.shape == (2, D, 3) and sig.shape == (2, 4)
    Uf, sf, Vhf = torch.linalg.svd(L @ R.transpose(-1, -2))                     # [2 D D]: the d × d product
    torch.testing.assert_close(sig, sf[:, :4], rtol=1e-12, atol=0)
    # each singular pair up to its common sign: u vᵀ is unique for distinct σ
    torch.testing.assert_close(U[..., :, None, :] * V[..., None, :, :],
                               Uf[..., :, None, :3] * Vhf.transpose(-1, -2)[..., None, :, :3], rtol=0, atol=1e-12)
    torch.testing.assert_close(U.transpose(-1, -2) @ U, torch.eye(3, dtype=torch.float64).expand(2, 3, 3),
                               rtol=0, atol=1e-12)
