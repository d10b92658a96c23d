"""Statistics shared by the analyses, in one place: correlation, quantiles, histograms.

Conventions: a statistic that is undefined on its input (the correlation of a constant
vector, the quantile of nothing) is ``None`` for a scalar and NaN inside a tensor;
callers that promise a number say "not applicable" instead of writing NaN.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from jaxtyping import Float

Tensor = torch.Tensor

#: log of the largest float64: exp overflows above it (≈ 709.78)
LOG_FLOAT64_MAX = math.log(torch.finfo(torch.float64).max)


def correlation(a: Float[Tensor, "... n"], b: Float[Tensor, "... n"]) -> Float[Tensor, "..."]:
    """Pearson correlation of `a` and `b` along the last dimension (NaN where either is constant).

    r = Σ (a − ā)(b − b̄) / (|a − ā| |b − b̄|).
    """
    a = a - a.mean(-1, keepdim=True)
    b = b - b.mean(-1, keepdim=True)
    den = a.norm(dim=-1) * b.norm(dim=-1)
    r = (a * b).sum(-1) / den
    return torch.where(den > 0, r, torch.full_like(r, math.nan))


def pearson(a: Tensor, b: Tensor) -> float | None:
    """Pearson correlation of two 1-D tensors; None when either is constant (undefined)."""
    r = float(correlation(a.reshape(-1), b.reshape(-1)))
    return r if math.isfinite(r) else None


def fraction_unexplained(true: Float[Tensor, "... n"], pred: Float[Tensor, "... n"]) -> Float[Tensor, "..."]:
    """FVU = |true − pred|² / |true − mean(true)|² along the last dimension (NaN where true is constant)."""
    resid = (true - pred).pow(2).sum(-1)
    var = (true - true.mean(-1, keepdim=True)).pow(2).sum(-1)
    return torch.where(var > 0, resid / var, torch.full_like(resid, math.nan))


def quantile(x: Tensor, q: float) -> float | None:
    """The q-quantile of the finite entries of `x` (linear interpolation); None if there are none."""
    x = x.reshape(-1).double()
    x = x[torch.isfinite(x)]
    return float(torch.quantile(x, q)) if x.numel() else None


def median(x: Tensor) -> float | None:
    """The median of the finite entries of `x` (mean of the two middle ones); None if there are none."""
    return quantile(x, 0.5)


def vector_std(x: Tensor) -> float:
    """Sample standard deviation (n − 1) of all entries of `x`, in float64, summed in a fixed order.

    torch splits a reduction of more than 32768 entries between its threads, which moves the
    last digits with the thread count; numpy's pairwise sums run on one thread, so the same
    input gives the same bits on any machine (NaN for fewer than two entries).
    """
    x = x.detach().reshape(-1).to(torch.float64).cpu().numpy()
    return float(np.std(x, ddof=1)) if x.size > 1 else math.nan


def vector_mean(x: Tensor) -> float:
    """Mean of all entries of `x` in float64, summed in a fixed order (see :func:`vector_std`); NaN if empty."""
    x = x.detach().reshape(-1).to(torch.float64).cpu().numpy()
    return float(np.mean(x)) if x.size else math.nan


def bin_values(values: Sequence[float], bins: int = 30) -> tuple[list[float], list[int]]:
    """Equal-width bin edges and counts of the finite `values` (a histogram).

    Value v falls in bin min(⌊(v − lo)/step⌋, bins − 1), computed in float64 by numpy over all
    values at once (the same IEEE operations as one at a time; None counts as non-finite)."""
    vals = np.asarray([np.nan if v is None else v for v in values] if not isinstance(values, np.ndarray) else values,
                      dtype=np.float64).reshape(-1)
    vals = vals[np.isfinite(vals)]
    if not vals.size:
        return [0.0, 1.0], [0]
    lo, hi = float(vals.min()), float(vals.max())
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    step = (hi - lo) / bins
    index = np.minimum(((vals - lo) / step).astype(np.int64), bins - 1)           # v ≥ lo: truncation = floor
    return [lo + i * step for i in range(bins + 1)], np.bincount(index, minlength=bins).tolist()


def robust_z(x: Tensor, ref: Tensor | None = None) -> Tensor:
    """Modified z-scores 0.6745 (x − median) / MAD of `x` against `ref` (default: `x` itself).

    Iglewicz & Hoaglin (1993): |z| > 3.5 marks an outlier. MAD = median |ref − median|;
    where MAD = 0 the scores are 0 for x = median and ±inf otherwise (callers compare them).
    """
    ref = x if ref is None else ref
    ref = ref.reshape(-1).double()
    med = ref.median()
    mad = (ref - med).abs().median()
    dev = x.double() - med
    if float(mad) > 0:
        return 0.6745 * dev / mad
    return torch.where(dev == 0, torch.zeros_like(dev), dev.sign() * math.inf)


#: significant digits two values must share to count as one value when ranked (:func:`ranks`)
RANK_DIGITS = 12


def ranks(x: Sequence[float] | Tensor) -> Float[Tensor, "n"]:
    """Ranks 0..n−1 of `x` (float64), ties their mean rank, after rounding each value to
    :data:`RANK_DIGITS` significant digits.

    The values ranked here are float64 results (spreads, bounds, kernel sums) whose last digits
    depend on the order of the sums that made them (10⁻¹⁶–10⁻¹² relative, more after a
    cancellation): two values equal in exact arithmetic, or equal to rounding, would otherwise
    get distinct ranks in one order and a tie in another, and a rank correlation over a few
    saturated heads would move by whole ranks with the arithmetic. Rounded, values that agree
    to 12 digits are one value."""
    t = torch.tensor([float(f"{float(v):.{RANK_DIGITS}g}") for v in (x.tolist() if isinstance(x, Tensor) else x)],
                     dtype=torch.float64)
    r = torch.empty_like(t)
    r[torch.argsort(t, stable=True)] = torch.arange(len(t), dtype=torch.float64)
    for v in t.unique():                                       # ties: mean rank
        m = t == v
        r[m] = r[m].mean()
    return r


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's ρ: Pearson's r of the :func:`ranks` (ties, to 12 digits, get their mean rank);
    None below 3 pairs or where either side is constant."""
    if len(a) != len(b):
        raise ValueError(f"spearman: expected equal lengths, got {len(a)} and {len(b)}")
    if len(a) < 3:
        return None
    return pearson(ranks(a), ranks(b))


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties counting ½
    (the Mann–Whitney U over n⁺·n⁻); None without both classes."""
    pos = [float(s) for s, y in zip(scores, labels) if y]
    neg = [float(s) for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def null_tail(draws: Sequence[float], direction: str) -> tuple[float, float]:
    """(median, the 95th percentile in the claim's direction) of a null's finite draws.

    ``direction`` "above": the claim's statistic is large, the tail is the 95th percentile;
    "below": it is small, the tail is the 5th percentile (the 95th of −x). Linear
    interpolation between order statistics (``torch.quantile``)."""
    if direction not in ("above", "below"):
        raise ValueError(f"null_tail: expected direction 'above' or 'below', got {direction!r}")
    x = torch.tensor([float(v) for v in draws], dtype=torch.float64)
    x = x[torch.isfinite(x)]
    if x.numel() == 0:
        raise ValueError("null_tail: expected at least one finite draw, got none")
    q = 0.95 if direction == "above" else 0.05
    return float(x.median()), float(torch.quantile(x, q))


#: a term Φ̄(x/σ_t) with x/σ_t beyond this is below 1e-349 and left out of :func:`log_union_tail`
UNION_TAIL_Z = 40.0


def log_union_tail(x: Tensor, sigma: Tensor, chunk: int = 256) -> Tensor:
    """log Σ_t Φ̄(x_j / σ_t) for each x_j ([k] → [k], float64): the union (Bonferroni) bound on
    P(max_t z_t ≥ x_j) for centred Gaussians z_t of standard deviations σ_t, whatever their
    correlations. Terms with x_j/σ_t > :data:`UNION_TAIL_Z` are left out (each < 1e-349); terms with
    σ_t = 0 vanish for x_j > 0; x_j ≤ 0 gives 0 (the bound is capped at 1)."""
    sigma = sigma.double()
    sigma = sigma[sigma > 0].sort(descending=True).values
    x = x.double()
    out = torch.zeros_like(x)
    pos = (x > 0).nonzero().squeeze(1)
    if sigma.numel() == 0:
        return out.index_fill_(0, pos, -math.inf)
    pos = pos[torch.argsort(x[pos])]                      # ascending: a chunk's smallest x sets its tokens
    for c in pos.split(chunk):
        xc = x[c]
        keep = int((sigma >= float(xc[0]) / UNION_TAIL_Z).sum())
        if keep == 0:
            out[c] = -math.inf
            continue
        out[c] = torch.special.log_ndtr(-(xc[:, None] / sigma[None, :keep])).logsumexp(1).clamp_max(0.0)
    return out


def sign_flip_means(d: Tensor, n_max: int = 4096, seed: int = 0) -> Tensor:
    """The means of ``s ⊙ d`` over sign vectors s ∈ {±1}^n: the paired permutation null of mean(d).

    Every one of the 2ⁿ sign vectors when 2ⁿ ≤ n_max (exact, in a fixed order), else n_max
    seeded draws. Under the null that each paired difference is as likely negative as
    positive, mean(d) is one draw of this distribution."""
    d = d.reshape(-1).double()
    n = d.numel()
    if n == 0:
        raise ValueError("sign_flip_means: expected at least one difference, got none")
    if 2 ** n <= n_max:
        bits = torch.arange(2 ** n).unsqueeze(1).bitwise_right_shift(torch.arange(n)).bitwise_and(1)   # [2ⁿ n]
        signs = 1.0 - 2.0 * bits.double()
    else:
        g = torch.Generator().manual_seed(seed)
        signs = 1.0 - 2.0 * torch.randint(0, 2, (n_max, n), generator=g).double()
    return (signs * d).mean(-1)


def hypergeometric_quantiles(V: int, k: int, q: float = 0.95) -> tuple[int, int]:
    """(median, q-quantile) of the overlap of a uniformly random k-subset of V items with a fixed
    k-subset (hypergeometric, exact): the overlap a selection that knows nothing of the other gets."""
    total, acc, med = math.comb(V, k), 0, None
    for x in range(k + 1):
        acc += math.comb(k, x) * math.comb(V - k, k - x)
        if med is None and 2 * acc >= total:
            med = x
        if acc >= q * total:
            return med, x
    return med, k


def binomial_quantiles(n: int, p: float, q: float = 0.95) -> tuple[int, int]:
    """(median, q-quantile) of Binomial(n, p), exact: how many of n independent trials succeed when
    each does with probability p (the count a set of n random components reaches)."""
    if n < 0 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_quantiles: expected n ≥ 0 and 0 ≤ p ≤ 1, got n={n}, p={p}")
    if p in (0.0, 1.0):                                   # a point mass
        return (0, 0) if p == 0.0 else (n, n)
    acc, med = 0.0, None
    lp, lq, ln_fact_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    for x in range(n + 1):                                 # pmf in log space: C(n, x) overflows a float for n ≳ 1030
        acc += math.exp(ln_fact_n - math.lgamma(x + 1) - math.lgamma(n - x + 1) + x * lp + (n - x) * lq)
        if med is None and acc >= 0.5 - 1e-12:
            med = x
        if acc >= q - 1e-12:
            return med, x
    return (n if med is None else med), n
