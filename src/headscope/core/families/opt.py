"""OPT (``model_type: opt``): its config.json and state-dict layout.

Config
------
``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``ffn_dim``, ``vocab_size``,
``max_position_embeddings`` (n_ctx), ``activation_function`` (relu). Pre-LN
(``do_layer_norm_before: true``, every OPT but opt-350m) with a final LayerNorm; refused in one
line: post-LN (``do_layer_norm_before: false``: opt-350m), ``word_embed_proj_dim`` ≠
``hidden_size`` (opt-350m's project_in/project_out), ``enable_bias: false``,
``layer_norm_elementwise_affine: false``, ``_remove_final_layer_norm: true``. LayerNorm ε is
PyTorch's default 1e-5. Tied unembedding.

Positions: OPT's learned table ``embed_positions`` has ``n_ctx + 2`` rows and position p reads
row p + 2 (the offset of 2, a fairseq legacy). The canonical ``W_pos`` is rows 2 onward
[n_ctx d_model]; the first two rows are never read by an unpadded sequence and are written
back as stored.

State dict
----------
``model.decoder.embed_tokens``/``embed_positions``/``final_layer_norm`` and
``model.decoder.layers.{i}.self_attn.{q,k,v,out}_proj`` (``nn.Linear``, [out in], with
biases), ``self_attn_layer_norm`` (before attention), ``final_layer_norm`` (before the MLP),
``fc1``, ``fc2``. The hub's OPT files (saved from ``OPTModel``) have ``decoder.…`` keys instead:
both prefixes are read, ``model.decoder.`` is written. The attention scale 1/√d_head multiplies the biased query, which is the
same score q·k/√d_head as GPT-2's.
"""

from __future__ import annotations

import re

import torch

from ..._errors import HeadscopeError
from ..config import Config
from ..weights import Block
from .base import Family, flag, heads_in, heads_in_inverse, heads_out, heads_out_inverse, layered_shapes, size, tie

PREFIX = "model.decoder."
OFFSET = 2
_LAYER_RE = re.compile(r"layers\.(0|[1-9][0-9]*)\.(.+)")
_S = "self_attn."
_LEAVES = ("self_attn_layer_norm.weight", "self_attn_layer_norm.bias") + tuple(
    f"{_S}{x}_proj.{k}" for x in ("q", "k", "v", "out") for k in ("weight", "bias")) + (
    "final_layer_norm.weight", "final_layer_norm.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")


def config_from_hf(hf: dict) -> Config:
    d = size(hf, "hidden_size")
    if not flag(hf, "do_layer_norm_before", True):
        raise HeadscopeError("unsupported config: do_layer_norm_before false (post-LN OPT, e.g. opt-350m)")
    if hf.get("word_embed_proj_dim") not in (None, d):          # null: hidden_size, as transformers reads it
        raise HeadscopeError(f"unsupported config: word_embed_proj_dim {hf['word_embed_proj_dim']} ≠ hidden_size "
                             f"{d} (OPT's project_in/project_out, e.g. opt-350m)")
    for key, ok in (("enable_bias", True), ("layer_norm_elementwise_affine", True),
                    ("_remove_final_layer_norm", False)):
        if flag(hf, key, ok) != ok:
            raise HeadscopeError(f"unsupported config: {key} {str(not ok).lower()}")
    act = hf.get("activation_function", "relu")
    return Config(
        n_layers=size(hf, "num_hidden_layers"), d_model=d, n_heads=size(hf, "num_attention_heads"),
        d_mlp=size(hf, "ffn_dim"), d_vocab=size(hf, "vocab_size"), n_ctx=size(hf, "max_position_embeddings"),
        ln_eps=1e-5, act_fn=act if isinstance(act, str) else repr(act), family="opt",
    )


def hf_config(cfg: Config, untied: bool = False) -> dict:
    return {
        "architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": cfg.d_vocab,
        "hidden_size": cfg.d_model, "word_embed_proj_dim": cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "ffn_dim": cfg.d_mlp, "max_position_embeddings": cfg.n_ctx,
        "activation_function": cfg.act_fn, "do_layer_norm_before": True, "enable_bias": True,
        "layer_norm_elementwise_affine": True, "dropout": 0.0, "attention_dropout": 0.0, "layerdrop": 0.0,
        "tie_word_embeddings": not untied, "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1,
    }


