"""GPT-NeoX / Pythia (``model_type: gpt_neox``): its config.json and state-dict layout.

Config
------
``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``intermediate_size``,
``vocab_size`` (Pythia's is padded: 50304 rows for 50277 tokens), ``max_position_embeddings``
(n_ctx), ``layer_norm_eps``, ``hidden_act`` (Pythia: exact ``gelu``). Rotary on the first
``int(d_head · rotary_pct)`` dims of each head (``rotary_pct`` / ``partial_rotary_factor``) with
base ``rotary_emb_base`` (or ``rope_parameters``, as transformers resolves them:
:func:`.base.rope_config`; a top-level ``rope_theta`` is ignored, as there; :mod:`headscope.core.rotary`); ``use_parallel_residual``
(default true: ``x + attn(ln1 x) + mlp(ln2 x)``); ``attention_bias`` (default true);
``tie_word_embeddings`` (default false: the unembedding ``embed_out.weight`` is its own tensor).

State dict
----------
Keys ``gpt_neox.embed_in.weight``, ``gpt_neox.layers.{i}.…``, ``gpt_neox.final_layer_norm.*``
and ``embed_out.weight`` (no prefix). Linear layers store [out in]. The fused
``attention.query_key_value.weight`` [3·h·e d] is laid out per head — rows
``[h, (q|k|v), e]`` — unlike GPT-2's [q|k|v] blocks. Buffers ``attention.bias``,
``attention.masked_bias``, ``attention.rotary_emb.inv_freq`` (older checkpoints) are ignored.
"""

from __future__ import annotations

import re

import torch

from ..config import Config
from ..weights import Block
from .base import (Family, flag, heads_in, heads_in_inverse, heads_out, heads_out_inverse, layered_shapes, number,
                   rope_config, rope_hf, size, tie)

PREFIX = "gpt_neox."
_LAYER_RE = re.compile(r"layers\.(0|[1-9][0-9]*)\.(.+)")
_LEAVES = ("input_layernorm.weight", "input_layernorm.bias", "attention.query_key_value.weight",
           "attention.query_key_value.bias", "attention.dense.weight", "attention.dense.bias",
           "post_attention_layernorm.weight", "post_attention_layernorm.bias", "mlp.dense_h_to_4h.weight",
           "mlp.dense_h_to_4h.bias", "mlp.dense_4h_to_h.weight", "mlp.dense_4h_to_h.bias")
_BUFFERS = ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq")


def config_from_hf(hf: dict) -> Config:
    d, h = size(hf, "hidden_size"), size(hf, "num_attention_heads")
    if not flag(hf, "attention_bias", True):
        from ..._errors import HeadscopeError
        raise HeadscopeError("unsupported config: attention_bias false (GPT-NeoX without attention biases)")
    act = hf.get("hidden_act", "gelu")
    n_ctx = size(hf, "max_position_embeddings")
    return Config(
        n_layers=size(hf, "num_hidden_layers"), d_model=d, n_heads=h, d_mlp=size(hf, "intermediate_size"),
        d_vocab=size(hf, "vocab_size"), n_ctx=n_ctx,
        ln_eps=number(hf, "layer_norm_eps", 1e-5), act_fn=act if isinstance(act, str) else repr(act),
        family="gpt_neox", parallel_residual=flag(hf, "use_parallel_residual", True),
        **rope_config(hf, d // h, n_ctx, theta_key="rotary_emb_base", pct_key="rotary_pct", default_pct=0.25,
                      partial=True),
    )


def hf_config(cfg: Config, untied: bool = True) -> dict:
    """A config.json that transformers' GPTNeoXForCausalLM loads."""
    return {
        "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
        "vocab_size": cfg.d_vocab, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "intermediate_size": cfg.d_mlp, "hidden_act": cfg.act_fn,
        "max_position_embeddings": cfg.n_ctx, "layer_norm_eps": cfg.ln_eps,
        "rotary_pct": cfg.rotary_dim / cfg.d_head, "rotary_emb_base": cfg.rotary_base,
        "rope_scaling": rope_hf(cfg)["rope_scaling"],
        "use_parallel_residual": cfg.parallel_residual, "attention_bias": True,
        "hidden_dropout": 0.0, "attention_dropout": 0.0, "tie_word_embeddings": not untied,
        "bos_token_id": 0, "eos_token_id": 0,
    }


