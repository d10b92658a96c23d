"""Which analyses apply to a model, and why not: one home for the reasons (raised as NotApplicable).

The seed-000 analyses (the content + position key split and its TV distance, the positional
kernels and their categories, the softmax-denominator bounds and calibration, the contextual
circuit and its neurons) derive everything from keys built as ``LN(W_E[t] + W_pos[i])``: a
position vector added to the token embedding before layer 0. Rotary models (GPT-NeoX/Pythia,
Llama, Qwen2) add none; position enters only as a rotation of queries and keys inside every
attention layer, so there is no W_pos to split off. Those analyses raise :class:`NotApplicable`
with :func:`learned_positions`'s reason there — the command line prints it as one line, a
report records ``{"not_applicable": reason}`` for the stage and goes on. The rotary analogue of
the positional kernel is :mod:`headscope.layer0.relative` (the kernel over relative position).
"""

from __future__ import annotations

from .._errors import NotApplicable
from .config import Config

#: family → its name in messages
NAMES = {"gpt2": "GPT-2", "gpt_neo": "GPT-Neo", "gpt_neox": "GPT-NeoX (Pythia)", "opt": "OPT",
         "llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral", "gptj": "GPT-J", "gemma2": "Gemma 2",
         "olmo2": "OLMo 2", "phi3": "Phi-3"}


def learned_positions(cfg: Config, analysis: str) -> None:
    """Refuse `analysis` on a model without a learned position table added to the embedding."""
    if cfg.positional != "learned":
        raise NotApplicable(
            f"{analysis} needs learned absolute positions added to the token embedding (W_pos); "
            f"{NAMES.get(cfg.family, cfg.family)} is a rotary model: positions rotate queries and keys inside "
            "attention, so there is no W_pos to split off (see the relative-position kernel instead)")
