"""Gemma 2 (``model_type: gemma2``; Gemma-2-2B/9B/27B): config.json and state-dict layout.

Config
------
``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads`` (GQA),
``head_dim`` (256 in the released models, not hidden/heads), ``intermediate_size``, ``vocab_size``,
``max_position_embeddings``, ``rms_norm_eps``, ``hidden_activation`` (gelu_pytorch_tanh, gated),
rope settings as Llama's (:func:`.base.rope_config`), ``query_pre_attn_scalar`` (scores are
q·k / √query_pre_attn_scalar: ``Config.attn_divisor``), ``attn_logit_softcapping`` (50) and
``final_logit_softcapping`` (30) (null = none), ``sliding_window`` (4096) with ``layer_types``
(absent: even layers 0, 2, … slide, odd ones are global, as ``Gemma2Config`` sets them),
``tie_word_embeddings`` (default true). ``attention_bias: true`` and
``use_bidirectional_attention: true`` are refused.

Maths (transformers' ``Gemma2ForCausalLM``), and how headscope holds it
----------------------------------------------------------------------
- **scaled embeddings**: the residual stream starts at W_E[t]·√d_model (the factor cast to the
  weights' dtype). Canonical ``W_E`` is the stored table times that factor; ``W_U`` is the stored
  table's transpose (tied) — so a Gemma 2's W_U is not W_Eᵀ in headscope's weights.
- **(1 + w) RMSNorm**: every norm multiplies by (1 + w) (stored w starts at 0). Canonical norm
  weights hold 1 + w, so the one RMSNorm of :mod:`headscope.core.forward` applies; written back as
  (1 + w) − 1 (exact up to float32 rounding of 1 + w).
- **sandwich norms**: ``x + N₁ᵖᵒˢᵗ(attn(N₁ x))``, then ``+ N₂ᵖᵒˢᵗ(mlp(N₂ ·))``
  (``post_attention_layernorm`` → ``ln1_post_w``, ``pre_feedforward_layernorm`` → ``ln2_w``,
  ``post_feedforward_layernorm`` → ``ln2_post_w``; ``Config.branch_norms``).
- **soft-capping**: scores c·tanh(s/c) before the mask (c = 50), final logits c·tanh(l/c) (c = 30).
- **local/global**: a sliding layer's query i sees keys i − window < j ≤ i (``Config.attn_windows``).

State dict
----------
``model.embed_tokens.weight``, ``model.layers.{i}.{input_layernorm, post_attention_layernorm,
pre_feedforward_layernorm, post_feedforward_layernorm}.weight``, ``self_attn.{q,k,v,o}_proj.weight``,
``mlp.{gate,up,down}_proj.weight``, ``model.norm.weight``; ``lm_head.weight`` when untied.
"""

from __future__ import annotations

import math
import re

import torch

from ..._errors import HeadscopeError
from ..config import MAX_SIZE, Config, _show
from ..weights import Block
from .base import (Family, expand_kv, group_kv, heads_in, heads_in_inverse, heads_out, heads_out_inverse,
                   layered_shapes, number, refuse, rope_config, rope_hf, size, tie)

PREFIX = "model."
_LAYER_RE = re.compile(r"layers\.(0|[1-9][0-9]*)\.(.+)")
#: stored norm → canonical Block field (each holds 1 + w)
_NORMS = {"input_layernorm.weight": "ln1_w", "post_attention_layernorm.weight": "ln1_post_w",
          "pre_feedforward_layernorm.weight": "ln2_w", "post_feedforward_layernorm.weight": "ln2_post_w"}
_ATTN = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight")
_MLP = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
KINDS = ("full_attention", "sliding_attention")


def _softcap(hf: dict, key: str, default: float) -> float | None:
    c = hf.get(key, default)
    return None if c is None else number(hf, key, default)


