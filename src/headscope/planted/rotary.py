"""A planted rotary checkpoint (Qwen2 layout: RMSNorm, rotary on every head dim, SwiGLU, Q/K/V biases).

The GPT-2 plants (:mod:`.layer0`, :mod:`.layer1`, :mod:`.layer2`) rest on a position table added
to the embedding; this one proves the analyses that claim to work on rotary models. Its vocabulary
is a byte-level BPE of 1024 tokens (:func:`headscope.testing.tokenizers.build_tokenizer`) that
holds the semantic survey's category words as single tokens; weights are small and random
except for three mechanisms, each in its own block of residual coordinates so that they do not
disturb one another:

``sem`` (n_cat + n_id coordinates), ``copy`` (e coordinates) and ``free`` (the rest).

Previous-token head 0.1 (positional, weights-free). W_Q = W_K = 0 and the biases are rotated
copies of one vector on the four fastest rotary planes: b_K = b_Q R(1) (R(Δ) the rotary rotation by Δ positions,
:func:`headscope.core.rotary.relative_rotation`). The score of query i and key j is then

    rot(b_Q, i) · rot(b_K, j) = b_Q R(i − j) R(1)ᵀ b_Qᵀ = Σ_planes ‖b_Q|plane‖² cos((i − j − 1) θ_plane),

largest at i − j = 1 whatever the token (80 logits there; the neighbours Δ = 0, 2 score ≈ 17% less,
≈ 13 logits lower): the head attends to the previous token. It writes nothing (W_O = 0).

Semantic self-suppressing head 1.0 (seed 002's head, rotary form). Category word t, the i-th
member of category k, has ``W_E[t]|sem = a c_k + b u_i`` (c_k, u_i orthonormal coordinate
directions of ``sem``); W_Q[h] and W_K[h] read ``sem`` so that

    W_QK = W_Q W_Kᵀ = α Σ_k c_k c_kᵀ − β Σ_i u_i u_iᵀ      (symmetric; α a² < β b²),

giving a same-category partner +α a²/σ², the token itself −(β b² − α a²)/σ² (σ the RMS of the
residual): the most negative self score of the model. At offset 0 the rotation is the identity,
so the self score is exactly this; the partner score is modulated by cos(Δθ) on the low
frequencies only. Layers 0 and 1 write nothing into ``sem`` (their W_O, W_out rows there are 0).

Contextual heads 0.0 and 0.2 and contextual MLP0 neuron 7 (seed 000's circuit, rotary form;
docs/rotary-layer0.md). ``free`` gives two coordinates: ``topic`` (4.0 on 48 seeded "topic" tokens,
0 elsewhere) and ``ctx`` (0 in every embedding). Both heads have W_Q = W_K = 0 except
W_K[topic, d₁₅] = 2, b_Q = e_{d₁₅} (d₁₅ on the slowest rotary plane, θ = 1.8e-4 per position) and b_K = 0:
every query is the same vector, the relative kernel is flat (uniform attention over the context) and a
topic key scores ≈ +1.5 logits whatever the distance (cos(Δθ) ≥ 0.99998 within n_ctx). Their OV circuit
copies ``topic`` into ``ctx`` (W_V[topic, 0] = W_O[0, ctx] = 1, every other entry 0), so layer 0 writes
the context's content-weighted topic density into ``ctx``; neuron 7 of MLP0 reads it (W_gate[ctx, 7] = 3: its
pre-activation, the gate of SwiGLU; the other neurons' W_gate[ctx] stay random at scale 0.02): a neuron that fires on topic-dense contexts.

Copying head 2.2. W_V[h] W_O[h] = P_copy, the projection onto the ``copy`` coordinates, where every
token's embedding has a random component; with the tied unembedding W_U = W_Eᵀ the OV circuit
W_E P_copy W_Eᵀ (in vocabulary space) is positive semi-definite: copying score ≈ +1.

Same seed → byte-identical files.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from ..core.config import Config
from ..core.rotary import relative_rotation
from ..core.weights import Block, Weights

N_TOKENS = 1024
PREV_HEAD = (0, 1)
CONTEXTUAL_HEADS = (0, 2)      #: layer-0 heads of the planted contextual circuit
CONTEXTUAL_NEURON = 7          #: the MLP0 neuron that reads them
N_TOPIC = 48                   #: topic tokens
SEM_HEAD = (1, 0)
COPY_HEAD = (2, 2)
MANIFEST = "planted.json"


def rotary_config(n_layers: int = 3) -> Config:
    """The planted rotary model's shape: all dimensions distinct, an odd head count."""
    return Config(n_layers=n_layers, d_model=96, n_heads=3, d_mlp=160, d_vocab=N_TOKENS + 16, n_ctx=64,
                  ln_eps=1e-6, act_fn="silu", family="qwen2", positional="rotary", rotary_dim=32,
                  rotary_base=10000.0, norm="rmsnorm", gated_mlp=True)


