"""Qwen2 (``model_type: qwen2``): the Llama layout (:mod:`.llama`) with Q, K and V biases (no O bias).

Config as Llama's. Sliding windows as ``Qwen2Config`` sets them: ``sliding_window`` (default 4096)
counts only with ``use_sliding_window: true``; ``layer_types`` (when absent: layer i is
"sliding_attention" iff the window is on and i ≥ ``max_window_layers``, default 28) names each
layer's kind; a sliding layer's query i sees keys j with i − window < j ≤ i (``Config.attn_windows``).
A sliding layer without a window is refused (transformers cannot build its mask).
``tie_word_embeddings`` defaults to false (the small Qwen2 models set it true).
"""

from __future__ import annotations

from ..._errors import HeadscopeError
from ..config import MAX_SIZE, Config, _show
from .base import flag, size
from .llama import config_from_hf as _llama_config, make_family

KINDS = ("full_attention", "sliding_attention")


def windows(hf: dict) -> tuple:
    """Per-layer windows (0 = full) of a Qwen2 config.json, as Qwen2Config computes its layer_types."""
    n = size(hf, "num_hidden_layers")
    window = hf.get("sliding_window", 4096) if flag(hf, "use_sliding_window", False) else None
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_SIZE):
        raise HeadscopeError(f"config: sliding_window must be a positive integer or null, got {_show(window)}")
    kinds = hf.get("layer_types")
    if kinds is None:
        first = hf.get("max_window_layers", 28)
        if isinstance(first, bool) or not isinstance(first, int):
            raise HeadscopeError(f"config: max_window_layers must be an integer, got {_show(first)}")
        if window is None or first >= n:
            return ()
        kinds = ["sliding_attention" if i >= first else "full_attention" for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or any(k not in KINDS for k in kinds):
        raise HeadscopeError(f"config: layer_types must list {n} layer kinds ({', '.join(KINDS)}), got {_show(kinds)}")
    if "sliding_attention" in kinds and window is None:
        raise HeadscopeError("unsupported config: sliding_attention layers without a sliding window "
                             "(use_sliding_window false or sliding_window null: transformers cannot build their mask)")
    return tuple(window if k == "sliding_attention" else 0 for k in kinds) if "sliding_attention" in kinds else ()


def config_from_hf(hf: dict) -> Config:
    return _llama_config(hf, family="qwen2", attn_windows=windows(hf))


def _extra(cfg: Config) -> dict:
    if not cfg.attn_windows or not any(cfg.attn_windows):
        return {"use_sliding_window": False}
    w = max(cfg.attn_windows)
    if any(x not in (0, w) for x in cfg.attn_windows):
        raise HeadscopeError("cannot write a Qwen2 config.json with different sliding windows per layer")
    return {"use_sliding_window": True, "sliding_window": w, "max_window_layers": cfg.n_layers,
            "layer_types": ["sliding_attention" if x else "full_attention" for x in cfg.attn_windows]}


FAMILY = make_family("qwen2", "Qwen2", "Qwen2ForCausalLM", qkv_bias=True, o_bias=False, mlp_bias=False,
                     config=config_from_hf, extra_config=_extra)
