"""The per-head metrics of the atlas (:mod:`headscope.maps.atlas`), each read off small matrices.

Every function here takes a head's (or a batch of heads') queries, keys or weights and returns
its figure through the low-rank identities stated in :mod:`headscope.maps.atlas`'s docstring:
nothing of size N × N or vocabulary × vocabulary is formed. :mod:`headscope.maps.atlas` holds
the column spec, the result types and the pass over the layers that calls these.
"""

from __future__ import annotations

import numpy as np
import torch
from jaxtyping import Float

from .._threads import one_thread, split_heads
from ..lowrank import (small_matrices, sym_eigenvalues, sym_skew_cores, centred_column_factors, factor_cores,
                       core_eigenvalues, sym_core)

Tensor = torch.Tensor

TOP = 64               #: eigenvalues of S counted by qk_negative_fraction
REL_TOL = 1e-6         #: |λ| ≤ REL_TOL · max|λ| counts as zero (as in bilinear.bilinear_form)
SILENT = 1e-6          #: a score row with std ≤ SILENT · the largest row std is constant


# -- the metrics of one head (small matrices only; see the module docstring) ----------------


def form_norms(q: Float[Tensor, "... n e"], k: Float[Tensor, "... n e"]) -> tuple[Tensor, Tensor]:
    """(‖sym(q kᵀ)‖_F, ‖skew(q kᵀ)‖_F) from the 2e × 2e cores of [q k] (n × n never formed)."""
    S, A = sym_skew_cores(q, k)                                                    # [... 2e 2e] each
    return S.flatten(-2).norm(dim=-1), A.flatten(-2).norm(dim=-1)


def token_forms(q: Float[Tensor, "... n e"], k: Float[Tensor, "... n e"]
                ) -> tuple[Tensor, Tensor, Float[Tensor, "... r"]]:
    """(sym, skew, λ̃): :func:`form_norms` of (q, k) and :func:`weighted_eigenvalues` of the
    token-centred (q − q̄, k − k̄), from one QR of the centred [q̃ k̃] [n 2e] and one of 2e + 1 rows
    (:func:`headscope.lowrank.centred_column_factors`: [q k]ᵀ[q k] = [q̃ k̃]ᵀ[q̃ k̃] + n c̄ c̄ᵀ).
    On one thread (:func:`headscope.lowrank.small_matrices`): besides the QR, passes over [... n 2e]
    and products of 2e × 2e cores, where a second thread only synchronises (at GPT-2 XL's widths,
    n = 2000, on 2 busy cores: 0.195 CPU s a layer on one thread, 0.236 on two, the same bits)."""
    with small_matrices():
        R_c, R = centred_column_factors(torch.cat([q, k], dim=-1))                 # [... 2e 2e] each
        S, A = factor_cores(R)
        return S.flatten(-2).norm(dim=-1), A.flatten(-2).norm(dim=-1), core_eigenvalues(sym_core(R_c))


def symmetry_ratio(sym: float, skew: float) -> float | None:
    """‖sym‖/(‖sym‖ + ‖skew‖), None when both vanish."""
    total = sym + skew
    return None if total <= 0 else sym / total


def symmetric_eigenvalues(W_Q: Float[Tensor, "... d e"], W_K: Float[Tensor, "... d e"], centre: bool = False
                          ) -> Float[Tensor, "... r"]:
    """The (at most 2e) eigenvalues of sym(W_Q W_Kᵀ) that can be nonzero, sorted by |λ| descending;
    ``centre``: of sym(P W_Q W_Kᵀ P), P the projector onto 1⊥ in d (fold_ln's centred residual).

    Through R M_S Rᵀ with [W_Q W_K] = Q R (:func:`headscope.lowrank.sym_eigenvalues`); the
    other d − 2e eigenvalues are exactly zero. On one thread (as :func:`token_forms`).
    """
    with small_matrices():
        lam = sym_eigenvalues(W_Q, W_K, centre=centre)                             # [... 2e]
    order = torch.argsort(lam.abs(), dim=-1, descending=True, stable=True)
    return torch.gather(lam, -1, order)


def negative_fraction(lam: Float[Tensor, "r"], top: int = TOP, rel_tol: float = REL_TOL
                      ) -> tuple[int, int, float | None]:
    """(negative, nonzero, negative/nonzero) among the `top` eigenvalues of largest |λ| (sorted input)."""
    if lam.numel() == 0 or float(lam.abs().max()) == 0.0:
        return 0, 0, None
    tol = rel_tol * float(lam.abs().max())
    kept = lam[lam.abs() > tol][:top]
    n_neg = int((kept < 0).sum())
    return n_neg, int(kept.numel()), n_neg / int(kept.numel())


