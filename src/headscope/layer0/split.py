"""Layer-0 attention split into content and position (seed 000), in one place.

Every layer-0 analysis — positional kernels (:mod:`.kernels`), denominators
(:mod:`.denominators`), calibration (:mod:`.calibration`), the contextual circuit
(:mod:`.contextual`) and contextual neurons (:mod:`.neurons`) — reads layer 0 through
this module. Notation of the seed: x the input, x_i its token at key position i ≤ n,
n the query position, d = d_model, e = d_head, s = the model's score divisor
(:meth:`Config.attn_scale`, √e for GPT-2), LN the layer-0 LayerNorm 1 with weight w₁
and bias b₁ (folded into W_Q/W_K/W_V by ``fold_ln``; the formulas hold either way),
c(v) = v − mean(v) the centring over d_model.

Query at n::

    q_h[n] = LN(W_E[x_n] + W_pos[n]) W_Q[h] + b_Q[h]                           [head e]

Key split (the seed's formula, exact at i = n)::

    key_h[i] ≈ E_h[n, x_i] + P_h[n, i]
    E_h[n, t] = LN(W_E[t] + W_pos[n]) W_K[h] + b_K[h]
    P_h[n, i] = √d · (w₁ ⊙ c(W_pos[i] − W_pos[n])) W_K[h] / sqrt(|c(W_pos[i])|² + c²)

c stands for a typical token-embedding norm: by default measured as the median of
|c(W_E[t])| over the vocabulary (:func:`measure_c`), or the seed's 3.5 for GPT-2
Small (:data:`GPT2_C`). The key bias b_K adds q·b_K to every score of a query, which
softmax ignores; it is kept in E so that the split is exact at i = n.

Positional kernel and content factor::

    pos_h[n, i]     = softmax_{i ≤ n}( q_h[n] · P_h[n, i] / s )
    content_h[n, t] = exp( q_h[n] · E_h[n, t] / s )
    attn_approx[n, i] = pos_h[n, i] · content_h[n, x_i] / S_h[n],
    S_h[n] = Σ_{j ≤ n} pos_h[n, j] · content_h[n, x_j]        (the seed's denominator)

On a local layer 0 (GPT-Neo's local layers) every ``i ≤ n`` reads "every key query n sees"
(n − window < i ≤ n): one mask, :meth:`Config.hidden_keys`, the forward's own (:func:`hidden`).

The model's own log-denominator ``L_h[n] = logsumexp_i(q·key_i/s)`` (forward's
``hook_denom``) relates to it by ``S_h[n] ≈ exp(L_h[n] − log Z_h[n])`` with
``Z_h[n] = Σ_{i ≤ n} exp(q_h[n]·P_h[n, i]/s)`` (exact where the split is exact).

Values split the same way: ``v_h[i] W_O[h] ≈ OV_h[n, x_i] + OVP_h[n, i]`` with
``OV_h[n, t] = (LN(W_E[t] + W_pos[n]) W_V[h] + b_V[h]) W_O[h]`` and ``OVP_h`` built
like ``P_h`` with W_V in place of W_K (:func:`positional_term` gives the shared part).

The analyses see the model through :func:`view`: a float64 CPU copy of W_E, W_pos and
block 0 only (whatever device the model was loaded on), so that tiny differences of
exponentiated scores are not rounding noise and nothing of the later layers is copied.
The fixed query token of the seed is :data:`SEED_QUERY`.

This module holds the view, c, the positional terms and the fixed-query frames; the split over
whole windows of text and its TV against the model's pattern (the text's queries, the mask,
:func:`split_scores`, :func:`approx_tv` …) live in :mod:`.split_windows`, whose names are
re-exported here.

Rotary models (no W_pos) have their own split, kernel over distance × content factor
(:mod:`.rotary_split`, docs/rotary-layer0.md): :func:`view`, :func:`frame`, :func:`log_Z`,
:func:`log_content_factors`, :func:`fixed_query_scores` and :func:`value_inputs` hand them to it,
so the denominators, calibration, contextual circuit and neuron scan read one interface.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import torch
from jaxtyping import Float, Int

from .._errors import HeadscopeError
from ..core.tokenizer import word_ids
from ..core.weights import Block, Weights
from ..lowrank import small_matrices
from .split_windows import (  # noqa: F401  (the window-level split: its names re-exported here)
    approx_pattern, approx_tv, centred, check_split, crude_pattern, hidden, ln1, mask_block_, queries, query_rows,
    split_scores, sum_norm2, text_content_factors, text_positional_kernels, true_pattern, true_pattern_rows, true_qk, tv_distance,
)

from ..core.applicability import learned_positions

Tensor = torch.Tensor

SEED_QUERY = " the"   #: the seed's fixed query token (appears in many contexts)
GPT2_C = 3.5          #: the seed's c for GPT-2 Small
#: vocabulary rows per chunk when scoring every token: 256 float64 rows of d_model 768 are 1.6 MB per
#: temporary (W_E + W_pos, LayerNorm), which stay in cache between the passes over a chunk; 8192 (50 MB)
#: took 1.4–2× the CPU time of 2048 (distilgpt2 shape), and 2048 (12.6 MB) 1.6–2× that of 256 on GPT-2
#: small's vocabulary (``log_content_factors`` 0.26–0.39 against 0.13–0.16 CPU s, shared machine,
#: 2026-12-05); 64–128 no better. Rows are independent in exact arithmetic, not in rounding: a product
#: over a row slice may round differently from the same rows inside a larger product (MKL; seen on the
#: tiny model with 7-row pieces), so the readouts are defined as this chunking's and another CONTENT_CHUNK
#: may move their last bits
CONTENT_CHUNK = 256


# -- the layer-0 view -----------------------------------------------------------------------


def view(model) -> Weights:
    """W_E, W_pos and block 0 of `model` under its bound processing, as float64 on the CPU.

    The config says one layer, so a forward pass on the view stops after block 0; W_U is
    shared, not copied (no layer-0 analysis reads it). Built once per model and processing
    and kept beside the processed weights (:meth:`headscope.Model.derived`); read-only.
    """
    if _rotary(model.cfg):
        return _rs().view(model)
    learned_positions(model.cfg, "the layer-0 content + position analyses")
    return model.derived("layer0.view", _view)


def _rotary(cfg) -> bool:
    return cfg.positional == "rotary"


def _rs():
    from . import rotary_split
    return rotary_split


def value_inputs(w: Weights, tokens: Int[Tensor, "t"], n: int) -> Float[Tensor, "t d"]:
    """What a value reads for token t at key position ≈ n: LN(W_E[t] + W_pos[n]) (learned; the
    split's value term), N₁(W_E[t]) (rotary: exact, values carry no position)."""
    if _rotary(w.cfg):
        return _rs().normalised(w, tokens)
    return ln1(w, w.W_E[tokens] + w.W_pos[n])


def _view(w: Weights) -> Weights:
    f = lambda t: t.to(device="cpu", dtype=torch.float64)  # noqa: E731
    b0 = Block(**{k: f(getattr(w.blocks[0], k)) for k in w.blocks[0].shapes(w.cfg)})
    return dataclasses.replace(w, W_E=f(w.W_E), W_pos=f(w.W_pos), blocks=[b0],
                               cfg=w.cfg.truncated(1))


def token_id(model, text: str, what: str = "query") -> int:
    """The id of `text`, which must be exactly one token. A text with a leading space is the word as it
    reads after a space inside a text (``core.tokenizer.word_ids``: " the" is ``▁the`` in a
    SentencePiece-style vocabulary, ``Ġthe`` in byte-level BPE)."""
    ids = word_ids(model.tokenizer, text) if text.startswith(" ") else model.tokenizer.encode(text)
    if len(ids) != 1:
        raise HeadscopeError(f"{what}: expected a single token, got {text!r} = {len(ids)} tokens")
    return int(ids[0])


# -- c ----------------------------------------------------------------------------------------


def measure_c(weights: Weights) -> float:
    """Typical token-embedding norm: median over the vocabulary of |W_E[t] − mean|.

    Remembered on `weights` (rebuilt if W_E changes): the kernels, the heatmap, the
    denominators, calibration and the atlas all ask for it, a pass over the whole vocabulary."""
    key = (id(weights.W_E), weights.W_E._version)
    memo = weights.__dict__.get("_measured_c")
    if memo is not None and memo[0] == key:
        return memo[1]
    W_E, chunk = weights.W_E, CONTENT_CHUNK
    norms = torch.empty(W_E.shape[0], dtype=W_E.dtype, device=W_E.device)         # |c(W_E[t])| [V]
    # on one thread: row-wise passes over [chunk d] blocks, where a second thread only synchronises (GPT-2
    # small's vocabulary in float64: 0.09 CPU s on one thread, 0.25–0.33 on two; each row's norm the same bits)
    with small_matrices():
        for a in range(0, W_E.shape[0], chunk):  # row by row the same values; no [V d] centred copy
            torch.linalg.vector_norm(centred(W_E[a:a + chunk]), dim=-1, out=norms[a:a + chunk])
    c = float(norms.median())
    weights.__dict__["_measured_c"] = (key, c, weights.W_E)   # W_E kept alive: its id is not reused
    return c


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
    top = math.sqrt(float(torch.finfo(torch.float32).max) / weights.cfg.d_model)
    if value > top:     # c is an embedding norm: its square, summed over d_model, must fit float32
        raise HeadscopeError(f"c: expected a positive number at most {top:.3g} (an embedding norm whose square "
                             f"summed over d_model {weights.cfg.d_model} fits float32), got {c!r}")
    return value, "given"


# -- the split's positional terms (queries, ln1, hidden: split_windows) -------------------------


def _positional_parts(w: Weights) -> tuple[Tensor, Tensor, Tensor]:
    """(c(W_pos) [n_ctx d], |c(W_pos[i])|² [n_ctx], (w₁ ⊙ c(W_pos[i])) W_K[h] [h n_ctx e]) of `w`.

    Computed once per weights (remembered on block 0, rebuilt if W_pos, w₁ or W_K change):
    every frame needs them, and the positional logits of a query then cost O(n·e) per head
    instead of O(n·d).
    """
    b = w.blocks[0]
    learned_positions(w.cfg, "the positional kernels of the W_pos key split")
    parts = (w.W_pos, b.ln1_w, b.W_K)
    key = tuple((id(t), t._version) for t in parts)
    memo = b.__dict__.get("_positional_parts")
    if memo is not None and memo[0] == key:
        return memo[1]
    P = centred(w.W_pos)                                                          # [n_ctx d]
    out = (P, P.pow(2).sum(-1), torch.einsum("id,hde->hie", P * b.ln1_w, b.W_K))    # [n_ctx], [h n_ctx e]
    b.__dict__["_positional_parts"] = (key, out, parts)  # `parts` keeps the ids alive (no reuse)
    return out


def _position_scale(w: Weights, k: int, c: float) -> Float[Tensor, "k"]:
    """√d / sqrt(|c(W_pos[i])|² + c²) for i < k.

    The norm is floored at d·eps, LayerNorm's own floor (|c(x)|² + d·eps): finite when
    c = 0 and W_pos[i] = 0."""
    sq = (_positional_parts(w)[1][:k] + c * c).clamp_min(w.cfg.d_model * w.cfg.ln_eps)
    return math.sqrt(w.cfg.d_model) / sq.sqrt()


def positional_term(w: Weights, n: int, c: float, k: int | None = None) -> Float[Tensor, "k d"]:
    """√d · w₁ ⊙ c(W_pos[i] − W_pos[n]) / sqrt(|c(W_pos[i])|² + c²) for i < k (default n+1).

    Multiply by W_K[h] (W_V[h]) to get P_h[n, i] (the positional value term)."""
    k = n + 1 if k is None else k
    P = _positional_parts(w)[0]                                                   # [n_ctx d]
    diff = P[:k] - P[n]                                                           # [k d]
    return diff * _position_scale(w, k, c)[:, None] * w.blocks[0].ln1_w


def positional_basis(w: Weights, k: int, c: float) -> tuple[Float[Tensor, "n_ctx d"], Float[Tensor, "k"]]:
    """(w₁ ⊙ c(W_pos) [n_ctx d], scale [k]) with ``positional_term(w, n, c, k) = scale[:, None]·(rows[:k] − rows[n])``
    (scale_i = √d / sqrt(|c(W_pos[i])|² + c²)): the positional term of many n at once."""
    return _positional_parts(w)[0] * w.blocks[0].ln1_w, _position_scale(w, k, c)


def _positional_logits(w: Weights, q: Float[Tensor, "m h e"], ns: Int[Tensor, "m"], k: int, c: float
                       ) -> Float[Tensor, "m h k"]:
    """q_m · P_h[n_m, i] / s for i < k (n_m < k): scale_i·(q·PK_h[i] − q·PK_h[n_m]) / s; −inf at the keys
    query n_m does not see (i > n_m, or outside layer 0's local window)."""
    G = torch.einsum("mhe,hie->mhi", q, _positional_parts(w)[2][:, :k])           # [m h k]
    Gn = G.gather(2, ns.view(-1, 1, 1).expand(-1, G.shape[1], 1))                  # [m h 1]: exactly 0 at i = n
    L = (G - Gn) * (_position_scale(w, k, c) / w.cfg.attn_scale(0))
    return L.masked_fill_(hidden(w, ns, k)[:, None, :], -math.inf)


def key_split(weights: Weights, tokens: Int[Tensor, "p"], n: int, c: float
              ) -> tuple[Float[Tensor, "h i e"], Float[Tensor, "h i e"]]:
    """(E[n, x_i], P[n, i]) for i = 0..n, every head, exactly as the seed writes them."""
    check_split(weights)
    b = weights.blocks[0]
    E = torch.einsum("id,hde->hie", ln1(weights, weights.W_E[tokens[: n + 1]] + weights.W_pos[n]), b.W_K)
    P = torch.einsum("id,hde->hie", positional_term(weights, n, c), b.W_K)
    return E + b.b_K[:, None], P                                                  # [h i e] each


# -- fixed query token at one position: the frame ---------------------------------------------


@dataclasses.dataclass
class Frame:
    """Everything of layer 0 that depends only on (query token, n), for all heads."""

    n: int
    token: int
    c: float
    q: Float[Tensor, "head e"]
    Kq: Float[Tensor, "d head"]          # W_K[h] q_h / s: a residual vector's score readout
    bq: Float[Tensor, "head"]            # b_K[h]·q_h / s
    pos_logits: Float[Tensor, "head k"]  # q·P[n, i]/s for i = 0..n
    log_Z: Float[Tensor, "head"]         # logsumexp_i pos_logits
    pos: Float[Tensor, "head k"]         # pos_h[n, i]

    def content_logits(self, w: Weights, tokens: Int[Tensor, "t"] | slice) -> Float[Tensor, "head t"]:
        """log content_h[n, t] = q_h·E_h[n, t]/s for the given tokens (ids, or a slice of the vocabulary)."""
        return self.content_readouts(w, tokens).T + self.bq[:, None]           # [head t]

    def content_readouts(self, w: Weights, tokens: Int[Tensor, "t"] | slice, out: Tensor | None = None
                         ) -> Float[Tensor, "t head"]:
        """LN(W_E[t] + W_pos[n]) @ Kq [t head]: :meth:`content_logits` before its b_K·q/s, written into
        `out` [t head] (contiguous) when given."""
        x = ln1(w, w.W_E[tokens] + w.W_pos[self.n])                             # [t d]
        return torch.mm(x, self.Kq, out=out)                                   # [t head]


def _check_frame(w: Weights, tokens: Sequence[int], n: int) -> None:
    if not 0 <= n < w.cfg.n_ctx:
        raise HeadscopeError(f"query position {n} out of range (n_ctx {w.cfg.n_ctx})")
    bad = [t for t in tokens if not 0 <= t < w.cfg.d_vocab]
    if bad:
        raise HeadscopeError(f"query token id {bad[0]} out of range (d_vocab {w.cfg.d_vocab})")


def score_readouts(w: Weights, query_tokens: Sequence[int], n: int) -> tuple[Tensor, Tensor, Tensor]:
    """(q [t h e], W_K q / s [t d h], b_K·q / s [t h]) of query tokens placed at position n."""
    b = w.blocks[0]
    toks = torch.as_tensor(list(query_tokens), dtype=torch.long)
    q = queries(w, toks, torch.full_like(toks, n))                                # [t h e]
    s = w.cfg.attn_scale(0)
    return q, torch.einsum("hde,the->tdh", b.W_K, q) / s, (b.b_K * q).sum(-1) / s


def positional_logits(w: Weights, query_tokens: Sequence[int], n: int, c: float) -> Float[Tensor, "t h i"]:
    """q·P[n, i]/s for i = 0..n, each query token placed at position n."""
    _check_frame(w, list(query_tokens), n)
    toks = torch.as_tensor(list(query_tokens), dtype=torch.long)
    q = queries(w, toks, torch.full_like(toks, n))                                # [t h e]
    return _positional_logits(w, q, torch.full_like(toks, n), n + 1, c)


def query_frames(w: Weights, token: int, ns: Int[Tensor, "m"], c: float
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The frames of `token` at positions `ns` at once: q [m h e], Kq = W_K q / s [m d h],
    bq = b_K·q / s [m h] and pos [m h k] (k = max(ns) + 1, zero beyond each n) — what
    :func:`frame` gives one position at a time."""
    q, Kq, bq, logits = _frame_parts(w, token, ns, c)
    return q, Kq, bq, torch.softmax(logits, dim=-1)


def _frame_parts(w: Weights, token: int, ns: Int[Tensor, "m"], c: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`query_frames` with the positional logits [m h k] (−inf where hidden) in place of their softmax."""
    b = w.blocks[0]
    _check_frame(w, [token], int(ns.max()))
    q = queries(w, torch.full_like(ns, token), ns)                                 # [m h e]
    s = w.cfg.attn_scale(0)
    logits = _positional_logits(w, q, ns, int(ns.max()) + 1, c)                    # [m h k], −inf where hidden
    return q, torch.einsum("hde,mhe->mdh", b.W_K, q) / s, (b.b_K * q).sum(-1) / s, logits


def positional_kernels(w: Weights, query_tokens: Sequence[int], n: int, c: float) -> Float[Tensor, "t h i"]:
    """pos_{n,i,q} for i = 0..n and each query token q placed at position n."""
    return torch.softmax(positional_logits(w, query_tokens, n, c).double(), dim=-1)


def positional_kernel(w: Weights, query_token: int, n: int, c: float) -> Float[Tensor, "h i"]:
    """pos_{n,i,q} for i = 0..n, the query token placed at position n."""
    return positional_kernels(w, [query_token], n, c)[0]


def frame(w: Weights, token: int, n: int, c: float | None = None) -> Frame:
    """The layer-0 query frame at position n for query token `token`."""
    if _rotary(w.cfg):
        return _rs().frame(w, token, n, c)
    _check_frame(w, [token], n)
    c = measure_c(w) if c is None else float(c)
    q, Kq, bq = score_readouts(w, [token], n)
    pos_logits = _positional_logits(w, q, torch.tensor([n]), n + 1, c)[0]         # [head n+1]
    return Frame(n=n, token=token, c=c, q=q[0], Kq=Kq[0], bq=bq[0], pos_logits=pos_logits,
                 log_Z=torch.logsumexp(pos_logits, dim=-1), pos=torch.softmax(pos_logits, dim=-1))


def log_content_factors(w: Weights, query_token: int, n: int, tokens: Int[Tensor, "t"] | None = None
                        ) -> Float[Tensor, "h t"]:
    """log content_{t,q} = q·E[n, t]/s for `tokens` (default: the whole vocabulary), query at n.

    On one thread: [chunk d] @ [d head] products and a chunk's LN are too thin for a second
    thread (distilgpt2's vocabulary, shared machine: 0.2–0.4 CPU s on one thread, 0.9–1.0 on two,
    and 2–5× the wall time; the same values)."""
    if _rotary(w.cfg):
        return _rs().log_content_factors(w, query_token, n, tokens)
    fr = frame(w, query_token, n, c=1.0)                                          # c does not enter content
    with small_matrices():
        V = w.cfg.vocab if tokens is None else len(tokens)
        R = torch.empty(V, fr.Kq.shape[1], dtype=torch.promote_types(w.W_E.dtype, fr.Kq.dtype))   # [t head]
        for a in range(0, V, CONTENT_CHUNK):   # the whole vocabulary: row slices of W_E, no gathered copy
            rows = slice(a, min(a + CONTENT_CHUNK, V)) if tokens is None else tokens[a:a + CONTENT_CHUNK]
            fr.content_readouts(w, rows, out=R[a:a + CONTENT_CHUNK])           # each chunk's product in place
        # content_logits' b_K·q/s, once over [head t] (contiguous, as the chunks' concatenation was)
        return torch.add(R.T, fr.bq[:, None], out=torch.empty(R.shape[1], V, dtype=R.dtype)).double()


def frames_at(w: Weights, token: int, ns: Int[Tensor, "m"], c: float, tokens: Int[Tensor, "t"]
              ) -> tuple[Float[Tensor, "m head t"], Float[Tensor, "m head k"]]:
    """The frames of `token` at the positions `ns` at once, as far as the denominators read them:
    (log content_h[n, t] for `tokens` [m head t], pos_logits [m head k], k = max(ns) + 1, −inf where
    n does not see i) — :meth:`Frame.content_logits` and ``pos_logits`` of :func:`frame` at each n.

    Learned positions: with LN1(x) = w₁ ⊙ c(x)/σ(x) + b₁, σ(x)² = |c(x)|²/d + eps and
    x = W_E[t] + W_pos[n] (c linear), a token's readout is

        LN1(x)·Kq_n = (c(W_E[t]) ⊙ w₁)·Kq_n / σ_tn + (c(W_pos[n]) ⊙ w₁)·Kq_n / σ_tn + b₁·Kq_n,
        σ_tn² = (|c(W_E[t])|² + |c(W_pos[n])|² + 2 c(W_E[t])·c(W_pos[n])) / d + eps,

    so every position's content logits come from one [t d] @ [d m·head] product and σ² from
    :func:`sum_norm2` (as :func:`split_scores` takes its own), not a LayerNorm of [t d] per position
    (the same values to float64 rounding). Rotary
    positions: :func:`frame` at each n (their content depends on n through q̃ only)."""
    if _rotary(w.cfg):
        frames = [frame(w, token, int(n), c) for n in ns]
        k = int(ns.max()) + 1
        pos = torch.full((len(frames), w.cfg.n_heads, k), -math.inf, dtype=frames[0].pos_logits.dtype)
        for i, fr in enumerate(frames):
            pos[i, :, :fr.pos_logits.shape[1]] = fr.pos_logits
        return torch.stack([fr.content_logits(w, tokens) for fr in frames]), pos
    b, d = w.blocks[0], w.cfg.d_model
    _, Kq, bq, logits = _frame_parts(w, token, ns, c)                              # Kq [m d h], bq [m h]
    m, H = bq.shape
    KqT = Kq.permute(1, 0, 2).reshape(d, m * H)                                    # [d m·h]
    e_t, p_n = centred(w.W_E[tokens]), centred(w.W_pos[ns])                       # [t d], [m d]
    sigma = sum_norm2(p_n.pow(2).sum(-1), e_t.pow(2).sum(-1), p_n, e_t).T.div(d).add_(w.cfg.ln_eps).sqrt_()   # [t m]
    wE = (e_t * b.ln1_w) @ KqT                                                     # [t d] @ [d m·h] → [t m·h]
    wP = torch.einsum("md,mdh->mh", p_n * b.ln1_w, Kq)                             # [m h]
    bias = (b.ln1_b @ KqT).view(m, H) + bq                                         # [m h]: b₁·Kq + b_K·q/s
    content = wE.view(-1, m, H).add_(wP).div_(sigma[:, :, None]).add_(bias)       # [t m h]
    return content.permute(1, 2, 0), logits


def seed_log_denominator(log_denom: Float[Tensor, "... head"], fr: Frame) -> Float[Tensor, "... head"]:
    """log S_h[n] = L_h[n] − log Z_h[n]: the model's log-denominator in the seed's normalisation."""
    return log_denom - fr.log_Z


def log_Z(w: Weights, token: int, n_pos: int, c: float, chunk: int = 128) -> Float[Tensor, "head pos"]:
    """log Z_h[n] for n = 0..n_pos−1 (the positional kernel's normaliser), the frames' ``log_Z``
    for `chunk` positions at a time (one [chunk head k] block of logits up to the chunk's last position k − 1,
    masked above n)."""
    if _rotary(w.cfg):
        return _rs().log_Z(w, token, n_pos, c)
    _check_frame(w, [token], n_pos - 1)
    return torch.cat([log_Z_at(w, token, torch.arange(a, min(a + chunk, n_pos)), c) for a in range(0, n_pos, chunk)],
                     dim=1)


def log_Z_at(w: Weights, token: int, ns: Int[Tensor, "m"], c: float) -> Float[Tensor, "head m"]:
    """log Z_h[n] at the positions `ns` (learned positions): one [m head k] block of positional
    logits up to the last position k − 1, masked above each n."""
    _check_frame(w, [token], int(ns.max()))
    q = queries(w, torch.full_like(ns, token), ns)                                 # [m h e]
    L = _positional_logits(w, q, ns, int(ns.max()) + 1, c)                         # [m h k]: −inf where hidden
    return logsumexp_(L).T                                                         # [h m] (L consumed)


def fixed_queries(w: Weights, token: int, p: int) -> Float[Tensor, "p head e"]:
    """The layer-0 queries of `token` at positions 0..p−1 (learned positions; what
    :func:`fixed_query_scores` scores the keys with, the same for every text)."""
    b0 = w.blocks[0]
    x = ln1(w, w.W_E[token] + w.W_pos[:p])                                        # [p d]
    return query_rows(b0, x)                                                      # [p head e]


def _fixed_queries_of_length(w: Weights, token: int, p: int, queries: dict[int, Tensor] | None) -> Tensor:
    """:func:`fixed_queries` for `p` positions, kept in the caller's `queries` by length when given."""
    if queries is None:
        return fixed_queries(w, token, p)
    if p not in queries:
        queries[p] = fixed_queries(w, token, p)
    return queries[p]


def fixed_query_scores(w: Weights, k: Float[Tensor, "b p head e"], token: int,
                       queries: dict[int, Tensor] | None = None) -> Float[Tensor, "b head q p"]:
    """True layer-0 scores when the query at every position n is `token` at n.

    Keys ``k`` are the text's own (forward's ``hook_k``); causal and window masks applied. This is
    the model's computation at n had x_n been `token` (the key and value at n stay the
    text's own). ``queries``, a dict the caller keeps across calls with the same `w` and
    `token` (e.g. calibration windows), holds :func:`fixed_queries` by length, computed once.
    """
    if _rotary(w.cfg):
        return _rs().fixed_query_scores(w, k, token)
    p = k.shape[1]
    q = _fixed_queries_of_length(w, token, p, queries)
    scores = torch.einsum("qhe,bkhe->bhqk", q, k) / w.cfg.attn_scale(0)           # [b head q k]
    return scores.masked_fill(hidden(w, torch.arange(p, device=k.device), p), float("-inf"))


#: query positions per block of :func:`fixed_query_log_denominators`
QUERY_BLOCK = 256


def logsumexp_(s: Tensor) -> Tensor:
    """``torch.logsumexp(s, -1)`` in `s`'s own memory (`s` is consumed): the same operations in the same
    order — m = max, its ±inf set to 0, log Σ exp(s − m) + m — hence the same values, without the
    [... k] copy that ``s − m`` allocates."""
    m = s.amax(-1, keepdim=True)                                                  # [... 1]
    m.masked_fill_(m.abs() == math.inf, 0)
    return s.sub_(m).exp_().sum(-1).log_().add_(m.squeeze(-1))


def fixed_query_log_denominators(w: Weights, k: Float[Tensor, "b p head e"], token: int,
                                 queries: dict[int, Tensor] | None = None, block: int = QUERY_BLOCK
                                 ) -> Float[Tensor, "b head p"]:
    """L_h[n] = logsumexp over the keys visible from n of :func:`fixed_query_scores` (the model's
    log-denominator had x_n been `token`), without forming the masked scores.

    Query positions [a, a + block) read keys [0, a + block) only (causal): about half the
    products, exponentials and sums of ``logsumexp(fixed_query_scores(...), -1)``, the same
    values (the keys left out are the −inf entries, which add exp(−∞) = 0; a row's sum depends on
    its length, so the block's rows keep theirs). Each block of scores is masked where a query
    does not see a key (causal: its diagonal block only), and its logsumexp taken in place
    (:func:`logsumexp_`); with s a power of two the queries are divided by s instead of each
    block of scores ((q/s)·k = (q·k)/s bit for bit: every product and sum scales exactly).
    Two [b head m z] passes fewer than ``div_``, a full mask and ``torch.logsumexp``'s copy.

    One window at a time: its keys laid out [head e p] in one kept buffer and each block's
    [head m z] scores in another (the same [head m e] @ [head e z] products as the batch's
    [b·head m e] @ [b·head e z], row by row the same bits): what a block reads and writes stays
    in cache, and the queries are not broadcast into a [b head m e] copy per block (a GPT-2-small
    shape, 7 windows of 256: 34 against 55 ms CPU)."""
    if _rotary(w.cfg):
        return torch.logsumexp(_rs().fixed_query_scores(w, k, token), -1)
    b, p, h, e = k.shape
    s = w.cfg.attn_scale(0)
    exact_s = math.frexp(s)[0] == 0.5
    q = _fixed_queries_of_length(w, token, p, queries)
    qh = (q / s if exact_s else q).permute(1, 0, 2)                               # [head q e]
    dtype = torch.promote_types(q.dtype, k.dtype)
    out = torch.empty(b, h, p, dtype=dtype, device=k.device)
    kh = torch.empty(h, e, p, dtype=k.dtype, device=k.device)                     # one window's keys [head e k]
    scratch = torch.empty(h * min(block, p) * p, dtype=dtype, device=k.device)    # a block's scores
    for i in range(b):
        kh.copy_(k[i].permute(1, 2, 0))                                           # [p head e] → [head e p]
        for a in range(0, p, block):
            z = min(a + block, p)
            S = torch.matmul(qh[:, a:z], kh[..., :z], out=scratch[:h * (z - a) * z].view(h, z - a, z))  # [head m z]
            if not exact_s:
                S.div_(s)
            out[i, :, a:z] = logsumexp_(mask_block_(w, S, a))                    # −inf where hidden
    return out
