"""Phi-3 (``model_type: phi3``; Phi-3-mini/medium 4k and 128k): config.json and state-dict layout.

The Llama block (RMSNorm, SwiGLU, GQA, no biases) with **fused** projections:
``self_attn.qkv_proj.weight`` [(h + 2·kv)·e d] holds the query rows, then the key rows, then the
value rows (transformers splits at h·e and h·e + kv·e), and ``mlp.gate_up_proj.weight`` [2m d]
holds the gate rows then the up rows (``gate, up = chunk(2)``; MLP = down(up ⊙ silu(gate))).
They are split once into W_Q, W_K, W_V (keys and values expanded per query head) and W_gate, W_in,
and fused again when written back.

Config: Llama's keys (``head_dim`` is hidden/heads: a stated one that differs is refused),
``partial_rotary_factor`` honoured (rotary on the first int(e·f) dims, as GPT-NeoX), rope
settings resolved as ``Phi3Config`` does (:func:`.base.rope_config`: "su" and "yarn" are read as
longrope; ``original_max_position_embeddings`` from the top level, default 4096), and
``sliding_window`` (null = none; Phi-3-mini-4k: 2047) on every layer
(``Config.attn_windows``). ``tie_word_embeddings`` defaults to false.
"""

from __future__ import annotations

import re

import torch

from ..._errors import HeadscopeError
from ..config import MAX_SIZE, Config, _show
from ..weights import Block
from .base import (Family, expand_kv, group_kv, heads_in, heads_in_inverse, heads_out, heads_out_inverse,
                   layered_shapes, number, rope_config, rope_hf, size, tie)

PREFIX = "model."
_LAYER_RE = re.compile(r"layers\.(0|[1-9][0-9]*)\.(.+)")
_LEAVES = ("input_layernorm.weight", "self_attn.qkv_proj.weight", "self_attn.o_proj.weight",
           "post_attention_layernorm.weight", "mlp.gate_up_proj.weight", "mlp.down_proj.weight")


def config_from_hf(hf: dict) -> Config:
    d, h = size(hf, "hidden_size"), size(hf, "num_attention_heads")
    kv = size(hf, "num_key_value_heads") if hf.get("num_key_value_heads") is not None else h
    if hf.get("head_dim") is not None and hf["head_dim"] != d // h:
        raise HeadscopeError(f"unsupported config: head_dim {_show(hf['head_dim'])} ≠ hidden_size / heads "
                             f"({d // h}; transformers' Phi-3 splits its fused projection by hidden/heads)")
    if d % h:
        raise HeadscopeError(f"config: hidden_size ({d}) is not divisible by num_attention_heads ({h})")
    window = hf.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_SIZE):
        raise HeadscopeError(f"config: sliding_window must be a positive integer or null, got {_show(window)}")
    n = size(hf, "num_hidden_layers")
    n_ctx = size(hf, "max_position_embeddings")
    act = hf.get("hidden_act", "silu")
    return Config(
        n_layers=n, d_model=d, n_heads=h, d_mlp=size(hf, "intermediate_size"), d_vocab=size(hf, "vocab_size"),
        n_ctx=n_ctx, ln_eps=number(hf, "rms_norm_eps", 1e-5), act_fn=act if isinstance(act, str) else repr(act),
        family="phi3", n_kv_heads=kv if kv != h else None, norm="rmsnorm", gated_mlp=True, qk_bias=False,
        attn_windows=(window,) * n if window else (),
        **rope_config(hf, d // h, n_ctx, default_pct=1.0, partial=True, top_original=4096,
                      type_aliases={"su": "longrope", "yarn": "longrope"}),
    )


def _name(layer: int, leaf: str) -> str:
    return f"layers.{layer}.{leaf}"


def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    d, m, h, kv, e = cfg.d_model, cfg.d_mlp, cfg.n_heads, cfg.kv_heads, cfg.d_head
    leaf = {"input_layernorm.weight": (d,), "self_attn.qkv_proj.weight": ((h + 2 * kv) * e, d),
            "self_attn.o_proj.weight": (d, h * e), "post_attention_layernorm.weight": (d,),
            "mlp.gate_up_proj.weight": (2 * m, d), "mlp.down_proj.weight": (d, m)}
    return layered_shapes({"embed_tokens.weight": (cfg.d_vocab, d)}, leaf, {"norm.weight": (d,)}, cfg.n_layers, _name)


