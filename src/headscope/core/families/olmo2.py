"""OLMo 2 (``model_type: olmo2``; AllenAI's OLMo-2 1B/7B/13B, public training checkpoints as revisions).

Config: Llama's keys (``num_key_value_heads``, ``intermediate_size``, ``rms_norm_eps``,
``hidden_act`` silu, rope settings as Llama's: :func:`.base.rope_config`), ``tie_word_embeddings``
(default false). ``attention_bias: true`` and a stated ``head_dim`` other than hidden/heads are
refused.

Block (transformers' ``Olmo2DecoderLayer``): **no norm before the readers** — attention and MLP
read the residual stream itself (``Config.pre_norms = False``) — and an RMSNorm on each branch's
output (``Config.branch_norms``):

    h = x + N(attn(x)) ⊙ w_post_attn,   out = h + N(mlp(h)) ⊙ w_post_ff

with **QK-norm** (``Config.qk_norm``): q = N(x W_Q) ⊙ w_q and k = N(x W_K) ⊙ w_k, the RMS taken
over all heads of a position together (q over h·e, k over kv·e), before rotary. A score is then
q̂·k̂ / √e with q̂, k̂ each divided by a per-token RMS that depends on the token itself: not a fixed
bilinear form of the residual stream. The weight-only QK analyses refuse OLMo 2
(:func:`headscope.core.applicability.fixed_qk_form`).

State dict: ``model.embed_tokens.weight``, ``model.layers.{i}.self_attn.{q,k,v,o}_proj.weight``,
``self_attn.q_norm.weight`` [h·e], ``self_attn.k_norm.weight`` [kv·e] (expanded per query head in
``Block.k_norm_w``: the RMS over the repeated heads equals that over the stored ones),
``post_attention_layernorm.weight``, ``post_feedforward_layernorm.weight``,
``mlp.{gate,up,down}_proj.weight``, ``model.norm.weight``; ``lm_head.weight`` when untied.
Canonical LN1/LN2 weights are ones (unused).
"""

from __future__ import annotations

import re

import torch

from ..._errors import HeadscopeError
from ..config import Config, _show
from ..weights import Block
from .base import (Family, expand_kv, group_kv, heads_in, heads_in_inverse, heads_out, heads_out_inverse,
                   layered_shapes, number, refuse, rope_config, rope_hf, size, tie)

PREFIX = "model."
_LAYER_RE = re.compile(r"layers\.(0|[1-9][0-9]*)\.(.+)")
_ATTN = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight")
_MLP = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
_NORMS = ("self_attn.q_norm.weight", "self_attn.k_norm.weight", "post_attention_layernorm.weight",
          "post_feedforward_layernorm.weight")


