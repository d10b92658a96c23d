"""OPT (``model_type: opt``): its config.json and its state-dict layout.

Config
------
``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``ffn_dim``, ``vocab_size``,
``max_position_embeddings`` are integers in 1..2^31−1; ``activation_function`` one headscope
implements (OPT's is ``relu``); LayerNorm ε is PyTorch's default 1e-5 (OPT's config has none).
Supported: the pre-LN models (``do_layer_norm_before: true``: OPT-125m, 1.3b and larger) with a
final LayerNorm, biases (``enable_bias: true``) and affine LayerNorms
(``layer_norm_elementwise_affine: true``). Refused in one line: post-LN
(``do_layer_norm_before: false``, OPT-350m), ``word_embed_proj_dim`` ≠ ``hidden_size``
(``project_in``/``project_out``, OPT-350m), ``_remove_final_layer_norm``, ``enable_bias: false``,
``layer_norm_elementwise_affine: false``.

Positions
---------
OPT's ``embed_positions`` has ``max_position_embeddings + 2`` rows and position p reads row
p + 2 (a fairseq padding-index legacy; transformers' ``OPTLearnedPositionalEmbedding.offset``).
headscope's W_pos is rows ``2:`` ([n_ctx d], position 0 first; :attr:`Family.pos_offset` = 2).
:meth:`Model.save` copies the stored table, the two leading rows included; weights written from
a :class:`Weights` alone get zeros there (no position ever reads them).

Attention
---------
transformers scales the query *after* its bias, ``q = (x W_Q + b_Q)/√d_head``, then ``score = q·k``;
headscope's ``score = (x W_Q + b_Q)·k / √d_head`` is the same number (hook_q is unscaled).

State dict
----------
Keys may carry the ``model.`` prefix (``OPTForCausalLM.save_pretrained``) or not (``OPTModel``
files on the hub: ``decoder.…``). q/k/v/out and fc1/fc2 are ``nn.Linear`` weights stored
[out in], transposed once here (shapes asserted by the checkpoint first).
"""

from __future__ import annotations

import re

import torch

from ..._errors import HeadscopeError
from ..config import Config, _show
from ..weights import Block
from .base import Family
from .gpt2 import _flag, _size, tie_word_embeddings

PREFIX = "model."
_LEAVES = ("self_attn_layer_norm.weight", "self_attn_layer_norm.bias",
           "self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight", "self_attn.k_proj.bias",
           "self_attn.v_proj.weight", "self_attn.v_proj.bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
           "final_layer_norm.weight", "final_layer_norm.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")
_LAYER_RE = re.compile(r"decoder\.layers\.(0|[1-9][0-9]*)\.(.+)")
OFFSET = 2

#: (key, value headscope requires, what a different value means): refused in one line.
_REFUSED = (("do_layer_norm_before", True, "post-LN OPT (OPT-350m style) is not supported"),
            ("_remove_final_layer_norm", False, "OPT without a final layer norm is not supported"),
            ("enable_bias", True, "OPT without biases is not supported"),
            ("layer_norm_elementwise_affine", True, "OPT with non-affine layer norms is not supported"))


def config_from_hf(hf: dict) -> Config:
    """Validate an OPT config.json and read its shapes (module docstring)."""
    tie_word_embeddings(hf)
    for key, want, why in _REFUSED:
        if _flag(hf, key, want) != want:
            raise HeadscopeError(f"unsupported config: {key} is {str(not want).lower()} ({why})")
    d_model = _size(hf, "hidden_size")
    proj = hf.get("word_embed_proj_dim")
    if proj is not None and proj != d_model:
        raise HeadscopeError(f"unsupported config: word_embed_proj_dim {_show(proj)} differs from hidden_size "
                             f"{d_model} (OPT's project_in/project_out is not supported)")
    act = hf.get("activation_function", "relu")
    if not isinstance(act, str):
        raise HeadscopeError(f"config: activation_function must be a string, got {_show(act)}")
    return Config(
        n_layers=_size(hf, "num_hidden_layers"),
        d_model=d_model,
        n_heads=_size(hf, "num_attention_heads"),
        d_mlp=_size(hf, "ffn_dim"),
        d_vocab=_size(hf, "vocab_size"),
        n_ctx=_size(hf, "max_position_embeddings"),
        ln_eps=1e-5,
        act_fn=act,
        family="opt",
    )


def hf_config(cfg: Config, untied: bool = False) -> dict:
    """A config.json that transformers' OPTForCausalLM loads."""
    if cfg.ln_eps != 1e-5:
        raise HeadscopeError(f"OPT's layer norms have ε = 1e-5, got {cfg.ln_eps}")
    return {
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "vocab_size": cfg.d_vocab,
        "max_position_embeddings": cfg.n_ctx,
        "hidden_size": cfg.d_model,
        "word_embed_proj_dim": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "ffn_dim": cfg.d_mlp,
        "activation_function": cfg.act_fn,
        "do_layer_norm_before": True,
        "enable_bias": True,
        "layer_norm_elementwise_affine": True,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "layerdrop": 0.0,
        "pad_token_id": 1,
        "bos_token_id": 2,
        "eos_token_id": 2,
        "tie_word_embeddings": not untied,
    }