def config_from_hf(hf: dict) -> Config:
    d, h = size(hf, "hidden_size"), size(hf, "num_attention_heads")
    n = size(hf, "num_hidden_layers")
    kv = size(hf, "num_key_value_heads") if hf.get("num_key_value_heads") is not None else h
    e = size(hf, "head_dim") if hf.get("head_dim") is not None else d // h
    refuse(hf, "attention_bias", False, "Gemma 2 with attention biases")
    refuse(hf, "use_bidirectional_attention", False, "bidirectional attention")
    n_ctx = size(hf, "max_position_embeddings")
    window = hf.get("sliding_window", 4096)
    kinds = hf.get("layer_types")
    if kinds is None:
        kinds = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or any(k not in KINDS for k in kinds):
        raise HeadscopeError(f"config: layer_types must list {n} layer kinds ({', '.join(KINDS)}), got {_show(kinds)}")
    if "sliding_attention" in kinds and (isinstance(window, bool) or not isinstance(window, int)
                                         or not 1 <= window <= MAX_SIZE):
        raise HeadscopeError(f"config: sliding_window must be a positive integer for sliding layers, got {_show(window)}")
    act = hf.get("hidden_activation", hf.get("hidden_act", "gelu_pytorch_tanh"))
    scalar = number(hf, "query_pre_attn_scalar", 256)
    return Config(
        n_layers=n, d_model=d, n_heads=h, d_mlp=size(hf, "intermediate_size"), d_vocab=size(hf, "vocab_size"),
        n_ctx=n_ctx, ln_eps=number(hf, "rms_norm_eps", 1e-6), act_fn=act if isinstance(act, str) else repr(act),
        family="gemma2", n_kv_heads=kv if kv != h else None, head_dim=e if e * h != d else None,
        norm="rmsnorm", gated_mlp=True, qk_bias=False, branch_norms=True,
        attn_softcap=_softcap(hf, "attn_logit_softcapping", 50.0),
        final_softcap=_softcap(hf, "final_logit_softcapping", 30.0),
        attn_windows=tuple(window if k == "sliding_attention" else 0 for k in kinds) if "sliding_attention" in kinds
        else (),
        **rope_config(hf, e, n_ctx, scale_divisor=math.sqrt(scalar)),
    )


def _name(layer: int, leaf: str) -> str:
    return f"layers.{layer}.{leaf}"


def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    d, m, h, kv, e = cfg.d_model, cfg.d_mlp, cfg.n_heads, cfg.kv_heads, cfg.d_head
    leaf = {k: (d,) for k in _NORMS}
    leaf.update(zip(_ATTN, ((h * e, d), (kv * e, d), (kv * e, d), (d, h * e))))
    leaf.update(zip(_MLP, ((m, d), (m, d), (d, m))))
    return layered_shapes({"embed_tokens.weight": (cfg.d_vocab, d)}, leaf, {"norm.weight": (d,)}, cfg.n_layers, _name)


def _one_plus(w: torch.Tensor) -> torch.Tensor:
    """Gemma's norm weight as applied: 1 + w, computed in float32 as transformers computes it."""
    return (1.0 + w.float()).to(w.dtype)


def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
    h, kv, e, d, m = cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.d_model, cfg.d_mlp
    q = t["self_attn.q_proj.weight"]
    zero = lambda *s: torch.zeros(*s, dtype=q.dtype, device=q.device)   # noqa: E731
    norms = {field: _one_plus(t[key]) for key, field in _NORMS.items()}
    return Block(
        W_Q=heads_in(q, h, e), W_K=expand_kv(heads_in(t["self_attn.k_proj.weight"], kv, e), h),
        W_V=expand_kv(heads_in(t["self_attn.v_proj.weight"], kv, e), h),
        b_Q=zero(h, e), b_K=zero(h, e), b_V=zero(h, e),
        W_O=heads_out(t["self_attn.o_proj.weight"], h, e), b_O=zero(d),
        ln1_b=zero(d), ln2_b=zero(d),
        W_gate=t["mlp.gate_proj.weight"].T, b_gate=zero(m), W_in=t["mlp.up_proj.weight"].T, b_in=zero(m),
        W_out=t["mlp.down_proj.weight"].T, b_out=zero(d), **norms,
    )


