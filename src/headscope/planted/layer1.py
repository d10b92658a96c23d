"""Layer-1 semantic head of seed 002, planted as head 1.5.

Behaviour (the seed's three rules): a token attends to earlier tokens of its own
semantic category, never to itself or to copies of itself, and to BOS when the
context holds no category partner.

Construction
------------
Write x̂ for the LayerNorm-1 output of block 1 (centred, divided by σ; ln1_w = 1,
ln1_b = 0 in the base weights, so raw and processed weights agree here), e = d_head.

Token embeddings. Inside the ``sem`` block choose orthonormal directions, all
orthogonal to the all-ones vector (so LayerNorm's centring leaves their coefficients
untouched):

- ``c_k``, one per category k (n_cat of them),
- ``u_j``, j = 0 … n_id − 1, token-identity directions, shared between categories:
  the i-th member of every category uses u_i (so members of one category have
  mutually orthogonal identity parts).

For a planted token t, the i-th member of category k::

    W_E[t]|sem = a · c_k + b · u_i            (a = b ≈ 1.27, so ‖W_E[t]‖ ≈ 3.5)

All other tokens have nothing in ``sem``.

QK circuit. With the first n_cat + n_id of head 5's e columns::

    W_Q = [√α c_1 … √α c_ncat, √β u_0 … √β u_{n_id−1}, 0, …]
    W_K = [√α c_1 … √α c_ncat, −√β u_0 … −√β u_{n_id−1}, m̂, …]

so that ``W_QK = W_Q W_Kᵀ = α Σ_k c_k c_kᵀ − β Σ_j u_j u_jᵀ``, exactly symmetric,
with n_cat eigenvalues +α and n_id eigenvalues −β (the rest 0), and::

    x̂_t W_QK x̂_sᵀ = (α a² [cat(t) = cat(s)] − β b² [id(t) = id(s)]) / (σ_t σ_s)

i.e. a same-category partner scores α a²/σ², the token itself or a copy
(α a² − β b²)/σ² < 0, other planted tokens ≤ 0 and unplanted tokens 0.

BOS fallback. BOS gets a marker ``W_E[BOS]|sem_out = m (e_0 − e_1)`` (orthogonal to
the all-ones vector as well) and the column n_cat + n_id of W_K reads it,
``m̂ = (e_0 − e_1)/√2``, while that column of W_Q is zero and of b_Q is γ. This adds
the key-only term ``b_Q · (x̂_s W_K) = γ √2 m / σ_BOS [s = BOS]``: it is not part of the
token-token bilinear form (W_QK is unchanged), it only raises BOS above the
unrelated tokens. With scores divided by √e, the target logits are::

    partner ≈ +12,  BOS ≈ +6,  unrelated ≈ 0,  self / copy ≈ −6

α, β and γ are calibrated from σ measured on the real residual entering block 1
(after layer 0 — whatever was planted there — has run), so the head works on the
actual stream, not only on the bare embeddings. All other weights of head 5 that
read the stream (W_Q, W_K outside these columns) are zero; W_V and W_O stay random.
"""

from __future__ import annotations

import numpy as np
import torch

LAYER, HEAD = 1, 5

#: Planted categories: single GPT-2 tokens with a leading space (checked at plant time).
CATEGORIES: dict[str, list[str]] = {
    "colours": ["red", "blue", "green", "yellow", "purple", "pink", "brown", "black", "white", "grey"],
    "days": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "months": ["January", "February", "March", "April", "June", "July", "August", "September",
               "October", "November", "December"],
    "animals": ["cat", "dog", "horse", "cow", "pig", "sheep", "bird", "lion", "tiger", "wolf"],
    "numbers": ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"],
    "fruits": ["apple", "banana", "grape", "cherry", "lemon", "peach", "pear", "mango"],
    "body": ["hand", "foot", "head", "eye", "ear", "nose", "arm", "leg", "mouth"],
    "family": ["mother", "father", "sister", "brother", "son", "daughter", "uncle", "aunt", "wife", "husband"],
    "countries": ["France", "Germany", "China", "Japan", "India", "Italy", "Spain", "Russia", "Canada", "Brazil"],
    "metals": ["gold", "silver", "iron", "copper", "steel", "zinc", "aluminum"],
}