def self_scores(q: Float[Tensor, "... n e"], k: Float[Tensor, "... n e"], silent: float = SILENT, *,
                k_mean: Tensor | None = None) -> Float[Tensor, "... n"]:
    """z_t = (s_tt − mean_s s_ts) / std_s s_ts for s_ts = q_t·k_s, from e × e moments (NaN on silent rows).
    ``k_mean`` [... e]: the keys' mean k̄ over the n tokens, when the caller took it."""
    with small_matrices():           # passes over [... n e] and e × e products: a second thread only waits
        return _self_scores(q.double(), k.double(), silent, k_mean)


def _self_scores(q: Tensor, k: Tensor, silent: float, k_mean: Tensor | None) -> Tensor:
    n = k.shape[-2]
    prod = q * k                                                                   # [... n e], reused below
    diag = prod.sum(-1)                                                            # [... n]
    k_mean = k.mean(-2) if k_mean is None else k_mean.double()                     # [... e]
    kc = k - k_mean[..., None, :]
    cov = kc.transpose(-1, -2) @ kc / n                                            # [... e e]
    del kc
    mean = torch.mul(q, k_mean[..., None, :], out=prod).sum(-1)
    std = (q @ cov).mul_(q).sum(-1).clamp_min(0).sqrt()                            # [... n]
    live = std > silent * std.amax(-1, keepdim=True)
    return torch.where(live, (diag - mean) / torch.where(live, std, torch.ones_like(std)),
                       torch.full_like(std, float("nan")))


def mean_self_score(z: Float[Tensor, "n"]) -> tuple[float | None, int]:
    """(mean of the defined z_t, how many are defined); None when none is."""
    ok = torch.isfinite(z)
    n = int(ok.sum())
    return (float(z[ok].mean()) if n else None), n


def low_rank_eigenvalues(A: Float[Tensor, "... n e"], B: Float[Tensor, "... e n"]) -> Tensor:
    """Eigenvalues of the e × e matrix B A: the nonzero eigenvalues of the n × n matrix A B. Complex."""
    with small_matrices():                       # per head [e n] @ [n e]: small products, one thread
        return torch.linalg.eigvals(B.double() @ A.double())


def copying_score(eigenvalues: Tensor, scale: float = 0.0, rel_tol: float = REL_TOL) -> float | None:
    """Σ λ / Σ |λ| (real: the trace over the total modulus), None when every λ is 0.

    ``scale`` (e.g. ‖W_O‖_F ‖W_U W_E‖_F ‖W_V‖_F, a bound on every |λ|): eigenvalues all at
    most rel_tol · scale are rounding of an OV circuit that is zero (e.g. a head writing
    where no unembedding reads, whose W_O·1 = 0 holds only to float rounding) — None.
    """
    total = float(eigenvalues.abs().sum())
    if total == 0.0 or float(eigenvalues.abs().max()) <= rel_tol * scale:
        return None
    return float(eigenvalues.real.sum()) / total


def weighted_eigenvalues(q: Float[Tensor, "... n e"], k: Float[Tensor, "... n e"]) -> Float[Tensor, "... r"]:
    """The (at most 2e) nonzero eigenvalues of sym(q kᵀ) [n n], ascending, from R M_S Rᵀ with
    [q k] = Q R (float64; :func:`headscope.lowrank.sym_eigenvalues`)."""
    return sym_eigenvalues(q, k)


def negative_mass(lam: Float[Tensor, "r"], rel_tol: float = REL_TOL) -> float | None:
    """Σ_{λ<0} |λ| / Σ |λ| (eigenvalues with |λ| ≤ rel_tol · max|λ| dropped), None when every λ is 0."""
    if lam.numel() == 0 or float(lam.abs().max()) == 0.0:
        return None
    lam = lam[lam.abs() > rel_tol * float(lam.abs().max())]
    return float((-lam).clamp_min(0).sum() / lam.abs().sum())


def positional_share(content: Float[Tensor, "... q k"], position: Float[Tensor, "... q k"]) -> Tensor:
    """Σ_q Var_k position / Σ_q (Var_k position + Var_k content) over the finite entries of each row.

    Masked (−inf) entries are left out; NaN where both parts are constant on every row
    (their total row variance at most 1e-24 of the parts' summed squares: rounding).
    On one thread: these passes over [h q k] are memory-bound, and on a busy machine a second
    thread spins (a GPT-2-XL layer's [25 256 256]: 0.05 s CPU on one thread, 0.25 s on two).
    """
    with small_matrices():
        return _positional_share(content, position)


def _positional_share(content: Tensor, position: Tensor) -> Tensor:
    mask = torch.isfinite(content) & torch.isfinite(position)
    n = mask.sum(-1).clamp_min(1)                                                  # [... q]
    zero = torch.zeros((), dtype=torch.float64)
    finite = {k: torch.where(mask, x.double(), zero) for k, x in (("c", content), ("p", position))}  # 0 off the mask

    def row_var(x):
        m = x.sum(-1) / n
        return torch.where(mask, (x - m[..., None]) ** 2, zero).sum(-1) / n

    vp, vc = row_var(finite["p"]).sum(-1), row_var(finite["c"]).sum(-1)
    total = vp + vc
    # both parts constant on every row, up to rounding of their row means: no share
    scale = sum(finite[k].pow(2).sum((-1, -2)) for k in ("c", "p"))
    live = total > 1e-24 * scale
    return torch.where(live, vp / torch.where(live, total, torch.ones_like(total)), torch.full_like(total, float("nan")))


