"""GPT-2 (``model_type: gpt2``): its config.json and its state-dict layout, in one place.

Config
------
Sizes (``n_layer``, ``n_embd``/``hidden_size``, ``n_head``, ``n_inner``, ``vocab_size``,
``n_positions``/``n_ctx``) must be integers in 1..2^31−1 (no strings, floats or booleans),
``layer_norm_epsilon`` a finite positive number, the boolean options JSON ``true``/``false``
(never a string such as ``"false"``), ``activation_function`` one that headscope implements,
``add_cross_attention`` off. ``scale_attn_by_inverse_layer_idx`` / ``reorder_and_upcast_attn``
are honoured as transformers does.

State dict
----------
Keys may carry the ``transformer.`` prefix (``save_pretrained``) or not (the hub's files); the
causal-mask buffers ``h.{i}.attn.bias`` / ``h.{i}.attn.masked_bias`` are expected and ignored.
``lm_head.weight``, when stored and different from ``wte.weight``, is the unembedding
(transformers ≥ 5 does not tie it then; written back with ``tie_word_embeddings: false``).

HF's GPT-2 stores its linear layers as ``Conv1D`` with weight [in out], so ``y = x @ W + b``
already in headscope's right-multiplying convention; ``c_attn`` holds Q, K and V side by side:
[d_model 3·d_model] → three [d_model d_model] blocks, each reshaped to [head d_model d_head].
The shapes are checked against :func:`shapes` before any tensor reaches :func:`block_from_hf`.
"""

from __future__ import annotations

import re

import torch

from ..._errors import HeadscopeError
from ..config import Config, _show
from ..weights import Block
from .base import Family, flag as _flag, size as _size

#: boolean options of a GPT-2 config.json that headscope reads, with their defaults.
BOOLEAN_OPTIONS = {"add_cross_attention": False, "reorder_and_upcast_attn": False,
                   "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
                   "tie_word_embeddings": True}

_TOP = ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")
_LEAVES = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
           "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
           "mlp.c_proj.weight", "mlp.c_proj.bias")
_BUFFERS = ("attn.bias", "attn.masked_bias")
_LAYER_RE = re.compile(r"h\.(0|[1-9][0-9]*)\.(.+)")
PREFIX = "transformer."


# -- config.json ------------------------------------------------------------------------


def config_from_hf(hf: dict) -> Config:
    """Validate a GPT-2 config.json and read its shapes (module docstring)."""
    flags = {name: _flag(hf, name, default) for name, default in BOOLEAN_OPTIONS.items()}
    if flags["add_cross_attention"]:
        raise HeadscopeError("unsupported config: add_cross_attention is set")
    for key in ("n_layer", "n_head", "vocab_size"):
        if key not in hf:
            raise HeadscopeError(f"config.json: missing key {key!r}")
    d_model = _size(hf, "n_embd", "hidden_size")
    n_inner = hf.get("n_inner")
    eps = hf.get("layer_norm_epsilon", 1e-5)
    try:
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise TypeError
        eps = float(eps)
    except (TypeError, OverflowError):
        raise HeadscopeError(f"config: layer_norm_epsilon must be a finite positive number, got {_show(eps)}") from None
    act = hf.get("activation_function", "gelu_new")
    if not isinstance(act, str):
        raise HeadscopeError(f"config: activation_function must be a string, got {_show(act)}")
    return Config(
        n_layers=_size(hf, "n_layer"),
        d_model=d_model,
        n_heads=_size(hf, "n_head"),
        d_mlp=_size(hf, "n_inner") if n_inner is not None else 4 * d_model,
        d_vocab=_size(hf, "vocab_size"),
        n_ctx=_size(hf, "n_positions", "n_ctx"),
        ln_eps=eps,
        act_fn=act,
        scale_attn_by_inverse_layer_idx=flags["scale_attn_by_inverse_layer_idx"],
        scale_attn_weights=flags["scale_attn_weights"],
        reorder_and_upcast_attn=flags["reorder_and_upcast_attn"],
    )


