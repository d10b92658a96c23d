"""Unremarkable GPT-2-like random weights, and the layout of the residual stream.

The residual stream's d_model coordinates are split into disjoint blocks so that the
planted mechanisms of different layers cannot interfere (each writes and reads only
its own blocks). For d_model = 768:

=========  ===========  =========================================================
block      coordinates  used for
=========  ===========  =========================================================
pos        0:64         W_pos (position embeddings)                [layer 0 QK]
l0_key     64:96        layer-0 content features of keys (keywords) [layer 0 QK]
ctx_in     96:224       token features read by the contextual heads' OV circuit
ctx_out    224:288      where contextual heads write; read by MLP0 neurons
sem        288:480      semantic category and token-identity directions (layer 1)
sem_out    480:512      spare for layer 1 (BOS marker, outputs)
free       512:768      random part of every token embedding (norm ≈ 3)
=========  ===========  =========================================================

Smaller d_model values scale every block proportionally (minimum 1 coordinate).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..core.config import Config
from ..core.weights import Block, Weights

_LAYOUT_768 = (("pos", 64), ("l0_key", 32), ("ctx_in", 128), ("ctx_out", 64),
               ("sem", 192), ("sem_out", 32), ("free", 256))

#: Norm of a token embedding's random (free-block) part; features add to it.
FREE_NORM = 3.0


@dataclasses.dataclass(frozen=True)
class Space:
    """Named, disjoint coordinate blocks of the residual stream."""

    blocks: tuple[tuple[str, int, int], ...]  # (name, start, stop)

    @classmethod
    def for_d_model(cls, d_model: int) -> "Space":
        total = sum(n for _, n in _LAYOUT_768)
        sizes = [max(1, n * d_model // total) for _, n in _LAYOUT_768]
        sizes[-1] = d_model - sum(sizes[:-1])
        if sizes[-1] < 1:
            raise ValueError(f"d_model {d_model} is too small for a planted layout")
        out, start = [], 0
        for (name, _), n in zip(_LAYOUT_768, sizes):
            out.append((name, start, start + n))
            start += n
        return cls(tuple(out))

    def slice(self, name: str) -> slice:
        for n, a, b in self.blocks:
            if n == name:
                return slice(a, b)
        raise KeyError(name)

    def size(self, name: str) -> int:
        s = self.slice(name)
        return s.stop - s.start

    def to_dict(self) -> dict:
        return {n: [a, b] for n, a, b in self.blocks}


def gpt2_small_config(n_layers: int = 2) -> Config:
    return Config(n_layers=n_layers, d_model=768, n_heads=12, d_mlp=3072, d_vocab=50257, n_ctx=1024)


def base_weights(cfg: Config, space: Space, rng: np.random.Generator) -> Weights:
    """Random weights with GPT-2-like norms and no mechanism worth finding.

    Matrices that read the residual stream (W_Q, W_K, W_V, W_in) are small
    Gaussians (std 0.02, GPT-2's initialisation) over all coordinates, so heads attend
    almost uniformly. Matrices that write to it (W_O, W_out) write only into the
    ``free`` block, so every other block carries nothing but what is planted there.
    Token embeddings are random in the ``free`` block with norm ≈ FREE_NORM.
    """
    d, h, e, m, V, N = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.d_vocab, cfg.n_ctx

    def randn(*shape, std=0.02):
        return torch.from_numpy((rng.standard_normal(shape, dtype=np.float32) * std))

    free = space.slice("free")
    W_E = torch.zeros(V, d)
    W_E[:, free] = randn(V, space.size("free"), std=FREE_NORM / np.sqrt(space.size("free")))
    W_pos = torch.zeros(N, d)
    W_pos[:, free] = randn(N, space.size("free"), std=0.3 / np.sqrt(space.size("free")))
    def writer(rows, std):  # [rows d], non-zero only in the free block
        out = torch.zeros(rows, d)
        out[:, free] = randn(rows, space.size("free"), std=std)
        return out

    blocks = []
    for _ in range(cfg.n_layers):
        blocks.append(Block(
            ln1_w=torch.ones(d), ln1_b=torch.zeros(d),
            W_Q=randn(h, d, e), W_K=randn(h, d, e), W_V=randn(h, d, e),
            b_Q=torch.zeros(h, e), b_K=torch.zeros(h, e), b_V=torch.zeros(h, e),
            W_O=writer(h * e, 0.02).reshape(h, e, d), b_O=torch.zeros(d),
            ln2_w=torch.ones(d), ln2_b=torch.zeros(d),
            W_in=randn(d, m), b_in=torch.zeros(m), W_out=writer(m, 0.005), b_out=torch.zeros(d),
        ))
    return Weights(
        cfg=cfg, W_E=W_E, W_pos=W_pos, blocks=blocks,
        ln_final_w=torch.ones(d), ln_final_b=torch.zeros(d),
        W_U=W_E.T, b_U=torch.zeros(V),
    )
