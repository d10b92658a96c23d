"""GPT-Neo (``model_type: gpt_neo``): its config.json and its state-dict layout.

Config
------
``num_layers``, ``hidden_size``, ``num_heads``, ``intermediate_size`` (null → 4·hidden_size),
``vocab_size``, ``max_position_embeddings``, ``window_size`` are integers in 1..2^31−1;
``attention_types`` (``[[["global", "local"], n], …]``, expanded as transformers'
``GPTNeoConfig.expand_attention_types_params``) gives each layer's kind, and must agree with
``attention_layers`` when that is stored too. ``layer_norm_epsilon``, ``activation_function``
and ``tie_word_embeddings`` are read as for GPT-2.

The model differs from GPT-2 in two ways the forward pass honours through :class:`Config`:

- attention scores are **not** scaled: ``score = q·k`` (``scale_attn_weights`` false; transformers'
  ``GPTNeoSelfAttention._attn`` has no 1/√d_head);
- a ``"local"`` layer attends to the last ``window_size`` keys **including the query itself**:
  key k is visible from query q iff ``q − window_size < k ≤ q`` (transformers' mask is
  ``tril ^ tril(·, −window_size)``); ``Config.attn_windows[l] = window_size`` there, 0 for global.

State dict
----------
Keys may carry the ``transformer.`` prefix; the mask buffers ``h.{i}.attn.attention.bias`` /
``masked_bias`` (older checkpoints store them) are ignored. q/k/v are separate ``nn.Linear``
weights without bias, stored [out in] = [h·e d]: transposed once to [d h·e] and reshaped to
[h d e] (b_Q = b_K = b_V = 0); ``out_proj`` [d h·e] (with bias) → W_O [h e d]; the MLP's
``c_fc`` [m d] / ``c_proj`` [d m] are transposed to W_in [d m] / W_out [m d].
"""

from __future__ import annotations

import re

import torch

from ..._errors import HeadscopeError
from ..config import Config, _show
from ..weights import Block
from .base import Family
from .gpt2 import _size, tie_word_embeddings

_LEAVES = ("ln_1.weight", "ln_1.bias", "attn.attention.q_proj.weight", "attn.attention.k_proj.weight",
           "attn.attention.v_proj.weight", "attn.attention.out_proj.weight", "attn.attention.out_proj.bias",
           "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")
_BUFFERS = ("attn.attention.bias", "attn.attention.masked_bias")
_LAYER_RE = re.compile(r"h\.(0|[1-9][0-9]*)\.(.+)")
PREFIX = "transformer."
KINDS = ("global", "local")


