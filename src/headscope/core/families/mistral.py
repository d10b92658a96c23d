"""Mistral (``model_type: mistral``; Mistral-7B v0.1–v0.3): the Llama layout (:mod:`.llama`) without
biases, with sliding-window attention on every layer.

Config as Llama's, plus ``sliding_window``: every layer's query i sees keys j with
i − sliding_window < j ≤ i (transformers' ``sliding_window_overlay``: kv > q − window), as
``Config.attn_windows`` (the forward pass's local-window mask, GPT-Neo's); ``null`` = full causal
attention (v0.2 and later); absent = 4096, ``MistralConfig``'s default. A ``layer_types`` key is
ignored, as ``MistralForCausalLM`` ignores it (every layer uses ``sliding_window``).
``tie_word_embeddings`` defaults to false.
"""

from __future__ import annotations

from ..._errors import HeadscopeError
from ..config import MAX_SIZE, Config, _show
from .llama import config_from_hf as _llama_config, make_family


def config_from_hf(hf: dict) -> Config:
    window = hf.get("sliding_window", 4096)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_SIZE):
        raise HeadscopeError(f"config: sliding_window must be a positive integer or null, got {_show(window)}")
    n = hf.get("num_hidden_layers")
    windows = (window,) * n if window and isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_SIZE else ()
    if len(windows) > 100_000:
        raise HeadscopeError(f"config: num_hidden_layers {n} is more layers than headscope reads (100000)")
    return _llama_config(hf, family="mistral", qk_bias=False, attn_windows=windows)


def _extra(cfg: Config) -> dict:
    return {"sliding_window": cfg.window(0) or None}


FAMILY = make_family("mistral", "Mistral", "MistralForCausalLM", qkv_bias=False, o_bias=False, mlp_bias=False,
                     config=config_from_hf, extra_config=_extra)
