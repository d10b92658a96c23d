"""Qwen2 (``model_type: qwen2``): the Llama layout (:mod:`.llama`) with Q, K and V biases (no O bias).

Config as Llama's; sliding-window attention (``use_sliding_window: true``) is refused in one line
(Qwen2's released checkpoints leave it off). ``tie_word_embeddings`` defaults to false (the small
Qwen2 models set it true).
"""

from __future__ import annotations

from ..config import Config
from .base import flag
from .llama import config_from_hf as _llama_config, make_family


def config_from_hf(hf: dict) -> Config:
    from ..._errors import HeadscopeError

    if flag(hf, "use_sliding_window", False):
        raise HeadscopeError("unsupported config: use_sliding_window true (Qwen2 sliding-window attention)")
    kinds = hf.get("layer_types") or []
    if not isinstance(kinds, list) or any(k != "full_attention" for k in kinds):
        raise HeadscopeError("unsupported config: layer_types other than full_attention (Qwen2 sliding-window "
                             "attention)")
    return _llama_config(hf, family="qwen2")


FAMILY = make_family("qwen2", "Qwen2", "Qwen2ForCausalLM", qkv_bias=True, o_bias=False, mlp_bias=False,
                     config=config_from_hf, extra_config={"use_sliding_window": False})