def build_weights(seed: int = 0, n_layers: int = 3) -> tuple[Weights, dict, object]:
    """(raw weights, manifest, tokenizers.Tokenizer) of the planted rotary model."""
    from ..semantic.prompts import category_tokens, load_categories
    from ..testing.tokenizers import build_tokenizer

    cfg = rotary_config(n_layers)
    tok = build_tokenizer("qwen2", N_TOKENS)
    rng = np.random.default_rng([seed, 23])
    g = lambda *shape, s=0.02: torch.from_numpy(rng.normal(0.0, s, size=shape))  # noqa: E731  float64
    d, h, e, m, V = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.d_vocab

    cats = category_tokens(_Encoder(tok), load_categories())
    names = sorted(cats)
    n_cat, n_id = len(names), max(len(v) for v in cats.values())
    sem = list(range(n_cat + n_id))                                        # c_k then u_i
    copy = list(range(len(sem), len(sem) + e))
    free = list(range(len(sem) + e, d))

    W_E = torch.zeros(V, d, dtype=torch.float64)
    W_E[:, free] = g(V, len(free), s=1.0)                                  # unremarkable content
    W_E[:, copy] = g(V, e, s=1.0)                                          # what the copying head reads
    a = b = 1.0
    for k, name in enumerate(names):
        for i, t in enumerate(cats[name]):
            W_E[t, sem[k]] = a
            W_E[t, sem[n_cat + i]] = b

    blocks = []
    for l in range(n_layers):
        W_O = g(h, e, d)
        W_out = g(m, d)
        W_O[..., sem] = 0                                                  # nothing written into sem
        W_out[:, sem] = 0
        blocks.append(Block(
            ln1_w=torch.ones(d, dtype=torch.float64), ln1_b=torch.zeros(d, dtype=torch.float64),
            W_Q=g(h, d, e), W_K=g(h, d, e), W_V=g(h, d, e), b_Q=g(h, e), b_K=g(h, e),
            b_V=g(h, e), W_O=W_O, b_O=torch.zeros(d, dtype=torch.float64),
            ln2_w=torch.ones(d, dtype=torch.float64), ln2_b=torch.zeros(d, dtype=torch.float64),
            W_in=g(d, m), b_in=torch.zeros(m, dtype=torch.float64), W_out=W_out,
            b_out=torch.zeros(d, dtype=torch.float64), W_gate=g(d, m), b_gate=torch.zeros(m, dtype=torch.float64)))

    # previous-token head: biases only, b_K = b_Q R(1)
    L, H = PREV_HEAD
    half = cfg.rotary_dim // 2
    bq = torch.zeros(e, dtype=torch.float64)
    fast = [j for p_ in range(4) for j in (p_, p_ + half)]                # the 4 fastest planes (θ = 1, 0.56, 0.32, 0.18)
    bq[fast] = 1.0
    peak = 80.0                                                            # the score at Δ = 1 (logits)
    bq = bq / bq.norm() * (peak * cfg.attn_scale(L)) ** 0.5
    R1 = relative_rotation(torch.tensor([1]), cfg, e)[0]                  # [e e]
    blk = blocks[L]
    blk.W_Q[H] = 0
    blk.W_K[H] = 0
    blk.b_Q[H], blk.b_K[H] = bq, bq @ R1
    blk.W_O[H] = 0

    # contextual heads and neuron (module docstring): a separate generator, so nothing else changes
    topic_c, ctx_c = free[0], free[1]
    in_cats = {t for v in cats.values() for t in v}
    pool = [t for t in range(256, N_TOKENS) if t not in in_cats]
    topic = sorted(int(t) for t in np.random.default_rng([seed, 35]).choice(pool, N_TOPIC, replace=False))
    W_E[:, topic_c] = 0.0
    W_E[topic, topic_c] = 4.0
    W_E[:, ctx_c] = 0.0
    slow = _slow_dim(0, cfg)
    blk = blocks[0]
    for H in CONTEXTUAL_HEADS:
        for t in (blk.W_Q, blk.W_K, blk.W_V, blk.W_O, blk.b_Q, blk.b_K, blk.b_V):
            t[H] = 0
        blk.b_Q[H, slow] = 1.0
        blk.W_K[H, topic_c, slow] = 2.0
        blk.W_V[H, topic_c, 0] = 1.0
        blk.W_O[H, 0, ctx_c] = 1.0
    blk.W_gate[ctx_c, CONTEXTUAL_NEURON] = 3.0                             # hook_pre: the gate's pre-activation

    # semantic self-suppressing head: W_QK = α Σ c cᵀ − β Σ u uᵀ on sem
    L, H = SEM_HEAD
    alpha, beta = 8.0, 24.0
    blk = blocks[L]
    blk.W_Q[H], blk.W_K[H] = 0, 0
    blk.b_Q[H], blk.b_K[H] = 0, 0
    for s_ in range(len(sem)):
        col, sign = _slow_dim(s_, cfg), (1.0 if s_ < n_cat else -1.0)
        scale = (alpha if s_ < n_cat else beta) ** 0.5
        blk.W_Q[H, sem[s_], col] = scale
        blk.W_K[H, sem[s_], col] = sign * scale

    # copying head: W_V W_O = projection onto the copy coordinates
    if n_layers > COPY_HEAD[0]:
        L, H = COPY_HEAD
        blk = blocks[L]
        blk.W_V[H] = 0
        blk.W_O[H] = 0
        for j, c in enumerate(copy):
            blk.W_V[H, c, j] = 1.0
            blk.W_O[H, j, c] = 1.0
        blk.b_V[H] = 0

    to32 = lambda t: t.to(torch.float32)  # noqa: E731
    w = Weights(cfg=cfg, W_E=to32(W_E), W_pos=None, blocks=[Block(**{k: to32(getattr(bb, k)) for k in bb.shapes(cfg)})
                                                           for bb in blocks],
                ln_final_w=torch.ones(d), ln_final_b=torch.zeros(d), W_U=None, b_U=torch.zeros(V))
    w.W_U = w.W_E.T                                                        # tied
    w.validate()
    manifest = {
        "version": 1, "seed": seed, "family": "qwen2", "config": cfg.to_dict(),
        "space": {"sem": [sem[0], sem[-1] + 1], "copy": [copy[0], copy[-1] + 1], "free": [free[0], free[-1] + 1]},
        "previous_token_head": {"layer": PREV_HEAD[0], "head": PREV_HEAD[1], "offset": 1},
        "contextual": {"heads": list(CONTEXTUAL_HEADS), "neuron": CONTEXTUAL_NEURON, "topic_tokens": topic,
                       "space": {"topic": topic_c, "ctx": ctx_c}},
        "semantic_head": {"layer": SEM_HEAD[0], "head": SEM_HEAD[1], "alpha": alpha, "beta": beta,
                          "categories": {n: cats[n] for n in names}},
        "copy_heads": ({"copying": {"layer": COPY_HEAD[0], "head": COPY_HEAD[1], "ov_copying": "close to +1"}}
                       if n_layers > COPY_HEAD[0] else {}),
    }
    return w, manifest, tok