def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
    h, kv, e, d, m = cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.d_model, cfg.d_mlp
    qkv = t["self_attn.qkv_proj.weight"]
    q, k, v = qkv.split([h * e, kv * e, kv * e])                                     # [(h+2kv)e d] → rows of each
    gate, up = t["mlp.gate_up_proj.weight"].chunk(2)                                 # [2m d] → [m d] × 2
    zero = lambda *s: torch.zeros(*s, dtype=qkv.dtype, device=qkv.device)           # noqa: E731
    return Block(
        ln1_w=t["input_layernorm.weight"], ln1_b=zero(d),
        W_Q=heads_in(q, h, e), W_K=expand_kv(heads_in(k, kv, e), h), W_V=expand_kv(heads_in(v, kv, e), h),
        b_Q=zero(h, e), b_K=zero(h, e), b_V=zero(h, e), W_O=heads_out(t["self_attn.o_proj.weight"], h, e),
        b_O=zero(d), ln2_w=t["post_attention_layernorm.weight"], ln2_b=zero(d),
        W_gate=gate.T, b_gate=zero(m), W_in=up.T, b_in=zero(m), W_out=t["mlp.down_proj.weight"].T, b_out=zero(d),
    )


def _no_bias(b: Block, names: str) -> None:
    for n in names.split():
        if bool(getattr(b, n).abs().max() > 0):
            raise HeadscopeError(f"cannot write a Phi-3 checkpoint whose {n} is not zero (Phi-3 has no biases)")


def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
    kv = cfg.kv_heads
    if leaf == "self_attn.qkv_proj.weight":
        _no_bias(b, "b_Q b_K b_V")
        t = torch.cat([heads_in_inverse(b.W_Q), heads_in_inverse(group_kv(b.W_K, kv, "K of a grouped-query checkpoint")),
                       heads_in_inverse(group_kv(b.W_V, kv, "V of a grouped-query checkpoint"))])
    elif leaf == "self_attn.o_proj.weight":
        _no_bias(b, "b_O")
        t = heads_out_inverse(b.W_O)
    elif leaf == "mlp.gate_up_proj.weight":
        _no_bias(b, "b_gate b_in")
        t = torch.cat([b.W_gate.T, b.W_in.T])
    elif leaf == "mlp.down_proj.weight":
        _no_bias(b, "b_out")
        t = b.W_out.T
    else:
        t = b.ln1_w if leaf == "input_layernorm.weight" else b.ln2_w
    return t.detach().to("cpu", torch.float32).contiguous()


def hf_config(cfg: Config, untied: bool = True) -> dict:
    out = {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
        "vocab_size": cfg.d_vocab, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.kv_heads, "intermediate_size": cfg.d_mlp,
        "hidden_act": cfg.act_fn, "max_position_embeddings": cfg.n_ctx, "rms_norm_eps": cfg.ln_eps, **rope_hf(cfg),
        "partial_rotary_factor": cfg.rotary_dim / cfg.d_head, "sliding_window": cfg.window(0) or None,
        "tie_word_embeddings": not untied, "attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
        # Phi-3's <|endoftext|> is id 32000 (its pad and eos); a smaller vocabulary has none
        "pad_token_id": 32000 if cfg.d_vocab > 32000 else None, "eos_token_id": 32000 if cfg.d_vocab > 32000 else None,
        "bos_token_id": 1 if cfg.d_vocab > 1 else None,
    }
    s = dict(cfg.rope_scaling)
    if "original_max_position_embeddings" in s:
        out["original_max_position_embeddings"] = s["original_max_position_embeddings"]
    return out


FAMILY = Family(
    name="phi3", title="Phi-3", model_types=("phi3",), hf_class="Phi3ForCausalLM", prefix=PREFIX,
    top={"W_E": "embed_tokens.weight", "ln_final_w": "norm.weight"}, leaves=_LEAVES,
    buffers=("self_attn.rotary_emb.inv_freq",), unembed="lm_head.weight", block_re=_LAYER_RE, block_name=_name,
    config=config_from_hf, tied=lambda hf: tie(hf, False), hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block, top_buffers=("rotary_emb.inv_freq",),
)
