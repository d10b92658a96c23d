"""Layer-0 attention at one query position n, split into position and content (seed 000).

The split is :mod:`headscope.kernels`' (same formulas, same c); this module adds
what the denominators need on top of it: the positional kernel's normaliser
log Z_h[n], scores for a fixed query against a text's true keys, and the value split.
Private helpers shared by :mod:`.denominators`, :mod:`.calibration`, :mod:`.contextual`
and :mod:`.neurons`. Notation of the seed: x_i the token at key position i ≤ n, n the
query position, d = d_model, e = d_head, LN the layer-0 LayerNorm 1 (with its weight
w₁ and bias b₁ unless processing folded them; the formulas below hold either way).

Query at n for a fixed query token t_q::

    q_h[n] = LN(W_E[t_q] + W_pos[n]) W_Q[h] + b_Q[h]                     [head e]

Key split (the seed's formula, exact at i = n)::

    key_h[i] ≈ E_h[n, x_i] + P_h[n, i]
    E_h[n, t] = LN(W_E[t] + W_pos[n]) W_K[h] + b_K[h]
    P_h[n, i] = √d · (w₁ ⊙ c(W_pos[i] − W_pos[n])) W_K[h] / sqrt(|c(W_pos[i])|² + c²)

where c(·) centres over d_model and c is the typical token-embedding norm (the seed's
3.5 for GPT-2 Small; here by default the median of |c(W_E[t])|). The key bias b_K is
kept in the *content* term; it is the same for every key, so it cancels in the
softmax, but it fixes the normalisation of the seed's denominator below.

Positional kernel and content factor (divisor √e as the model scales its scores)::

    pos_h[n, i]     = softmax_{i ≤ n}( q_h[n] · P_h[n, i] / √e )
    content_h[n, t] = exp( q_h[n] · E_h[n, t] / √e )

so that the approximate pattern is ``pos·content / S_h[n]`` with the seed's denominator
``S_h[n] = Σ_{j ≤ n} pos_h[n, j] · content_h[n, x_j]``. The model's own log-denominator
``L_h[n] = logsumexp_i(q·key_i/√e)`` (forward's ``hook_denom``) relates to it by

    S_h[n] ≈ exp( L_h[n] − log Z_h[n] ),   Z_h[n] = Σ_{i ≤ n} exp(q_h[n]·P_h[n, i]/√e)

(exact where the split is exact); :func:`seed_log_denominator` applies it.

Values are split the same way: ``v_h[i] W_O[h] ≈ OV_h[n, x_i] + OVP_h[n, i]`` with
``OV_h[n, t] = (LN(W_E[t] + W_pos[n]) W_V[h] + b_V[h]) W_O[h]`` and ``OVP_h`` the
positional term built like ``P_h`` with W_V in place of W_K.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from jaxtyping import Float, Int

from ._errors import HeadscopeError
from .forward import layer_norm
from .weights import Weights

Tensor = torch.Tensor


def typical_embedding_norm(w: Weights) -> float:
    """The key split's default c: :func:`headscope.kernels.measure_c` (median |c(W_E[t])|)."""
    from .kernels import measure_c

    return measure_c(w)


def score_divisor(w: Weights) -> float:
    return math.sqrt(w.cfg.d_head) if w.cfg.scale_attn_weights else 1.0


def ln1(w: Weights, x: Float[Tensor, "... d"]) -> Float[Tensor, "... d"]:
    b = w.blocks[0]
    return layer_norm(x, b.ln1_w, b.ln1_b, w.cfg.ln_eps)[0]


def query(w: Weights, token: int, n: int) -> Float[Tensor, "head e"]:
    """q_h[n] for every layer-0 head, query token `token` at position n."""
    from .kernels import queries

    return queries(w, torch.tensor([token]), torch.tensor([n]))[0]


