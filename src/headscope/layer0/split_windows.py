"""The layer-0 split over whole windows of text, and its TV against the model's own pattern (seed 000).

Notation and maths: :mod:`.split` (whose names these are too: it re-exports every one). Here the
split is vectorised over the query positions of one window ``x`` (each query n with the text's own
query q_n and token x_n), with what it is built from:

- :func:`centred` (c(t) = t − mean_d t, LayerNorm's centring), :func:`queries`
  (q_n = LN(W_E[x_n] + W_pos[n]) W_Q + b_Q), :func:`ln1`, :func:`hidden` (the layer's
  mask, :meth:`Config.hidden_keys`), :func:`check_split` (what the vectorised split assumes);
- :func:`split_scores` (content and position parts of q_n·(E[n, x_i] + P[n, i])/s), the patterns
  :func:`approx_pattern`, :func:`crude_pattern`, :func:`text_positional_kernels`,
  :func:`text_content_factors`;
- the model's pattern: :func:`true_pattern` ([h p p]), or its causal rows block by block
  (:func:`true_qk`, :func:`true_pattern_rows`);
- TV = ½ Σ_i |true − approx|: :func:`tv_distance` of two patterns, or :func:`approx_tv`, which
  builds both patterns in blocks of query rows against the keys those rows see (never the
  [h p p] squares).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float, Int

from .._errors import HeadscopeError
from ..core.applicability import learned_positions
from ..core.forward import layer_norm, masked_scores, run_with_cache
from ..core.weights import Weights
from ..lowrank import small_matrices

Tensor = torch.Tensor


# -- what the vectorised split is built from ---------------------------------------------------


def check_split(weights: Weights, layer: int = 0) -> None:
    """The vectorised split assumes fold_ln (LN1 only centres and scales) and layer 0.

    (The caller checks that the model has `layer` at all: the view has one layer.)"""
    learned_positions(weights.cfg, "the content + position key split")
    if not weights.processing.fold_ln:
        raise HeadscopeError("the key split needs weights processed with fold_ln "
                             f"(got processing {weights.processing.label()})")
    if layer != 0:
        raise HeadscopeError(f"layer {layer}: the key split uses keys built from W_E + W_pos, "
                             "which holds for layer 0 only; expected --layer 0")


def centred(t: Float[Tensor, "... d"]) -> Float[Tensor, "... d"]:
    """c(t) = t − mean_d(t): each row less its mean over d_model (the last axis), as LayerNorm centres
    its input; c(W_E[x]) and c(W_pos[n]) are the centred embeddings the key split adds (c is linear)."""
    return t - t.mean(-1, keepdim=True)


def ln1(w: Weights, x: Float[Tensor, "... d"]) -> Float[Tensor, "... d"]:
    """LayerNorm 1 of block 0."""
    b = w.blocks[0]
    return layer_norm(x, b.ln1_w, b.ln1_b, w.cfg.ln_eps)[0]


def queries(weights: Weights, tokens: Int[Tensor, "p"], positions: Int[Tensor, "p"] | None = None
            ) -> Float[Tensor, "p h e"]:
    """True layer-0 queries q = LN(W_E[t] + W_pos[n]) W_Q + b_Q of tokens at positions (default 0..p−1)."""
    b = weights.blocks[0]
    learned_positions(weights.cfg, "queries LN(W_E[t] + W_pos[n])")
    positions = torch.arange(len(tokens)) if positions is None else positions
    return query_rows(b, ln1(weights, weights.W_E[tokens] + weights.W_pos[positions]))   # [p h e]


def query_rows(b, x: Float[Tensor, "p d"]) -> Float[Tensor, "p h e"]:
    """x W_Q[h] + b_Q[h] for every head of block `b` and each row of x (the queries of LN1 outputs x):
    one [p d] @ [d h·e] product with W_Q laid out by columns once (:func:`_by_columns`), the values of
    ``einsum("pd,hde->phe", x, W_Q) + b_Q`` bit for bit without its copy of W_Q at every call."""
    h, _, e = b.W_Q.shape
    return (x @ _by_columns(b)[0]).view(x.shape[0], h, e).add_(b.b_Q)             # [p d] @ [d h·e] → [p h e]


def sum_norm2(p2: Float[Tensor, "n"], e2: Float[Tensor, "t"], p: Float[Tensor, "n d"], e: Float[Tensor, "t d"]
              ) -> Float[Tensor, "n t"]:
    """|p_n + e_t|² for every row n of p and t of e (c(W_pos[n]) and c(W_E[t]): LayerNorm's centred input
    of token t at position n) from their squared norms p2, e2 and one [n d] @ [d t] product:
    |p|² + |e|² + 2 p·e, clamped at 0 (the expansion's rounding must not go below it)."""
    return (e2[None, :] + p2[:, None] + 2 * p @ e.T).clamp_min(0)


def hidden(w: Weights, ns: Int[Tensor, "m"], k: int) -> Tensor:
    """[m k] True where key i < k is not visible from query position ns[m] in layer 0: i > n, or
    outside a local window (:meth:`Config.hidden_keys`, the forward's own mask)."""
    return w.cfg.hidden_keys(0, ns[:, None], torch.arange(k, device=ns.device)[None, :])


def mask_block_(w: Weights, scores: Float[Tensor, "... m z"], a: int) -> Tensor:
    """`scores` of the queries at positions a..a+m−1 against keys 0..z−1, −inf in place where
    :func:`hidden`; when every query sees every key before a (causal), only the diagonal block
    [a, z) is filled (the keys before a are visible: nothing to write there)."""
    m, z = scores.shape[-2], scores.shape[-1]
    mask = hidden(w, torch.arange(a, a + m, device=scores.device), z)                  # [m z]
    if a and not bool(mask[:, :a].any()):
        scores[..., a:].masked_fill_(mask[:, a:], -math.inf)
    else:
        scores.masked_fill_(mask, -math.inf)
    return scores


# -- the split over a whole window (vectorised over query positions) --------------------------


def split_scores(weights: Weights, tokens: Int[Tensor, "p"], c: float
                 ) -> tuple[Float[Tensor, "h q k"], Float[Tensor, "h q k"]]:
    """(content, position) parts of the approximate scores q_n·(E[n,x_i] + P[n,i])/s.

    The text's own queries q_n; entries of keys query n does not see (i > n, or outside a
    local window) are −inf in both.
    Vectorised with ‖c(W_E[x_i]) + c(W_pos[n])‖² = |e_i|² + |p_n|² + 2 e_i·p_n, which
    needs fold_ln.
    """
    check_split(weights)
    cfg, b = weights.cfg, weights.blocks[0]
    d, P_len = cfg.d_model, len(tokens)
    s = cfg.attn_scale(0)
    Q = queries(weights, tokens)                                                  # [q h e]
    e_x = centred(weights.W_E[tokens])                                            # [k d]
    p = centred(weights.W_pos[:P_len])                                            # [p d]
    eK = torch.einsum("kd,hde->hke", e_x, b.W_K)                                  # [h k e]
    pK = torch.einsum("pd,hde->hpe", p, b.W_K)                                    # [h p e]
    Qh = Q.transpose(0, 1)                                                        # [h q e]
    q_eK = Qh @ eK.transpose(1, 2)                                                # [h q k]
    q_pK = Qh @ pK.transpose(1, 2)                                                # [h q k]  q_n · p_i W_K
    q_pnK = torch.diagonal(q_pK, dim1=1, dim2=2).clone()                          # [h q]    q_n · p_n W_K
    q_bK = torch.einsum("hqe,he->hq", Qh, b.b_K)                                  # [h q]
    norm2 = sum_norm2(p.pow(2).sum(-1), e_x.pow(2).sum(-1), p, e_x) + d * cfg.ln_eps
    # [q k] = |c(W_E[x_k] + W_pos[q])|² + d·eps
    # in place, each step the same operation as (√d (q_eK + q_pnK) / √norm2 + q_bK) / s: [h q k] passes, no copies
    content = q_eK.add_(q_pnK[:, :, None]).mul_(math.sqrt(d)).div_(norm2.sqrt()).add_(q_bK[:, :, None]).div_(s)
    pos_norm = (p.pow(2).sum(-1) + c ** 2).clamp_min(d * cfg.ln_eps).sqrt()      # [k] (floor: see positional_term)
    position = q_pK.sub_(q_pnK[:, :, None]).mul_(math.sqrt(d)).div_(pos_norm[None, None, :]).div_(s)
    mask = hidden(weights, torch.arange(P_len), P_len)                            # [q k]
    return content.masked_fill_(mask, -math.inf), position.masked_fill_(mask, -math.inf)


def crude_pattern(weights: Weights, tokens: Int[Tensor, "p"], c: float) -> Float[Tensor, "h q k"]:
    """The crude split the seed improves on: |W_E[x_i] + W_pos[i]| ≈ √(|W_pos[i]|² + c²), i.e.
    keys √d (c(W_E[x_i]) + c(W_pos[i])) W_K / √(|c(W_pos[i])|² + c²) + b_K, without adding and
    subtracting W_pos[n]; softmax_i of q_n·key_i/s (causal)."""
    check_split(weights)
    cfg, b = weights.cfg, weights.blocks[0]
    d, P_len = cfg.d_model, len(tokens)
    Q = queries(weights, tokens).transpose(0, 1)                                  # [h q e]
    x = centred(weights.W_E[tokens]) + centred(weights.W_pos[:P_len])             # [k d]
    norm = (centred(weights.W_pos[:P_len]).pow(2).sum(-1) + c ** 2).clamp_min(d * cfg.ln_eps).sqrt()    # [k]
    keys = math.sqrt(d) * torch.einsum("kd,hde->hke", x, b.W_K) / norm[None, :, None] + b.b_K[:, None, :]
    scores = Q @ keys.transpose(1, 2) / cfg.attn_scale(0)                         # [h q k]
    return torch.softmax(scores.masked_fill(hidden(weights, torch.arange(P_len), P_len), -math.inf), dim=-1)


def approx_pattern(weights: Weights, tokens: Int[Tensor, "p"], c: float) -> Float[Tensor, "h q k"]:
    """attn_approx[n, i] = softmax_i of the split scores (visible keys only, rows sum to 1)."""
    content, position = split_scores(weights, tokens, c)
    return torch.softmax(content.add_(position), dim=-1)


def approx_tv(weights: Weights, tokens: Int[Tensor, "p"], c: float, true: Float[Tensor, "h q k"] | None = None,
              rows: int = 64) -> Float[Tensor, "h q"]:
    """``tv_distance(true, approx_pattern(weights, tokens, c))``, `rows` queries at a time.

    The same terms as :func:`split_scores` in the same order, for a block of queries a..z−1
    against keys 0..z−1 only (later keys are hidden from every query of the block, where both
    patterns are exactly 0): half the products of the full square, and [h rows z] temporaries
    instead of several [h p p] ones. `true` [h p p] is the model's pattern (float64 view); None:
    the model's own pattern, block by block as well (:func:`true_pattern_rows`: the forward's q
    and k, its scores of the block's queries, its softmax), never the [h p p] square — the
    pattern equal to :func:`true_pattern`'s up to an ulp of a score (:func:`core.forward.masked_scores`).
    On one thread: products this small spend a second thread's time synchronising (a
    1000-token distilgpt2 window: 0.34 s CPU on one thread, 2.5 s on two; the full square
    on two threads 1.07 s); the q and k of the model's pattern on the caller's threads."""
    qk = true_qk(weights, tokens) if true is None else None
    with small_matrices():
        return _approx_tv(weights, tokens, c, true, qk, rows)


def true_qk(weights: Weights, tokens: Int[Tensor, "p"]) -> tuple[Float[Tensor, "1 p h e"], Float[Tensor, "1 p h e"]]:
    """The model's layer-0 queries and keys on one window (forward's ``hook_q``, ``hook_k``)."""
    names = ["blocks.0.attn.hook_q", "blocks.0.attn.hook_k"]
    cache = run_with_cache(weights, tokens[None], names=names, stop_at_layer=1)
    return cache[names[0]], cache[names[1]]


def true_pattern_rows(weights: Weights, qk: tuple[Tensor, Tensor], a: int, z: int) -> Float[Tensor, "h m k"]:
    """Rows a..z−1 of the model's layer-0 pattern against keys 0..z−1 (the later keys are 0 in
    causal rows), from :func:`true_qk`: :func:`true_pattern`'s block ``[:, a:z, :z]`` up to an ulp
    of a score (:func:`core.forward.masked_scores`)."""
    q, k = qk
    scores = masked_scores(q, k, 0, weights.cfg, a, z)                           # [1 h m k]
    return torch._softmax(scores, -1, False, out=scores)[0].to(q.dtype)          # in place: the same values


def _by_columns(b) -> tuple[Tensor, Tensor]:
    """(W_Q, W_K) of block `b` as [d h·e] matrices (head h in columns h·e..(h+1)·e − 1): what
    ``einsum("pd,hde->phe", x, W)`` copies W into at every call, made once (remembered on the block,
    rebuilt if W_Q or W_K change); ``x @ W`` gives einsum's values bit for bit."""
    parts = (b.W_Q, b.W_K)
    key = tuple((id(t), t._version) for t in parts)
    memo = b.__dict__.get("_by_columns")
    if memo is not None and memo[0] == key:
        return memo[1]
    out = tuple(W.permute(1, 0, 2).reshape(W.shape[1], -1) for W in parts)      # [h d e] → [d h·e]
    b.__dict__["_by_columns"] = (key, out, parts)      # `parts` keeps the ids alive (no reuse)
    return out


def _approx_tv(weights: Weights, tokens: Tensor, c: float, true: Tensor | None, qk, rows: int) -> Tensor:
    check_split(weights)
    cfg, b = weights.cfg, weights.blocks[0]
    d, P_len = cfg.d_model, len(tokens)
    s, root_d, floor = cfg.attn_scale(0), math.sqrt(d), d * cfg.ln_eps
    h, e = cfg.n_heads, cfg.d_head
    W_K = _by_columns(b)[1]                                                       # [d h·e]
    x = ln1(weights, weights.W_E[tokens] + weights.W_pos[torch.arange(P_len)])    # [q d]
    Qh = query_rows(b, x).transpose(0, 1)                                         # [h q e] (queries())
    e_x = centred(weights.W_E[tokens])                                            # [k d]
    p = centred(weights.W_pos[:P_len])                                            # [p d]
    eK = (e_x @ W_K).view(P_len, h, e).transpose(0, 1)                            # [h k e]
    pK = (p @ W_K).view(P_len, h, e).transpose(0, 1)                              # [h p e]
    q_bK = torch.einsum("hqe,he->hq", Qh, b.b_K)                                  # [h q]
    e2, p2 = e_x.pow(2).sum(-1), p.pow(2).sum(-1)                                 # [k], [p]
    pos_norm = (p2 + c ** 2).clamp_min(floor).sqrt()                              # [k]
    # s a power of two (d_head 16, 64, 256): x/s is exact, so x/s + y/s = (x + y)/s bit for bit: one
    # division of the sum instead of one of each part (a [h r z] pass fewer)
    exact_s = math.frexp(s)[0] == 0.5
    out = torch.empty(cfg.n_heads, P_len, dtype=torch.float64)
    for a in range(0, P_len, rows):
        z = min(a + rows, P_len)
        q = Qh[:, a:z]                                                            # [h r e]
        q_eK = q @ eK[:, :z].transpose(1, 2)                                      # [h r z]
        q_pK = q @ pK[:, :z].transpose(1, 2)                                      # [h r z]
        q_pnK = torch.diagonal(q_pK[:, :, a:z], dim1=1, dim2=2).clone()           # [h r]  q_n · p_n W_K
        norm2 = sum_norm2(p2[a:z], e2[:z], p[a:z], e_x[:z]) + floor                   # [r z]
        # addcdiv(x, t, u, value=v) = x + (v·t)/u elementwise, as written: (√d·(q_eK + q_pnK))/√norm2 + q_bK
        # and content + (√d·(q_pK − q_pnK))/pos_norm in one [h r z] pass each instead of three (the same
        # operations in the same order: v·t = t·v and x + y = y + x exactly)
        content = torch.addcdiv(q_bK[:, a:z, None], q_eK.add_(q_pnK[:, :, None]), norm2.sqrt(), value=root_d,
                                out=q_eK)
        q_pK.sub_(q_pnK[:, :, None])                                              # q_n·(p_i − p_n) W_K
        if exact_s:
            scores = torch.addcdiv(content, q_pK, pos_norm[None, None, :z], value=root_d, out=content).div_(s)
        else:
            scores = content.div_(s).add_(q_pK.mul_(root_d).div_(pos_norm[None, None, :z]).div_(s))
        mask_block_(weights, scores, a)                                           # [h r z], −inf where hidden
        approx = torch._softmax(scores, -1, False, out=scores)                    # in place: the same values
        # |approx − true| = |true − approx| exactly (IEEE subtraction is antisymmetric): in approx's own
        # buffer, one pass instead of a float64 copy of true's block and a second pass
        t = true[:, a:z, :z] if true is not None else true_pattern_rows(weights, qk, a, z)   # [h r z]
        out[:, a:z] = 0.5 * approx.sub_(t).abs_().sum(-1)
    return out


def text_positional_kernels(weights: Weights, tokens: Int[Tensor, "p"], c: float) -> Float[Tensor, "h q k"]:
    """pos_{n,i,query[n](x)} with the real queries of a text: softmax_i of q_n·P[n,i]/s."""
    _, position = split_scores(weights, tokens, c)
    return torch.softmax(position, dim=-1)


def text_content_factors(weights: Weights, tokens: Int[Tensor, "p"], c: float) -> Float[Tensor, "h q k"]:
    """content_{E[n, x_i], query[n](x)} = exp(q_n·E[n, x_i]/s) (0 at the keys query n does not see)."""
    content, _ = split_scores(weights, tokens, c)
    return content.exp()


def true_pattern(weights: Weights, tokens: Int[Tensor, "p"]) -> Float[Tensor, "h q k"]:
    """The model's layer-0 attention pattern on one window."""
    cache = run_with_cache(weights, tokens[None], names=["blocks.0.attn.hook_pattern"], stop_at_layer=1)
    return cache["blocks.0.attn.hook_pattern"][0]


def tv_distance(true: Float[Tensor, "h q k"], approx: Float[Tensor, "h q k"]) -> Float[Tensor, "h q"]:
    """½ Σ_k |true − approx| per head and query position."""
    return 0.5 * true.to(torch.float64, copy=True).sub_(approx).abs_().sum(-1)   # approx promoted exactly
