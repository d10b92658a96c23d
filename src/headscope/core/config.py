"""GPT-2 hyper-parameters, read from a Hugging Face config.json and validated."""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import os
import sys
from pathlib import Path

from .._errors import HeadscopeError
from ..corpus import read_text_file

def _is_index(x) -> bool:
    """An integer (Python, numpy or 0-d torch), not a bool."""
    if isinstance(x, bool):
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


#: the largest size (layers, widths, vocabulary, context) headscope accepts: a 32-bit signed index.
MAX_SIZE = 2**31 - 1

#: boolean options of a GPT-2 config.json that headscope reads, with their defaults.
BOOLEAN_OPTIONS = {"add_cross_attention": False, "reorder_and_upcast_attn": False,
                   "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
                   "tie_word_embeddings": True}

#: activation_function values of HF GPT-2 configs that headscope implements.
ACTIVATIONS = ("gelu_new", "gelu", "gelu_pytorch_tanh", "relu", "gelu_fast", "quick_gelu")


@dataclasses.dataclass(frozen=True)
class Config:
    """Shapes of a GPT-2-family model, in TransformerLens names."""

    n_layers: int
    d_model: int
    n_heads: int
    d_mlp: int
    d_vocab: int
    n_ctx: int
    ln_eps: float = 1e-5
    act_fn: str = "gelu_new"
    scale_attn_by_inverse_layer_idx: bool = False
    scale_attn_weights: bool = True
    #: HF computes attention scores and softmax in float32 even for float16/bfloat16
    #: weights (the same maths; only the rounding differs); the forward pass does too.
    reorder_and_upcast_attn: bool = False

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def attn_scale(self, layer: int) -> float:
        """The divisor of layer `layer`'s attention scores, ``score = q·k / attn_scale``.

        √d_head (unless ``scale_attn_weights`` is off), times (layer + 1) when
        ``scale_attn_by_inverse_layer_idx`` is set, as HF's GPT-2 scales them.
        """
        scale = math.sqrt(self.d_head) if self.scale_attn_weights else 1.0
        return scale * (layer + 1) if self.scale_attn_by_inverse_layer_idx else scale

    def check_layer(self, layer: int) -> int:
        """`layer` if the model has it, else a one-line :class:`HeadscopeError`."""
        if not _is_index(layer) or not 0 <= layer < self.n_layers:
            raise HeadscopeError(f"layer {layer} out of range (the model has layers 0..{self.n_layers - 1})")
        return layer

    def check_head(self, layer: int, head: int) -> tuple[int, int]:
        """(layer, head) if the model has that head, else a one-line :class:`HeadscopeError`."""
        self.check_layer(layer)
        if not _is_index(head) or not 0 <= head < self.n_heads:
            raise HeadscopeError(f"head index {head} out of range (the model has {self.n_heads} heads per layer)")
        return layer, head

    def check_neuron(self, neuron: int) -> int:
        """`neuron` if MLP0 has it, else a one-line :class:`HeadscopeError`."""
        if not _is_index(neuron) or not 0 <= neuron < self.d_mlp:
            raise HeadscopeError(f"neuron {neuron} out of range (MLP0 has neurons 0..{self.d_mlp - 1})")
        return neuron

    def __post_init__(self):
        for name in ("n_layers", "d_model", "n_heads", "d_mlp", "d_vocab", "n_ctx"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise HeadscopeError(f"config: {name} must be a positive integer, got {_show(value)}")
            if value > MAX_SIZE:
                raise HeadscopeError(f"config: {name} must be at most {MAX_SIZE} (2^31 − 1), got {value}")
        eps = self.ln_eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
            raise HeadscopeError(f"config: layer_norm_epsilon must be a finite positive number, got {_show(eps)}")
        for name in ("scale_attn_by_inverse_layer_idx", "scale_attn_weights"):
            if not isinstance(getattr(self, name), bool):
                raise HeadscopeError(f"config: {name} must be true or false, got {_show(getattr(self, name))}")
        if self.d_model % self.n_heads:
            raise HeadscopeError(
                f"config: d_model ({self.d_model}) is not divisible by n_heads ({self.n_heads})"
            )
        if self.act_fn not in ACTIVATIONS:
            raise HeadscopeError(
                f"config: activation_function {_show(self.act_fn)} is not supported "
                f"(supported: {', '.join(ACTIVATIONS)})"
            )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["d_head"] = self.d_head
        return d

    # -- Hugging Face ------------------------------------------------------------------

    @classmethod
    def from_hf_dict(cls, hf: dict) -> "Config":
        """Validate a GPT-2 config.json and read its shapes.

        Sizes must be integers in 1..2^31−1 (no strings, floats or booleans),
        ``layer_norm_epsilon`` a finite positive number, the boolean options JSON
        ``true``/``false`` (never a string such as ``"false"``), and
        ``activation_function`` one that headscope implements; anything else is a
        one-line :class:`HeadscopeError`.
        """
        model_type = hf.get("model_type")
        if model_type != "gpt2":
            raise HeadscopeError(
                f"unsupported architecture: model_type {_show(model_type)} "
                "(headscope reads GPT-2-family checkpoints, model_type 'gpt2')"
            )
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
        return cls(
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

    def to_hf_dict(self) -> dict:
        """A config.json that transformers' GPT2LMHeadModel loads."""
        return {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "vocab_size": self.d_vocab,
            "n_positions": self.n_ctx,
            "n_embd": self.d_model,
            "n_layer": self.n_layers,
            "n_head": self.n_heads,
            "n_inner": self.d_mlp,
            "activation_function": self.act_fn,
            "layer_norm_epsilon": self.ln_eps,
            "scale_attn_weights": self.scale_attn_weights,
            "scale_attn_by_inverse_layer_idx": self.scale_attn_by_inverse_layer_idx,
            "reorder_and_upcast_attn": self.reorder_and_upcast_attn,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "bos_token_id": self.d_vocab - 1,
            "eos_token_id": self.d_vocab - 1,
            "tie_word_embeddings": True,
        }


def read_config(path: Path) -> Config:
    """Read and validate config.json at `path`."""
    return Config.from_hf_dict(read_hf_config(path))


def read_hf_config(path: Path) -> dict:
    """config.json at `path` as a dict: a regular file read under the input rule, a JSON object
    without duplicate keys or deep nesting (one-line errors otherwise)."""
    path = Path(path)
    if not os.path.lexists(path):
        raise HeadscopeError(f"missing config.json in {path.parent}")
    text = read_text_file(path, "checkpoint file")
    try:
        hf = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise HeadscopeError(f"{path} is not valid JSON: {e.msg} (line {e.lineno})") from None
    except RecursionError:
        raise HeadscopeError(f"{path}: JSON nested too deeply to be a config (more than "
                             f"{sys.getrecursionlimit()} levels)") from None
    if not isinstance(hf, dict):
        raise HeadscopeError(f"{path} is not a JSON object")
    return hf


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    d = {}
    for k, v in pairs:
        if k in d:
            raise HeadscopeError(f"config.json: key {k!r} appears twice (which one is meant is ambiguous)")
        d[k] = v
    return d


def _show(value) -> str:
    """`value`'s repr, cut to 40 characters (a config value can be huge)."""
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "…"


def _size(hf: dict, key: str, alias: str | None = None) -> int:
    """The size `key` (or its `alias`) of a config.json: an integer in 1..MAX_SIZE."""
    name = key if key in hf or alias is None or alias not in hf else alias
    if name not in hf:
        raise HeadscopeError(f"config.json: missing key {key!r}")
    value = hf[name]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
        raise HeadscopeError(f"config: {name} must be a positive integer (at most {MAX_SIZE}), got {_show(value)}")
    return value


def _flag(hf: dict, key: str, default: bool) -> bool:
    """The boolean option `key` of a config.json: JSON true or false (absent: `default`)."""
    value = hf.get(key, default)
    if not isinstance(value, bool):
        raise HeadscopeError(f"config: {key} must be true or false, got {_show(value)}"
                             + (" (a string)" if isinstance(value, str) else ""))
    return value


def tie_word_embeddings(hf: dict) -> bool:
    """config.json's ``tie_word_embeddings`` (default true, as in transformers)."""
    return _flag(hf, "tie_word_embeddings", True)
