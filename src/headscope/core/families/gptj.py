"""GPT-J (``model_type: gptj``; EleutherAI's GPT-J-6B): config.json and state-dict layout.

Config
------
``n_embd``, ``n_head``, ``n_layer``, ``n_positions`` (n_ctx), ``n_inner`` (default 4·n_embd),
``vocab_size`` (GPT-J-6B: 50400 rows for GPT-2's 50257 tokens), ``rotary_dim`` (default 64; θ base
10000, fixed in transformers), ``activation_function`` (gelu_new), ``layer_norm_epsilon``,
``tie_word_embeddings`` (default false). ``rotary_dim: null`` is refused: transformers then builds
cos/sin as wide as the residual stream, which only fits a one-head model.

Block: **one** LayerNorm ``ln_1`` read by both attention and MLP, in parallel:
``x + attn(ln_1 x) + mlp(ln_1 x)`` — headscope's parallel residual with LN2 a copy of LN1 (exact;
written back as one ``ln_1``, refused if the copies were edited apart). q, k, v and out
projections have no bias; ``fc_in``/``fc_out`` have. The unembedding ``lm_head`` has a bias:
``Weights.b_U`` (``Family.unembed_bias``).

Interleaved rotary
------------------
GPT-J rotates pairs of *adjacent* dims (2j, 2j+1) by p·θ_j (``rotate_every_two``); NeoX/Llama
rotate (j, j + r/2). The two are one permutation apart: with P = [0, 2, 4, …, r−2, 1, 3, …, r−1,
r, …, e−1], GPT-J's rotation of q equals the NeoX rotation of q[P], permuted back. Applying the
same P to the columns of W_Q and W_K leaves every score ``q_rot·k_rot`` unchanged (a permutation is
orthogonal), so the canonical W_Q, W_K hold their columns in NeoX order and every analysis (the
forward pass, the relative kernel, QK spectra) runs on the one rotary implementation in
:mod:`headscope.core.rotary`. ``hook_q``/``hook_k`` are transformers' rotated queries and keys with
their first r dims in that order. Writing back applies P⁻¹.

State dict
----------
``transformer.wte.weight``, ``transformer.h.{i}.ln_1.{weight,bias}``,
``attn.{q,k,v,out}_proj.weight``, ``mlp.fc_in.*``, ``mlp.fc_out.*``, ``transformer.ln_f.*``,
``lm_head.weight`` (untied only) and ``lm_head.bias``. Buffers ``attn.bias``/``attn.masked_bias`` of
older checkpoints are ignored.
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
_LEAVES = ("ln_1.weight", "ln_1.bias", "attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight",
           "attn.out_proj.weight", "mlp.fc_in.weight", "mlp.fc_in.bias", "mlp.fc_out.weight", "mlp.fc_out.bias")
_BUFFERS = ("attn.bias", "attn.masked_bias")


def config_from_hf(hf: dict) -> Config:
    d, h = size(hf, "n_embd"), size(hf, "n_head")
    r = hf.get("rotary_dim", 64)
    if r is None:
        raise HeadscopeError("unsupported config: rotary_dim null (transformers' GPT-J then rotates with tables as "
                             "wide as n_embd, which only fits a one-head model)")
    if isinstance(r, bool) or not isinstance(r, int):
        raise HeadscopeError(f"config: rotary_dim must be an integer, got {_show(r)}")
    act = hf.get("activation_function", "gelu_new")
    return Config(
        n_layers=size(hf, "n_layer"), d_model=d, n_heads=h,
        d_mlp=size(hf, "n_inner") if hf.get("n_inner") is not None else 4 * d,
        d_vocab=size(hf, "vocab_size"), n_ctx=size(hf, "n_positions"),
        ln_eps=number(hf, "layer_norm_epsilon", 1e-5), act_fn=act if isinstance(act, str) else repr(act),
        family="gptj", positional="rotary", rotary_dim=r, rotary_base=10000.0, parallel_residual=True,
        qk_bias=False,
    )


def hf_config(cfg: Config, untied: bool = True) -> dict:
    return {
        "architectures": ["GPTJForCausalLM"], "model_type": "gptj",
        "vocab_size": cfg.d_vocab, "n_embd": cfg.d_model, "n_head": cfg.n_heads, "n_layer": cfg.n_layers,
        "n_inner": cfg.d_mlp, "n_positions": cfg.n_ctx, "rotary_dim": cfg.rotary_dim,
        "activation_function": cfg.act_fn, "layer_norm_epsilon": cfg.ln_eps, "tie_word_embeddings": not untied,
        "embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0,
        "bos_token_id": 50256 if cfg.d_vocab > 50256 else cfg.d_vocab - 1,
        "eos_token_id": 50256 if cfg.d_vocab > 50256 else cfg.d_vocab - 1,
    }


def _name(layer: int, leaf: str) -> str:
    return f"h.{layer}.{leaf}"


def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    d, m = cfg.d_model, cfg.d_mlp
    hd = cfg.n_heads * cfg.d_head
    leaf = {"ln_1.weight": (d,), "ln_1.bias": (d,), "attn.q_proj.weight": (hd, d), "attn.k_proj.weight": (hd, d),
            "attn.v_proj.weight": (hd, d), "attn.out_proj.weight": (d, hd), "mlp.fc_in.weight": (m, d),
            "mlp.fc_in.bias": (m,), "mlp.fc_out.weight": (d, m), "mlp.fc_out.bias": (d,)}
    return layered_shapes({"wte.weight": (cfg.d_vocab, d)}, leaf, {"ln_f.weight": (d,), "ln_f.bias": (d,)},
                          cfg.n_layers, _name)


def neox_order(cfg: Config) -> torch.Tensor:
    """P [e]: canonical dim j holds GPT-J's dim P[j] (the rotated pairs (2j, 2j+1) → (j, j + r/2))."""
    r, e = cfg.rotary_dim, cfg.d_head
    return torch.cat([torch.arange(0, r, 2), torch.arange(1, r, 2), torch.arange(r, e)])


