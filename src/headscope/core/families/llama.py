"""Llama (``model_type: llama``; Llama 2/3.x, TinyLlama, SmolLM): config.json and state-dict layout.

Config
------
``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``
(grouped-query attention; default: no grouping), ``head_dim`` (default hidden_size /
heads), ``intermediate_size``, ``vocab_size``, ``max_position_embeddings`` (n_ctx),
``rms_norm_eps``, ``hidden_act`` (silu), rotary on every head dim (transformers' Llama ignores
``partial_rotary_factor`` for default RoPE and cannot run it with a scaled one: refused) with
``rope_theta`` and ``rope_scaling`` / ``rope_parameters`` resolved as transformers does
(:func:`.base.rope_config`; every type of :mod:`headscope.core.rotary`),
``attention_bias`` (Q, K, V and O biases) and ``mlp_bias`` (default false),
``tie_word_embeddings`` (default false; true for Llama-3.2-1B and SmolLM).

RMSNorm (``x / sqrt(mean x² + eps) · w``: no centring, no bias) before attention, MLP and
unembedding. The MLP is gated (SwiGLU): ``(silu(x W_gate) ⊙ (x W_in)) W_out`` with
``gate_proj`` → W_gate, ``up_proj`` → W_in, ``down_proj`` → W_out.

State dict
----------
``model.embed_tokens.weight``, ``model.layers.{i}.…``, ``model.norm.weight``, ``lm_head.weight``
(untied only). Linear layers store [out in]. ``k_proj``/``v_proj`` hold ``kv`` heads; the
canonical weights hold them expanded to one copy per query head (W_K, W_V [n_heads d_model
d_head]: every analysis sees ordinary heads; memory 2·(n_heads − kv)·d_model·d_head floats per
layer more — 384 MiB in float32 for Llama-3.2-1B). Writing back takes one copy per group and
refuses groups whose copies differ. ``self_attn.rotary_emb.inv_freq`` buffers are ignored.

Qwen2 (:mod:`.qwen2`) is this layout with Q, K and V biases.
"""

from __future__ import annotations

import re

import torch

from ..config import Config
from ..weights import Block
from .base import (Family, expand_kv, flag, group_kv, heads_in, heads_in_inverse, heads_out, heads_out_inverse,
                   layered_shapes, number, refuse, rope_config, rope_hf, size, tie)

