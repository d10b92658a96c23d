"""The interface every model family implements: how its checkpoints map to headscope's weights.

A *family* is one architecture's key layout and config.json (GPT-2 today; GPT-NeoX, Llama …
next). The rest of headscope reads checkpoints only through a :class:`Family`:

- ``config(hf)``: validate a config.json dict and return the family-neutral :class:`Config`
  (one-line :class:`HeadscopeError` for anything unsupported);
- ``tied(hf)``: whether the unembedding is the embedding's transpose;
- the stored tensors: ``prefix`` (optional on stored keys), ``top`` (the :class:`Weights`
  fields outside the blocks → their canonical names), ``leaves`` (one block's canonical leaf
  names), ``buffers`` (stored block leaves that are not weights, e.g. causal masks),
  ``unembed`` (the key of a separate unembedding, stored only when untied), ``shapes(cfg)``
  (canonical name → shape of every weight but the unembedding, in model order);
- ``block_from_hf(tensors, cfg)`` → a :class:`Block` in TransformerLens names and shapes (its
  transposes and reshapes, shapes asserted by the checkpoint before), and its inverse
  ``hf_from_block(block, leaf, cfg)`` with ``hf_config(cfg, untied)`` for writing back.

A new family is one module in this package defining a ``FAMILY`` and one line in
:data:`headscope.core.families.MODULES`, plus its tests (a checkpoint in the hub's layout
against transformers' forward). Rotary embeddings, RMSNorm, gated MLPs and grouped-query
attention will need new :class:`Block`/:class:`Config` fields and forward branches; the
interface here stays the same.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Mapping

import torch

from ..._errors import HeadscopeError
from ..config import MAX_SIZE, Config, _show
from ..weights import Block


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family's config and state-dict layout (module docstring)."""

    name: str                                   #: short name, e.g. "gpt2"
    title: str                                  #: in messages, e.g. "GPT-2-family"
    model_types: tuple[str, ...]                #: config.json ``model_type`` values it reads
    hf_class: str                               #: the transformers class whose weights these are
    prefix: str                                 #: optional prefix of stored keys ("transformer.")
    top: Mapping[str, str]                      #: Weights field → canonical name (W_E, W_pos, ln_final_*)
    leaves: tuple[str, ...]                     #: canonical leaf names of one block's weights
    buffers: tuple[str, ...]                    #: stored block leaves that are not weights
    unembed: str                                #: stored key of an untied unembedding [d_vocab d_model]
    block_re: re.Pattern                        #: canonical block name → (layer, leaf)
    block_name: Callable[[int, str], str]       #: (layer, leaf) → canonical name
    config: Callable[[dict], Config]            #: config.json dict → validated Config
    tied: Callable[[dict], bool]                #: config.json ties the unembedding to the embedding
    hf_config: Callable[[Config, bool], dict]   #: (cfg, untied) → config.json to write
    shapes: Callable[[Config], dict]            #: canonical name → shape, all weights but the unembedding
    block_from_hf: Callable[[dict, Config], Block]
    hf_from_block: Callable[[Block, str, Config], torch.Tensor]
    #: stored tensors outside the blocks that are not weights (e.g. a model-level rotary buffer)
    top_buffers: tuple[str, ...] = ()
    #: (Weights field, stored tensor, cfg) → canonical tensor, for tops that need more than a rename
    #: (OPT: its position table starts at row 2); None = as stored
    top_from_hf: Callable[[str, torch.Tensor, Config], torch.Tensor] | None = None
    #: its inverse, (Weights field, canonical tensor, cfg) → stored tensor, for writing; None = as is
    top_to_hf: Callable[[str, torch.Tensor, Config], torch.Tensor] | None = None
    #: config.json dict → the Family object for its options (a layout that varies with the config,
    #: e.g. Llama's optional biases); None = this object
    variant: Callable[[dict], "Family"] | None = None
    #: other optional prefixes of stored keys (OPT: the hub's OPTModel files say "decoder.", not
    #: "model.decoder."); headscope writes :attr:`prefix`
    alt_prefixes: tuple[str, ...] = ()
    #: (top tensors by field, W_U [d_model d_vocab], cfg) → (top, W_U), after :attr:`top_from_hf`: for tops
    #: built from several stored tensors (OPT-350m: W_E = embed_tokens @ project_inᵀ, W_U through
    #: project_out); pseudo-fields it consumes are popped. None = nothing to combine
    top_combine: Callable | None = None
    #: stored key (unprefixed, like :attr:`unembed`) of the unembedding bias b_U [d_vocab] (GPT-J's
    #: ``lm_head.bias``, stored tied or not); None = the family has none (b_U = 0)
    unembed_bias: str | None = None

    def canonical(self, key: str) -> str:
        """A stored key without the optional prefix (or one of the :attr:`alt_prefixes`)."""
        for prefix in (self.prefix, *self.alt_prefixes):
            if prefix and key.startswith(prefix):
                return key[len(prefix):]
        return key

    def layer_leaf(self, name: str) -> tuple[int | None, str | None]:
        """(layer, leaf) of a canonical block tensor name, (None, None) for any other name."""
        m = self.block_re.fullmatch(name)
        return (int(m.group(1)), m.group(2)) if m else (None, None)

    def write_keys(self, cfg: Config, untied: bool) -> list[tuple[str, tuple[int, ...]]]:
        """(key, shape) of a checkpoint as headscope writes it: prefixed keys, the unembedding when untied."""
        out = [(self.prefix + n, s) for n, s in self.shapes(cfg).items()]
        out += [(self.unembed, (cfg.d_vocab, cfg.d_model))] if untied else []
        return out + ([(self.unembed_bias, (cfg.d_vocab,))] if self.unembed_bias else [])


