"""Layer-0 mechanisms of seed 000: positional kernels, contextual heads, keyword density, MLP0 neurons.

Notation as in the seed (x_i the token at position i, n the query position, d = d_model,
e = d_head, N = n_ctx). Every direction this module reads or writes is a *zero-sum*
unit vector inside one block of the residual layout (:class:`~._base.Space`), e.g.
``(δ_a − δ_b)/√2``: LayerNorm's centring and processing's ``center_writing_weights``
leave such directions untouched, so LayerNorm acts on them as a pure rescaling

    LN(x)·u = ρ(x) (x·u),   ρ(x) = √d / |x − mean x|  (≈ √d / |x|, eps aside).

Position channel (head dims 0, 1 of W_Q / W_K)
----------------------------------------------
W_pos carries a slow rotation in the ``pos`` block: with unit zero-sum directions
p₁, p₂ and ω = π / (2N),

    W_pos[i] ⊃ A (cos ωi · p₁ + sin ωi · p₂),      |·| = A for every i.

A head with gain g reads it as

    key[i]_{0,1}   = g ρ_i A ( cos ωi,  sin ωi)       (W_K[h][p₁,0] = W_K[h][p₂,1] = g)
    query[n]_{0,1} = g ρ_n A (−sin ωn,  cos ωn)       (W_Q[h][p₂,0] = −g, W_Q[h][p₁,1] = g)

so the positional part of the score is

    score(n, i) = q·k / √e = −(g² ρ_n ρ_i A² / √e) · sin(ω (n − i))
                ≈ −κ (n − i)     with  κ = g² ρ̄² A² ω / √e,

exact up to sin(ωD)/(ωD) ≥ 0.97 for D ≤ N/4 and the relative factor ρ_nρ_i/ρ̄²
(token-norm variation, a few per cent). Softmax over i ≤ n then gives the
translation-equivariant kernel

    pos_{n,i} ∝ exp(−κ (n − i)).

Why not the simpler "linear coordinate + constant query": then score = κ·i·ρ_i/ρ̄,
and LayerNorm multiplies the *absolute* position value by ρ_i, so a 1 % change of
token norm moves a far-away key by κ·N/2·1 % — a local head would attend to random
distant tokens. With the rotation the score at i = n is 0 and LayerNorm's error is
relative to κ(n − i), the same structure the seed's key split exploits.

κ per head (n_heads = 12; other head counts reuse the plan cyclically):
κ ≥ 1.5 local (effective width 1/Σpos² ≤ 2), κ ∈ {0.05, 0.2} slowly decaying
(width 2/κ = 40 and 10 tokens), κ = 0 uniform (no position channel: the head's Q/K
dims 0–2 are zero, the rest the base's small random matrices). The gain is solved
for κ with ρ̄² = d / (median_t |W_E[t]|² + mean_i |W_pos[i]|²) measured on the planted
embeddings. All query/key entries of dims 0–2 not listed here are zero, so no random
weight multiplies the large positional gains. The base's random W_Q, W_K of layer 0
(std 0.02) are scaled by QK_NOISE_SCALE = 0.4: their q·k/√e is content noise of std
≈ 0.3 · 0.4² ≈ 0.05 in every score ("weak content dependence").

Keyword density (head dim 2, keyword heads only)
------------------------------------------------
Keyword tokens carry s_kw·k̂ in the ``l0_key`` block (k̂ zero-sum unit). A constant
query component b_Q[h, 2] = β (W_Q[h][:, 2] = 0) meets W_K[h][k̂, 2] = β, so a keyword
key gains the log-weight

    b_kw = β² ρ s_kw / √e      (per-head constant, solved for KEYWORD_BONUS),

i.e. keyword keys get e^{b_kw} ≈ 12× the attention of a non-keyword key at the same
distance. The denominator of such a head tracks local keyword density. As in GPT-2
(heads 6, 8) the keyword heads are two of the contextual heads. Keywords are the
content words of the contextual neurons' token sets (spelling, topic and sentiment
sets; not the function words of the language neuron).

Contextual OV circuit and MLP0 neurons
--------------------------------------
Neuron j has a feature direction v_j in ``ctx_in`` and an output direction u_j in
``ctx_out`` (both zero-sum units, v_j ⟂ v_k). Token t gets

    W_E[t] += s Σ_j σ_j(t) v_j,   σ_j(t) = +1 (positive set), −1 (negative set), 0 otherwise,

and its ``free`` part is rescaled so that |W_E[t]| keeps the base value (token norms,
hence ρ, do not depend on membership). Each contextual head h has, for value dim j,

    W_V[h][:, j] = α v_j,      W_O[h][j, :] = ω_o u_j,   (value dims ≥ K are zero)

so at query n the contextual heads write Σ_h ω_o α Σ_i A_h[n,i] ρ_i s σ_j(x_i) along u_j:
a kernel-weighted density of the neuron's positive minus negative tokens (α ω_o is
chosen so six heads at full density write ≈ OV_GAIN). MLP0 neuron j reads it:
W_in[:, j] += μ u_j (its base random column stays), so

    mlp.hook_pre[n, j] ≈ μ ρ₂ · OV_GAIN · (density⁺ − density⁻) + noise.

The other 3072 − K neurons keep the base weights (unremarkable).

Manifest (``planted.json["layer0"]``) — see :func:`plant`'s docstring.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._errors import HeadscopeError

#: Category names shared with headscope.kernels.
LOCAL, SLOW, UNIFORM = "local", "slowly_decaying", "uniform"

#: (κ, contextual, keyword) for heads 0..11, modelled on GPT-2 Small's layer 0.
HEAD_PLAN = (
    (0.05, True, False),   # 0  contextual
    (1.5, False, False),   # 1  local
    (0.05, True, False),   # 2  contextual
    (0.2, False, False),   # 3  slowly decaying
    (3.0, False, False),   # 4  local
    (0.0, False, False),   # 5  uniform
    (0.05, True, True),    # 6  contextual, keyword density
    (6.0, False, False),   # 7  local
    (0.05, True, True),    # 8  contextual, keyword density
    (0.05, True, False),   # 9  contextual
    (0.05, True, False),   # 10 contextual
    (0.0, False, False),   # 11 uniform
)
CONTEXTUAL_KAPPA = 0.05
LOCAL_MIN_KAPPA = 1.0        # planted κ ≥ this → "local"; 0 → "uniform"; else "slowly_decaying"
POS_AMPLITUDE = 1.5          # A: norm of W_pos's rotation part
KEYWORD_SCALE = 1.0          # s_kw
KEYWORD_BONUS = 2.5          # b_kw: log-weight added to keyword keys
FEATURE_SCALE = 1.0          # s
OV_GAIN = 1.5                # what six contextual heads write along u_j at full density
NEURON_GAIN = 1.5            # μ
#: μ multiplier per neuron: the language neuron's tokens are function words, which the keyword
#: heads do not boost, so without this its seed score (no LN2 scale, neurons.py) would be 2.0 < 5.0
NEURON_GAIN_FACTOR = {"french_vs_english": 4.0}
QK_NOISE_SCALE = 0.4         # layer-0 base W_Q, W_K are scaled by this (content noise of scores)

#: name → (positive words, negative words); each is used with a leading space and
#: kept only if it is a single GPT-2 token.
NEURON_SETS = {
    "commonwealth_spelling": (
        "colour centre favour behaviour organisation defence labour honour neighbour licence "
        "programme theatre travelling realise recognise analyse favourite offence armour flavour "
        "catalogue metre grey organised humour harbour fibre colours centres organisations "
        "realised recognised whilst apologise Labour Centre",
        "color center favor behavior organization defense labor honor neighbor license program "
        "theater traveling realize recognize analyze favorite offense armor flavor catalog meter "
        "gray organized humor harbor fiber colors centers organizations realized recognized "
        "apologize Labor Center",
    ),
    "sport_vs_cooking": (
        "football match goal team player league coach score season stadium championship "
        "tournament referee striker midfielder goalkeeper cricket rugby tennis golf basketball "
        "hockey fans victory defeat penalty teams players",
        "recipe oven flour bake sauce butter garlic onion kitchen cook cooking salt pepper sugar "
        "cheese chicken soup pasta dough chopped tablespoon teaspoon simmer roast baking "
        "vegetables fried boil",
    ),
    "french_vs_english": (
        "le la les des une est et pour qui pas sur du au ne que il je tu sans qu",
        "the and of is in for with that not on was are this from by have it be at as but or "
        "which their they",
    ),
    "positive_vs_negative_sentiment": (
        "good great happy love wonderful excellent beautiful amazing best perfect enjoy pleasure "
        "delighted brilliant fantastic lovely glad joy hope success",
        "bad terrible sad hate awful poor worst horrible angry ugly pain fear disaster failure "
        "miserable cruel tragic disgusting sorrow grief",
    ),
}
#: neurons whose token sets (both signs) are keywords for the keyword-density heads.
KEYWORD_NEURONS = ("commonwealth_spelling", "sport_vs_cooking", "positive_vs_negative_sentiment")

# head dims used by the planted channels
_QK_POS = (0, 1)
_QK_KEYWORD = 2


def category_of(kappa: float) -> str:
    """The category a planted κ belongs to (the manifest's ground truth)."""
    if kappa == 0.0:
        return UNIFORM
    return LOCAL if kappa >= LOCAL_MIN_KAPPA else SLOW


def _pair(block: slice, k: int, d_model: int) -> torch.Tensor:
    """Zero-sum unit vector (δ_{a} − δ_{a+1})/√2 with a = block.start + 2k, [d_model]."""
    a = block.start + 2 * k
    if a + 1 >= block.stop:
        raise HeadscopeError(f"planted layer 0: block {block} too small for direction {k}")
    v = torch.zeros(d_model)
    v[a], v[a + 1] = 1 / math.sqrt(2), -1 / math.sqrt(2)
    return v


def single_tokens(tokenizer, words: str) -> list[tuple[str, int]]:
    """[(" word", id)] for the words that are one GPT-2 token with a leading space."""
    out = []
    for word in words.split():
        ids = tokenizer.encode(" " + word)
        if len(ids) == 1:
            out.append((" " + word, int(ids[0])))
    return out


def plant(w, space, tokenizer, rng) -> dict:
    """Plant the layer-0 mechanisms into raw weights `w` (in place); return the manifest.

    Manifest schema (JSON)::

        {
          "heads": [{"head": int, "category": "local"|"slowly_decaying"|"uniform",
                     "kappa": float, "width_inf": float|null,   # (1+e^-κ)/(1-e^-κ), null if κ=0
                     "contextual": bool, "keyword": bool}, ...],   # one per layer-0 head
          "categories": {"local": [heads], "slowly_decaying": [heads], "uniform": [heads]},
          "contextual_heads": [int], "contextual_kappa": float,
          "keyword_heads": [int], "keyword_bonus": float,
          "keyword_tokens": [str], "keyword_ids": [int],
          "kernel": {"form": "exp(-kappa*(n-i))", "omega": float, "pos_amplitude": float,
                     "typical_resid_norm": float, "pos_dirs": [[a, b], [c, d]]},
          "neurons": [{"index": int, "name": str, "positive": [str], "positive_ids": [int],
                       "negative": [str], "negative_ids": [int],
                       "ctx_in_dir": [a, b], "ctx_out_dir": [a, b]}, ...],
          "constants": {...}
        }

    ``*_dir`` pairs [a, b] name the zero-sum direction (δ_a − δ_b)/√2.
    """
    cfg = w.cfg
    d, H, e, N = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.n_ctx
    if e < 3:
        raise HeadscopeError(f"planted layer 0 needs d_head ≥ 3, got {e}")
    b0 = w.blocks[0]
    pos_blk, key_blk = space.slice("pos"), space.slice("l0_key")
    in_blk, out_blk, free = space.slice("ctx_in"), space.slice("ctx_out"), space.slice("free")

    # -- token sets ---------------------------------------------------------------------
    neurons_spec = []
    for name, (pos_words, neg_words) in NEURON_SETS.items():
        pos_t, neg_t = single_tokens(tokenizer, pos_words), single_tokens(tokenizer, neg_words)
        neg_ids = {i for _, i in neg_t}
        pos_t = [(s, i) for s, i in pos_t if i not in neg_ids]
        neurons_spec.append((name, pos_t, neg_t))
    K = len(neurons_spec)
    if K > e:
        raise HeadscopeError(f"planted layer 0: {K} neurons need d_head ≥ {K}, got {e}")
    indices = sorted(int(j) for j in rng.choice(cfg.d_mlp, size=K, replace=False))
    keyword_ids = sorted({i for name, p, n in neurons_spec if name in KEYWORD_NEURONS for _, i in p + n})

    # -- token embeddings: features, then restore each token's norm -----------------------
    base_norm = w.W_E.norm(dim=1)                                                  # [vocab]
    feat = torch.zeros_like(w.W_E)                                                 # [vocab d]
    kw_dir = _pair(key_blk, 0, d)
    feat[keyword_ids] += KEYWORD_SCALE * kw_dir
    v_dirs = [_pair(in_blk, j, d) for j in range(K)]
    u_dirs = [_pair(out_blk, j, d) for j in range(K)]
    for j, (_, pos_t, neg_t) in enumerate(neurons_spec):
        feat[[i for _, i in pos_t]] += FEATURE_SCALE * v_dirs[j]
        feat[[i for _, i in neg_t]] -= FEATURE_SCALE * v_dirs[j]
    touched = feat.abs().sum(1) > 0                                                 # [vocab]
    fnorm2 = feat[touched].pow(2).sum(1)
    free_norm = w.W_E[touched][:, free].norm(dim=1)
    target = (base_norm[touched].pow(2) - fnorm2).clamp_min(0.25 * base_norm[touched].pow(2)).sqrt()
    w.W_E[touched.nonzero().squeeze(1)[:, None], torch.arange(free.start, free.stop)[None, :]] *= \
        (target / free_norm)[:, None]
    w.W_E += feat

    # -- position embedding: rotation in the pos block ----------------------------------
    omega = math.pi / (2 * N)
    p1, p2 = _pair(pos_blk, 0, d), _pair(pos_blk, 1, d)
    ang = omega * torch.arange(N, dtype=torch.float64)
    w.W_pos += POS_AMPLITUDE * (torch.cos(ang)[:, None] * p1 + torch.sin(ang)[:, None] * p2).float()

    # typical |x| of the residual stream entering layer 0 (centred), for ρ̄
    E_c = w.W_E - w.W_E.mean(1, keepdim=True)
    P_c = w.W_pos - w.W_pos.mean(1, keepdim=True)
    resid_norm = math.sqrt(float(E_c.pow(2).sum(1).median()) + float(P_c.pow(2).sum(1).mean()))
    rho = math.sqrt(d) / resid_norm

    # -- layer-0 attention ----------------------------------------------------------------
    plan = [HEAD_PLAN[h % len(HEAD_PLAN)] for h in range(H)]
    heads = []
    b0.W_Q *= QK_NOISE_SCALE   # weak content dependence: base random score noise σ ≈ 0.3 → ≈ 0.05
    b0.W_K *= QK_NOISE_SCALE
    for h, (kappa, contextual, keyword) in enumerate(plan):
        b0.W_Q[h, :, :3] = 0.0
        b0.W_K[h, :, :3] = 0.0
        b0.b_Q[h, :3] = 0.0
        b0.b_K[h, :3] = 0.0
        if kappa > 0:
            g = math.sqrt(kappa * math.sqrt(e) / (rho ** 2 * POS_AMPLITUDE ** 2 * omega))
            b0.W_K[h, :, 0] = g * p1
            b0.W_K[h, :, 1] = g * p2
            b0.W_Q[h, :, 0] = -g * p2
            b0.W_Q[h, :, 1] = g * p1
        if keyword:
            beta = math.sqrt(KEYWORD_BONUS * math.sqrt(e) / (rho * KEYWORD_SCALE))
            b0.b_Q[h, _QK_KEYWORD] = beta
            b0.W_K[h, :, _QK_KEYWORD] = beta * kw_dir
        if contextual:
            n_ctx_heads = sum(1 for p in plan if p[1])
            alpha = 1.0
            w_o = OV_GAIN / (n_ctx_heads * alpha * rho * FEATURE_SCALE)
            # The other value dims carry nothing: random values there, weighted up on
            # keywords by the keyword heads, would make every MLP0 neuron "contextual".
            b0.W_V[h, :, K:] = 0.0
            b0.b_V[h, K:] = 0.0
            for j in range(K):
                b0.W_V[h, :, j] = alpha * v_dirs[j]
                b0.b_V[h, j] = 0.0
                b0.W_O[h, j, :] = w_o * u_dirs[j]
        width = None if kappa == 0 else (1 + math.exp(-kappa)) / (1 - math.exp(-kappa))
        heads.append({"head": h, "category": category_of(kappa), "kappa": kappa, "width_inf": width,
                      "contextual": contextual, "keyword": keyword})

    # -- MLP0 neurons -------------------------------------------------------------------
    neurons = []
    for j, ((name, pos_t, neg_t), idx) in enumerate(zip(neurons_spec, indices)):
        b0.W_in[:, idx] += NEURON_GAIN * NEURON_GAIN_FACTOR.get(name, 1.0) * u_dirs[j]
        neurons.append({
            "index": idx, "name": name,
            "positive": [s for s, _ in pos_t], "positive_ids": [i for _, i in pos_t],
            "negative": [s for s, _ in neg_t], "negative_ids": [i for _, i in neg_t],
            "ctx_in_dir": [in_blk.start + 2 * j, in_blk.start + 2 * j + 1],
            "ctx_out_dir": [out_blk.start + 2 * j, out_blk.start + 2 * j + 1],
        })

    vocab_str = {i: s for _, p, n in neurons_spec for s, i in p + n}
    cats = {c: [hd["head"] for hd in heads if hd["category"] == c] for c in (LOCAL, SLOW, UNIFORM)}
    return {
        "heads": heads,
        "categories": cats,
        "contextual_heads": [hd["head"] for hd in heads if hd["contextual"]],
        "contextual_kappa": CONTEXTUAL_KAPPA,
        "keyword_heads": [hd["head"] for hd in heads if hd["keyword"]],
        "keyword_bonus": KEYWORD_BONUS,
        "keyword_tokens": [vocab_str[i] for i in keyword_ids],
        "keyword_ids": keyword_ids,
        "kernel": {
            "form": "exp(-kappa*(n-i))",
            "omega": omega,
            "pos_amplitude": POS_AMPLITUDE,
            "typical_resid_norm": resid_norm,
            "pos_dirs": [[pos_blk.start, pos_blk.start + 1], [pos_blk.start + 2, pos_blk.start + 3]],
            "keyword_dir": [key_blk.start, key_blk.start + 1],
        },
        "neurons": neurons,
        "constants": {
            "qk_noise_scale": QK_NOISE_SCALE,
            "local_min_kappa": LOCAL_MIN_KAPPA, "keyword_scale": KEYWORD_SCALE,
            "feature_scale": FEATURE_SCALE, "ov_gain": OV_GAIN, "neuron_gain": NEURON_GAIN, "neuron_gain_factor": NEURON_GAIN_FACTOR,
        },
    }