def _name(layer: int, leaf: str) -> str:
    return f"layers.{layer}.{leaf}"


def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    d, m = cfg.d_model, cfg.d_mlp
    leaf = {"self_attn_layer_norm.weight": (d,), "self_attn_layer_norm.bias": (d,)}
    for x in ("q", "k", "v", "out"):
        leaf |= {f"{_S}{x}_proj.weight": (d, d), f"{_S}{x}_proj.bias": (d,)}
    leaf |= {"final_layer_norm.weight": (d,), "final_layer_norm.bias": (d,), "fc1.weight": (m, d), "fc1.bias": (m,),
             "fc2.weight": (d, m), "fc2.bias": (d,)}
    return layered_shapes({"embed_tokens.weight": (cfg.d_vocab, d), "embed_positions.weight": (cfg.n_ctx + OFFSET, d)},
                          leaf, {"final_layer_norm.weight": (d,), "final_layer_norm.bias": (d,)}, cfg.n_layers, _name)


def top_from_hf(field: str, t: torch.Tensor, cfg: Config) -> torch.Tensor:
    """W_pos: rows OFFSET… of embed_positions (position p reads row p + 2)."""
    return t[OFFSET:] if field == "W_pos" else t                                            # [n_ctx+2 d] → [n_ctx d]


def top_to_hf(field: str, t: torch.Tensor, cfg: Config) -> torch.Tensor:
    """W_pos → embed_positions: OFFSET zero rows first (never read by an unpadded sequence)."""
    return torch.cat([t.new_zeros(OFFSET, t.shape[1]), t]) if field == "W_pos" else t     # [n_ctx d] → [n_ctx+2 d]


def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
    h, e = cfg.n_heads, cfg.d_head
    W = {x: heads_in(t[f"{_S}{x}_proj.weight"], h, e) for x in "qkv"}                       # [h d e]
    b = {x: t[f"{_S}{x}_proj.bias"].reshape(h, e) for x in "qkv"}                           # [h·e] → [h e]
    return Block(
        ln1_w=t["self_attn_layer_norm.weight"], ln1_b=t["self_attn_layer_norm.bias"],
        W_Q=W["q"], W_K=W["k"], W_V=W["v"], b_Q=b["q"], b_K=b["k"], b_V=b["v"],
        W_O=heads_out(t[f"{_S}out_proj.weight"], h, e), b_O=t[f"{_S}out_proj.bias"],
        ln2_w=t["final_layer_norm.weight"], ln2_b=t["final_layer_norm.bias"],
        W_in=t["fc1.weight"].T, b_in=t["fc1.bias"], W_out=t["fc2.weight"].T, b_out=t["fc2.bias"],  # [out in] → [in out]
    )


def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
    if leaf.startswith(_S):
        x, kind = leaf[len(_S):].split("_proj.")
        if x == "out":
            t = heads_out_inverse(b.W_O) if kind == "weight" else b.b_O
        else:
            t = heads_in_inverse(getattr(b, f"W_{x.upper()}")) if kind == "weight" else getattr(b, f"b_{x.upper()}").reshape(-1)
    elif leaf in ("fc1.weight", "fc2.weight"):
        t = (b.W_in if leaf == "fc1.weight" else b.W_out).T
    else:
        t = getattr(b, {"self_attn_layer_norm.weight": "ln1_w", "self_attn_layer_norm.bias": "ln1_b",
                        "final_layer_norm.weight": "ln2_w", "final_layer_norm.bias": "ln2_b",
                        "fc1.bias": "b_in", "fc2.bias": "b_out"}[leaf])
    return t.detach().to("cpu", torch.float32).contiguous()


FAMILY = Family(
    name="opt", title="OPT", model_types=("opt",), hf_class="OPTForCausalLM", prefix=PREFIX,
    top={"W_E": "embed_tokens.weight", "W_pos": "embed_positions.weight", "ln_final_w": "final_layer_norm.weight",
         "ln_final_b": "final_layer_norm.bias"},
    leaves=_LEAVES, buffers=(), unembed="lm_head.weight", block_re=_LAYER_RE, block_name=_name,
    config=config_from_hf, tied=lambda hf: tie(hf, True), hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block, top_from_hf=top_from_hf, top_to_hf=top_to_hf,
    alt_prefixes=("decoder.",),
)
