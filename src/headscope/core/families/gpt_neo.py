"""GPT-Neo (``model_type: gpt_neo``): its config.json and state-dict layout.

Config
------
``num_layers``, ``hidden_size``, ``num_heads``, ``intermediate_size`` (default 4·hidden),
``vocab_size``, ``max_position_embeddings`` (n_ctx), ``layer_norm_epsilon``,
``activation_function``; learned absolute positions (``wpe``) as GPT-2. Two differences in the
attention: scores are **not** divided by √d_head (``scale_attn_weights`` off), and the layers
that ``attention_layers`` (or its compact form ``attention_types``) marks ``local`` attend only
to the last ``window_size`` keys — key j is seen from query i when i − window < j ≤ i
(``Config.attn_windows``). Tied unembedding.

State dict
----------
``transformer.wte``/``wpe``/``ln_f`` and ``transformer.h.{i}.…`` as GPT-2, but the attention
projections are ``nn.Linear`` ([out in]) under ``attn.attention.{q,k,v,out}_proj`` with no
Q/K/V biases; the MLP's ``c_fc``/``c_proj`` are ``nn.Linear`` too. The mask buffers
``attn.attention.bias``/``masked_bias`` are ignored.
"""

from __future__ import annotations

import re

import torch

from ..._errors import HeadscopeError
from ..config import Config, _show
from ..weights import Block
from .base import Family, heads_in, heads_in_inverse, heads_out, heads_out_inverse, layered_shapes, number, size, tie

PREFIX = "transformer."
_LAYER_RE = re.compile(r"h\.(0|[1-9][0-9]*)\.(.+)")
_A = "attn.attention."
_LEAVES = ("ln_1.weight", "ln_1.bias", _A + "q_proj.weight", _A + "k_proj.weight", _A + "v_proj.weight",
           _A + "out_proj.weight", _A + "out_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
           "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")
_BUFFERS = (_A + "bias", _A + "masked_bias")


def _layers(hf: dict, n_layers: int) -> list[str]:
    """attention_types [[["global", "local"], n], …] expanded (what transformers' GPTNeoConfig uses: it
    recomputes attention_layers from it), else attention_layers; both stored must agree."""
    layers = hf.get("attention_layers")
    if "attention_types" in hf or layers is None:
        types = hf.get("attention_types", [[["global"], n_layers]])
        try:           # counted before it is expanded: [[["global", "local"], 10**9]] is 2·10⁹ layers
            total = sum(len(kinds) * n for kinds, n in types if isinstance(n, int) and isinstance(kinds, list))
            if total > n_layers:
                raise HeadscopeError(f"config: attention_types expand to {total} layers, expected {n_layers} "
                                     "(num_layers)")
            expanded = [kind for kinds, n in types for _ in range(n) for kind in kinds]
        except (TypeError, ValueError):
            raise HeadscopeError(f"config: attention_types must be [[kinds, repeat], …], got {_show(types)}") from None
        if layers is not None and layers != expanded:
            raise HeadscopeError(f"config: attention_layers {_show(layers)} disagrees with attention_types "
                                 f"(which expand to {_show(expanded)})")
        layers = expanded
    if not isinstance(layers, list) or len(layers) != n_layers or any(k not in ("global", "local") for k in layers):
        raise HeadscopeError(f"config: attention_layers must list 'global' or 'local' for each of the {n_layers} "
                             f"layers, got {_show(layers)}")
    return layers


def config_from_hf(hf: dict) -> Config:
    d, L = size(hf, "hidden_size"), size(hf, "num_layers")
    window = size(hf, "window_size") if "window_size" in hf else 256
    layers = _layers(hf, L)
    act = hf.get("activation_function", "gelu_new")
    return Config(
        n_layers=L, d_model=d, n_heads=size(hf, "num_heads"),
        d_mlp=size(hf, "intermediate_size") if hf.get("intermediate_size") is not None else 4 * d,
        d_vocab=size(hf, "vocab_size"), n_ctx=size(hf, "max_position_embeddings"),
        ln_eps=number(hf, "layer_norm_epsilon", 1e-5), act_fn=act if isinstance(act, str) else repr(act),
        scale_attn_weights=False, family="gpt_neo", qk_bias=False,
        attn_windows=tuple(window if k == "local" else 0 for k in layers) if "local" in layers else (),
    )