def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    d, m, h, e = cfg.d_model, cfg.d_mlp, cfg.n_heads, cfg.d_head
    leaf = {"input_layernorm.weight": (d,), "input_layernorm.bias": (d,),
            "attention.query_key_value.weight": (3 * h * e, d), "attention.query_key_value.bias": (3 * h * e,),
            "attention.dense.weight": (d, h * e), "attention.dense.bias": (d,),
            "post_attention_layernorm.weight": (d,), "post_attention_layernorm.bias": (d,),
            "mlp.dense_h_to_4h.weight": (m, d), "mlp.dense_h_to_4h.bias": (m,),
            "mlp.dense_4h_to_h.weight": (d, m), "mlp.dense_4h_to_h.bias": (d,)}
    return layered_shapes({"embed_in.weight": (cfg.d_vocab, d)}, leaf,
                          {"final_layer_norm.weight": (d,), "final_layer_norm.bias": (d,)}, cfg.n_layers, _name)


def _name(layer: int, leaf: str) -> str:
    return f"layers.{layer}.{leaf}"


def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
    h, e, d = cfg.n_heads, cfg.d_head, cfg.d_model
    W = t["attention.query_key_value.weight"].reshape(h, 3, e, d)                        # [3he d] → [h 3 e d]
    b = t["attention.query_key_value.bias"].reshape(h, 3, e)                              # [3he] → [h 3 e]
    W_Q, W_K, W_V = (heads_in(W[:, i].reshape(h * e, d), h, e) for i in range(3))         # [h d e] each
    return Block(
        ln1_w=t["input_layernorm.weight"], ln1_b=t["input_layernorm.bias"],
        W_Q=W_Q, W_K=W_K, W_V=W_V, b_Q=b[:, 0].contiguous(), b_K=b[:, 1].contiguous(), b_V=b[:, 2].contiguous(),
        W_O=heads_out(t["attention.dense.weight"], h, e), b_O=t["attention.dense.bias"],
        ln2_w=t["post_attention_layernorm.weight"], ln2_b=t["post_attention_layernorm.bias"],
        W_in=t["mlp.dense_h_to_4h.weight"].T, b_in=t["mlp.dense_h_to_4h.bias"],                 # Linear [out in] → [in out]
        W_out=t["mlp.dense_4h_to_h.weight"].T, b_out=t["mlp.dense_4h_to_h.bias"],
    )


def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
    h, e, d = cfg.n_heads, cfg.d_head, cfg.d_model
    if leaf == "attention.query_key_value.weight":
        parts = [heads_in_inverse(W).reshape(h, e, d) for W in (b.W_Q, b.W_K, b.W_V)]
        t = torch.stack(parts, 1).reshape(3 * h * e, d)                                       # [h 3 e d] → [3he d]
    elif leaf == "attention.query_key_value.bias":
        t = torch.stack([b.b_Q, b.b_K, b.b_V], 1).reshape(3 * h * e)
    elif leaf == "attention.dense.weight":
        t = heads_out_inverse(b.W_O)
    elif leaf in ("mlp.dense_h_to_4h.weight", "mlp.dense_4h_to_h.weight"):
        t = (b.W_in if "h_to_4h" in leaf else b.W_out).T
    else:
        t = getattr(b, {"input_layernorm.weight": "ln1_w", "input_layernorm.bias": "ln1_b",
                        "attention.dense.bias": "b_O", "post_attention_layernorm.weight": "ln2_w",
                        "post_attention_layernorm.bias": "ln2_b", "mlp.dense_h_to_4h.bias": "b_in",
                        "mlp.dense_4h_to_h.bias": "b_out"}[leaf])
    return t.detach().to("cpu", torch.float32).contiguous()


FAMILY = Family(
    name="gpt_neox", title="GPT-NeoX (Pythia)", model_types=("gpt_neox",), hf_class="GPTNeoXForCausalLM",
    prefix=PREFIX, top={"W_E": "embed_in.weight", "ln_final_w": "final_layer_norm.weight",
                        "ln_final_b": "final_layer_norm.bias"},
    leaves=_LEAVES, buffers=_BUFFERS, unembed="embed_out.weight", block_re=_LAYER_RE, block_name=_name,
    config=config_from_hf, tied=lambda hf: tie(hf, False), hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block, top_buffers=("rotary_emb.inv_freq",),
)
