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

import dataclasses
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


def _proj_dim(hf: dict, d: int) -> int:
    """word_embed_proj_dim (null or absent: hidden_size, as OPTConfig)."""
    p = hf.get("word_embed_proj_dim")
    return d if p is None else size(hf, "word_embed_proj_dim")


def config_from_hf(hf: dict) -> Config:
    d = size(hf, "hidden_size")
    _proj_dim(hf, d)
    pre = flag(hf, "do_layer_norm_before", True)
    for key, ok in (("enable_bias", True), ("layer_norm_elementwise_affine", True)):
        if flag(hf, key, ok) != ok:
            raise HeadscopeError(f"unsupported config: {key} {str(not ok).lower()}")
    if pre and flag(hf, "_remove_final_layer_norm", False):
        raise HeadscopeError("unsupported config: _remove_final_layer_norm true (a pre-LN OPT without its final "
                             "LayerNorm)")
    act = hf.get("activation_function", "relu")
    return Config(
        n_layers=size(hf, "num_hidden_layers"), d_model=d, n_heads=size(hf, "num_attention_heads"),
        d_mlp=size(hf, "ffn_dim"), d_vocab=size(hf, "vocab_size"), n_ctx=size(hf, "max_position_embeddings"),
        ln_eps=1e-5, act_fn=act if isinstance(act, str) else repr(act), family="opt",
        post_ln=not pre, pre_norms=pre, final_ln=pre,
    )


def hf_config(cfg: Config, untied: bool = False, proj: int | None = None) -> dict:
    if cfg.post_ln and proj is None:
        raise HeadscopeError("cannot write a post-LN OPT (opt-350m) from weights alone: its project_in/project_out "
                             "are folded into W_E and W_U (Model.save writes the stored tensors)")
    return {
        "architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": cfg.d_vocab,
        "hidden_size": cfg.d_model, "word_embed_proj_dim": proj or cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "ffn_dim": cfg.d_mlp, "max_position_embeddings": cfg.n_ctx,
        "activation_function": cfg.act_fn, "do_layer_norm_before": not cfg.post_ln, "enable_bias": True,
        "layer_norm_elementwise_affine": True, "dropout": 0.0, "attention_dropout": 0.0, "layerdrop": 0.0,
        "tie_word_embeddings": not untied, "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1,
    }


def _name(layer: int, leaf: str) -> str:
    return f"layers.{layer}.{leaf}"


def shapes(cfg: Config, proj: int | None = None) -> dict[str, tuple[int, ...]]:
    d, m = cfg.d_model, cfg.d_mlp
    p = proj or d
    leaf = {"self_attn_layer_norm.weight": (d,), "self_attn_layer_norm.bias": (d,)}
    for x in ("q", "k", "v", "out"):
        leaf |= {f"{_S}{x}_proj.weight": (d, d), f"{_S}{x}_proj.bias": (d,)}
    leaf |= {"final_layer_norm.weight": (d,), "final_layer_norm.bias": (d,), "fc1.weight": (m, d), "fc1.bias": (m,),
             "fc2.weight": (d, m), "fc2.bias": (d,)}
    head = {"embed_tokens.weight": (cfg.d_vocab, p), "embed_positions.weight": (cfg.n_ctx + OFFSET, d)}
    tail = {} if cfg.post_ln else {"final_layer_norm.weight": (d,), "final_layer_norm.bias": (d,)}
    if p != d:
        head |= {"project_in.weight": (d, p)}
        tail |= {"project_out.weight": (p, d)}
    return layered_shapes(head, leaf, tail, cfg.n_layers, _name)


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


def top_combine(top: dict, W_U: torch.Tensor, cfg: Config) -> tuple[dict, torch.Tensor]:
    """opt-350m: project_in folded into W_E (W_E = embed_tokens @ project_inᵀ [v d]) and project_out
    into W_U (logits = (x @ project_outᵀ) @ embed_tokensᵀ, so W_U = project_outᵀ @ embed_tokensᵀ [d v]);
    post-LN: no final LayerNorm (ones, zeros)."""
    top = dict(top)
    P_in, P_out = top.pop("project_in", None), top.pop("project_out", None)
    if P_in is not None:
        top["W_E"] = top["W_E"] @ P_in.T                                          # [v p] @ [p d] → [v d]
        W_U = P_out.T @ W_U                                                        # [d p] @ [p v] → [d v]
    if cfg.post_ln:
        like = top["W_pos"]
        top["ln_final_w"] = torch.ones(cfg.d_model, dtype=like.dtype, device=like.device)
        top["ln_final_b"] = torch.zeros(cfg.d_model, dtype=like.dtype, device=like.device)
    return top, W_U


_TOP = {"W_E": "embed_tokens.weight", "W_pos": "embed_positions.weight", "ln_final_w": "final_layer_norm.weight",
        "ln_final_b": "final_layer_norm.bias"}


def variant(hf: dict) -> Family:
    """The OPT family object for this config: pre-LN (every OPT but one) or post-LN with
    word_embed_proj_dim p (opt-350m: p = 512 < hidden 1024, project_in/project_out stored)."""
    d = hf.get("hidden_size")
    post = hf.get("do_layer_norm_before", True) is False
    p = hf.get("word_embed_proj_dim") if hf.get("word_embed_proj_dim") is not None else d
    if not post and p == d:
        return FAMILY
    top = {k: v for k, v in _TOP.items() if not (post and k.startswith("ln_final"))}
    if p != d:
        top |= {"project_in": "project_in.weight", "project_out": "project_out.weight"}
    return dataclasses.replace(
        FAMILY, top=top, shapes=lambda cfg: shapes(cfg, p), top_combine=top_combine,
        hf_config=lambda cfg, untied=False: hf_config(cfg, untied, p))


FAMILY = Family(
    name="opt", title="OPT", model_types=("opt",), hf_class="OPTForCausalLM", prefix=PREFIX,
    top=_TOP, leaves=_LEAVES, buffers=(), unembed="lm_head.weight", block_re=_LAYER_RE, block_name=_name,
    config=config_from_hf, tied=lambda hf: tie(hf, True), hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block, top_from_hf=top_from_hf, top_to_hf=top_to_hf,
    alt_prefixes=("decoder.",), variant=variant,
)