def hf_config(cfg: Config, untied: bool = False) -> dict:
    """A config.json that transformers' GPT2LMHeadModel loads."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.d_vocab,
        "n_positions": cfg.n_ctx,
        "n_embd": cfg.d_model,
        "n_layer": cfg.n_layers,
        "n_head": cfg.n_heads,
        "n_inner": cfg.d_mlp,
        "activation_function": cfg.act_fn,
        "layer_norm_epsilon": cfg.ln_eps,
        "scale_attn_weights": cfg.scale_attn_weights,
        "scale_attn_by_inverse_layer_idx": cfg.scale_attn_by_inverse_layer_idx,
        "reorder_and_upcast_attn": cfg.reorder_and_upcast_attn,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "bos_token_id": cfg.d_vocab - 1,
        "eos_token_id": cfg.d_vocab - 1,
        "tie_word_embeddings": not untied,
    }


def tie_word_embeddings(hf: dict) -> bool:
    """config.json's ``tie_word_embeddings`` (default true, as in transformers)."""
    return _flag(hf, "tie_word_embeddings", True)


# -- the state dict ----------------------------------------------------------------------


def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Canonical (unprefixed) name → shape of every GPT-2 weight but lm_head, in model order."""
    d, m, V = cfg.d_model, cfg.d_mlp, cfg.d_vocab
    out = {"wte.weight": (V, d), "wpe.weight": (cfg.n_ctx, d)}
    leaf = {"ln_1.weight": (d,), "ln_1.bias": (d,), "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
            "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,), "ln_2.weight": (d,), "ln_2.bias": (d,),
            "mlp.c_fc.weight": (d, m), "mlp.c_fc.bias": (m,), "mlp.c_proj.weight": (m, d), "mlp.c_proj.bias": (d,)}
    for l in range(cfg.n_layers):
        out.update({f"h.{l}.{k}": s for k, s in leaf.items()})
    out.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
    return out


def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
    """A block from its HF tensors (keyed by leaf name: ``attn.c_attn.weight`` …)."""
    d, h, e = cfg.d_model, cfg.n_heads, cfg.d_head
    W_Q, W_K, W_V = (w.reshape(d, h, e).permute(1, 0, 2).contiguous()                       # [d h*e] → [h d e]
                     for w in t["attn.c_attn.weight"].split(d, dim=1))                      # Conv1D: [in out]
    b_Q, b_K, b_V = (b.reshape(h, e).contiguous() for b in t["attn.c_attn.bias"].split(d))   # [h*e] → [h e]
    return Block(
        ln1_w=t["ln_1.weight"], ln1_b=t["ln_1.bias"], W_Q=W_Q, W_K=W_K, W_V=W_V, b_Q=b_Q, b_K=b_K, b_V=b_V,
        W_O=t["attn.c_proj.weight"].reshape(h, e, d), b_O=t["attn.c_proj.bias"],            # [h*e d] → [h e d]
        ln2_w=t["ln_2.weight"], ln2_b=t["ln_2.bias"],
        W_in=t["mlp.c_fc.weight"], b_in=t["mlp.c_fc.bias"], W_out=t["mlp.c_proj.weight"], b_out=t["mlp.c_proj.bias"],
    )


def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
    """One HF tensor (``attn.c_attn.weight`` …) of block `b`, float32 on the CPU."""
    d = cfg.d_model
    if leaf == "attn.c_attn.weight":
        t = torch.cat([W.permute(1, 0, 2).reshape(d, d) for W in (b.W_Q, b.W_K, b.W_V)], dim=1)  # [h d e] → [d h*e]
    elif leaf == "attn.c_attn.bias":
        t = torch.cat([x.reshape(d) for x in (b.b_Q, b.b_K, b.b_V)])
    elif leaf == "attn.c_proj.weight":
        t = b.W_O.reshape(d, d)                                                                    # [h e d] → [h*e d]
    else:
        t = getattr(b, {"attn.c_proj.bias": "b_O", "ln_1.weight": "ln1_w", "ln_1.bias": "ln1_b",
                        "ln_2.weight": "ln2_w", "ln_2.bias": "ln2_b", "mlp.c_fc.weight": "W_in",
                        "mlp.c_fc.bias": "b_in", "mlp.c_proj.weight": "W_out", "mlp.c_proj.bias": "b_out"}[leaf])
    return t.detach().to("cpu", torch.float32).contiguous()


FAMILY = Family(
    name="gpt2", title="GPT-2-family", model_types=("gpt2",), hf_class="GPT2LMHeadModel", prefix=PREFIX,
    top={"W_E": "wte.weight", "W_pos": "wpe.weight", "ln_final_w": "ln_f.weight", "ln_final_b": "ln_f.bias"},
    leaves=_LEAVES, buffers=_BUFFERS, unembed="lm_head.weight",
    block_re=_LAYER_RE, block_name=lambda layer, leaf: f"h.{layer}.{leaf}",
    config=config_from_hf, tied=tie_word_embeddings, hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block,
)
