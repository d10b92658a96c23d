"""Positional kernels of the layer-0 heads, their categories, and the TV of the key split (seed 000).

The split itself (E[n, t], P[n, i], pos, content, attn_approx, c) lives in
:mod:`headscope.layer0`; this module measures the kernels it gives, per head, and the
total-variation distance TV[n] = ½ Σ_i |attn[n, i] − attn_approx[n, i]| (0 ≤ TV ≤ 1)
per head and query position over a corpus of windows ``[BOS] + tokens``. Everything
runs on the float64 layer-0 view (:func:`headscope.layer0.view`).

Kernel measures (query token q, default ' the', placed at position n)
---------------------------------------------------------------------
- spread  Σ_i pos_{n,i}² and effective width 1/Σ_i pos_{n,i}² (tokens), at n = N_REF;
- decay_rate κ̂: least-squares slope of −log pos_{n,n−δ} over δ = 0..max(δ₉₀, 1), where
  δ₉₀ is the distance holding 90 % of the mass (pos ∝ e^{−κδ} gives κ̂ = κ);
- translation_tv: max over the positions m < n in TRANSLATION_POSITIONS of the TV
  between pos_{m, m−δ} and pos_{n, n−δ} restricted to δ ≤ m and renormalised
  (0 for a translation-equivariant kernel);
- query_tv: mean TV between the kernel of q and those of QUERY_SAMPLE other tokens
  (drawn with a fixed seed) at n = N_REF: dependence on the query token;
- content_std, content_boost: std and (max − median) over the vocabulary of
  log content_{t,q} = q·E[N_REF, t]/√e: strength of content dependence (a keyword
  head has a large boost: keywords are attended e^{boost} times more).

Categories — the rule, with every threshold here
------------------------------------------------
At n = N_REF (capped at n_ctx − 1), with width W = 1/Σ pos²:

    local            W ≤ LOCAL_MAX_WIDTH
    uniform          W ≥ UNIFORM_MIN_FRACTION · (n + 1)
    slowly_decaying  otherwise
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch
from jaxtyping import Float

from . import layer0
from ._errors import HeadscopeError
from ._html_repr import HtmlRepr
from .layer0 import SEED_QUERY
from .loading import Model
from .stats import quantile
from .weights import Processing, Weights

Tensor = torch.Tensor

# -- the one place for the category rule and the measures' settings ---------------------
N_REF = 255                    #: reference query position for categories and measures
LOCAL_MAX_WIDTH = 5.0          #: width ≤ this (tokens) → local
UNIFORM_MIN_FRACTION = 0.5     #: width ≥ this · (n + 1) → uniform
TRANSLATION_POSITIONS = (32, 64, 128, 255)   #: query positions compared for equivariance
QUERY_SAMPLE = 64              #: other query tokens compared for query dependence
QUERY_SAMPLE_SEED = 0
CATEGORIES = ("local", "slowly_decaying", "uniform")


def categorise(width: float, n: int) -> str:
    """Category of a kernel of effective width `width` at query position `n` (rule above)."""
    if width <= LOCAL_MAX_WIDTH:
        return "local"
    if width >= UNIFORM_MIN_FRACTION * (n + 1):
        return "uniform"
    return "slowly_decaying"


# -- per-head measures ----------------------------------------------------------------------


def effective_width(kernel: Float[Tensor, "... i"]) -> Tensor:
    return 1.0 / kernel.pow(2).sum(-1)


def decay_rate(kernel: Float[Tensor, "i"]) -> float:
    """κ̂: least-squares slope of −log pos_{n, n−δ} over δ = 0..max(δ₉₀, 1)."""
    by_dist = kernel.flip(0)                                                      # [δ]
    if len(by_dist) < 2:
        return 0.0
    d90 = int((by_dist.cumsum(0) < 0.9).sum())
    m = max(d90, 1) + 1
    y = -by_dist[:m].clamp_min(1e-300).log()
    x = torch.arange(m, dtype=y.dtype)
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / xc.pow(2).sum())


def translation_tv(kernels: dict[int, Float[Tensor, "h i"]], *, logits: bool = False) -> Float[Tensor, "h"]:
    """Max over position pairs m < n of TV(pos_m by distance, pos_n by distance restricted to δ ≤ m).

    With ``logits=True`` the dict holds the kernels' logits (q·P[n, i]/s) and the
    restriction is renormalised as a softmax of the restricted logits: exact even where
    the restricted mass underflows to 0 (all of pos_n beyond δ = m), where dividing the
    probabilities by their sum would give 0/0.
    """
    ns = sorted(kernels)
    worst = torch.zeros(next(iter(kernels.values())).shape[0], dtype=torch.float64)
    norm = (lambda x: torch.softmax(x, -1)) if logits else (lambda x: x / x.sum(-1, keepdim=True))  # noqa: E731
    for a, m in enumerate(ns):
        for n in ns[a + 1:]:
            km = norm(kernels[m].flip(-1))                                        # [h δ] δ = 0..m
            kn = norm(kernels[n].flip(-1)[:, : m + 1])
            worst = torch.maximum(worst, 0.5 * (km - kn).abs().sum(-1))
    return worst


@dataclasses.dataclass
class HeadKernel:
    """Kernel measures of one head (see the module docstring for definitions)."""

    head: int
    category: str
    width: float
    spread: float
    decay_rate: float
    translation_tv: float
    query_tv: float
    content_std: float
    content_boost: float
    kernel: list[float]                 # pos_{N_REF, N_REF−δ} for δ = 0..len−1 (truncated)
    tv_median: float | None = None
    tv_p90: float | None = None
    tv_mean: float | None = None
    tv_by_position: list[float] | None = None   # mean TV over windows at each query position
    tv_hist: list[int] | None = None            # counts over TV_BINS

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


TV_BINS = [i / 50 for i in range(51)]  #: histogram edges for TV values (0..1 by 0.02)
KERNEL_SHOWN = 128                     #: distances kept in HeadKernel.kernel


@dataclasses.dataclass
class KernelReport(HtmlRepr):
    """Kernels of every head of one layer, and what they depend on."""

    fingerprint: str
    processing: dict
    layer: int
    c: float
    c_source: str
    query: str
    query_id: int
    n_ref: int
    rule: dict
    heads: list[HeadKernel]
    corpus: dict | None = None          # {"n_windows", "n_queries", "names"} when TV was measured

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["heads"] = [h.to_dict() for h in self.heads]
        return d


def rule() -> dict:
    return {"n_ref": N_REF, "local_max_width": LOCAL_MAX_WIDTH,
            "uniform_min_fraction": UNIFORM_MIN_FRACTION,
            "text": "local if width <= local_max_width; uniform if width >= uniform_min_fraction*(n+1); "
                    "else slowly_decaying (width = 1/sum_i pos_{n,i}^2 at n = n_ref)"}


def corpus_tv(weights: Weights, windows: Sequence[Tensor], c: float, patterns=None) -> list[Tensor]:
    """TV [h p] per window; `patterns(tokens) -> [h p p]` gives the true ones (default: headscope forward)."""
    out = []
    for tokens in windows:
        true = layer0.true_pattern(weights, tokens) if patterns is None else patterns(tokens)
        out.append(layer0.tv_distance(true, layer0.approx_pattern(weights, tokens, c)))   # [h p]
    return out


def analyse_kernels(
    model: Model,
    layer: int = 0,
    query: str = SEED_QUERY,
    c: float | str | None = None,
    windows: Sequence[Tensor] | None = None,
    processing: Processing | None = None,
    n_ref: int | None = None,
    patterns=None,
) -> KernelReport:
    """Kernels, measures and categories of every head of `layer`; TV over `windows` if given."""
    model.cfg.check_layer(layer)
    weights = layer0.view(model, processing)
    layer0.check_split(weights, layer)
    cfg = weights.cfg
    q_id = layer0.token_id(model, query)
    c_value, c_source = layer0.resolve_c(weights, c)
    n = min(N_REF if n_ref is None else n_ref, cfg.n_ctx - 1)
    if n < 1:
        raise HeadscopeError(f"n_ref: expected 1..{cfg.n_ctx - 1}, got {n}")

    kern = layer0.positional_kernel(weights, q_id, n, c_value)                   # [h n+1]
    widths = effective_width(kern)                                               # [h]
    trans = translation_tv({m: layer0.positional_logits(weights, [q_id], m, c_value)[0].double()
                            for m in sorted({min(m, n) for m in TRANSLATION_POSITIONS} | {n})}, logits=True)
    g = torch.Generator().manual_seed(QUERY_SAMPLE_SEED)
    others = torch.randint(0, cfg.d_vocab, (QUERY_SAMPLE,), generator=g).tolist()
    qtv = (0.5 * (layer0.positional_kernels(weights, others, n, c_value) - kern).abs().sum(-1)).mean(0)  # [h]
    logc = layer0.log_content_factors(weights, q_id, n)                          # [h v]

    tvs = None
    if windows is not None:
        tvs = corpus_tv(weights, windows, c_value, patterns)
    heads = []
    for h in range(cfg.n_heads):
        hk = HeadKernel(
            head=h, category=categorise(float(widths[h]), n), width=float(widths[h]),
            spread=float(kern[h].pow(2).sum()), decay_rate=decay_rate(kern[h]),
            translation_tv=float(trans[h]), query_tv=float(qtv[h]),
            content_std=float(logc[h].std()), content_boost=float(logc[h].max() - logc[h].median()),
            kernel=kern[h].flip(0)[:KERNEL_SHOWN].tolist(),
        )
        if tvs is not None:
            vals = torch.cat([t[h, 1:] for t in tvs])                            # n = 0 is trivially exact
            hk.tv_median, hk.tv_p90 = quantile(vals, 0.5), quantile(vals, 0.9)
            hk.tv_mean = float(vals.mean()) if vals.numel() else None            # None: windows of BOS only
            p_max = max(len(t[h]) for t in tvs)
            sums, counts = torch.zeros(p_max, dtype=torch.float64), torch.zeros(p_max, dtype=torch.float64)
            for t in tvs:
                sums[: len(t[h])] += t[h]
                counts[: len(t[h])] += 1
            hk.tv_by_position = (sums / counts).tolist()
            hk.tv_hist = torch.histogram(vals.clamp(0, 1), bins=torch.tensor(TV_BINS, dtype=torch.float64)
                                         ).hist.long().tolist()
        heads.append(hk)
    corpus = None
    if windows is not None:
        corpus = {"n_windows": len(windows), "n_queries": int(sum(len(t) - 1 for t in windows)),
                  "window_lengths": [len(t) for t in windows]}
    return KernelReport(
        fingerprint=model.fingerprint, processing=weights.processing.to_dict(), layer=layer,
        c=c_value, c_source=c_source, query=query, query_id=q_id, n_ref=n, rule=rule(),
        heads=heads, corpus=corpus,
    )


def kernel_heatmap(model: Model, query: str = SEED_QUERY, c: float | str | None = None, positions: int = 48,
                   processing: Processing | None = None) -> list[list[list[float]]]:
    """K_h[n, i] = pos_{n,i,q} for query positions n < `positions` and keys i ≤ n: [head][n][i]."""
    weights = layer0.view(model, processing)
    q_id = layer0.token_id(model, query)
    c_value, _ = layer0.resolve_c(weights, c)
    P = min(positions, model.cfg.n_ctx)
    rows = [layer0.positional_kernel(weights, q_id, n, c_value) for n in range(P)]          # [h n+1] each
    return [[rows[n][h].tolist() for n in range(P)] for h in range(model.cfg.n_heads)]
