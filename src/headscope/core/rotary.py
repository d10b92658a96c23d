"""Rotary position embeddings (RoPE), the one home of their maths (GPT-NeoX, Llama, Qwen2).

A rotary model adds no position vector to the residual stream. Inside every attention layer
the first ``r = cfg.rotary_dim`` dimensions of each head's query and key are rotated by an
angle proportional to the position, in ``r/2`` planes with inverse frequencies

    θ_j = base^(−2j/r) (j = 0 … r/2 − 1), then rescaled by ``rope_scaling`` (below),

using the "rotate half" pairing that transformers uses for these families: dimension j is
paired with j + r/2,

    x_rot = x ⊙ cos(p θ) + rotate_half(x) ⊙ sin(p θ),   rotate_half([x₁, x₂]) = [−x₂, x₁],

with cos and sin of the r/2 angles each written twice ([p θ, p θ]). A rotation by p then by −p'
composes to one by p − p', so ``q_rot(i) · k_rot(j) = q R(i − j) kᵀ``: the score depends on
positions only through the offset i − j (translation equivariance; :func:`relative_rotation`).

Scaling (``rope_scaling`` / ``rope_parameters`` of config.json): ``linear`` divides every θ_j by
``factor``; ``llama3`` (Llama 3.1/3.2) divides the low frequencies (wavelength 2π/θ longer than
``original_max_position_embeddings / low_freq_factor``) by ``factor``, keeps the high ones
(shorter than ``… / high_freq_factor``) and interpolates smoothly between. Other types are
refused in one line.
"""

from __future__ import annotations

import math

import torch

from .._errors import HeadscopeError
from .config import Config

Tensor = torch.Tensor

#: rope_scaling types implemented (besides none / "default").
SCALINGS = ("linear", "llama3")


def check_scaling(scaling: dict) -> None:
    """Refuse a rope_scaling this module does not implement (one line naming the supported ones)."""
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return
    if kind not in SCALINGS:
        raise HeadscopeError(f"unsupported rope_scaling type {kind!r} (headscope implements: default, "
                             f"{', '.join(SCALINGS)})")
    need = {"linear": ("factor",),
            "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}[kind]
    for key in need:
        v = scaling.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise HeadscopeError(f"config: rope_scaling {kind} needs a positive number {key!r}, got {v!r}")
    if kind == "llama3" and scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
        raise HeadscopeError("config: rope_scaling llama3 needs high_freq_factor > low_freq_factor")


def inv_freq(cfg: Config) -> Tensor:
    """θ_j [rotary_dim/2], float32 as transformers computes them (module docstring)."""
    r = cfg.rotary_dim
    theta = 1.0 / (cfg.rotary_base ** (torch.arange(0, r, 2, dtype=torch.int64).float() / r))       # [r/2]
    s = dict(cfg.rope_scaling)
    kind = s.get("rope_type", s.get("type", "default"))
    if kind == "linear":
        theta = theta / s["factor"]
    elif kind == "llama3":
        factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        wavelen = 2 * math.pi / theta
        scaled = torch.where(wavelen > old / lo, theta / factor, theta)
        smooth = (old / wavelen - lo) / (hi - lo)
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        theta = torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    return theta


def cos_sin(positions: Tensor, cfg: Config, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """(cos, sin) [p rotary_dim] of the angles p·θ at integer `positions` [p] (may be negative)."""
    angles = positions.to(torch.float32)[:, None] * inv_freq(cfg)[None, :]                         # [p r/2]
    if dtype == torch.float64:
        angles = positions.to(torch.float64)[:, None] * inv_freq(cfg).double()[None, :]
    emb = torch.cat([angles, angles], dim=-1)                                                         # [p r]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """[x₁, x₂] → [−x₂, x₁] over the last dimension (halves of the rotated dims)."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE on x [... p h e]: the first r = cos.shape[-1] dims of each head rotated by position,
    the rest passed through. cos, sin: [p r] (:func:`cos_sin`)."""
    r = cos.shape[-1]
    c, s = cos[:, None, :], sin[:, None, :]                                                           # [p 1 r]
    rot = x[..., :r]
    out = rot * c + rotate_half(rot) * s
    return out if r == x.shape[-1] else torch.cat([out, x[..., r:]], dim=-1)


def relative_rotation(offsets: Tensor, cfg: Config, d_head: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """R(Δ) [n e e] for each offset Δ = i − j: ``rotate(q, i) · rotate(k, j) = q R(i − j) kᵀ``.

    Row a of R(Δ) is the basis vector e_a rotated by Δ (the block rotation by Δθ_j in each plane
    (j, j + r/2), identity beyond r); ``rotate(q, i)·rotate(k, j) = rotate(q, i − j)·k`` because
    the rotations are orthogonal and compose."""
    eye = torch.eye(d_head, dtype=dtype)
    cos, sin = cos_sin(offsets, cfg, dtype)                                                           # [n r]
    rows = rotate(eye[:, None, None, :].expand(d_head, len(offsets), 1, d_head), cos, sin)          # [a n 1 e]
    return rows[:, :, 0, :].transpose(0, 1).contiguous()                                              # [n a e]