def _slow_dim(s: int, cfg: Config) -> int:
    """Head dimension of the s-th semantic direction: the lowest-frequency rotary planes first
    (plane j pairs dims j and j + r/2 and turns by θ_j = base^(−2j/r) per position), so that a
    partner a few positions away still scores ≈ α (cos Δθ ≈ 1)."""
    half = cfg.rotary_dim // 2
    if s >= cfg.rotary_dim:
        raise ValueError(f"{s + 1} semantic directions do not fit the {cfg.rotary_dim} rotary dims of a head")
    return (half - 1 - s // 2) + half * (s % 2)


class _Encoder:
    """`encode` of a tokenizers.Tokenizer as headscope's tokenizers have it (no special tokens)."""

    def __init__(self, tok):
        self.tok = tok

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids


def build(out: str | Path, seed: int = 0, n_layers: int = 3) -> Path:
    """Write the planted rotary checkpoint (Qwen2 layout, tokenizer.json, planted.json) to `out` atomically."""
    from ..core.writing import save_checkpoint

    w, manifest, tok = build_weights(seed, n_layers)
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    with tempfile.TemporaryDirectory(prefix="headscope-plant-") as tmp:
        tok.save(str(Path(tmp) / "tokenizer.json"))
        return save_checkpoint(w, Path(out), tokenizer_from=Path(tmp), extra_files={MANIFEST: text})