def _sorted_complex(lam: Tensor, n: int) -> list[list[float]]:
    """The `n` eigenvalues of largest modulus as [re, im], ties by real then imaginary part."""
    items = sorted(((-abs(complex(z)), -complex(z).real, -complex(z).imag) for z in lam.tolist()))
    return [[-re, -im] for _, re, im in items[:n]]


class HeadColumns:
    """W [h d e] laid out once for any number of products X @ W[h] (:func:`_per_head`): the distinct
    heads' matrices side by side [d h'·e] (heads whose W[h] are copies of one matrix — grouped-query
    attention's keys and values, expanded per query head — stored once: h' = h / g)."""

    def __init__(self, W: Float[Tensor, "h d e"]):
        h, d, e = W.shape
        self.h, self.g = h, 1
        with one_thread():                                  # comparisons and a copy: memory-bound passes
            while (g := _groups(W)) > 1:                    # as one product per group (g is the largest: once)
                W, self.g = W[::g], self.g * g
            self.cols = W.permute(1, 0, 2).reshape(d, -1)                               # [d h'·e]
        self.e = e

    def __call__(self, X: Float[Tensor, "n d"]) -> Float[Tensor, "h n e"]:
        out = (X @ self.cols).view(-1, self.h // self.g, self.e).permute(1, 0, 2)     # [h' n e]
        return out.repeat_interleave(self.g, dim=0) if self.g > 1 else out             # [h n e]


def _per_head(X: Float[Tensor, "n d"], W: "Float[Tensor, 'h d e'] | HeadColumns") -> Float[Tensor, "h n e"]:
    """X @ W[h] for every head as one [n d] @ [d h·e] product; heads whose W[h] are copies of one
    matrix (grouped-query attention's keys and values, expanded per query head) share one product.
    `W` laid out by :class:`HeadColumns` already when it is read more than once."""
    return (W if isinstance(W, HeadColumns) else HeadColumns(W))(X)


def _groups(W: Float[Tensor, "h d e"]) -> int:
    """The largest g > 1 with W[h] identical within each run of g consecutive heads, else 1."""
    h = W.shape[0]
    if h < 2 or not torch.equal(W[1], W[0]):        # every g > 1 needs W[1] = W[0]
        return 1
    for g in range(h, 1, -1):
        if h % g == 0 and all(torch.equal(W[i], W[i - i % g]) for i in range(h)):
            return g
    return 1


def _f64(t: Tensor) -> Tensor:
    return t.to("cpu", torch.float64)


def _float(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def position_deviation(W_pos: Float[Tensor, "n_ctx d"], P: int) -> Float[Tensor, "P d"]:
    """c(δ_i) for i < P: the position's deviation δ_i = W_pos[i] − mean W_pos, centred across d (LN1's
    centring; the deep positional share's position part before LN1's scale and weight)."""
    delta = W_pos[:P] - W_pos.mean(0)                                                # [P d]
    return delta - delta.mean(-1, keepdim=True)                                      # c(δ)


def _positional_share_deep(X: Tensor, sigma: Tensor, win: Tensor, delta: Tensor, ln1_w: Tensor, W_Q, b_Q: Tensor,
                           W_K, s: float, hidden: Tensor) -> Tensor:
    """positional_share of every head of a layer ≥ 1 (module docstring): first order in δ_i. [h]
    `delta` [P d]: :func:`position_deviation`; W_Q, W_K [h d e] or their :class:`HeadColumns`;
    `hidden` [P P]: the layer's mask (:meth:`Config.hidden_keys`: causal, and its local window)."""
    p_hat = ln1_w * delta / sigma[win][:, None]                                      # [P d]
    x = X[win]                                                                       # [P d]
    q = _per_head(x + p_hat, W_Q)                                                    # [h P e]
    kc, kp = _per_head(x, W_K), _per_head(p_hat, W_K)
    # the [P d] @ [d h·e] products above on the caller's threads; the [h P P] scores and their
    # variances (batched e-wide products and elementwise passes) split by heads over them, one torch
    # thread each (split_heads: the same bits)

    def part(sl: slice) -> Tensor:
        qs = q[sl].add_(b_Q[sl, None])
        content = (qs @ kc[sl].transpose(1, 2)).div_(s).masked_fill_(hidden, float("-inf"))   # [h P P]
        position = (qs @ kp[sl].transpose(1, 2)).div_(s).masked_fill_(hidden, float("-inf"))
        return positional_share(content, position)
    return torch.cat(split_heads(part, q.shape[0]))