#: Categories of none of the shipped lists (data/categories*.json) but frequent words (among the
#: 3 000 nodes of the cluster row): a semantic head that ``reproduce --find`` must find by its
#: weights and judge on its own clusters (``build(..., categories=UNSHIPPED_CATEGORIES)``).
UNSHIPPED_CATEGORIES: dict[str, list[str]] = {
    "vehicles": ["car", "bus", "train", "truck", "plane", "boat", "ship", "bike", "van"],
    "buildings": ["house", "church", "school", "hospital", "hotel", "tower", "bank", "prison", "museum"],
    "drinks": ["coffee", "tea", "beer", "wine", "milk", "water"],
    "jobs": ["doctor", "lawyer", "teacher", "engineer", "pilot", "judge"],
    "clothes": ["shirt", "hat", "dress", "shoes", "suit"],
    "furniture": ["chair", "table", "bed", "door", "window"],
}

#: Embedding coefficients on the category and identity directions, BOS marker size.
A_CAT, B_ID, M_BOS = 1.27, 1.27, 1.0
#: Target attention logits (after the 1/√d_head scaling) at the calibrated σ.
PARTNER_LOGIT, SELF_LOGIT, BOS_LOGIT = 12.0, -6.0, 6.0


def _token_ids(tokenizer, words: list[str]) -> list[int]:
    ids = []
    for w in words:
        enc = tokenizer.encode(" " + w)
        if len(enc) != 1:
            raise ValueError(f"planted category word {' ' + w!r} is not a single GPT-2 token: {enc}")
        ids.append(enc[0])
    return ids


