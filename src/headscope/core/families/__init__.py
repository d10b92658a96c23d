"""Model families: one adapter module each, behind :class:`~.base.Family`; a registry by ``model_type``.

To add a family: write ``<name>.py`` here defining ``FAMILY = Family(...)`` (see :mod:`.base`
and :mod:`.gpt2`), add it to :data:`MODULES`, and test it on a checkpoint in the hub's layout.
"""

from __future__ import annotations

from ..._errors import HeadscopeError
from ..config import Config, _show
from . import gemma2, gpt2, gpt_neo, gpt_neox, gptj, llama, mistral, olmo2, opt, phi3, qwen2
from .base import Family

#: every family headscope reads, in the order messages list them.
MODULES = (gpt2, gpt_neo, gpt_neox, gptj, opt, llama, qwen2, mistral, gemma2, phi3, olmo2)
FAMILIES: dict[str, Family] = {t: m.FAMILY for m in MODULES for t in m.FAMILY.model_types}
GPT2 = gpt2.FAMILY


def family_for(hf: dict) -> Family:
    """The family of a config.json dict (by ``model_type``); unknown types refused in one line."""
    model_type = hf.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        supported = "; ".join(f"{m.FAMILY.title} checkpoints, model_type "
                              + ", ".join(repr(t) for t in m.FAMILY.model_types) for m in MODULES)
        raise HeadscopeError(f"unsupported architecture: model_type {_show(model_type)} (headscope reads {supported})")
    return family.variant(hf) if family.variant is not None else family


def read_config(hf: dict) -> tuple[Family, Config]:
    """(family, validated Config) of a config.json dict."""
    family = family_for(hf)
    return family, family.config(hf)


__all__ = ["FAMILIES", "Family", "GPT2", "MODULES", "family_for", "read_config"]
