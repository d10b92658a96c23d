"""The hyper-parameters of a model (:class:`Config`, family-neutral) and the reading of config.json.

Which config.json keys mean what is the family's business: :mod:`headscope.core.families`
(GPT-2: :func:`headscope.core.families.gpt2.config_from_hf`) validates them and builds a Config."""

from __future__ import annotations

import dataclasses
import math
import operator
import os
from pathlib import Path

from .._errors import HeadscopeError
from .._input import CHECKPOINT_FILE_LIMIT, read_json_file

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

#: activation_function values of HF GPT-2 configs that headscope implements.
ACTIVATIONS = ("gelu_new", "gelu", "gelu_pytorch_tanh", "relu", "gelu_fast", "quick_gelu", "silu")

#: how positions enter: "learned" (a W_pos row added to the token embedding; GPT-2, GPT-Neo, OPT)
#: or "rotary" (queries and keys rotated by position inside every attention layer; GPT-NeoX, Llama, Qwen2).
POSITIONAL = ("learned", "rotary")
#: the normalisation before each reader: "layernorm" (centre, scale, w, b) or "rmsnorm" (scale, w; no centring).
NORMS = ("layernorm", "rmsnorm")


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
    # -- beyond GPT-2 (defaults are GPT-2's; each family adapter sets what its config.json says) --
    #: the config.json model_type this Config was read from (the family adapter that reads it).
    family: str = "gpt2"
    #: key/value heads (grouped-query attention): None = n_heads. The canonical weights hold W_K, W_V
    #: expanded to one copy per query head, so every analysis sees n_heads ordinary heads.
    n_kv_heads: int | None = None
    #: per-head width when the config states one (Llama, Qwen2 may); None = d_model // n_heads.
    head_dim: int | None = None
    positional: str = "learned"                  #: one of POSITIONAL
    rotary_dim: int = 0                          #: dims of each head rotated (rotary only; even, ≤ d_head)
    rotary_base: float = 10000.0                 #: rotary θ base
    #: the rope scaling as resolved from config.json (``rope_type`` and the parameters that type reads)
    #: as sorted (key, value) pairs, () for default RoPE (rotary only; core/rotary.py).
    rope_scaling: tuple = ()
    #: the attention scores' divisor when it is not √d_head (Gemma 2's √query_pre_attn_scalar; YaRN and
    #: LongRoPE fold their attention factor a in as √d_head / a²); None = √d_head (or 1, scale_attn_weights off)
    attn_divisor: float | None = None
    norm: str = "layernorm"                      #: one of NORMS
    parallel_residual: bool = False              #: x + attn(ln1 x) + mlp(ln2 x) (GPT-NeoX)
    gated_mlp: bool = False                      #: MLP(x) = (act(x W_gate) ⊙ (x W_in)) W_out (SwiGLU)
    post_ln: bool = False                        #: LayerNorm after each residual add (OPT-350m style)
    final_ln: bool = True                        #: a final norm before the unembedding
    #: per-layer local attention window (keys within the last `w` positions), 0 = global;
    #: () = every layer global (GPT-Neo's "local" layers set it).
    attn_windows: tuple = ()
    #: an RMSNorm on each branch's output before it is added to the residual stream (Gemma 2's
    #: post_attention/post_feedforward norms, OLMo 2's): Block.ln1_post_w, ln2_post_w
    branch_norms: bool = False
    #: a norm before each reader (LN1 before attention, LN2 before the MLP); OLMo 2 has none: its
    #: attention and MLP read the residual stream itself (Block.ln1_w, ln2_w are then unused ones)
    pre_norms: bool = True
    #: QK-norm (OLMo 2): q and k are RMS-normalised over all heads together (Block.q_norm_w,
    #: k_norm_w) before rotary, so a score is not a fixed bilinear form of the residual stream
    qk_norm: bool = False
    #: soft-capping c of the attention scores (score → c·tanh(score/c), before the mask; Gemma 2: 50)
    attn_softcap: float | None = None
    #: soft-capping c of the final logits (logit → c·tanh(logit/c); Gemma 2: 30)
    final_softcap: float | None = None
    #: whether the checkpoint stores query/key biases (GPT-Neo and bias-free Llama do not: raw
    #: b_Q = b_K = 0 is all such a checkpoint can hold)
    qk_bias: bool = True
    #: token ids are 0..n_tokens−1: one past the tokenizer's largest id, set at load
    #: (:func:`headscope.core.tokenizer.n_tokens`); rows from there on are padding of a padded
    #: vocabulary (Pythia, OLMo, Phi-3) that no text reaches. None: every row is a token.
    n_tokens: int | None = None

    @property
    def vocab(self) -> int:
        """How many leading rows of W_E (columns of W_U) are tokens: what every whole-vocabulary
        tensor of an analysis ranges over (``d_vocab`` less the padding rows)."""
        return self.d_vocab if self.n_tokens is None else self.n_tokens

    @property
    def d_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads as stored (grouped-query attention); n_heads without grouping."""
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    def window(self, layer: int) -> int:
        """Layer `layer`'s local attention window (0 = global)."""
        return self.attn_windows[layer] if self.attn_windows else 0

    def hidden_keys(self, layer: int, q_pos, k_pos):
        """True where the query at position `q_pos` cannot see the key at `k_pos` in layer `layer`:
        k > q (causal), or k ≤ q − window on a local layer (visible: q − window < k ≤ q). Tensors or
        ints, broadcast (``hidden_keys(l, n[:, None], i[None, :])``; offsets Δ: ``hidden_keys(l, Δ, 0)``).
        The one mask: the forward and every analysis that builds scores from weights call it."""
        hidden = k_pos > q_pos
        if self.window(layer):
            hidden = hidden | (k_pos <= q_pos - self.window(layer))
        return hidden

    def truncated(self, n_layers: int) -> "Config":
        """This config with its first `n_layers` layers only (per-layer settings cut to match)."""
        return dataclasses.replace(self, n_layers=n_layers, attn_windows=self.attn_windows[:n_layers])

    def attn_scale(self, layer: int) -> float:
        """The divisor of layer `layer`'s attention scores, ``score = q·k / attn_scale``.

        √d_head (unless ``scale_attn_weights`` is off; ``attn_divisor`` when set), times (layer + 1) when
        ``scale_attn_by_inverse_layer_idx`` is set, as HF's GPT-2 scales them.
        """
        scale = math.sqrt(self.d_head) if self.scale_attn_weights else 1.0
        if self.attn_divisor is not None:
            scale = self.attn_divisor
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
        if eps < 1.1754943508222875e-38:         # float32's smallest normal number: below it, var + eps of a zero
            raise HeadscopeError(                # residual (a zero embedding row) rounds to 0 and normalises as 0/0
                f"config: the norm epsilon (layer_norm_epsilon, layer_norm_eps or rms_norm_eps) is {eps:g}: expected "
                "at least 1.18e-38 (float32's smallest normal number), or a zero residual normalises as 0/0 = NaN")
        for name in ("scale_attn_by_inverse_layer_idx", "scale_attn_weights"):
            if not isinstance(getattr(self, name), bool):
                raise HeadscopeError(f"config: {name} must be true or false, got {_show(getattr(self, name))}")
        for name in ("n_kv_heads", "head_dim"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_SIZE):
                raise HeadscopeError(f"config: {name} must be a positive integer, got {_show(value)}")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise HeadscopeError(
                f"config: d_model ({self.d_model}) is not divisible by n_heads ({self.n_heads})"
            )
        if self.n_heads % self.kv_heads:
            raise HeadscopeError(f"config: n_heads ({self.n_heads}) is not a multiple of the key/value heads "
                                 f"({self.kv_heads})")
        if self.positional not in POSITIONAL:
            raise HeadscopeError(f"config: positional must be one of {', '.join(POSITIONAL)}, got {_show(self.positional)}")
        if self.norm not in NORMS:
            raise HeadscopeError(f"config: norm must be one of {', '.join(NORMS)}, got {_show(self.norm)}")
        if self.positional == "rotary":
            rd = self.rotary_dim
            if not isinstance(rd, int) or isinstance(rd, bool) or rd <= 0 or rd % 2 or rd > self.d_head:
                raise HeadscopeError(f"config: the rotary dimension must be a positive even integer ≤ d_head "
                                     f"({self.d_head}), got {_show(rd)}")
            base = self.rotary_base
            if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) or base <= 1:
                raise HeadscopeError(f"config: rope_theta must be a finite number > 1, got {_show(base)}")
        for name in ("attn_softcap", "final_softcap"):
            c = getattr(self, name)
            if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c)
                                  or c <= 0):
                raise HeadscopeError(f"config: {name} must be a finite positive number or null, got {_show(c)}")
        for name in ("parallel_residual", "gated_mlp", "post_ln", "final_ln", "qk_bias", "branch_norms", "pre_norms",
                     "qk_norm"):
            if not isinstance(getattr(self, name), bool):
                raise HeadscopeError(f"config: {name} must be true or false, got {_show(getattr(self, name))}")
        dv = self.attn_divisor
        if dv is not None and (isinstance(dv, bool) or not isinstance(dv, (int, float)) or not math.isfinite(dv)
                               or dv <= 0):
            raise HeadscopeError(f"config: the attention scale must be a finite positive number, got {_show(dv)}")
        nt = self.n_tokens
        if nt is not None and (not isinstance(nt, int) or isinstance(nt, bool) or not 0 < nt <= self.d_vocab):
            raise HeadscopeError(f"config: n_tokens must be an integer in 1..d_vocab ({self.d_vocab}), got {_show(nt)}")
        if self.attn_windows:
            w = self.attn_windows
            if len(w) != self.n_layers or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in w):
                raise HeadscopeError(f"config: attention windows must be {self.n_layers} non-negative integers "
                                     f"(one per layer, 0 = global), got {_show(w)}")
        if self.act_fn not in ACTIVATIONS:
            raise HeadscopeError(
                f"config: activation_function {_show(self.act_fn)} is not supported "
                f"(supported: {', '.join(ACTIVATIONS)})"
            )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["d_head"] = self.d_head
        d["head_dim"], d["n_kv_heads"] = self.d_head, self.kv_heads     # resolved: numbers, never null
        d["rope_scaling"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.rope_scaling}
        d["attn_windows"] = list(self.attn_windows)
        for name in ("attn_divisor", "attn_softcap", "final_softcap", "n_tokens"):   # numbers when set, absent when not
            if d[name] is None:
                del d[name]
        return d


def read_hf_config(path: Path) -> dict:
    """config.json at `path` as a dict: a regular file read under the input rule, a JSON object
    without duplicate keys or deep nesting (one-line errors otherwise)."""
    path = Path(path)
    if not os.path.lexists(path):
        raise HeadscopeError(f"missing config.json in {path.parent}")
    hf = read_json_file(path, "checkpoint file", object_pairs_hook=_no_duplicate_keys, limit=CHECKPOINT_FILE_LIMIT)
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