def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
    if leaf in _NORMS:
        t = getattr(b, _NORMS[leaf]).float() - 1.0
    elif leaf.startswith("self_attn."):
        X = leaf.split(".")[1][0].upper()
        if X == "O":
            biases = [b.b_O]
            t = heads_out_inverse(b.W_O)
        else:
            biases = [getattr(b, f"b_{X}")]
            t = getattr(b, f"W_{X}")
            if X != "Q":
                t = group_kv(t, cfg.kv_heads, f"{X} of a grouped-query checkpoint")
            t = heads_in_inverse(t)
        if any(bool(x.abs().max() > 0) for x in biases):
            raise HeadscopeError(f"cannot write a Gemma 2 checkpoint whose b_{X} is not zero (no attention biases)")
    else:
        field = {"gate_proj": "gate", "up_proj": "in", "down_proj": "out"}[leaf.split(".")[1]]
        if bool(getattr(b, f"b_{field}").abs().max() > 0):
            raise HeadscopeError(f"cannot write a Gemma 2 checkpoint whose b_{field} is not zero (no MLP biases)")
        t = getattr(b, f"W_{field}").T
    return t.detach().to("cpu", torch.float32).contiguous()


def embed_scale(cfg: Config, dtype: torch.dtype) -> torch.Tensor:
    """√d_model in the weights' dtype (transformers' ``embed_scale.to(weight.dtype)``)."""
    return torch.tensor(cfg.d_model ** 0.5).to(dtype)


def top_from_hf(field: str, t: torch.Tensor, cfg: Config) -> torch.Tensor:
    if field == "W_E":
        return t * embed_scale(cfg, t.dtype).to(t.device)
    return _one_plus(t) if field == "ln_final_w" else t


def top_to_hf(field: str, t: torch.Tensor, cfg: Config) -> torch.Tensor:
    if field == "W_E":
        return t / embed_scale(cfg, t.dtype).to(t.device)
    return t.float() - 1.0 if field == "ln_final_w" else t


def hf_config(cfg: Config, untied: bool = False) -> dict:
    return {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
        "vocab_size": cfg.d_vocab, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.d_head,
        "intermediate_size": cfg.d_mlp, "hidden_activation": cfg.act_fn, "max_position_embeddings": cfg.n_ctx,
        "rms_norm_eps": cfg.ln_eps, **rope_hf(cfg), "tie_word_embeddings": not untied,
        "query_pre_attn_scalar": _scalar(cfg), "attn_logit_softcapping": cfg.attn_softcap,
        "final_logit_softcapping": cfg.final_softcap,
        "sliding_window": max(cfg.attn_windows, default=0) or 4096,
        "layer_types": ["sliding_attention" if cfg.window(l) else "full_attention" for l in range(cfg.n_layers)],
        "attention_dropout": 0.0, "attention_bias": False,
    }


def _scalar(cfg: Config) -> float:
    """query_pre_attn_scalar back from the divisor (yarn/longrope's factor taken out)."""
    from ..rotary import attention_factor

    a = attention_factor(cfg.rope_scaling, cfg.n_ctx)
    s = (cfg.attn_divisor * a * a) ** 2
    return int(round(s)) if abs(s - round(s)) < 1e-6 * s else s


FAMILY = Family(
    name="gemma2", title="Gemma 2", model_types=("gemma2",), hf_class="Gemma2ForCausalLM", prefix=PREFIX,
    top={"W_E": "embed_tokens.weight", "ln_final_w": "norm.weight"}, leaves=tuple(_NORMS) + _ATTN + _MLP,
    buffers=("self_attn.rotary_emb.inv_freq",), unembed="lm_head.weight", block_re=_LAYER_RE, block_name=_name,
    config=config_from_hf, tied=lambda hf: tie(hf, True), hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block, top_buffers=("rotary_emb.inv_freq",),
    top_from_hf=top_from_hf, top_to_hf=top_to_hf,
)