def config_from_hf(hf: dict) -> Config:
    d, h = size(hf, "hidden_size"), size(hf, "num_attention_heads")
    kv = size(hf, "num_key_value_heads") if hf.get("num_key_value_heads") is not None else h
    refuse(hf, "attention_bias", False, "OLMo 2 with attention biases")
    if hf.get("head_dim") is not None and hf["head_dim"] != d // h:
        raise HeadscopeError(f"unsupported config: head_dim {_show(hf['head_dim'])} ≠ hidden_size / heads ({d // h})")
    if d % h:
        raise HeadscopeError(f"config: hidden_size ({d}) is not divisible by num_attention_heads ({h})")
    n_ctx = size(hf, "max_position_embeddings")
    act = hf.get("hidden_act", "silu")
    return Config(
        n_layers=size(hf, "num_hidden_layers"), d_model=d, n_heads=h, d_mlp=size(hf, "intermediate_size"),
        d_vocab=size(hf, "vocab_size"), n_ctx=n_ctx, ln_eps=number(hf, "rms_norm_eps", 1e-5),
        act_fn=act if isinstance(act, str) else repr(act), family="olmo2", n_kv_heads=kv if kv != h else None,
        norm="rmsnorm", gated_mlp=True, qk_bias=False, pre_norms=False, qk_norm=True, branch_norms=True,
        **rope_config(hf, d // h, n_ctx),
    )


def _name(layer: int, leaf: str) -> str:
    return f"layers.{layer}.{leaf}"


def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    d, m, h, kv, e = cfg.d_model, cfg.d_mlp, cfg.n_heads, cfg.kv_heads, cfg.d_head
    leaf = dict(zip(_ATTN, ((h * e, d), (kv * e, d), (kv * e, d), (d, h * e))))
    leaf.update(zip(_NORMS, ((h * e,), (kv * e,), (d,), (d,))))
    leaf.update(zip(_MLP, ((m, d), (m, d), (d, m))))
    return layered_shapes({"embed_tokens.weight": (cfg.d_vocab, d)}, leaf, {"norm.weight": (d,)}, cfg.n_layers, _name)


def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
    h, kv, e, d, m = cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.d_model, cfg.d_mlp
    q = t["self_attn.q_proj.weight"]
    zero = lambda *s: torch.zeros(*s, dtype=q.dtype, device=q.device)   # noqa: E731
    one = torch.ones(d, dtype=q.dtype, device=q.device)
    return Block(
        ln1_w=one, ln1_b=zero(d), ln2_w=one.clone(), ln2_b=zero(d),
        W_Q=heads_in(q, h, e), W_K=expand_kv(heads_in(t["self_attn.k_proj.weight"], kv, e), h),
        W_V=expand_kv(heads_in(t["self_attn.v_proj.weight"], kv, e), h),
        b_Q=zero(h, e), b_K=zero(h, e), b_V=zero(h, e),
        W_O=heads_out(t["self_attn.o_proj.weight"], h, e), b_O=zero(d),
        W_gate=t["mlp.gate_proj.weight"].T, b_gate=zero(m), W_in=t["mlp.up_proj.weight"].T, b_in=zero(m),
        W_out=t["mlp.down_proj.weight"].T, b_out=zero(d),
        ln1_post_w=t["post_attention_layernorm.weight"], ln2_post_w=t["post_feedforward_layernorm.weight"],
        q_norm_w=t["self_attn.q_norm.weight"].reshape(h, e),                                  # [h·e] → [h e]
        k_norm_w=expand_kv(t["self_attn.k_norm.weight"].reshape(kv, e), h),                   # [kv·e] → [h e]
    )


def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
    kv = cfg.kv_heads
    if leaf == "self_attn.q_norm.weight":
        t = b.q_norm_w.reshape(-1)
    elif leaf == "self_attn.k_norm.weight":
        t = group_kv(b.k_norm_w, kv, "the key norm of a grouped-query checkpoint").reshape(-1)
    elif leaf.endswith("layernorm.weight"):
        t = b.ln1_post_w if leaf.startswith("post_attention") else b.ln2_post_w
    elif leaf.startswith("self_attn."):
        X = leaf.split(".")[1][0].upper()
        bias = b.b_O if X == "O" else getattr(b, f"b_{X}")
        if bool(bias.abs().max() > 0):
            raise HeadscopeError(f"cannot write an OLMo 2 checkpoint whose b_{X} is not zero (no attention biases)")
        if X == "O":
            t = heads_out_inverse(b.W_O)
        else:
            t = getattr(b, f"W_{X}")
            t = heads_in_inverse(t if X == "Q" else group_kv(t, kv, f"{X} of a grouped-query checkpoint"))
    else:
        field = {"gate_proj": "gate", "up_proj": "in", "down_proj": "out"}[leaf.split(".")[1]]
        if bool(getattr(b, f"b_{field}").abs().max() > 0):
            raise HeadscopeError(f"cannot write an OLMo 2 checkpoint whose b_{field} is not zero (no MLP biases)")
        t = getattr(b, f"W_{field}").T
    if not leaf.startswith("self_attn.") or leaf.endswith("norm.weight"):
        for n in ("ln1_w", "ln2_w"):
            if not bool((getattr(b, n) == 1).all()):
                raise HeadscopeError("cannot write an OLMo 2 checkpoint with a norm before attention or MLP "
                                     "(OLMo 2 has none: LN1 and LN2 must stay ones)")
    return t.detach().to("cpu", torch.float32).contiguous()


def hf_config(cfg: Config, untied: bool = True) -> dict:
    return {
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2",
        "vocab_size": cfg.d_vocab, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.kv_heads, "intermediate_size": cfg.d_mlp,
        "hidden_act": cfg.act_fn, "max_position_embeddings": cfg.n_ctx, "rms_norm_eps": cfg.ln_eps, **rope_hf(cfg),
        "tie_word_embeddings": not untied, "attention_bias": False, "attention_dropout": 0.0,
        "pad_token_id": None, "bos_token_id": None, "eos_token_id": None,
    }


FAMILY = Family(
    name="olmo2", title="OLMo 2", model_types=("olmo2",), hf_class="Olmo2ForCausalLM", prefix=PREFIX,
    top={"W_E": "embed_tokens.weight", "ln_final_w": "norm.weight"}, leaves=_ATTN + _NORMS + _MLP,
    buffers=("self_attn.rotary_emb.inv_freq",), unembed="lm_head.weight", block_re=_LAYER_RE, block_name=_name,
    config=config_from_hf, tied=lambda hf: tie(hf, False), hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block, top_buffers=("rotary_emb.inv_freq",),
)
