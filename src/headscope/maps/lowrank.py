"""Primitives of the low-rank identities the maps rely on (atlas, composition).

A head's circuits have rank ≤ d_head, so their norms and nonzero eigenvalues are those
of small factors: for C [n r], ``‖C X‖_F = ‖R X‖_F`` with R the triangular factor of C's
QR decomposition, and many such small decompositions run fastest on one thread.
"""

from __future__ import annotations

import contextlib

import torch
from jaxtyping import Float

Tensor = torch.Tensor


@contextlib.contextmanager
def small_matrices():
    """One torch thread while decomposing many small (≤ 2e × 2e) matrices.

    Multi-threaded LAPACK on matrices this small spends its time synchronising (on 2
    busy cores, 12 eigh of 128 × 128 took 1.7 s with 2 threads, 0.08 s with one).
    """
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def column_factor(C: Float[Tensor, "... n r"]) -> Float[Tensor, "... r r"]:
    """R with CᵀC = RᵀR: the triangular factor of C's QR decomposition (float64).

    QR rather than a factor of the Gram matrix CᵀC: forming CᵀC squares the condition
    number, and the null directions of a rank-deficient C (e.g. K = ±Q columnwise, an
    exactly symmetric head) would come back as √ε noise instead of ε.
    """
    with small_matrices():
        return torch.linalg.qr(C.double(), mode="r")[1]