def _layers(hf: dict, n_layers: int) -> list[str]:
    """Each layer's attention kind ("global"/"local") from ``attention_types`` (and ``attention_layers``)."""
    types = hf.get("attention_types", [[["global", "local"], n_layers // 2]])
    kinds: list[str] = []
    try:
        for pattern, repeat in types:
            if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 0 or not isinstance(pattern, list):
                raise TypeError
            for _ in range(repeat):
                kinds.extend(pattern)
    except (TypeError, ValueError):
        raise HeadscopeError(f"config: attention_types must be [[[\"global\" | \"local\", …], repeat], …], "
                             f"got {_show(types)}") from None
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise HeadscopeError(f"config: attention layer kinds must be 'global' or 'local', got {_show(bad[0])}")
    if len(kinds) != n_layers:
        raise HeadscopeError(f"config: attention_types give {len(kinds)} layers, expected num_layers = {n_layers}")
    stored = hf.get("attention_layers")
    if stored is not None and stored != kinds:
        raise HeadscopeError(f"config: attention_layers {_show(stored)} disagrees with attention_types "
                             f"(which expand to {_show(kinds)})")
    return kinds


def config_from_hf(hf: dict) -> Config:
    """Validate a GPT-Neo config.json and read its shapes (module docstring)."""
    tie_word_embeddings(hf)
    d_model = _size(hf, "hidden_size")
    n_layers = _size(hf, "num_layers")
    window = _size(hf, "window_size") if "window_size" in hf else 256
    kinds = _layers(hf, n_layers)
    eps = hf.get("layer_norm_epsilon", 1e-5)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise HeadscopeError(f"config: layer_norm_epsilon must be a finite positive number, got {_show(eps)}")
    act = hf.get("activation_function", "gelu_new")
    if not isinstance(act, str):
        raise HeadscopeError(f"config: activation_function must be a string, got {_show(act)}")
    return Config(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=_size(hf, "num_heads"),
        d_mlp=_size(hf, "intermediate_size") if hf.get("intermediate_size") is not None else 4 * d_model,
        d_vocab=_size(hf, "vocab_size"),
        n_ctx=_size(hf, "max_position_embeddings"),
        ln_eps=float(eps),
        act_fn=act,
        scale_attn_weights=False,
        family="gpt_neo",
        attn_windows=tuple(window if k == "local" else 0 for k in kinds),
    )


def _attention_types(cfg: Config) -> list:
    """``attention_types`` for `cfg`'s windows: one [[kind], 1] entry per layer (run-length where equal)."""
    out: list = []
    for w in (cfg.attn_windows or (0,) * cfg.n_layers):
        kind = "local" if w else "global"
        if out and out[-1][0] == [kind]:
            out[-1][1] += 1
        else:
            out.append([[kind], 1])
    return out


def hf_config(cfg: Config, untied: bool = False) -> dict:
    """A config.json that transformers' GPTNeoForCausalLM loads (one window size for all local layers)."""
    windows = {w for w in cfg.attn_windows if w}
    if len(windows) > 1:
        raise HeadscopeError(f"GPT-Neo has one window_size for all local layers, got {sorted(windows)}")
    return {
        "architectures": ["GPTNeoForCausalLM"],
        "model_type": "gpt_neo",
        "vocab_size": cfg.d_vocab,
        "max_position_embeddings": cfg.n_ctx,
        "hidden_size": cfg.d_model,
        "num_layers": cfg.n_layers,
        "num_heads": cfg.n_heads,
        "intermediate_size": cfg.d_mlp,
        "attention_types": _attention_types(cfg),
        "window_size": windows.pop() if windows else 256,
        "activation_function": cfg.act_fn,
        "layer_norm_epsilon": cfg.ln_eps,
        "resid_dropout": 0.0,
        "embed_dropout": 0.0,
        "attention_dropout": 0.0,
        "bos_token_id": cfg.d_vocab - 1,
        "eos_token_id": cfg.d_vocab - 1,
        "tie_word_embeddings": not untied,
    }


def shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Canonical (unprefixed) name → shape of every GPT-Neo weight but lm_head, in model order."""
    d, m, V = cfg.d_model, cfg.d_mlp, cfg.d_vocab
    out = {"wte.weight": (V, d), "wpe.weight": (cfg.n_ctx, d)}
    leaf = {"ln_1.weight": (d,), "ln_1.bias": (d,), "attn.attention.q_proj.weight": (d, d),
            "attn.attention.k_proj.weight": (d, d), "attn.attention.v_proj.weight": (d, d),
            "attn.attention.out_proj.weight": (d, d), "attn.attention.out_proj.bias": (d,),
            "ln_2.weight": (d,), "ln_2.bias": (d,), "mlp.c_fc.weight": (m, d), "mlp.c_fc.bias": (m,),
            "mlp.c_proj.weight": (d, m), "mlp.c_proj.bias": (d,)}
    for l in range(cfg.n_layers):
        out.update({f"h.{l}.{k}": s for k, s in leaf.items()})
    out.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
    return out


def block_from_hf(t: dict[str, torch.Tensor], cfg: Config) -> Block:
    """A block from its HF tensors (keyed by leaf name: ``attn.attention.q_proj.weight`` …)."""
    d, h, e = cfg.d_model, cfg.n_heads, cfg.d_head
    a = "attn.attention."
    W_Q, W_K, W_V = (t[a + n].T.reshape(d, h, e).permute(1, 0, 2).contiguous()                 # [h*e d] → [d h*e] → [h d e]
                     for n in ("q_proj.weight", "k_proj.weight", "v_proj.weight"))
    zero = t[a + "out_proj.bias"].new_zeros(h, e)                                                 # no q/k/v bias
    return Block(
        ln1_w=t["ln_1.weight"], ln1_b=t["ln_1.bias"], W_Q=W_Q, W_K=W_K, W_V=W_V,
        b_Q=zero, b_K=zero.clone(), b_V=zero.clone(),
        W_O=t[a + "out_proj.weight"].T.reshape(h, e, d).contiguous(), b_O=t[a + "out_proj.bias"],  # [d h*e] → [h e d]
        ln2_w=t["ln_2.weight"], ln2_b=t["ln_2.bias"],
        W_in=t["mlp.c_fc.weight"].T.contiguous(), b_in=t["mlp.c_fc.bias"],                       # [m d] → [d m]
        W_out=t["mlp.c_proj.weight"].T.contiguous(), b_out=t["mlp.c_proj.bias"],                  # [d m] → [m d]
    )


def hf_from_block(b: Block, leaf: str, cfg: Config) -> torch.Tensor:
    """One HF tensor (``attn.attention.q_proj.weight`` …) of block `b`, float32 on the CPU.

    GPT-Neo has no q/k/v bias: a block whose b_Q/b_K/b_V is non-zero is refused (folded
    LayerNorm biases live there; write raw weights)."""
    d = cfg.d_model
    a = "attn.attention."
    qkv = {a + "q_proj.weight": (b.W_Q, b.b_Q), a + "k_proj.weight": (b.W_K, b.b_K), a + "v_proj.weight": (b.W_V, b.b_V)}
    if leaf in qkv:
        W, bias = qkv[leaf]
        if bool(bias.abs().max() > 0):
            raise HeadscopeError(f"GPT-Neo has no {leaf[len(a):-len('.weight')]} bias, but the block's is non-zero")
        t = W.permute(1, 0, 2).reshape(d, d).T                                                   # [h d e] → [d h*e] → [h*e d]
    elif leaf == a + "out_proj.weight":
        t = b.W_O.reshape(d, d).T                                                                 # [h e d] → [h*e d] → [d h*e]
    elif leaf in ("mlp.c_fc.weight", "mlp.c_proj.weight"):
        t = (b.W_in if leaf == "mlp.c_fc.weight" else b.W_out).T
    else:
        t = getattr(b, {a + "out_proj.bias": "b_O", "ln_1.weight": "ln1_w", "ln_1.bias": "ln1_b",
                        "ln_2.weight": "ln2_w", "ln_2.bias": "ln2_b", "mlp.c_fc.bias": "b_in",
                        "mlp.c_proj.bias": "b_out"}[leaf])
    return t.detach().to("cpu", torch.float32).contiguous()


FAMILY = Family(
    name="gpt_neo", title="GPT-Neo", model_types=("gpt_neo",), hf_class="GPTNeoForCausalLM", prefix=PREFIX,
    top={"W_E": "wte.weight", "W_pos": "wpe.weight", "ln_final_w": "ln_f.weight", "ln_final_b": "ln_f.bias"},
    leaves=_LEAVES, buffers=_BUFFERS, unembed="lm_head.weight",
    block_re=_LAYER_RE, block_name=lambda layer, leaf: f"h.{layer}.{leaf}",
    config=config_from_hf, tied=tie_word_embeddings, hf_config=hf_config, shapes=shapes,
    block_from_hf=block_from_hf, hf_from_block=hf_from_block,
)