# -- config.json readers shared by the families --------------------------------------------------


def size(hf: dict, key: str, alias: str | None = None) -> int:
    """The size `key` (or its `alias`) of a config.json: an integer in 1..MAX_SIZE."""
    name = key if key in hf or alias is None or alias not in hf else alias
    if name not in hf:
        raise HeadscopeError(f"config.json: missing key {key!r}")
    value = hf[name]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
        raise HeadscopeError(f"config: {name} must be a positive integer (at most {MAX_SIZE}), got {_show(value)}")
    return value


def flag(hf: dict, key: str, default: bool) -> bool:
    """The boolean option `key` of a config.json: JSON true or false (absent: `default`)."""
    value = hf.get(key, default)
    if not isinstance(value, bool):
        raise HeadscopeError(f"config: {key} must be true or false, got {_show(value)}"
                             + (" (a string)" if isinstance(value, str) else ""))
    return value


def number(hf: dict, key: str, default=None, *, alias: str | None = None) -> float:
    """A finite positive number of a config.json (`alias` tried when `key` is absent)."""
    import math

    value = hf.get(key, hf.get(alias, default) if alias else default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise HeadscopeError(f"config: {key} must be a finite positive number, got {_show(value)}")
    return float(value)


def refuse(hf: dict, key: str, allowed, what: str) -> None:
    """One line refusing a config option headscope does not implement (absent or `allowed` passes)."""
    value = hf.get(key)
    if value is not None and value not in (allowed if isinstance(allowed, tuple) else (allowed,)):
        raise HeadscopeError(f"unsupported config: {key} {_show(value)} ({what})")


# -- layout helpers shared by the families whose projections are nn.Linear ([out in]) -----------


def heads_in(W: torch.Tensor, n: int, e: int) -> torch.Tensor:
    """A Linear weight [n·e d] (y = x Wᵀ) reading the residual → [n d e] (y_h = x @ W[h])."""
    d = W.shape[1]
    assert W.shape == (n * e, d), (tuple(W.shape), (n * e, d))
    return W.reshape(n, e, d).transpose(1, 2).contiguous()                       # [n·e d] → [n e d] → [n d e]


def heads_in_inverse(W: torch.Tensor) -> torch.Tensor:
    """[n d e] → the Linear weight [n·e d]."""
    n, d, e = W.shape
    return W.transpose(1, 2).reshape(n * e, d)


def heads_out(W: torch.Tensor, n: int, e: int) -> torch.Tensor:
    """A Linear weight [d n·e] writing the residual from the heads' outputs → W_O [n e d]."""
    d = W.shape[0]
    assert W.shape == (d, n * e), (tuple(W.shape), (d, n * e))
    return W.T.reshape(n, e, d).contiguous()                                      # [d n·e] → [n·e d] → [n e d]


def heads_out_inverse(W_O: torch.Tensor) -> torch.Tensor:
    """W_O [n e d] → the Linear weight [d n·e]."""
    n, e, d = W_O.shape
    return W_O.reshape(n * e, d).T


def expand_kv(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Grouped-query attention: key/value heads [kv …] repeated for the query heads [n_heads …]
    (query head h reads key/value head h // (n_heads / kv), as transformers' ``repeat_kv``)."""
    return t.repeat_interleave(n_heads // t.shape[0], dim=0)


def group_kv(t: torch.Tensor, kv_heads: int, what: str) -> torch.Tensor:
    """The inverse of :func:`expand_kv`: one head per group, refusing groups whose copies differ
    (a grouped checkpoint cannot hold per-query-head keys or values)."""
    from ..._errors import HeadscopeError

    g = t.shape[0] // kv_heads
    first = t[::g]
    if not torch.equal(t, first.repeat_interleave(g, dim=0)):
        raise HeadscopeError(f"cannot write {what}: the query heads sharing a key/value head "
                             "(grouped-query attention) no longer agree on it")
    return first


def layered_shapes(head: dict, leaf: dict, tail: dict, n_layers: int, block_name: Callable[[int, str], str]) -> dict:
    """Canonical name → shape in model order: `head` tensors, every layer's `leaf` tensors, `tail`."""
    out = dict(head)
    for l in range(n_layers):
        out.update({block_name(l, k): s for k, s in leaf.items()})
    return out | tail


def rope_config(hf: dict, d_head: int, n_ctx: int, *, theta_key: str = "rope_theta", default_theta: float = 10000.0,
                pct_key: str = "partial_rotary_factor", default_pct: float | None = None, partial: bool = False,
                top_original: int | None = None, type_aliases: dict | None = None,
                scale_divisor: float | None = None) -> dict:
    """Config fields of a rotary family (positional, rotary_dim, rotary_base, rope_scaling,
    attn_divisor), resolved as transformers 5.25 resolves them (``convert_rope_params_to_dict`` and
    ``standardize_rope_params``):

    1. the parameters are config.json's ``rope_scaling`` when it is a non-empty object, else its
       ``rope_parameters`` (never a merge of the two);
    2. ``rope_theta`` and the partial factor inside them win over the top-level keys
       (`theta_key`, `pct_key`; defaults `default_theta`, `default_pct`);
    3. the type is ``rope_type``, else the old ``type`` key, else "default";
    4. llama3/yarn/longrope take ``original_max_position_embeddings`` from the top level when the
       family's config class has that field (`top_original`, its default: Phi-3's 4096), else from
       the parameters, else ``max_position_embeddings``; `type_aliases` renames types first (Phi-3
       reads "su" and "yarn" as longrope).

    rotary_dim = int(d_head · partial factor) for families whose rotary embedding honours it
    (`partial`: GPT-NeoX, Phi-3); the others (Llama, Qwen2, Mistral …) rotate every dim with
    default RoPE whatever the factor says, and cannot run a scaled RoPE with a factor < 1 (their
    cos/sin would be narrower than the heads): refused. `scale_divisor` is the family's score
    divisor before the attention factor (default √d_head)."""
    import math

    from ..rotary import attention_factor, check_scaling

    def obj(key):
        v = hf.get(key)
        if v is not None and not isinstance(v, dict):
            raise HeadscopeError(f"config: {key} must be an object or null, got {_show(v)}")
        return v
    scaling, params = obj("rope_scaling"), obj("rope_parameters")
    p = dict(scaling) if scaling else dict(params or {})
    if any(isinstance(v, dict) for v in p.values()):
        raise HeadscopeError("unsupported config: rope parameters per layer type (nested objects)")
    p.setdefault("rope_theta", hf.get(theta_key, default_theta))
    pct = hf.get(pct_key, default_pct)
    if pct is not None:
        p.setdefault("partial_rotary_factor", pct)
    if (type_aliases or {}).get(p.get("rope_type", p.get("type"))) is not None:     # Phi-3: "su", "yarn" → longrope
        p["rope_type"] = type_aliases[p.get("rope_type", p.get("type"))]
    kind = p.setdefault("rope_type", p.get("type", "default"))
    if not isinstance(kind, str):
        raise HeadscopeError(f"config: rope_type must be a string, got {_show(kind)}")
    if kind in ("llama3", "yarn", "longrope"):
        if top_original is not None:
            p["original_max_position_embeddings"] = hf.get("original_max_position_embeddings", top_original)
        else:
            p.setdefault("original_max_position_embeddings", n_ctx)
    base = number({"rope_theta": p["rope_theta"]}, "rope_theta")
    pct = number({"partial_rotary_factor": p.get("partial_rotary_factor", 1.0)}, "partial_rotary_factor")
    if pct > 1:
        raise HeadscopeError(f"config: the rotary fraction must be at most 1, got {pct}")
    rotary_dim = int(d_head * pct)
    if not partial:
        if kind != "default" and rotary_dim != d_head:
            raise HeadscopeError(f"unsupported config: partial_rotary_factor {pct} with rope_type {kind!r} (this "
                                 f"family's transformers class rotates all {d_head} dims of a head but builds {kind} "
                                 f"tables for {rotary_dim}: it cannot run)")
        rotary_dim = d_head
    kept = check_scaling(p, rotary_dim)
    a = attention_factor(kept, n_ctx)
    if a != 1.0 and rotary_dim != d_head:
        raise HeadscopeError(f"unsupported config: rope_type {kind!r} with attention factor {a:.6g} on a partial "
                             f"rotary ({rotary_dim} of {d_head} dims; headscope applies the factor to whole scores)")
    divisor = None
    if a != 1.0 or scale_divisor is not None:
        divisor = (scale_divisor if scale_divisor is not None else math.sqrt(d_head)) / (a * a)
    return {"positional": "rotary", "rotary_dim": rotary_dim, "rotary_base": base,
            "rope_scaling": tuple(sorted(kept.items())), "attn_divisor": divisor}


def rope_hf(cfg: Config) -> dict:
    """config.json keys that make transformers read `cfg`'s rotary settings back (``rope_scaling``
    wins over anything else there; ``rope_theta`` fills it)."""
    return {"rope_theta": cfg.rotary_base,
            "rope_scaling": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.rope_scaling} or None}


def tie(hf: dict, default: bool) -> bool:
    """config.json's ``tie_word_embeddings`` (`default`: the family's transformers default)."""
    return flag(hf, "tie_word_embeddings", default)