def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Canonical (unprefixed) name → shape of every OPT weight but lm_head, in model order."""
    d, m, V = cfg.d_model, cfg.d_mlp, cfg.d_vocab
    out = {"decoder.embed_tokens.weight": (V, d), "decoder.embed_positions.weight": (cfg.n_ctx + OFFSET, d)}
    leaf = {"self_attn_layer_norm.weight": (d,), "self_attn_layer_norm.bias": (d,)}
    for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
        leaf.update({f"self_attn.{n}.weight": (d, d), f"self_attn.{n}.bias": (d,)})
    leaf.update({"final_layer_norm.weight": (d,), "final_layer_norm.bias": (d,),
                 "fc1.weight": (m, d), "fc1.bias": (m,), "fc2.weight": (d, m), "fc2.bias": (d,)})
    for l in range(cfg.n_layers):
        out.update({f"decoder.layers.{l}.{k}": s for k, s in leaf.items()})
    out.update({"decoder.final_layer_norm.weight": (d,), "decoder.final_layer_norm.bias": (d,)})
    return out


def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
    """A block from its HF tensors (keyed by leaf name: ``self_attn.q_proj.weight`` …)."""
    d, h, e = cfg.d_model, cfg.n_heads, cfg.d_head
    a = "self_attn."
    W_Q, W_K, W_V = (t[a + n + ".weight"].T.reshape(d, h, e).permute(1, 0, 2).contiguous()   # [h*e d] → [d h*e] → [h d e]
                     for n in ("q_proj", "k_proj", "v_proj"))
    b_Q, b_K, b_V = (t[a + n + ".bias"].reshape(h, e) for n in ("q_proj", "k_proj", "v_proj"))  # [h*e] → [h e]
    return Block(
        ln1_w=t["self_attn_layer_norm.weight"], ln1_b=t["self_attn_layer_norm.bias"],
        W_Q=W_Q, W_K=W_K, W_V=W_V, b_Q=b_Q, b_K=b_K, b_V=b_V,
        W_O=t[a + "out_proj.weight"].T.reshape(h, e, d).contiguous(), b_O=t[a + "out_proj.bias"],  # [d h*e] → [h e d]
        ln2_w=t["final_layer_norm.weight"], ln2_b=t["final_layer_norm.bias"],
        W_in=t["fc1.weight"].T.contiguous(), b_in=t["fc1.bias"],                                  # [m d] → [d m]
        W_out=t["fc2.weight"].T.contiguous(), b_out=t["fc2.bias"],                                # [d m] → [m d]
    )


def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
    """One HF tensor (``self_attn.q_proj.weight`` …) of block `b`, float32 on the CPU."""
    d = cfg.d_model
    qkv = {"q_proj": (b.W_Q, b.b_Q), "k_proj": (b.W_K, b.b_K), "v_proj": (b.W_V, b.b_V)}
    name = leaf[len("self_attn."):].split(".")[0] if leaf.startswith("self_attn.") else None
    if name in qkv:
        W, bias = qkv[name]
        t = W.permute(1, 0, 2).reshape(d, d).T if leaf.endswith(".weight") else bias.reshape(d)  # [h d e] → [h*e d]
    elif leaf == "self_attn.out_proj.weight":
        t = b.W_O.reshape(d, d).T                                                                 # [h e d] → [d h*e]
    elif leaf in ("fc1.weight", "fc2.weight"):
        t = (b.W_in if leaf == "fc1.weight" else b.W_out).T
    else:
        t = getattr(b, {"self_attn.out_proj.bias": "b_O", "self_attn_layer_norm.weight": "ln1_w",
                        "self_attn_layer_norm.bias": "ln1_b", "final_layer_norm.weight": "ln2_w",
                        "final_layer_norm.bias": "ln2_b", "fc1.bias": "b_in", "fc2.bias": "b_out"}[leaf])
    return t.detach().to("cpu", torch.float32).contiguous()


FAMILY = Family(
    name="opt", title="OPT", model_types=("opt",), hf_class="OPTForCausalLM", prefix=PREFIX,
    top={"W_E": "decoder.embed_tokens.weight", "W_pos": "decoder.embed_positions.weight",
         "ln_final_w": "decoder.final_layer_norm.weight", "ln_final_b": "decoder.final_layer_norm.bias"},
    leaves=_LEAVES, buffers=(), unembed="lm_head.weight",
    block_re=_LAYER_RE, block_name=lambda layer, leaf: f"decoder.layers.{layer}.{leaf}",
    config=config_from_hf, tied=tie_word_embeddings, hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block, pos_offset=OFFSET,
)