@dataclasses.dataclass
class Frame:
    """Everything of layer 0 that depends only on (query token, n), for all heads."""

    n: int
    token: int
    c: float
    q: Float[Tensor, "head e"]
    Kq: Float[Tensor, "d head"]        # W_K[h] q_h / √e: a residual vector's score readout
    bq: Float[Tensor, "head"]          # b_K[h]·q_h / √e
    pos_logits: Float[Tensor, "head k"]  # q·P[n, i]/√e for i = 0..n
    log_Z: Float[Tensor, "head"]       # logsumexp_i pos_logits
    pos: Float[Tensor, "head k"]       # pos_h[n, i]

    def content_logits(self, w: Weights, tokens: Int[Tensor, "t"]) -> Float[Tensor, "head t"]:
        """log content_h[n, t] = q_h·E_h[n, t]/√e for the given tokens."""
        x = ln1(w, w.W_E[tokens] + w.W_pos[self.n])                         # [t d]
        return (x @ self.Kq).T + self.bq[:, None]                          # [head t]


def positional_term(w: Weights, n: int, c: float, k: int | None = None) -> Float[Tensor, "k d"]:
    """√d · w₁ ⊙ c(W_pos[i] − W_pos[n]) / sqrt(|c(W_pos[i])|² + c²) for i < k (default n+1).

    Multiply by W_K[h] (W_V[h]) to get P_h[n, i] (the positional value term)."""
    k = n + 1 if k is None else k
    P = w.W_pos - w.W_pos.mean(-1, keepdim=True)                           # [n_ctx d]
    diff = P[:k] - P[n]                                                    # [k d]
    scale = math.sqrt(w.cfg.d_model) / (P[:k].pow(2).sum(-1) + c * c).sqrt()  # [k]
    return diff * scale[:, None] * w.blocks[0].ln1_w


def frame(w: Weights, token: int, n: int, c: float | None = None) -> Frame:
    """The layer-0 query frame at position n for query token `token`."""
    if not 0 <= n < w.cfg.n_ctx:
        raise HeadscopeError(f"query position {n} out of range (n_ctx {w.cfg.n_ctx})")
    if not 0 <= token < w.cfg.d_vocab:
        raise HeadscopeError(f"query token id {token} out of range (d_vocab {w.cfg.d_vocab})")
    c = typical_embedding_norm(w) if c is None else float(c)
    b = w.blocks[0]
    div = score_divisor(w)
    q = query(w, token, n)                                                 # [head e]
    Kq = torch.einsum("hde,he->dh", b.W_K, q) / div                        # [d head]
    bq = (b.b_K * q).sum(-1) / div                                         # [head]
    pos_logits = (positional_term(w, n, c) @ Kq).T                         # [head n+1]
    log_Z = torch.logsumexp(pos_logits, dim=-1)
    return Frame(n=n, token=token, c=c, q=q, Kq=Kq, bq=bq, pos_logits=pos_logits,
                 log_Z=log_Z, pos=torch.softmax(pos_logits, dim=-1))


def seed_log_denominator(log_denom: Float[Tensor, "... head"], fr: Frame) -> Float[Tensor, "... head"]:
    """log S_h[n] = L_h[n] − log Z_h[n]: the model's log-denominator in the seed's normalisation."""
    return log_denom - fr.log_Z


def fixed_query_scores(
    w: Weights, k: Float[Tensor, "b p head e"], token: int,
) -> Float[Tensor, "b head q p"]:
    """True layer-0 scores when the query at every position n is `token` at n.

    Keys ``k`` are the text's own (forward's ``hook_k``); causal mask applied. This is
    the model's computation at n had x_n been `token` (the key and value at n stay the
    text's own).
    """
    b0 = w.blocks[0]
    p = k.shape[1]
    x = ln1(w, w.W_E[token] + w.W_pos[:p])                                 # [p d]
    q = torch.einsum("pd,hde->phe", x, b0.W_Q) + b0.b_Q                    # [p head e]
    scores = torch.einsum("qhe,bkhe->bhqk", q, k) / score_divisor(w)       # [b head q k]
    causal = torch.ones(p, p, dtype=torch.bool, device=k.device).tril()
    return scores.masked_fill(~causal, float("-inf"))