def _directions(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """n orthonormal vectors in R^size, all orthogonal to the all-ones vector. [n size]"""
    if n > size - 1:
        raise ValueError(f"the sem block ({size} coordinates) cannot hold {n} orthonormal directions")
    g = rng.standard_normal((size, n))
    g -= g.mean(axis=0, keepdims=True)                   # ⟂ 1
    q, _ = np.linalg.qr(g)                                # [size n]
    return q.T


@torch.no_grad()
def _block1_sigma(w, tokens: torch.Tensor) -> torch.Tensor:
    """σ of LayerNorm 1 of block 1 on the real residual (after block 0). [b p]"""
    from ..core.forward import run_with_cache

    cache = run_with_cache(w, tokens, names=["blocks.0.hook_resid_post"], stop_at_layer=1)
    x = cache["blocks.0.hook_resid_post"]                # [b p d]
    xc = x - x.mean(-1, keepdim=True)
    return (xc.pow(2).mean(-1) + w.cfg.ln_eps).sqrt()


def plant(w, space, tokenizer, rng, categories: dict[str, list[str]] | None = None) -> dict:
    """Plant head 1.5 on `categories` (default :data:`CATEGORIES`, the shipped ones)."""
    cats = CATEGORIES if categories is None else categories
    cfg = w.cfg
    if cfg.n_heads <= HEAD:
        raise ValueError(f"planting head {LAYER}.{HEAD} needs at least {HEAD + 1} heads")
    e = cfg.d_head
    names = list(cats)
    ids = {k: _token_ids(tokenizer, v) for k, v in cats.items()}
    all_ids = [i for k in names for i in ids[k]]
    if len(set(all_ids)) != len(all_ids):
        raise ValueError("planted categories share a token")
    n_cat, n_id = len(names), max(len(v) for v in cats.values())
    if n_cat + n_id + 1 > e:
        raise ValueError(f"rank budget: {n_cat} categories + {n_id} identities + BOS > d_head {e}")
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else cfg.d_vocab - 1

    # -- embeddings -------------------------------------------------------------
    sem, out = space.slice("sem"), space.slice("sem_out")
    dirs = _directions(n_cat + n_id, space.size("sem"), rng)          # [n_cat+n_id sem]
    C = torch.zeros(n_cat, cfg.d_model)
    U = torch.zeros(n_id, cfg.d_model)
    C[:, sem] = torch.from_numpy(dirs[:n_cat]).float()
    U[:, sem] = torch.from_numpy(dirs[n_cat:]).float()
    for k, name in enumerate(names):
        for i, t in enumerate(ids[name]):
            w.W_E[t, sem] = 0.0
            w.W_E[t] += A_CAT * C[k] + B_ID * U[i]
    marker = torch.zeros(cfg.d_model)
    marker[out.start], marker[out.start + 1] = 1.0, -1.0
    w.W_E[bos, out] = 0.0
    w.W_E[bos] += M_BOS * marker

    # -- calibrate on the real residual entering block 1 ---------------------------
    g = np.random.default_rng(rng.integers(1 << 32))
    prompts = torch.tensor([[bos] + list(g.choice(all_ids, size=15, replace=False)) for _ in range(8)])
    sig = _block1_sigma(w, prompts)                                   # [b p]
    s_tok, s_bos = float(sig[:, 1:].median()), float(sig[:, 0].median())
    scale = np.sqrt(e)
    alpha = PARTNER_LOGIT * scale * s_tok**2 / A_CAT**2
    beta = (PARTNER_LOGIT - SELF_LOGIT) * scale * s_tok**2 / B_ID**2
    m_hat = marker / marker.norm()
    gamma = BOS_LOGIT * scale * s_bos / float(M_BOS * marker.norm())

    # -- QK circuit of head 5 ------------------------------------------------------
    blk = w.blocks[LAYER]
    W_Q = torch.zeros(cfg.d_model, e)
    W_K = torch.zeros(cfg.d_model, e)
    W_Q[:, :n_cat] = np.sqrt(alpha) * C.T
    W_K[:, :n_cat] = np.sqrt(alpha) * C.T
    W_Q[:, n_cat:n_cat + n_id] = np.sqrt(beta) * U.T
    W_K[:, n_cat:n_cat + n_id] = -np.sqrt(beta) * U.T
    j_bos = n_cat + n_id
    W_K[:, j_bos] = m_hat
    b_Q = torch.zeros(e)
    b_Q[j_bos] = gamma
    blk.W_Q[HEAD] = W_Q
    blk.W_K[HEAD] = W_K
    blk.b_Q[HEAD] = b_Q
    blk.b_K[HEAD] = 0.0

    return {
        "semantic_head": {"layer": LAYER, "head": HEAD, "name": f"{LAYER}.{HEAD}"},
        "categories": {k: {"tokens": [" " + s for s in cats[k]], "ids": ids[k]} for k in names},
        "bilinear_form": {
            "rank": n_cat + n_id,
            "n_positive": n_cat,
            "n_negative": n_id,
            "positive_eigenvalue": alpha,
            "negative_eigenvalue": -beta,
            "eigenvalue_signs": ["+"] * n_cat + ["-"] * n_id,
            "symmetric": True,
            "note": "eigenvalues of W_Q W_K^T of head 1.5 (raw = processed here: ln1_w = 1, ln1_b = 0); "
                    "positive on the category directions, negative on the token-identity directions",
        },
        "embedding": {"category_coefficient": A_CAT, "identity_coefficient": B_ID,
                      "identity_directions": "shared: the i-th member of every category uses identity direction i"},
        "bos": {
            "token_id": int(bos),
            "mechanism": "query bias b_Q[j] = gamma on a W_K column that reads the BOS marker "
                         "W_E[BOS] = m (e_0 - e_1) in sem_out; W_Q[:, j] = 0, so it is a key-only term "
                         "outside the token-token bilinear form",
            "column": j_bos,
            "marker_coordinates": [out.start, out.start + 1],
            "gamma": gamma,
        },
        "target_logits": {"partner": PARTNER_LOGIT, "self_or_copy": SELF_LOGIT, "bos": BOS_LOGIT, "unrelated": 0.0},
        "calibration_sigma": {"tokens": s_tok, "bos": s_bos},
    }