def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
    h, e = cfg.n_heads, cfg.d_head
    P = neox_order(cfg)
    W_Q, W_K = (heads_in(t[f"attn.{x}_proj.weight"], h, e)[..., P] for x in "qk")                  # [h d e]
    zero = torch.zeros(h, e, dtype=W_Q.dtype, device=W_Q.device)
    d = cfg.d_model
    return Block(
        ln1_w=t["ln_1.weight"], ln1_b=t["ln_1.bias"], W_Q=W_Q, W_K=W_K,
        W_V=heads_in(t["attn.v_proj.weight"], h, e), b_Q=zero, b_K=zero.clone(), b_V=zero.clone(),
        W_O=heads_out(t["attn.out_proj.weight"], h, e), b_O=torch.zeros(d, dtype=W_Q.dtype, device=W_Q.device),
        ln2_w=t["ln_1.weight"].clone(), ln2_b=t["ln_1.bias"].clone(),                  # the MLP reads ln_1 too
        W_in=t["mlp.fc_in.weight"].T, b_in=t["mlp.fc_in.bias"], W_out=t["mlp.fc_out.weight"].T,   # [out in] → [in out]
        b_out=t["mlp.fc_out.bias"],
    )


def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
    if leaf.startswith("ln_1."):
        one, two = (b.ln1_w, b.ln2_w) if leaf.endswith("weight") else (b.ln1_b, b.ln2_b)
        if not torch.equal(one, two):
            raise HeadscopeError("cannot write a GPT-J checkpoint whose LN1 and LN2 differ (GPT-J's attention and "
                                 "MLP read one LayerNorm, ln_1)")
        t = one
    elif leaf.startswith("attn."):
        x = leaf.split(".")[1][0].upper()
        if x == "O":
            if bool(b.b_O.abs().max() > 0):
                raise HeadscopeError("cannot write a GPT-J checkpoint whose b_O is not zero (out_proj has no bias)")
            t = heads_out_inverse(b.W_O)
        else:
            if bool(getattr(b, f"b_{x}").abs().max() > 0):
                raise HeadscopeError(f"cannot write a GPT-J checkpoint whose b_{x} is not zero "
                                     "(GPT-J has no query/key/value biases)")
            W = getattr(b, f"W_{x}")
            if x != "V":
                W = W[..., torch.argsort(neox_order(cfg))]                                  # back to GPT-J's pairs
            t = heads_in_inverse(W)
    elif leaf in ("mlp.fc_in.weight", "mlp.fc_out.weight"):
        t = (b.W_in if "fc_in" in leaf else b.W_out).T
    else:
        t = b.b_in if leaf == "mlp.fc_in.bias" else b.b_out
    return t.detach().to("cpu", torch.float32).contiguous()


FAMILY = Family(
    name="gptj", title="GPT-J", model_types=("gptj",), hf_class="GPTJForCausalLM", prefix=PREFIX,
    top={"W_E": "wte.weight", "ln_final_w": "ln_f.weight", "ln_final_b": "ln_f.bias"},
    leaves=_LEAVES, buffers=_BUFFERS, unembed="lm_head.weight", block_re=_LAYER_RE, block_name=_name,
    config=config_from_hf, tied=lambda hf: tie(hf, False), hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block, unembed_bias="lm_head.bias",
)
