"""Positional kernels and the content/position split of layer-0 attention (seed 000, first half).

Notation of the seed: x the input, x_i its token at position i, n the query position,
d = d_model, e = d_head. Weights are processed (fold_ln at least; LayerNorm's w, b
are then inside W_K, b_K), e_t = W_E[t] and p_i = W_pos[i] centred over d.

Key split
---------
LayerNorm makes the layer-0 key of position i

    key[i] = √d (e_{x_i} + p_i) W_K / ‖e_{x_i} + p_i‖ + b_K,     ‖v‖ = sqrt(|v|² + d·eps).

The seed approximates it, for query position n, by a content term plus a position term

    E[n, t] = √d (e_t + p_n) W_K / ‖e_t + p_n‖ + b_K
    P[n, i] = √d (p_i − p_n) W_K / sqrt(|p_i|² + c²)

key[i] ≈ E[n, x_i] + P[n, i], exact at i = n (P[n, n] = 0). c stands for a typical
token-embedding norm: by default *measured* as the median of |e_t| over the
vocabulary (``c_source = "measured"``), or the seed's 3.5 for GPT-2 Small
(``"gpt2"``), or any number given (``"given"``). b_K adds q·b_K to every score of a
query, which softmax ignores; it is kept in E so that the split is exact at i = n.

Approximate attention
---------------------
With the true query q_n = LN(x_n) W_Q + b_Q and the model's score divisor √e,

    pos_{n,i,q}   = softmax_{i ≤ n}( q·P[n, i] / √e )           (positional kernel)
    content_{t,q} = exp( q·E[n, t] / √e )                        (content factor)
    attn_approx[n, i] = pos_{n,i,q} content_{x_i,q} / Σ_{j ≤ n} pos_{n,j,q} content_{x_j,q}

and TV[n] = ½ Σ_i |attn[n, i] − attn_approx[n, i]| (0 ≤ TV ≤ 1) per head and query
position, over a corpus of windows ``[BOS] + tokens``.

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
import math
from typing import Sequence

import torch
from jaxtyping import Float, Int

from ._errors import HeadscopeError
from .forward import layer_norm, run_with_cache
from .weights import Processing, Weights

Tensor = torch.Tensor

# -- the one place for the category rule and the measures' settings ---------------------
N_REF = 255                    #: reference query position for categories and measures
LOCAL_MAX_WIDTH = 5.0          #: width ≤ this (tokens) → local
UNIFORM_MIN_FRACTION = 0.5     #: width ≥ this · (n + 1) → uniform
TRANSLATION_POSITIONS = (32, 64, 128, 255)   #: query positions compared for equivariance
QUERY_SAMPLE = 64              #: other query tokens compared for query dependence
QUERY_SAMPLE_SEED = 0
GPT2_C = 3.5                   #: the seed's c for GPT-2 Small
CATEGORIES = ("local", "slowly_decaying", "uniform")


def categorise(width: float, n: int) -> str:
    """Category of a kernel of effective width `width` at query position `n` (rule above)."""
    if width <= LOCAL_MAX_WIDTH:
        return "local"
    if width >= UNIFORM_MIN_FRACTION * (n + 1):
        return "uniform"
    return "slowly_decaying"


# -- c ------------------------------------------------------------------------------------


def _centred(t: Tensor) -> Tensor:
    return t - t.mean(-1, keepdim=True)


def measure_c(weights: Weights) -> float:
    """Typical token-embedding norm: median over the vocabulary of |W_E[t] − mean|."""
    return float(_centred(weights.W_E).norm(dim=-1).median())


def resolve_c(weights: Weights, c: float | str | None = None) -> tuple[float, str]:
    """(c, source): None/"measured" → measured, "gpt2" → 3.5, a number → itself ("given")."""
    if c is None or c == "measured":
        return measure_c(weights), "measured"
    if c == "gpt2":
        return GPT2_C, "gpt2"
    try:
        value = float(c)
    except (TypeError, ValueError):
        raise HeadscopeError(f"c: expected 'measured', 'gpt2' or a positive number, got {c!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise HeadscopeError(f"c: expected a positive number, got {c!r}")
    return value, "given"


def check_weights(weights: Weights, layer: int = 0) -> None:
    if not weights.processing.fold_ln:
        raise HeadscopeError("the key split needs weights processed with fold_ln "
                             f"(got processing {weights.processing.label()})")
    if not 0 <= layer < weights.cfg.n_layers:
        raise HeadscopeError(f"layer {layer} out of range (the model has layers 0..{weights.cfg.n_layers - 1})")
    if layer != 0:
        raise HeadscopeError(f"layer {layer}: the key split uses keys built from W_E + W_pos, "
                             "which holds for layer 0 only; expected --layer 0")


def _divisor(weights: Weights) -> float:
    return math.sqrt(weights.cfg.d_head) if weights.cfg.scale_attn_weights else 1.0


def queries(weights: Weights, tokens: Int[Tensor, "p"], positions: Int[Tensor, "p"] | None = None
            ) -> Float[Tensor, "p h e"]:
    """True layer-0 queries q = LN(W_E[t] + W_pos[n]) W_Q + b_Q of tokens at positions."""
    b = weights.blocks[0]
    positions = torch.arange(len(tokens)) if positions is None else positions
    x = weights.W_E[tokens] + weights.W_pos[positions]                            # [p d]
    ln, _ = layer_norm(x, b.ln1_w, b.ln1_b, weights.cfg.ln_eps)
    return torch.einsum("pd,hde->phe", ln, b.W_Q) + b.b_Q                         # [p h e]


# -- the split, per query position (the seed's formula, readable) ---------------------------


def key_split(weights: Weights, tokens: Int[Tensor, "p"], n: int, c: float
              ) -> tuple[Float[Tensor, "h i e"], Float[Tensor, "h i e"]]:
    """(E[n, x_i], P[n, i]) for i = 0..n, every head, exactly as the seed writes them."""
    check_weights(weights)
    cfg, b = weights.cfg, weights.blocks[0]
    d = cfg.d_model
    e_x = _centred(weights.W_E[tokens[: n + 1]])                                  # [i d]
    p = _centred(weights.W_pos[: n + 1])                                          # [i d]
    p_n = p[n]                                                                    # [d]
    content_in = e_x + p_n                                                        # [i d]
    norm = (content_in.pow(2).sum(-1) + d * cfg.ln_eps).sqrt()                    # [i]
    E = math.sqrt(d) * torch.einsum("id,hde->hie", content_in / norm[:, None], b.W_K) + b.b_K[:, None]
    pos_norm = (p.pow(2).sum(-1) + c ** 2).sqrt()                                 # [i]
    P = math.sqrt(d) * torch.einsum("id,hde->hie", (p - p_n) / pos_norm[:, None], b.W_K)
    return E, P                                                                   # [h i e] each


# -- vectorised scores over a window ------------------------------------------------------


def split_scores(weights: Weights, tokens: Int[Tensor, "p"], c: float
                 ) -> tuple[Float[Tensor, "h q k"], Float[Tensor, "h q k"]]:
    """(content, position) parts of the approximate scores q_n·(E[n,x_i] + P[n,i])/√e.

    Entries above the diagonal (i > n) are −inf in both.
    """
    check_weights(weights)
    cfg, b = weights.cfg, weights.blocks[0]
    d, P_len = cfg.d_model, len(tokens)
    div = _divisor(weights)
    Q = queries(weights, tokens)                                                  # [q h e]
    e_x = _centred(weights.W_E[tokens])                                           # [k d]
    p = _centred(weights.W_pos[:P_len])                                           # [p d]
    eK = torch.einsum("kd,hde->hke", e_x, b.W_K)                                  # [h k e]
    pK = torch.einsum("pd,hde->hpe", p, b.W_K)                                    # [h p e]
    Qh = Q.transpose(0, 1)                                                        # [h q e]
    q_eK = Qh @ eK.transpose(1, 2)                                                # [h q k]
    q_pK = Qh @ pK.transpose(1, 2)                                                # [h q k]  q_n · p_i W_K
    q_pnK = torch.diagonal(q_pK, dim1=1, dim2=2)                                  # [h q]    q_n · p_n W_K
    q_bK = torch.einsum("hqe,he->hq", Qh, b.b_K)                                  # [h q]
    # ‖e_{x_i} + p_n‖² = |e_i|² + |p_n|² + 2 e_i·p_n  (+ d·eps)
    norm2 = (e_x.pow(2).sum(-1)[None, :] + p.pow(2).sum(-1)[:, None] + 2 * p @ e_x.T + d * cfg.ln_eps)  # [q k]
    content = (math.sqrt(d) * (q_eK + q_pnK[:, :, None]) / norm2.sqrt() + q_bK[:, :, None]) / div
    pos_norm = (p.pow(2).sum(-1) + c ** 2).sqrt()                                 # [k]
    position = math.sqrt(d) * (q_pK - q_pnK[:, :, None]) / pos_norm[None, None, :] / div
    causal = torch.ones(P_len, P_len, dtype=torch.bool).tril()
    return content.masked_fill(~causal, -math.inf), position.masked_fill(~causal, -math.inf)


def approx_pattern(weights: Weights, tokens: Int[Tensor, "p"], c: float) -> Float[Tensor, "h q k"]:
    """attn_approx[n, i] = softmax_i of the split scores (causal, rows sum to 1)."""
    content, position = split_scores(weights, tokens, c)
    return torch.softmax(content + position, dim=-1)


def text_positional_kernels(weights: Weights, tokens: Int[Tensor, "p"], c: float) -> Float[Tensor, "h q k"]:
    """pos_{n,i,query[n](x)} with the real queries of a text: softmax_i of q_n·P[n,i]/√e."""
    _, position = split_scores(weights, tokens, c)
    return torch.softmax(position, dim=-1)


def text_content_factors(weights: Weights, tokens: Int[Tensor, "p"], c: float) -> Float[Tensor, "h q k"]:
    """content_{E[n, x_i], query[n](x)} = exp(q_n·E[n, x_i]/√e) (0 above the diagonal)."""
    content, _ = split_scores(weights, tokens, c)
    return content.exp()


def true_pattern(weights: Weights, tokens: Int[Tensor, "p"]) -> Float[Tensor, "h q k"]:
    cache = run_with_cache(weights, tokens[None], names=["blocks.0.attn.hook_pattern"], stop_at_layer=1)
    return cache["blocks.0.attn.hook_pattern"][0]


def tv_distance(true: Float[Tensor, "h q k"], approx: Float[Tensor, "h q k"]) -> Float[Tensor, "h q"]:
    """½ Σ_k |true − approx| per head and query position."""
    return 0.5 * (true.double() - approx.double()).abs().sum(-1)


# -- positional kernels and content factors for a fixed query token ------------------------


def positional_kernels(weights: Weights, query_tokens: Sequence[int], n: int, c: float) -> Float[Tensor, "t h i"]:
    """pos_{n,i,q} for i = 0..n and each query token q placed at position n."""
    check_weights(weights)
    b, d = weights.blocks[0], weights.cfg.d_model
    toks = torch.as_tensor(list(query_tokens), dtype=torch.long)
    q = queries(weights, toks, torch.full_like(toks, n))                          # [t h e]
    p = _centred(weights.W_pos[: n + 1])                                          # [i d]
    pos_norm = (p.pow(2).sum(-1) + c ** 2).sqrt()                                 # [i]
    pK = torch.einsum("id,hde->hie", (p - p[n]) / pos_norm[:, None], b.W_K)       # [h i e]  P[n, i]/√d
    scores = math.sqrt(d) * torch.einsum("the,hie->thi", q, pK) / _divisor(weights)
    return torch.softmax(scores.double(), dim=-1)                                 # [t h i]


def positional_kernel(weights: Weights, query_token: int, n: int, c: float) -> Float[Tensor, "h i"]:
    """pos_{n,i,q} for i = 0..n, the query token placed at position n."""
    return positional_kernels(weights, [query_token], n, c)[0]


def log_content_factors(weights: Weights, query_token: int, n: int, chunk: int = 8192) -> Float[Tensor, "h v"]:
    """log content_{t,q} = q·E[n, t]/√e for every token t of the vocabulary (query at n)."""
    check_weights(weights)
    b, d = weights.blocks[0], weights.cfg.d_model
    q = queries(weights, torch.tensor([query_token]), torch.tensor([n]))[0]       # [h e]
    U = torch.einsum("hde,he->dh", b.W_K, q)                                      # [d h]  W_K q
    p_n = _centred(weights.W_pos[n])
    out = []
    for start in range(0, weights.cfg.d_vocab, chunk):
        x = _centred(weights.W_E[start:start + chunk]) + p_n                      # [v d]
        norm = (x.pow(2).sum(-1) + d * weights.cfg.ln_eps).sqrt()                 # [v]
        out.append(math.sqrt(d) * (x @ U) / norm[:, None])                        # [v h]
    return ((torch.cat(out) + (b.b_K * q).sum(-1)) / _divisor(weights)).T.double()  # [h v]


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


def translation_tv(kernels: dict[int, Float[Tensor, "h i"]]) -> Float[Tensor, "h"]:
    """Max over position pairs m < n of TV(pos_m by distance, pos_n by distance restricted to δ ≤ m)."""
    ns = sorted(kernels)
    worst = torch.zeros(next(iter(kernels.values())).shape[0], dtype=torch.float64)
    for a, m in enumerate(ns):
        for n in ns[a + 1:]:
            km = kernels[m].flip(-1)                                              # [h δ] δ = 0..m
            kn = kernels[n].flip(-1)[:, : m + 1]
            kn = kn / kn.sum(-1, keepdim=True)
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
class KernelReport:
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
        true = true_pattern(weights, tokens) if patterns is None else patterns(tokens)
        out.append(tv_distance(true, approx_pattern(weights, tokens, c)))         # [h p]
    return out


def _quantile(x: Tensor, q: float) -> float:
    return float(torch.quantile(x.double(), q)) if x.numel() else float("nan")


def analyse_kernels(
    model,
    layer: int = 0,
    query: str = " the",
    c: float | str | None = None,
    windows: Sequence[Tensor] | None = None,
    processing: Processing | None = None,
    n_ref: int | None = None,
    patterns=None,
) -> KernelReport:
    """Kernels, measures and categories of every head of `layer`; TV over `windows` if given."""
    weights = model.weights(processing)
    check_weights(weights, layer)
    cfg = weights.cfg
    ids = model.tokenizer.encode(query)
    if len(ids) != 1:
        raise HeadscopeError(f"query: expected a single token, got {query!r} = {len(ids)} tokens")
    q_id = int(ids[0])
    c_value, c_source = resolve_c(weights, c)
    n = min(N_REF if n_ref is None else n_ref, cfg.n_ctx - 1)
    if n < 1:
        raise HeadscopeError(f"n_ref: expected 1..{cfg.n_ctx - 1}, got {n}")

    kern = positional_kernel(weights, q_id, n, c_value)                          # [h n+1]
    widths = effective_width(kern)                                               # [h]
    trans = translation_tv({m: positional_kernel(weights, q_id, m, c_value)
                            for m in sorted({min(m, n) for m in TRANSLATION_POSITIONS} | {n})})
    g = torch.Generator().manual_seed(QUERY_SAMPLE_SEED)
    others = torch.randint(0, cfg.d_vocab, (QUERY_SAMPLE,), generator=g).tolist()
    qtv = (0.5 * (positional_kernels(weights, others, n, c_value) - kern).abs().sum(-1)).mean(0)  # [h]
    logc = log_content_factors(weights, q_id, n)                                 # [h v]

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
            hk.tv_median, hk.tv_p90 = _quantile(vals, 0.5), _quantile(vals, 0.9)
            hk.tv_mean = float(vals.mean())
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
