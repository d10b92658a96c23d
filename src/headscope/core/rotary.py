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

Scaling (config.json's ``rope_scaling`` / ``rope_parameters``, resolved as transformers 5.25
resolves them: :func:`headscope.core.families.base.rope_config`), the types of
``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` computed as there:

- ``linear``: every θ_j divided by ``factor``;
- ``dynamic`` (NTK): base' = base · (factor · L/n_ctx − (factor − 1))^(r/(r−2)) with
  L = max(sequence length, n_ctx) = n_ctx for every sequence headscope runs (≤ n_ctx), so the
  tables are the default ones with base' (= base up to float rounding);
- ``yarn``: θ_j blended between θ_j (high frequencies) and θ_j/factor (low ones) by a linear
  ramp over the dims whose rotation count at ``original_max_position_embeddings`` lies between
  ``beta_slow`` and ``beta_fast``; cos and sin multiplied by an attention factor a
  (``attention_factor``, else 0.1·ln(factor) + 1, or the mscale ratio);
- ``longrope`` (Phi-3): θ_j divided by ``short_factor[j]``, or by ``long_factor[j]`` when the
  sequence is longer than ``original_max_position_embeddings`` (transformers switches the whole
  table by sequence length; :func:`cos_sin` takes it from the largest position); attention factor
  ``attention_factor``, else sqrt(1 + ln(factor)/ln(original)) for factor > 1;
- ``llama3`` (Llama 3.1/3.2): low frequencies (wavelength 2π/θ longer than
  ``original_max_position_embeddings / low_freq_factor``) divided by ``factor``, high ones
  (shorter than ``… / high_freq_factor``) kept, smooth interpolation between.

The attention factor a scales both q and k on the rotated dims, so a score's rotated part is
a²·q R kᵀ. headscope applies it in the score's divisor (``Config.attn_divisor = √d_head / a²``,
exact when every dim rotates; partial rotary with a ≠ 1 is refused when read), so the rotation
tables stay orthogonal and every analysis that divides by ``cfg.attn_scale`` sees it.
"""

from __future__ import annotations

import math

import torch

from .._errors import HeadscopeError
from .config import Config, _show

Tensor = torch.Tensor

#: rope_scaling types implemented (besides none / "default"): all of transformers' for causal LMs
#: but "proportional" (Gemma 4).
SCALINGS = ("linear", "dynamic", "yarn", "longrope", "llama3")

#: the keys each type reads (beyond rope_type, rope_theta, partial_rotary_factor), required first
KEYS = {"linear": (("factor",), ()), "dynamic": (("factor",), ()),
        "yarn": (("original_max_position_embeddings",), ("factor", "attention_factor", "beta_fast", "beta_slow",
                                                         "mscale", "mscale_all_dim", "truncate")),
        "longrope": (("short_factor", "long_factor", "original_max_position_embeddings"),
                     ("factor", "attention_factor")),
        "llama3": (("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"), ())}


def _positive(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def check_scaling(scaling: dict, rotary_dim: int | None = None) -> dict:
    """The parameters of a resolved scaling (``rope_type`` set) that its type reads, as (key, value)
    pairs ready for :attr:`Config.rope_scaling`; refuses in one line a type this module does not
    implement or a parameter that is missing or not a finite positive number (lists for longrope)."""
    kind = scaling.get("rope_type", "default")
    if kind == "default":
        return {}
    if kind not in SCALINGS:
        raise HeadscopeError(f"unsupported rope_scaling type {_show(kind)} (headscope implements: default, "
                             f"{', '.join(SCALINGS)})")
    need, optional = KEYS[kind]
    out = {"rope_type": kind}
    for key in need + optional:
        v = scaling.get(key)
        if v is None and key in optional:
            continue
        if key == "truncate":
            if not isinstance(v, bool):
                raise HeadscopeError(f"config: rope_scaling yarn truncate must be true or false, got {_show(v)}")
        elif key.endswith("_factor") and kind == "longrope" and key != "attention_factor":
            if not isinstance(v, list) or not v or not all(_positive(x) for x in v) or (
                    rotary_dim is not None and len(v) != rotary_dim // 2):
                want = f"{rotary_dim // 2} " if rotary_dim is not None else ""
                raise HeadscopeError(f"config: rope_scaling longrope needs {key!r}: a list of {want}positive numbers "
                                     f"(one per rotary frequency), got {_show(v)}")
            v = tuple(float(x) for x in v)
        elif key in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise HeadscopeError(f"config: rope_scaling {kind} {key!r} must be a finite number ≥ 0, got {_show(v)}")
        elif not _positive(v):
            raise HeadscopeError(f"config: rope_scaling {kind} needs a positive number {key!r}, got {_show(v)}")
        out[key] = v
    if kind == "llama3" and out["high_freq_factor"] <= out["low_freq_factor"]:
        raise HeadscopeError("config: rope_scaling llama3 needs high_freq_factor > low_freq_factor")
    if kind == "dynamic" and rotary_dim == 2:
        raise HeadscopeError("config: rope_scaling dynamic needs a rotary dimension above 2 (its exponent is r/(r − 2))")
    return out


def _factor(s: dict, n_ctx: int) -> float:
    """yarn/longrope's factor: stated, else n_ctx / original_max_position_embeddings (transformers)."""
    f = s.get("factor")
    return f if f is not None else n_ctx / s["original_max_position_embeddings"]


def attention_factor(rope_scaling, n_ctx: int) -> float:
    """The factor a by which transformers multiplies cos and sin (yarn, longrope; 1 otherwise)."""
    s = dict(rope_scaling)
    kind = s.get("rope_type", "default")
    if kind not in ("yarn", "longrope"):
        return 1.0
    if s.get("attention_factor") is not None:
        return float(s["attention_factor"])
    factor = _factor(s, n_ctx)
    if kind == "longrope":
        return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(s["original_max_position_embeddings"]))

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
    if s.get("mscale") and s.get("mscale_all_dim"):
        return float(mscale(factor, s["mscale"]) / mscale(factor, s["mscale_all_dim"]))
    return mscale(factor)


def inv_freq(cfg: Config, seq_len: int | None = None) -> Tensor:
    """θ_j [rotary_dim/2], float32 as transformers computes them (module docstring); `seq_len`
    (the sequence length) matters for longrope only."""
    r, base = cfg.rotary_dim, cfg.rotary_base
    s = dict(cfg.rope_scaling)
    kind = s.get("rope_type", "default")
    if kind == "dynamic":                           # L = max(seq_len, n_ctx) = n_ctx (sequences ≤ n_ctx)
        f = s["factor"]
        base = base * ((f * cfg.n_ctx / cfg.n_ctx) - (f - 1)) ** (r / (r - 2))
    shape = torch.arange(0, r, 2, dtype=torch.int64).float() / r                                      # [r/2]
    if kind == "longrope":
        long = seq_len is not None and seq_len > s["original_max_position_embeddings"]
        ext = torch.tensor(s["long_factor" if long else "short_factor"], dtype=torch.float32)
        return 1.0 / (ext * base ** shape)
    if kind == "yarn":
        return _yarn(s, r, base, cfg.n_ctx)
    theta = 1.0 / (base ** shape)                                                                    # [r/2]
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


def _yarn(s: dict, r: int, base: float, n_ctx: int) -> Tensor:
    """YaRN's θ_j (transformers' ``_compute_yarn_parameters``, step for step)."""
    factor = _factor(s, n_ctx)
    old = s["original_max_position_embeddings"]
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations):          # the dim whose wavelength fits `rotations` times into `old`
        return (r * math.log(old / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(r // 2, dtype=torch.float32) - low) / (high - low), 0, 1)        # [r/2]
    pos = base ** (torch.arange(0, r, 2).to(dtype=torch.float) / r)
    extra = 1 - ramp                                  # 1: keep θ_j (extrapolate), 0: θ_j / factor
    return (1.0 / (factor * pos)) * (1 - extra) + (1.0 / pos) * extra


def cos_sin(positions: Tensor, cfg: Config, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """(cos, sin) [p rotary_dim] of the angles p·θ at integer `positions` [p] (may be negative;
    longrope's table follows the largest position + 1, the sequence length transformers uses)."""
    theta = inv_freq(cfg, int(positions.abs().max()) + 1 if positions.numel() else None)              # [r/2]
    angles = positions.to(torch.float32)[:, None] * theta[None, :]                                  # [p r/2]
    if dtype == torch.float64:
        angles = positions.to(torch.float64)[:, None] * theta.double()[None, :]
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
