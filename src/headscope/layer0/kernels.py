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

Categories — two rules, with every threshold here
-------------------------------------------------
``shape`` (the default) reads the kernel's *shape* at several query positions
n ∈ SHAPE_POSITIONS (capped at n_ctx − 1), as the seed describes the kernels
("translation equivariant"). At each n the key at position 0 is left out and the
rest renormalised (BOS / position 0 often holds a large share of the mass that says
nothing about the kernel's decay), giving p_n(δ), δ = n − i = 0..n−1. A truncated
exponential (geometric) kernel q(δ) ∝ e^{−κδ} on δ = 0..n−1 is fitted by maximum
likelihood, i.e. its mean distance is matched to Σ_δ δ p_n(δ) (:func:`fit_decay_rate`);
the fitted decay length is ℓ_n = 1/κ_n. Then

    local            ℓ_n ≤ LOCAL_MAX_LENGTH tokens         (κ_n ≥ 1/LOCAL_MAX_LENGTH)  at every n
    uniform          |κ_n| · n ≤ 1/UNIFORM_MIN_RELATIVE      (decays by < e over the window) at every n
    increasing       κ_n · n < −1/UNIFORM_MIN_RELATIVE       at every n (mass grows with distance)
    slowly_decaying  otherwise

A kernel e^{−κδ} gives κ_n = κ exactly (for n ≫ 1/κ); a uniform kernel κ_n = 0; a
heavy-tailed kernel p ∝ (1 + δ)^{−a}, a < 1, has a mean distance well below n/2, so
κ_n·n stays above 1 (slowly decaying), although its effective width can exceed n/2.

``width`` (headscope's first rule, kept as a named variant): at n = N_REF (capped at
n_ctx − 1), with width W = 1/Σ pos²:

    local            W ≤ LOCAL_MAX_WIDTH
    uniform          W ≥ UNIFORM_MIN_FRACTION · (n + 1)
    slowly_decaying  otherwise

It misreads a kernel that puts much mass on position 0 (W small: "local") and a slowly
decaying kernel with a heavy tail (W large: "uniform").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import torch
from jaxtyping import Float

from . import split as layer0
from .._json import plain
from ..lowrank import small_matrices
from .._errors import HeadscopeError
from .._html_repr import HtmlRepr
from .split import SEED_QUERY
from ..core.model import Model
from ..stats import quantile, vector_mean, vector_std
from ..core.weights import Weights

Tensor = torch.Tensor

# -- the one place for the category rule and the measures' settings ---------------------
N_REF = 255                    #: reference query position for categories and measures
LOCAL_MAX_WIDTH = 5.0          #: width ≤ this (tokens) → local
UNIFORM_MIN_FRACTION = 0.5     #: width ≥ this · (n + 1) → uniform
TRANSLATION_POSITIONS = (32, 64, 128, 255)   #: query positions compared for equivariance
QUERY_SAMPLE = 64              #: other query tokens compared for query dependence
QUERY_SAMPLE_SEED = 0
CATEGORIES = ("local", "slowly_decaying", "uniform", "increasing")   #: the seed's three; "increasing": shape rule only
SHAPE_POSITIONS = (128, 256, 512, 1023)      #: query positions of the shape rule (capped at n_ctx − 1)
LOCAL_MAX_LENGTH = 2.0         #: fitted decay length ≤ this (tokens) at every n → local
UNIFORM_MIN_RELATIVE = 1.0     #: fitted decay length ≥ this · n at every n → uniform
RULES = ("shape", "width")     #: category rules (module docstring)
DEFAULT_RULE = "shape"


def categorise(width: float, n: int) -> str:
    """Category of a kernel of effective width `width` at query position `n` (the ``width`` rule)."""
    if width <= LOCAL_MAX_WIDTH:
        return "local"
    if width >= UNIFORM_MIN_FRACTION * (n + 1):
        return "uniform"
    return "slowly_decaying"


def _geometric_mean_distance(kappa: float, N: int) -> float:
    """Mean of q(δ) ∝ e^{−κδ} on δ = 0..N−1 (κ may be negative; (N−1)/2 at κ = 0)."""
    if abs(kappa) * N < 1e-6:
        return (N - 1) / 2
    if kappa > 0:
        r = math.exp(-kappa)
        return r / (1 - r) - N * r ** N / (1 - r ** N) if kappa * N < 700 else r / (1 - r)
    return (N - 1) - _geometric_mean_distance(-kappa, N)        # mirror: δ → N − 1 − δ


def fit_decay_rate(kernel: Float[Tensor, "i"], *, logits: bool = False) -> float:
    """κ̂ of the ``shape`` rule for one kernel pos_{n, i}, i = 0..n (module docstring).

    Position 0 is dropped and the rest renormalised; κ̂ solves mean_q(δ) = Σ δ p(δ) on
    δ = 0..n−1 by bisection (the mean decreases monotonically in κ). Returns 0.0 for
    n < 2 (nothing to fit); |κ̂| ≤ 50. With ``logits=True`` `kernel` holds the logits
    q·P[n, i]/s (−inf: keys outside a local window, left out) and the rest is renormalised as a
    softmax of its own logits: exact even
    when position 0 holds all but e^{−800} of the mass (the probabilities would underflow).
    """
    x = kernel[1:].double().flip(0)                                               # [δ] δ = n − i
    if logits:
        x = x[x > -math.inf]              # keys outside a local window (−inf logits, the largest δ) not fitted
    N = x.numel()
    if N < 2:
        return 0.0
    if logits:
        p = torch.softmax(x, 0)
    else:
        if not float(x.sum()) > 0:
            return 0.0
        p = x / x.sum()
    m = float((torch.arange(N, dtype=torch.float64) * p).sum())
    lo, hi = -50.0, 50.0
    if m <= _geometric_mean_distance(hi, N):
        return hi
    if m >= _geometric_mean_distance(lo, N):
        return lo
    for _ in range(200):
        mid = (lo + hi) / 2
        if _geometric_mean_distance(mid, N) > m:
            lo = mid
        else:
            hi = mid
        if (lo + hi) / 2 in (lo, hi):
            break       # no float between lo and hi: every later step returns the same (lo + hi) / 2
    return (lo + hi) / 2 + 0.0          # + 0.0: never −0.0


def shape_positions(n_ctx: int) -> list[int]:
    """The query positions of the ``shape`` rule for a model with `n_ctx` positions."""
    return sorted({min(m, n_ctx - 1) for m in SHAPE_POSITIONS if min(m, n_ctx - 1) >= 2})


def categorise_shape(rates: dict[int, float]) -> str:
    """Category from fitted decay rates κ_n at query positions n (the ``shape`` rule)."""
    if not rates:
        return "uniform"
    cats = set()
    for n, k in rates.items():
        if k >= 1.0 / LOCAL_MAX_LENGTH:
            cats.add("local")
        elif abs(k) * n <= 1.0 / UNIFORM_MIN_RELATIVE:
            cats.add("uniform")
        elif k < 0:
            cats.add("increasing")
        else:
            cats.add("slowly_decaying")
    return cats.pop() if len(cats) == 1 else "slowly_decaying"


@dataclasses.dataclass
class KernelCategories:
    """Every head's category under both rules at once (:func:`kernel_categories`)."""

    rule: str                         # the rule `categories` follows
    n_ref: int                        # n of the width rule
    widths: list[float]               # effective width 1/Σ pos² at n_ref, per head
    positions: list[int]              # n of the shape rule
    rates: list[list[float]]          # fitted κ_n per head and shape position
    width: list[str]                  # the width rule's category per head
    shape: list[str]                  # the shape rule's category per head

    @property
    def categories(self) -> list[str]:
        return self.shape if self.rule == "shape" else self.width


def kernel_categories(weights: Weights, q_id: int, c: float, n_ref: int, rule_name: str = DEFAULT_RULE,
                      kern: Tensor | None = None) -> KernelCategories:
    """Categories of every layer-0 head's kernel for query token `q_id` under both rules (module
    docstring); the one place where a kernel gets its category (:func:`analyse_kernels`, the atlas).
    `kern` may pass the kernels at n_ref [h n_ref+1] if already computed."""
    check_rule(rule_name)
    kern = layer0.positional_kernel(weights, q_id, n_ref, c) if kern is None else kern       # [h n+1]
    widths = effective_width(kern).tolist()                                                 # [h]
    s_pos = shape_positions(weights.cfg.n_ctx)
    s_logits = {m: layer0.positional_logits(weights, [q_id], m, c)[0] for m in s_pos}       # [h m+1] each
    rates = [[fit_decay_rate(s_logits[m][h], logits=True) for m in s_pos] for h in range(kern.shape[0])]   # [h n]
    return KernelCategories(rule=rule_name, n_ref=n_ref, widths=widths, positions=s_pos, rates=rates,
                            width=[categorise(w, n_ref) for w in widths],
                            shape=[categorise_shape(dict(zip(s_pos, r))) for r in rates])


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


def translation_positions(n: int) -> list[int]:
    """The query positions whose kernels translation_tv compares: TRANSLATION_POSITIONS capped at the
    reference position n, and n (GPT-2: 32, 64, 128, 255; n_ctx 37: 32, 36)."""
    return sorted({min(m, n) for m in TRANSLATION_POSITIONS} | {n})


def kernel_tvs(weights: Weights, q_id: int, c: float, n: int, kern: Tensor | None = None
               ) -> tuple[Float[Tensor, "h"], Float[Tensor, "h"]]:
    """(translation_tv, query_tv) of every head of the layer-0 view `weights` (module docstring):
    weights only, so it also measures null heads stacked in place of the layer's heads.
    `kern` may pass the kernels at n [h n+1] if already computed."""
    kern = layer0.positional_kernel(weights, q_id, n, c) if kern is None else kern       # [h n+1]
    trans = translation_tv({m: layer0.positional_logits(weights, [q_id], m, c)[0].double()
                            for m in translation_positions(n)}, logits=True)
    g = torch.Generator().manual_seed(QUERY_SAMPLE_SEED)
    others = torch.randint(0, weights.cfg.vocab, (QUERY_SAMPLE,), generator=g).tolist()
    qtv = (0.5 * (layer0.positional_kernels(weights, others, n, c) - kern).abs().sum(-1)).mean(0)  # [h]
    return trans, qtv


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
    shape_positions: list[int] | None = None    # n of the shape rule
    shape_decay_rate: list[float] | None = None  # fitted κ_n at each of them (position 0 left out)
    category_width: str | None = None           # the width rule's category (for comparison)
    category_shape: str | None = None           # the shape rule's category

    def to_dict(self) -> dict:
        return plain(self)


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
        d = plain(self)
        d["heads"] = [h.to_dict() for h in self.heads]
        return d


def rule(name: str = "width", positions: list[int] | None = None) -> dict:
    """The category rule `name` with its thresholds, and the width rule's (always recorded) (JSON-ready)."""
    width = {"n_ref": N_REF, "local_max_width": LOCAL_MAX_WIDTH, "uniform_min_fraction": UNIFORM_MIN_FRACTION}
    if name == "shape":
        return {"name": "shape", "positions": positions, "local_max_length": LOCAL_MAX_LENGTH,
                "uniform_min_relative": UNIFORM_MIN_RELATIVE, **width,
                "text": "fit q(d) ~ exp(-kappa*d), d = n-i, to pos_{n,i} for i >= 1 (position 0 left out) at every "
                        "n in positions; local if 1/kappa <= local_max_length at every n; uniform if "
                        "|kappa|*n <= 1/uniform_min_relative at every n; increasing if kappa*n < -1/uniform_min_relative "
                        "at every n; else slowly_decaying (category_width: the width rule)"}
    return {"name": "width", **width,
            "text": "local if width <= local_max_width; uniform if width >= uniform_min_fraction*(n+1); "
                    "else slowly_decaying (width = 1/sum_i pos_{n,i}^2 at n = n_ref)"}


def check_rule(name: str) -> str:
    if name not in RULES:
        raise HeadscopeError(f"category rule: expected one of {', '.join(RULES)}, got {name!r}")
    return name


def corpus_tv(weights: Weights, windows: Sequence[Tensor], c: float, patterns=None) -> list[Tensor]:
    """TV [h p] per window; `patterns(tokens) -> [h p p]` gives the true ones (default: headscope forward)."""
    out = []
    for tokens in windows:
        if patterns is None:          # both patterns in blocks of queries (layer0.approx_tv): no [h p p] square
            out.append(layer0.approx_tv(weights, tokens, c))
            continue
        out.append(layer0.tv_distance(patterns(tokens), layer0.approx_pattern(weights, tokens, c)))   # [h p]
    return out


def check_n_ref(cfg, n: int) -> int:
    """`n` if it is a query position of the model with keys before it (1..n_ctx − 1), else one line."""
    if not 1 <= n <= cfg.n_ctx - 1:
        raise HeadscopeError(f"--n-ref: expected a query position in 1..{cfg.n_ctx - 1} (n_ctx − 1), got {n}")
    return n


def _head_kernels(cfg, kern: Tensor, cats, trans: Tensor, qtv: Tensor, logc: Tensor, tvs: list[Tensor] | None
                  ) -> list[HeadKernel]:
    """Each head's :class:`HeadKernel` from the layer's kernels, categories, TVs and content factors."""
    heads = []
    for h in range(cfg.n_heads):
        hk = HeadKernel(
            head=h, category=cats.categories[h], width=cats.widths[h],
            spread=float(kern[h].pow(2).sum()), decay_rate=decay_rate(kern[h]),
            translation_tv=float(trans[h]), query_tv=float(qtv[h]),
            content_std=vector_std(logc[h]), content_boost=float(logc[h].max() - logc[h].median()),
            kernel=kern[h].flip(0)[:KERNEL_SHOWN].tolist(),
            shape_positions=list(cats.positions), shape_decay_rate=cats.rates[h], category_width=cats.width[h],
            category_shape=cats.shape[h],
        )
        if tvs is not None:
            vals = torch.cat([t[h, 1:] for t in tvs])                            # n = 0 is trivially exact
            hk.tv_median, hk.tv_p90 = quantile(vals, 0.5), quantile(vals, 0.9)
            hk.tv_mean = vector_mean(vals) if vals.numel() else None            # None: windows of BOS only
            p_max = max(len(t[h]) for t in tvs)
            sums, counts = torch.zeros(p_max, dtype=torch.float64), torch.zeros(p_max, dtype=torch.float64)
            for t in tvs:
                sums[: len(t[h])] += t[h]
                counts[: len(t[h])] += 1
            hk.tv_by_position = (sums / counts).tolist()
            hk.tv_hist = torch.histogram(vals.clamp(0, 1), bins=torch.tensor(TV_BINS, dtype=torch.float64)
                                         ).hist.long().tolist()
        heads.append(hk)
    return heads


def analyse_kernels(
    model: Model,
    layer: int = 0,
    query: str = SEED_QUERY,
    c: float | str | None = None,
    windows: Sequence[Tensor] | None = None,
    n_ref: int | None = None,
    patterns=None,
    rule_name: str = DEFAULT_RULE,
) -> KernelReport:
    """Kernels, measures and categories of every head of `layer`; TV over `windows` if given.

    ``rule_name`` picks the category rule, ``"shape"`` (default) or ``"width"``; both
    categories are recorded per head (``category_shape``, ``category_width``).
    """
    check_rule(rule_name)
    model.cfg.check_layer(layer)
    weights = layer0.view(model)
    layer0.check_split(weights, layer)
    cfg = weights.cfg
    q_id = layer0.token_id(model, query)
    c_value, c_source = layer0.resolve_c(weights, c)
    n = min(N_REF, cfg.n_ctx - 1) if n_ref is None else n_ref    # the default is capped; a given n_ref is checked
    check_n_ref(cfg, n)

    with small_matrices():       # one query's kernels: [h n+1] products, fastest on one thread
        kern = layer0.positional_kernel(weights, q_id, n, c_value)               # [h n+1]
        cats = kernel_categories(weights, q_id, c_value, n, rule_name, kern=kern)
        trans, qtv = kernel_tvs(weights, q_id, c_value, n, kern)
    logc = layer0.log_content_factors(weights, q_id, n)                          # [h v]

    tvs = None
    if windows is not None:
        tvs = corpus_tv(weights, windows, c_value, patterns)
    with small_matrices():       # per-head reductions of [v] and [windows·p] vectors: a second thread only
        heads = _head_kernels(cfg, kern, cats, trans, qtv, logc, tvs)      # synchronises (exact either way)
    corpus = None
    if windows is not None:
        corpus = {"n_windows": len(windows), "n_queries": int(sum(len(t) - 1 for t in windows)),
                  "window_lengths": [len(t) for t in windows]}
    return KernelReport(
        fingerprint=model.fingerprint, processing=weights.processing.to_dict(), layer=layer,
        c=c_value, c_source=c_source, query=query, query_id=q_id, n_ref=n, rule=rule(rule_name, cats.positions),
        heads=heads, corpus=corpus,
    )


def kernel_heatmap(model: Model, query: str = SEED_QUERY, c: float | str | None = None, positions: int = 48) -> list[list[list[float]]]:
    """K_h[n, i] = pos_{n,i,q} for query positions n < `positions` and keys i ≤ n: [head][n][i]."""
    weights = layer0.view(model)
    q_id = layer0.token_id(model, query)
    c_value, _ = layer0.resolve_c(weights, c)
    P = min(positions, model.cfg.n_ctx)
    with small_matrices():       # 48 tiny kernels: on two threads their CPU time was 15× (synchronising)
        rows = [layer0.positional_kernel(weights, q_id, n, c_value) for n in range(P)]      # [h n+1] each
    return [[rows[n][h].tolist() for n in range(P)] for h in range(model.cfg.n_heads)]