def hf_config(cfg: Config, untied: bool = False) -> dict:
    kinds = ["local" if cfg.window(l) else "global" for l in range(cfg.n_layers)]
    return {
        "architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo",
        "vocab_size": cfg.d_vocab, "hidden_size": cfg.d_model, "num_layers": cfg.n_layers, "num_heads": cfg.n_heads,
        "intermediate_size": cfg.d_mlp, "max_position_embeddings": cfg.n_ctx, "layer_norm_epsilon": cfg.ln_eps,
        "activation_function": cfg.act_fn, "attention_types": [[[k], 1] for k in kinds],
        "window_size": max((cfg.window(l) for l in range(cfg.n_layers)), default=0) or 256,
        "embed_dropout": 0.0, "attention_dropout": 0.0, "resid_dropout": 0.0, "tie_word_embeddings": not untied,
        "bos_token_id": cfg.d_vocab - 1, "eos_token_id": cfg.d_vocab - 1,
    }


def _name(layer: int, leaf: str) -> str:
    return f"h.{layer}.{leaf}"


def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    d, m = cfg.d_model, cfg.d_mlp
    leaf = {"ln_1.weight": (d,), "ln_1.bias": (d,), _A + "q_proj.weight": (d, d), _A + "k_proj.weight": (d, d),
            _A + "v_proj.weight": (d, d), _A + "out_proj.weight": (d, d), _A + "out_proj.bias": (d,),
            "ln_2.weight": (d,), "ln_2.bias": (d,), "mlp.c_fc.weight": (m, d), "mlp.c_fc.bias": (m,),
            "mlp.c_proj.weight": (d, m), "mlp.c_proj.bias": (d,)}
    return layered_shapes({"wte.weight": (cfg.d_vocab, d), "wpe.weight": (cfg.n_ctx, d)}, leaf,
                          {"ln_f.weight": (d,), "ln_f.bias": (d,)}, cfg.n_layers, _name)


def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
    h, e = cfg.n_heads, cfg.d_head
    W_Q, W_K, W_V = (heads_in(t[_A + f"{x}_proj.weight"], h, e) for x in "qkv")                 # [h d e]
    zero = torch.zeros(h, e, dtype=W_Q.dtype, device=W_Q.device)
    return Block(
        ln1_w=t["ln_1.weight"], ln1_b=t["ln_1.bias"], W_Q=W_Q, W_K=W_K, W_V=W_V,
        b_Q=zero, b_K=zero.clone(), b_V=zero.clone(),
        W_O=heads_out(t[_A + "out_proj.weight"], h, e), b_O=t[_A + "out_proj.bias"],
        ln2_w=t["ln_2.weight"], ln2_b=t["ln_2.bias"],
        W_in=t["mlp.c_fc.weight"].T, b_in=t["mlp.c_fc.bias"], W_out=t["mlp.c_proj.weight"].T,   # [out in] → [in out]
        b_out=t["mlp.c_proj.bias"],
    )


def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
    if leaf.startswith(_A) and leaf.endswith("_proj.weight"):
        x = leaf[len(_A)]
        if x != "o":
            if bool(getattr(b, f"b_{x.upper()}").abs().max() > 0):
                raise HeadscopeError(f"cannot write a GPT-Neo checkpoint whose b_{x.upper()} is not zero "
                                     "(GPT-Neo has no query/key/value biases)")
            t = heads_in_inverse(getattr(b, f"W_{x.upper()}"))
        else:
            t = heads_out_inverse(b.W_O)
    elif leaf in ("mlp.c_fc.weight", "mlp.c_proj.weight"):
        t = (b.W_in if "c_fc" in leaf else b.W_out).T
    else:
        t = getattr(b, {"ln_1.weight": "ln1_w", "ln_1.bias": "ln1_b", _A + "out_proj.bias": "b_O",
                        "ln_2.weight": "ln2_w", "ln_2.bias": "ln2_b", "mlp.c_fc.bias": "b_in",
                        "mlp.c_proj.bias": "b_out"}[leaf])
    return t.detach().to("cpu", torch.float32).contiguous()


FAMILY = Family(
    name="gpt_neo", title="GPT-Neo", model_types=("gpt_neo",), hf_class="GPTNeoForCausalLM", prefix=PREFIX,
    top={"W_E": "wte.weight", "W_pos": "wpe.weight", "ln_final_w": "ln_f.weight", "ln_final_b": "ln_f.bias"},
    leaves=_LEAVES, buffers=_BUFFERS, unembed="lm_head.weight", block_re=_LAYER_RE, block_name=_name,
    config=config_from_hf, tied=lambda hf: tie(hf, True), hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block,
)
