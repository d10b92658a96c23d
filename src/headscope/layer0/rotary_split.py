"""Seed 000's layer-0 split for rotary models: attention ≈ a kernel over distance × a content factor.

A rotary model (``cfg.positional == "rotary"``: GPT-NeoX/Pythia, Llama, Qwen2) adds no W_pos; in
layer 0 a token's query, key and value depend on the token alone (x̂_t = N₁(W_E[t]), block 0's first
norm, LayerNorm or RMSNorm)::

    q(t) = x̂_t W_Q + b_Q,   k(t) = x̂_t W_K + b_K,   v(t) = x̂_t W_V + b_V            [h e]

and position enters as a rotation: score[n, i] = rot(q(x_n), n)·rot(k(x_i), i)/s = rot(q(x_n), Δ)·k(x_i)/s
with Δ = n − i (:mod:`headscope.core.rotary`). The derivation (docs/rotary-layer0.md) writes
k(t) = k̄ + δk(t), k̄ the mean key over the vocabulary (:func:`mean_key`), so that

    score[n, i] = κ_n(Δ) + rot(q, Δ)·δk(x_i)/s,      κ_n(Δ) = rot(q, Δ)·k̄/s   (the relative kernel)

exactly. The position part is the relative kernel of :mod:`.relative` for this query; the content part
still turns with Δ. The split replaces rot(q, Δ) in it by its average under the kernel,

    q̃[n] = Σ_{i ≤ n} pos[n, i] rot(q, n − i),     pos[n, i] = softmax_{i ≤ n} κ_n(n − i)

(high-frequency planes average out over a broad kernel, slow planes and unrotated dims stay), so

    attn_approx[n, i] = pos[n, i] · content[n, x_i] / S[n],   content[n, t] = exp(q̃[n]·δk(t)/s),
    S[n] = Σ_i pos[n, i] · content[n, x_i]      and  L[n] = log Z[n] + log S[n]  (Z = Σ_i exp κ_n(n − i))

— the seed's formulas with P[n, i] ↦ κ and E[n, t] ↦ δk(t) read by q̃. It is exact when every key is
k̄ (no content) and when q̃ = rot(q, Δ) over the kernel's support (a kernel on one offset, or rotation
only of dims the key does not use). Values carry no position: the positional value term of the
learned split is 0. A local attention window w at layer 0 (sliding windows) masks Δ ≥ w everywhere.

This module gives the functions of :mod:`.split` that the denominators, calibration, contextual
circuit and neuron scan read (:func:`view`, :func:`frame`, :func:`fixed_query_scores`, :func:`log_Z`,
:func:`log_content_factors`); :mod:`.split` hands rotary models to them.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from jaxtyping import Float, Int

from .._errors import HeadscopeError
from ..core import rotary
from ..core.applicability import rotary_split as _premises
from ..core.forward import normalize, run_with_cache
from ..core.weights import Block, Weights

Tensor = torch.Tensor
CHUNK = 8192


def view(model) -> Weights:
    """W_E and block 0 of a rotary `model` as float64 on the CPU (no W_pos), one layer; kept per processing."""
    _premises(model.cfg, "the rotary layer-0 split (denominators, calibration, contextual circuit)")
    return model.derived("layer0.rotary_view", _view)


def _view(w: Weights) -> Weights:
    f = lambda t: t.to(device="cpu", dtype=torch.float64)  # noqa: E731
    b0 = Block(**{k: f(getattr(w.blocks[0], k)) for k in w.blocks[0].shapes(w.cfg)})
    return dataclasses.replace(w, W_E=f(w.W_E), W_pos=None, blocks=[b0], cfg=w.cfg.truncated(1))


def normalised(w: Weights, tokens: Int[Tensor, "t"]) -> Float[Tensor, "t d"]:
    """x̂_t = N₁(W_E[t]) (block 0's first norm)."""
    b = w.blocks[0]
    return normalize(w.W_E[tokens], b.ln1_w, b.ln1_b, w.cfg)[0]


def queries(w: Weights, tokens: Int[Tensor, "t"]) -> Float[Tensor, "t h e"]:
    """Unrotated layer-0 queries q(t)."""
    b = w.blocks[0]
    return torch.einsum("td,hde->the", normalised(w, tokens), b.W_Q) + b.b_Q


def keys(w: Weights, tokens: Int[Tensor, "t"]) -> Float[Tensor, "t h e"]:
    """Unrotated layer-0 keys k(t)."""
    b = w.blocks[0]
    return torch.einsum("td,hde->the", normalised(w, tokens), b.W_K) + b.b_K


def mean_key(w: Weights) -> Float[Tensor, "h e"]:
    """k̄ = mean over the vocabulary of k(t); remembered on block 0 (rebuilt if W_E or W_K change)."""
    b = w.blocks[0]
    key = tuple((id(t), t._version) for t in (w.W_E, b.W_K, b.b_K, b.ln1_w))
    memo = b.__dict__.get("_rotary_mean_key")
    if memo is not None and memo[0] == key:
        return memo[1]
    total = torch.zeros(w.cfg.d_model, dtype=w.W_E.dtype)                        # Σ_t x̂_t: k is linear in x̂
    for a in range(0, w.cfg.vocab, CHUNK):                                       # tokens only, no padding rows
        total += normalised(w, torch.arange(a, min(a + CHUNK, w.cfg.vocab))).sum(0)
    out = torch.einsum("d,hde->he", total / w.cfg.vocab, b.W_K) + b.b_K
    b.__dict__["_rotary_mean_key"] = (key, out, (w.W_E, b.W_K, b.b_K, b.ln1_w))
    return out


def rotated(w: Weights, q: Float[Tensor, "h e"], D: int) -> Float[Tensor, "D h e"]:
    """rot(q, Δ) for Δ = 0..D−1."""
    cos, sin = rotary.cos_sin(torch.arange(D), w.cfg, dtype=q.dtype)
    return rotary.rotate(q[None].expand(D, *q.shape), cos, sin)


def _offset_mask(w: Weights, D: int) -> Tensor:
    """True where offset Δ < D is outside layer 0's attention window (none when global)."""
    return w.cfg.hidden_keys(0, torch.arange(D), 0)                              # offset Δ = n − i


def kernel_logits(w: Weights, rq: Float[Tensor, "D h e"]) -> Float[Tensor, "h D"]:
    """κ(Δ) = rot(q, Δ)·k̄/s (−inf outside the window)."""
    kap = torch.einsum("ahe,he->ha", rq, mean_key(w)) / w.cfg.attn_scale(0)
    return kap.masked_fill(_offset_mask(w, rq.shape[0])[None], -math.inf)


@dataclasses.dataclass
class RotaryFrame:
    """Everything of layer 0 that depends only on (query token, n): the same fields as
    :class:`headscope.layer0.split.Frame` (``q`` is the kernel-averaged query q̃)."""

    n: int
    token: int
    c: float
    q: Float[Tensor, "head e"]           # q̃[n]
    Kq: Float[Tensor, "d head"]          # W_K[h] q̃_h / s
    bq: Float[Tensor, "head"]            # (b_K − k̄)·q̃ / s
    pos_logits: Float[Tensor, "head k"]  # κ(n − i) for i = 0..n
    log_Z: Float[Tensor, "head"]
    pos: Float[Tensor, "head k"]

    def content_logits(self, w: Weights, tokens: Int[Tensor, "t"]) -> Float[Tensor, "head t"]:
        """log content[n, t] = q̃·δk(t)/s."""
        return (normalised(w, tokens) @ self.Kq).T + self.bq[:, None]


def _frame_from(w: Weights, q: Float[Tensor, "h e"], n: int, token: int, c: float) -> RotaryFrame:
    rq = rotated(w, q, n + 1)                                                     # [Δ h e]
    kap = kernel_logits(w, rq)                                                    # [h Δ]
    pos_d = torch.softmax(kap, dim=-1)                                            # [h Δ]
    qt = torch.einsum("ha,ahe->he", pos_d, rq)                                    # q̃ [h e]
    s = w.cfg.attn_scale(0)
    b = w.blocks[0]
    return RotaryFrame(n=n, token=token, c=c, q=qt, Kq=torch.einsum("hde,he->dh", b.W_K, qt) / s,
                       bq=((b.b_K - mean_key(w)) * qt).sum(-1) / s, pos_logits=kap.flip(-1),
                       log_Z=torch.logsumexp(kap, -1), pos=pos_d.flip(-1))


def _check(w: Weights, token: int, n: int) -> None:
    if not 0 <= n < w.cfg.n_ctx:
        raise HeadscopeError(f"query position {n} out of range (n_ctx {w.cfg.n_ctx})")
    if not 0 <= token < w.cfg.d_vocab:
        raise HeadscopeError(f"query token id {token} out of range (d_vocab {w.cfg.d_vocab})")


def frame(w: Weights, token: int, n: int, c: float | None = None) -> RotaryFrame:
    """The frame of query token `token` at position n (c is not used: no W_pos)."""
    _check(w, token, n)
    return _frame_from(w, queries(w, torch.tensor([token]))[0], n, token, 0.0 if c is None else float(c))


def log_Z(w: Weights, token: int, n_pos: int, c: float = 0.0) -> Float[Tensor, "head pos"]:
    """log Z[n] = logsumexp_{Δ ≤ n} κ(Δ) for n = 0..n_pos−1 (a running log-sum-exp)."""
    _check(w, token, n_pos - 1)
    kap = kernel_logits(w, rotated(w, queries(w, torch.tensor([token]))[0], n_pos))   # [h n_pos]
    return torch.logcumsumexp(kap, dim=-1)


def log_content_factors(w: Weights, token: int, n: int, tokens: Int[Tensor, "t"] | None = None
                        ) -> Float[Tensor, "h t"]:
    """log content[n, t] for `tokens` (default: the whole vocabulary)."""
    fr = frame(w, token, n)
    tokens = torch.arange(w.cfg.vocab) if tokens is None else tokens
    return torch.cat([fr.content_logits(w, ids) for ids in tokens.split(CHUNK)], dim=1)


def fixed_query_scores(w: Weights, k: Float[Tensor, "b p head e"], token: int) -> Float[Tensor, "b head q p"]:
    """The model's layer-0 scores with `token` as the query at every n: rot(q, n)·k_rot[i]/s, where k are the
    text's own rotated keys (forward's ``hook_k``); causal and window masks applied. Exact."""
    p = k.shape[1]
    q = queries(w, torch.tensor([token]))[0].to(k.dtype)                           # [h e]
    cos, sin = rotary.cos_sin(torch.arange(p, device=k.device), w.cfg, dtype=k.dtype)
    qr = rotary.rotate(q[None].expand(p, *q.shape), cos, sin)                      # [p h e]
    scores = torch.einsum("qhe,bkhe->bhqk", qr, k) / w.cfg.attn_scale(0)
    pos = torch.arange(p, device=k.device)
    return scores.masked_fill(w.cfg.hidden_keys(0, pos[:, None], pos[None, :]), float("-inf"))


@torch.no_grad()
def split_patterns(w: Weights, tokens: Int[Tensor, "p"], block: int = 16
                   ) -> tuple[Float[Tensor, "h q k"], Float[Tensor, "h q k"]]:
    """(true, approximate) layer-0 patterns on one window with the text's own queries (the TV's inputs):
    the model's ``hook_pattern``, and softmax_i(κ_n(n − i) + q̃[n]·δk(x_i)/s) with κ_n, q̃[n] from q(x_n);
    `block` query positions at a time."""
    true = run_with_cache(w, tokens[None], names=["blocks.0.attn.hook_pattern"],
                          stop_at_layer=1)["blocks.0.attn.hook_pattern"][0].double()
    p = len(tokens)
    Q, K = queries(w, tokens), keys(w, tokens) - mean_key(w)                       # [p h e]
    s = w.cfg.attn_scale(0)
    cos, sin = rotary.cos_sin(torch.arange(p), w.cfg, dtype=Q.dtype)
    kbar = mean_key(w)
    approx = torch.zeros_like(true)
    off = torch.arange(p)[:, None] - torch.arange(p)[None, :]                      # n − i
    for a0 in range(0, p, block):
        ns = torch.arange(a0, min(a0 + block, p))                                  # [m]
        rq = rotary.rotate(Q[ns][:, None].expand(len(ns), p, *Q.shape[1:]), cos, sin)   # [m Δ h e]
        kap = torch.einsum("mahe,he->mha", rq, kbar) / s                            # [m h Δ]
        kap = kap.masked_fill(_offset_mask(w, p)[None, None], -math.inf)
        kap = kap.masked_fill((torch.arange(p)[None, :] > ns[:, None])[:, None, :], -math.inf)
        pos_d = torch.softmax(kap, dim=-1)                                          # [m h Δ]
        qt = torch.einsum("mha,mahe->mhe", pos_d, rq)                               # [m h e]
        o = off[ns]                                                                 # [m k]
        logits = kap.gather(2, o.clamp_min(0)[:, None, :].expand(-1, kap.shape[1], -1))   # κ_n(n − i) [m h k]
        logits = logits + torch.einsum("khe,mhe->mhk", K, qt) / s
        logits = logits.masked_fill(w.cfg.hidden_keys(0, o, 0)[:, None, :], -math.inf)   # i > n, or outside the window
        approx[:, ns] = torch.softmax(logits, dim=-1).transpose(0, 1)
    return true, approx


def _masked_kernels(w: Weights, kap: Float[Tensor, "h D"], ns: Int[Tensor, "m"]) -> Float[Tensor, "m h D"]:
    """softmax over Δ ≤ n of κ(Δ), for each n in `ns` (zero beyond n)."""
    L = kap[None].expand(len(ns), *kap.shape).clone()                              # [m h D]
    L.masked_fill_((torch.arange(kap.shape[1])[None, :] > ns[:, None])[:, None, :], -math.inf)
    return torch.softmax(L, dim=-1)


def predict(w: Weights, token: int, heads: list[int], log_S: Float[Tensor, "H pos"], tokens: Int[Tensor, "p"],
            positions: list[int], block: int = 64, content: bool = True) -> Float[Tensor, "n d"]:
    """The contextual circuit's output at each n in `positions` (:meth:`headscope.layer0.contextual.Circuit.predict`):
    Σ_i pos[n, i] Σ_{h ∈ H} content_h[n, x_i]/S̄_h[n] · v_h(x_i) W_O[h], pos the chosen heads' mean kernel;
    no positional value term (rotary values carry no position). ``log_S`` [H pos]: log S̄ of the chosen heads.
    The frames of `block` positions at once: κ and rot(q, Δ) are shared, only the truncation at n differs.
    ``content=False``: every token weight content/S̄ replaced by 1 (the positional kernel alone)."""
    b = w.blocks[0]
    if not positions:
        return torch.empty(0, w.cfg.d_model, dtype=w.W_E.dtype)
    D = max(positions) + 1
    X = normalised(w, tokens[:D])                                                 # [D d] (key i's x̂)
    V = torch.einsum("kd,hde->hke", X, b.W_V[heads]) + b.b_V[heads][:, None]      # [H k e]
    rq = rotated(w, queries(w, torch.tensor([token]))[0], D)                      # [Δ h e]
    kap = kernel_logits(w, rq)                                                    # [h Δ]
    dK = keys(w, tokens[:D]) - mean_key(w)                                        # [k h e]
    s = w.cfg.attn_scale(0)
    rows = []
    for a0 in range(0, len(positions), block):
        ns = torch.tensor(positions[a0:a0 + block])                               # [m]
        pos_d = _masked_kernels(w, kap, ns)                                       # [m h Δ]
        qt = torch.einsum("mha,ahe->mhe", pos_d[:, heads], rq[:, heads])          # q̃ [m H e]
        # key i sits at Δ = n − i: kernel over keys = pos_d gathered at n − i (0 for i > n)
        idx = (ns[:, None] - torch.arange(D)[None, :])                            # [m k]
        valid = idx >= 0
        kern = pos_d[:, heads].mean(1).gather(1, idx.clamp_min(0)) * valid        # [m k] shared kernel
        logit = torch.einsum("khe,mhe->mhk", dK[:, heads], qt) / s                # [m H k] content logits
        a = ((logit - log_S[:, ns].T[:, :, None]).exp() if content else torch.ones_like(logit)) * kern[:, None, :]
        z = torch.einsum("mhk,hke->mhe", a, V)                                    # [m H e]
        rows.append(torch.einsum("mhe,hed->md", z, b.W_O[heads]))
    return torch.cat(rows)


def token_values(w: Weights, token: int, heads: list[int], log_S: Float[Tensor, "H"], n: int, dtype=torch.float32,
                 chunk: int = CHUNK) -> Float[Tensor, "v he"]:
    """Y[t] = (content_h[n, t]/S̄_h[n] · v_h(t))_{h ∈ H} for the whole vocabulary [d_vocab |H|·d_head]
    (:func:`headscope.layer0.neurons.token_values` for rotary models)."""
    b = w.blocks[0]
    fr = frame(w, token, n)
    H, e = len(heads), w.cfg.d_head
    Y = torch.empty(w.cfg.vocab, H * e, dtype=dtype)
    for s in range(0, w.cfg.vocab, chunk):
        ids = torch.arange(s, min(s + chunk, w.cfg.vocab))
        X = normalised(w, ids)                                                    # [c d]
        a = ((X @ fr.Kq[:, heads]) + fr.bq[heads] - log_S).exp()                  # [c H]
        v = torch.einsum("cd,hde->che", X, b.W_V[heads]) + b.b_V[heads]           # [c H e]
        Y[s:s + len(ids)] = (v * a[:, :, None]).reshape(len(ids), H * e).to(dtype)
    return Y


def split_tv(w: Weights, wins: list[Tensor]) -> Float[Tensor, "h N"]:
    """TV(true, approx) of every head at every query position n ≥ 1 of the windows (:func:`split_patterns`)."""
    if not wins:
        raise HeadscopeError("the rotary split's TV needs at least one window")
    out = []
    for x in wins:
        true, approx = split_patterns(w, x)
        out.append(0.5 * (true - approx).abs().sum(-1)[:, 1:])                    # [h p−1]
    return torch.cat(out, dim=1)
