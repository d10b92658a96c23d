"""The small-factor primitives of the low-rank identities (atlas, composition, the QK form).

A head's circuits have rank ≤ d_head, so their norms and nonzero eigenvalues are those
of small factors: for C [n r], ``‖C X‖_F = ‖R X‖_F`` with R the triangular factor of C's
QR decomposition, and many such small decompositions run fastest on one thread.

For a bilinear form U Vᵀ (U, V [n e]), with [U V] = B R (B [n 2e] orthonormal), U = B R₁ and
V = B R₂, so sym(U Vᵀ) = B (R M_S Rᵀ) Bᵀ and skew(U Vᵀ) = B (R M_A Rᵀ) Bᵀ with
M_S, M_A the symmetric and skew parts of E = [[0, I], [0, 0]] (:func:`pair_forms`): the
n × n parts' norms and nonzero eigenvalues are those of the 2e × 2e cores
(:func:`sym_skew_cores`), and their eigenvectors are B times the cores' (:func:`span_basis`).
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import torch
from jaxtyping import Float

from ._threads import one_thread

Tensor = torch.Tensor


@contextlib.contextmanager
def small_matrices():
    """One torch thread while decomposing many small (≤ 2e × 2e) matrices.

    Multi-threaded LAPACK on matrices this small spends its time synchronising (on 2
    busy cores, 12 eigh of 128 × 128 took 1.7 s with 2 threads, 0.08 s with one).
    """
    with one_thread():
        yield


def stacked_columns(parts: Sequence[Tensor], shifts: Sequence[Tensor] | None = None) -> Float[Tensor, "... n r"]:
    """``torch.cat(parts, -1)`` in float64 (each part minus its row ``shifts[i]`` [... 1 r_i] when
    given), laid out column-major: every matrix of the batch stored column by column, as LAPACK reads
    it. A QR copies its input into that layout first; from a row-major [... n r] that copy transposes
    (a strided pass over n·r entries), from this one it is a straight copy, and the cat's own pass is
    gone. The same values bit for bit (a copy, or the same elementwise subtraction)."""
    *batch, n, _ = parts[0].shape
    out = torch.empty(*batch, sum(p.shape[-1] for p in parts), n, dtype=torch.float64).mT   # [... n r]
    c = 0
    for i, p in enumerate(parts):
        view = out[..., c:c + p.shape[-1]]
        if shifts is None:
            view.copy_(p)
        else:
            torch.sub(p.double(), shifts[i], out=view)
        c += p.shape[-1]
    return out


def column_factor(C: Float[Tensor, "... n r"]) -> Float[Tensor, "... r r"]:
    """R with CᵀC = RᵀR: the triangular factor of C's QR decomposition (float64).

    QR rather than a factor of the Gram matrix CᵀC: forming CᵀC squares the condition
    number, and the null directions of a rank-deficient C (e.g. K = ±Q columnwise, an
    exactly symmetric head) would come back as √ε noise instead of ε.
    """
    with small_matrices():
        return torch.linalg.qr(C.double(), mode="r")[1]


def span_basis(U: Float[Tensor, "d e"], V: Float[Tensor, "d e"]) -> Float[Tensor, "d r"]:
    """An orthonormal B [d r], r = min(d, 2e), whose span contains the columns of U and V.

    Householder QR: B is orthonormal even when [U V] is rank-deficient (U = V for a symmetric
    head), its span then holding U, V and directions the forms vanish on.
    """
    return torch.linalg.qr(torch.cat([U, V], dim=1))[0]                               # [d r]


def pair_forms(e: int, dtype=torch.float64) -> tuple[Tensor, Tensor]:
    """M_S = (E + Eᵀ)/2 and M_A = (E − Eᵀ)/2 for E = [[0, I], [0, 0]] (2e × 2e)."""
    E = torch.zeros(2 * e, 2 * e, dtype=dtype)
    E[:e, e:] = torch.eye(e, dtype=dtype)
    return (E + E.T) / 2, (E - E.T) / 2


def sym_skew_cores(U: Float[Tensor, "... n e"], V: Float[Tensor, "... n e"]
                   ) -> tuple[Float[Tensor, "... 2e 2e"], Float[Tensor, "... 2e 2e"]]:
    """(R M_S Rᵀ, R M_A Rᵀ) with [U V] = Q R: the 2e × 2e cores of sym(U Vᵀ) and skew(U Vᵀ)
    (module docstring; float64, the n × n forms never built)."""
    return factor_cores(column_factor(stacked_columns([U, V])))                     # R [... 2e 2e]


def times_pair_form(R: Float[Tensor, "... r 2e"], skew: bool = False) -> Float[Tensor, "... r 2e"]:
    """R M_S = ½ [R₂ R₁] (or R M_A = ½ [−R₂ R₁] with ``skew``) for R = [R₁ R₂] (e columns each):
    the product with :func:`pair_forms`' M, without the product.

    The same bits as ``R @ M``: each entry of that product is one term ±½ R_ij (exact) plus terms
    R_ik · 0 = ±0, which BLAS sums from +0, so an entry that is zero comes out +0 (hence the + 0.0
    here). Row-major, as the product is."""
    e = R.shape[-1] // 2
    R1, R2 = R[..., :e], R[..., e:]
    return torch.cat([R2.neg() if skew else R2, R1], dim=-1).mul_(0.5).add_(0.0)   # [... r 2e]


def sym_core(R: Float[Tensor, "... r 2e"]) -> Float[Tensor, "... r r"]:
    """R M_S Rᵀ alone: the first of :func:`factor_cores`."""
    return times_pair_form(R) @ R.transpose(-1, -2)


def factor_cores(R: Float[Tensor, "... r 2e"]) -> tuple[Float[Tensor, "... r r"], Float[Tensor, "... r r"]]:
    """(R M_S Rᵀ, R M_A Rᵀ) for a factor R of [U V] (RᵀR = [U V]ᵀ[U V]): :func:`sym_skew_cores`'s cores.
    One product each (R M by :func:`times_pair_form`: a permutation and a halving)."""
    Rt = R.transpose(-1, -2)
    return times_pair_form(R) @ Rt, times_pair_form(R, skew=True) @ Rt


def centred_column_factors(C: Float[Tensor, "... n r"]) -> tuple[Tensor, Tensor]:
    """(R̃, R): the triangular factors of the column-centred C̃ = C − 1 c̄ᵀ (c̄ the mean row) and of C
    itself, from one QR of n rows (float64; C̃ written column-major, :func:`stacked_columns`).

    Since 1ᵀC̃ = 0, CᵀC = C̃ᵀC̃ + n c̄ c̄ᵀ, so R is the factor of the r + 1 rows [[R̃], [√n c̄ᵀ]]: one
    small QR instead of a second one of n rows. Both are QR factors of matrices whose columns keep
    C's exact dependencies (K = ±Q columnwise: an exactly symmetric head), so, as with
    :func:`column_factor`, the null directions come back at rounding level ε, not √ε.
    """
    C = C.double()
    mean = C.mean(-2, keepdim=True)                                                # [... 1 r]
    R_c = column_factor(stacked_columns([C], [mean]))                              # [... r r]
    n = C.shape[-2]
    return R_c, column_factor(torch.cat([R_c, mean * n ** 0.5], dim=-2))           # [r+1 r] → [... r r]


def sym_eigenvalues(U: Float[Tensor, "... n e"], V: Float[Tensor, "... n e"], centre: bool = False
                    ) -> Float[Tensor, "... 2e"]:
    """The (at most 2e) eigenvalues of sym(U Vᵀ) [n n] that can be nonzero, ascending (float64);
    the other n − 2e are exactly zero. ``centre``: of sym(P U Vᵀ P) instead, P the projector onto
    1⊥ in the n rows (U and V minus their mean rows, taken as the QR's input is assembled)."""
    U, V = U.double(), V.double()
    shifts = [U.mean(-2, keepdim=True), V.mean(-2, keepdim=True)] if centre else None   # [... 1 e] each
    return core_eigenvalues(sym_core(column_factor(stacked_columns([U, V], shifts))))  # R [... 2e 2e]


def core_eigenvalues(S: Float[Tensor, "... r r"]) -> Float[Tensor, "... r"]:
    """Eigenvalues of a symmetric core R M_S Rᵀ, ascending (symmetrised against rounding first)."""
    with small_matrices():
        return torch.linalg.eigvalsh((S + S.transpose(-1, -2)) / 2)
