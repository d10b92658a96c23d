"""GPT-2 hyper-parameters, read from a Hugging Face config.json and validated."""

from __future__ import annotations

import dataclasses
import json
import math
import operator
from pathlib import Path

from ._errors import HeadscopeError

def _is_index(x) -> bool:
    """An integer (Python, numpy or 0-d torch), not a bool."""
    if isinstance(x, bool):
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


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
                raise HeadscopeError(f"config: {name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise HeadscopeError(
                f"config: d_model ({self.d_model}) is not divisible by n_heads ({self.n_heads})"
            )
        if self.act_fn not in ACTIVATIONS:
            raise HeadscopeError(
                f"config: activation_function {self.act_fn!r} is not supported "
                f"(supported: {', '.join(ACTIVATIONS)})"
            )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["d_head"] = self.d_head
        return d

    # -- Hugging Face ------------------------------------------------------------------

    @classmethod
    def from_hf_dict(cls, hf: dict) -> "Config":
        """Validate a GPT-2 config.json and read its shapes."""
        model_type = hf.get("model_type")
        if model_type != "gpt2":
            raise HeadscopeError(
                f"unsupported architecture: model_type {model_type!r} "
                "(headscope reads GPT-2-family checkpoints, model_type 'gpt2')"
            )
        if hf.get("add_cross_attention"):
            raise HeadscopeError("unsupported config: add_cross_attention is set")
        d_model = hf.get("n_embd", hf.get("hidden_size"))
        n_inner = hf.get("n_inner")
        try:
            return cls(
                n_layers=hf["n_layer"],
                d_model=d_model,
                n_heads=hf["n_head"],
                d_mlp=n_inner if n_inner is not None else 4 * d_model,
                d_vocab=hf["vocab_size"],
                n_ctx=hf.get("n_positions", hf.get("n_ctx")),
                ln_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
                act_fn=hf.get("activation_function", "gelu_new"),
                scale_attn_by_inverse_layer_idx=bool(hf.get("scale_attn_by_inverse_layer_idx", False)),
                scale_attn_weights=bool(hf.get("scale_attn_weights", True)),
                reorder_and_upcast_attn=bool(hf.get("reorder_and_upcast_attn", False)),
            )
        except KeyError as e:
            raise HeadscopeError(f"config.json: missing key {e.args[0]!r}") from None
        except TypeError as e:
            raise HeadscopeError(f"config.json: {e}") from None

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
    """config.json at `path` as a dict (one-line errors when missing or not a JSON object)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HeadscopeError(f"missing config.json in {Path(path).parent}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise HeadscopeError(f"cannot read {path}: {e}") from None
    try:
        hf = json.loads(text)
    except json.JSONDecodeError as e:
        raise HeadscopeError(f"{path} is not valid JSON: {e.msg} (line {e.lineno})") from None
    if not isinstance(hf, dict):
        raise HeadscopeError(f"{path} is not a JSON object")
    return hf


def tie_word_embeddings(hf: dict) -> bool:
    """config.json's ``tie_word_embeddings`` (default true, as in transformers)."""
    tie = hf.get("tie_word_embeddings", True)
    if not isinstance(tie, bool):
        raise HeadscopeError(f"config: tie_word_embeddings must be true or false, got {tie!r}")
    return tie