PREFIX = "model."
_LAYER_RE = re.compile(r"layers\.(0|[1-9][0-9]*)\.(.+)")
_BUFFERS = ("self_attn.rotary_emb.inv_freq",)
_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight")
_ATTN = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
_MLP = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def config_from_hf(hf: dict, family: str = "llama", **fields) -> Config:
    """Llama's config.json keys → Config; `fields` override (a Llama-layout family's own options)."""
    d, h = size(hf, "hidden_size"), size(hf, "num_attention_heads")
    kv = size(hf, "num_key_value_heads") if hf.get("num_key_value_heads") is not None else h
    e = size(hf, "head_dim") if hf.get("head_dim") is not None else None
    act = hf.get("hidden_act", "silu")
    refuse(hf, "pretraining_tp", 1, "tensor-parallel slices")
    n_ctx = size(hf, "max_position_embeddings")
    return Config(
        n_layers=size(hf, "num_hidden_layers"), d_model=d, n_heads=h, d_mlp=size(hf, "intermediate_size"),
        d_vocab=size(hf, "vocab_size"), n_ctx=n_ctx,
        ln_eps=number(hf, "rms_norm_eps", 1e-6), act_fn=act if isinstance(act, str) else repr(act),
        family=family, n_kv_heads=kv if kv != h else None, head_dim=e if e is not None and e * h != d else None,
        **({"norm": "rmsnorm", "gated_mlp": True, "qk_bias": family != "llama" or biases(hf)[0]}
           | rope_config(hf, e or d // h, n_ctx) | fields),
    )


def biases(hf: dict) -> tuple[bool, bool]:
    """(attention biases, MLP biases) of a Llama config.json."""
    return flag(hf, "attention_bias", False), flag(hf, "mlp_bias", False)


def _name(layer: int, leaf: str) -> str:
    return f"layers.{layer}.{leaf}"


def make_family(name: str, title: str, hf_class: str, *, qkv_bias: bool, o_bias: bool, mlp_bias: bool,
                config=config_from_hf, tied_default: bool = False, extra_config=None, variant=None) -> Family:
    """A Llama-layout family: which biases it stores (Llama: per config; Qwen2: Q, K, V)."""
    leaves = list(_NORMS)
    for proj, has in zip(_ATTN, (qkv_bias, qkv_bias, qkv_bias, o_bias)):
        leaves += [f"{proj}.weight"] + ([f"{proj}.bias"] if has else [])
    for proj in _MLP:
        leaves += [f"{proj}.weight"] + ([f"{proj}.bias"] if mlp_bias else [])

    def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
        d, m, h, kv, e = cfg.d_model, cfg.d_mlp, cfg.n_heads, cfg.kv_heads, cfg.d_head
        out = {"q_proj": h * e, "k_proj": kv * e, "v_proj": kv * e}
        leaf = {n: (d,) for n in _NORMS}
        for proj, has in zip(_ATTN, (qkv_bias, qkv_bias, qkv_bias, o_bias)):
            rows = out.get(proj.split(".")[1])
            leaf[f"{proj}.weight"] = (rows, d) if rows else (d, h * e)
            if has:
                leaf[f"{proj}.bias"] = (rows or d,)
        for proj, shape in zip(_MLP, ((m, d), (m, d), (d, m))):
            leaf[f"{proj}.weight"] = shape
            if mlp_bias:
                leaf[f"{proj}.bias"] = (shape[0],)
        return layered_shapes({"embed_tokens.weight": (cfg.d_vocab, d)}, leaf, {"norm.weight": (d,)},
                              cfg.n_layers, _name)

    def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
        h, kv, e, d, m = cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.d_model, cfg.d_mlp
        zero = lambda *s: torch.zeros(*s, dtype=t["self_attn.q_proj.weight"].dtype,  # noqa: E731
                                      device=t["self_attn.q_proj.weight"].device)
        bias = lambda key, n: t[key].reshape(n, e) if key in t else zero(n, e)      # noqa: E731  [n·e] → [n e]
        return Block(
            ln1_w=t["input_layernorm.weight"], ln1_b=zero(d),
            W_Q=heads_in(t["self_attn.q_proj.weight"], h, e),
            W_K=expand_kv(heads_in(t["self_attn.k_proj.weight"], kv, e), h),          # [kv d e] → [h d e]
            W_V=expand_kv(heads_in(t["self_attn.v_proj.weight"], kv, e), h),
            b_Q=bias("self_attn.q_proj.bias", h), b_K=expand_kv(bias("self_attn.k_proj.bias", kv), h),
            b_V=expand_kv(bias("self_attn.v_proj.bias", kv), h),
            W_O=heads_out(t["self_attn.o_proj.weight"], h, e), b_O=t.get("self_attn.o_proj.bias", zero(d)),
            ln2_w=t["post_attention_layernorm.weight"], ln2_b=zero(d),
            W_gate=t["mlp.gate_proj.weight"].T, b_gate=t.get("mlp.gate_proj.bias", zero(m)),   # [out in] → [in out]
            W_in=t["mlp.up_proj.weight"].T, b_in=t.get("mlp.up_proj.bias", zero(m)),
            W_out=t["mlp.down_proj.weight"].T, b_out=t.get("mlp.down_proj.bias", zero(d)),
        )

    def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
        kv = cfg.kv_heads
        if leaf.startswith("self_attn."):
            proj, kind = leaf.split(".")[1:]
            if proj == "o_proj":
                t = heads_out_inverse(b.W_O) if kind == "weight" else b.b_O
            else:
                X = proj[0].upper()
                t = getattr(b, f"{'W' if kind == 'weight' else 'b'}_{X}")
                if X != "Q":
                    t = group_kv(t, kv, f"{X} of a grouped-query checkpoint")
                t = heads_in_inverse(t) if kind == "weight" else t.reshape(-1)
        elif leaf.startswith("mlp."):
            proj, kind = leaf.split(".")[1:]
            field = {"gate_proj": "gate", "up_proj": "in", "down_proj": "out"}[proj]
            t = getattr(b, f"W_{field}").T if kind == "weight" else getattr(b, f"b_{field}")
        else:
            t = b.ln1_w if leaf == "input_layernorm.weight" else b.ln2_w
        return t.detach().to("cpu", torch.float32).contiguous()

    def hf_config(cfg: Config, untied: bool = True) -> dict:
        out = {
            "architectures": [hf_class], "model_type": name,
            "vocab_size": cfg.d_vocab, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.d_head,
            "intermediate_size": cfg.d_mlp, "hidden_act": cfg.act_fn, "max_position_embeddings": cfg.n_ctx,
            "rms_norm_eps": cfg.ln_eps, **rope_hf(cfg), "tie_word_embeddings": not untied,
            "attention_dropout": 0.0,
        }
        return out | ((extra_config(cfg) if callable(extra_config) else extra_config) or {})

    return Family(
        name=name, title=title, model_types=(name,), hf_class=hf_class, prefix=PREFIX,
        top={"W_E": "embed_tokens.weight", "ln_final_w": "norm.weight"}, leaves=tuple(leaves), buffers=_BUFFERS,
        unembed="lm_head.weight", block_re=_LAYER_RE, block_name=_name, config=config,
        tied=lambda hf: tie(hf, tied_default), hf_config=hf_config, shapes=shapes,
        block_from_hf=block_from_hf, hf_from_block=hf_from_block, top_buffers=("rotary_emb.inv_freq",),
        variant=variant,
    )


#: Llama's biases are config options; one Family per combination, chosen by :func:`config`.
def variant(hf: dict) -> Family:
    """The Llama family object for this config's bias options."""
    return _VARIANTS[biases(hf)]


_VARIANTS = {(a, m): make_family("llama", "Llama", "LlamaForCausalLM", qkv_bias=a, o_bias=a, mlp_bias=m,
                                 extra_config={"attention_bias": a, "mlp_bias": m}, variant=variant)
             for a in (False, True) for m in (False, True)}
FAMILY = _VARIANTS[(False, False)]


__all__ = ["FAMILY", "config_from_hf", "make_family", "variant"]

