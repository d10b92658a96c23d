"""Layer-2 copying and copy-suppression heads, planted when the checkpoint has ≥ 3 layers.

Two heads of block 2, a layer no other mechanism uses, get a hand-built OV circuit;
their QK circuits stay the base's small random matrices (they attend almost uniformly).

Construction
------------
Inside the ``free`` block — where every token embedding has its random part (norm
≈ FREE_NORM) — choose k = d_head orthonormal directions u_1 … u_k, all orthogonal to the
all-ones vector (so LayerNorm's centring and ``center_writing_weights`` leave them
untouched), and set for head h with sign σ_h::

    W_V[h] = √γ [u_1 … u_k],   W_O[h] = σ_h √γ [u_1 … u_k]ᵀ,   b_V[h] = 0
    ⇒ W_V[h] W_O[h] = σ_h γ Π,    Π = Σ_j u_j u_jᵀ (the projector onto span u)

Attending to token s, the head writes σ_h γ Π x̂_s, and with tied embeddings
(W_U = W_Eᵀ) the logit of token t moves by σ_h γ x̂_s Π W_E[t]ᵀ. Since
x̂_s ≈ ρ_s W_E[s] on span u (ρ_s = √d / ‖c(x_s)‖ > 0, up to what blocks 0–1 write into
the free block), the OV circuit over any token set is

    M ≈ σ_h γ D E Π Eᵀ        (D = diag ρ_s, E the tokens' embeddings)

whose eigenvalues are those of σ_h γ D^½ E Π Eᵀ D^½: all ≥ 0 for σ_h = +1 (the head
copies: attending to a token raises that token's logit) and all ≤ 0 for σ_h = −1 (copy
suppression, as GPT-2's L10H7). The copying score Σλ/Σ|λ| is then close to +1 / −1;
the small writes of blocks 0 and 1 into the free block keep it from being exact. No
other head of the model has such an OV circuit (base W_V is random, base W_O writes
random directions of the free block), so these two heads have the largest and the most
negative copying scores.

K-composition (an edge for :mod:`headscope.composition` to recover): head
``KCOMP_READER`` of block 2 gets, on top of its base random W_K, a key that reads what
layer-0 head ``KCOMP_WRITER`` writes::

    W_K[2, r] += β W_O[0, w]ᵀ / ‖W_O[0, w]‖_F · ‖W_K[2, r]‖_F        (β = KCOMP_GAIN)

so the reader's key space contains the writer's output space (W_O[0, w] is a base
writer: random rows of the ``free`` block). Its K-composition score with the writer,
‖W_OV^w W_K^r W_Q^rᵀ‖_F / (‖W_OV^w‖_F ‖W_QK^r‖_F), is then of order 1/√d_head, against
about 1/√d_model for every pair of unrelated (independent random) heads. The reader's
query and OV stay the base's, so its other atlas figures stay those of a random head.
"""

from __future__ import annotations

import numpy as np
import torch

LAYER = 2
COPY_HEAD, SUPPRESS_HEAD = 3, 7
GAIN = 0.25          #: γ: W_V W_O = ±γ Π
KCOMP_WRITER, KCOMP_READER = 1, 5   #: head 0.1 (not contextual) writes what head 2.5's key reads
KCOMP_GAIN = 2.0     #: β: the planted key part's norm over the base key's


def _directions(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """n orthonormal vectors in R^size, all orthogonal to the all-ones vector. [n size]"""
    if n > size - 1:
        raise ValueError(f"the free block ({size} coordinates) cannot hold {n} orthonormal zero-sum directions")
    g = rng.standard_normal((size, n))
    g -= g.mean(axis=0, keepdims=True)
    q, _ = np.linalg.qr(g)
    return q.T


def plant(w, space, rng) -> dict:
    cfg = w.cfg
    if cfg.n_layers <= LAYER:
        raise ValueError(f"copy heads need layer {LAYER}: the model has {cfg.n_layers} layers")
    if cfg.n_heads <= max(COPY_HEAD, SUPPRESS_HEAD):
        raise ValueError(f"copy heads {COPY_HEAD} and {SUPPRESS_HEAD} need at least {SUPPRESS_HEAD + 1} heads")
    e, free = cfg.d_head, space.slice("free")
    U = torch.zeros(cfg.d_model, e)
    U[free] = torch.from_numpy(_directions(e, space.size("free"), rng)).float().T   # [d e]
    g = float(np.sqrt(GAIN))
    blk = w.blocks[LAYER]
    heads = {}
    for name, head, sign in (("copying", COPY_HEAD, 1.0), ("copy_suppression", SUPPRESS_HEAD, -1.0)):
        blk.W_V[head] = g * U
        blk.b_V[head] = 0.0
        blk.W_O[head] = sign * g * U.T
        heads[name] = {"layer": LAYER, "head": head, "name": f"{LAYER}.{head}", "sign": int(sign),
                       "ov_copying": "close to +1" if sign > 0 else "close to -1"}
    Wo = w.blocks[0].W_O[KCOMP_WRITER]                                                 # [e d]
    Wk = blk.W_K[KCOMP_READER]                                                          # [d e]
    blk.W_K[KCOMP_READER] = Wk + KCOMP_GAIN * float(Wk.norm()) / float(Wo.norm()) * Wo.T
    return {
        "k_composition": {"writer": {"layer": 0, "head": KCOMP_WRITER}, "reader": {"layer": LAYER, "head": KCOMP_READER},
                          "gain": KCOMP_GAIN,
                          "note": "W_K[reader] += gain * |W_K[reader]| * W_O[writer]^T / |W_O[writer]|: "
                                  "the strongest K-composition edge"},
        "copy_heads": heads,
        "ov_circuit": {
            "W_V_W_O": "sign * gain * projector onto d_head orthonormal zero-sum directions of the free block",
            "gain": GAIN, "rank": e, "block": "free",
            "note": "OV circuit over tokens ~ sign * gain * D E P E^T (D > 0 diagonal): eigenvalues all of one sign; "
                    "the QK circuits of these heads are the base's random ones",
        },
    }
