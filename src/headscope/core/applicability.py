"""Which analyses apply to a model, and why not: one home for the reasons (raised as NotApplicable).

The seed-000 key split ``LN(W_E[t] + W_pos[i])`` (its TV distance, the positional kernels of a
query token and their categories, Gibson's code variant) needs a position vector added to the
token embedding before layer 0. Rotary models (GPT-NeoX/Pythia, Llama, Qwen2) add none; position
enters only as a rotation of queries and keys inside attention. Those analyses raise
:class:`NotApplicable` with :func:`learned_positions`'s reason there — the command line prints it
as one line, a report records ``{"not_applicable": reason}`` for the stage and goes on. Rotary
models have their own split (:mod:`headscope.layer0.rotary_split`: the relative kernel of
:mod:`headscope.layer0.relative` × a content factor), on which the denominators, calibration,
contextual circuit and neuron scan run. The contextual *neurons* also need MLP0 to read layer-0
attention's output, which a parallel residual (GPT-NeoX) does not: :func:`mlp_reads_attention`.
"""

from __future__ import annotations

from .._errors import NotApplicable
from .config import Config

#: family → its name in messages
NAMES = {"gpt2": "GPT-2", "gpt_neo": "GPT-Neo", "gpt_neox": "GPT-NeoX (Pythia)", "opt": "OPT",
         "llama": "Llama", "qwen2": "Qwen2"}


def learned_positions(cfg: Config, analysis: str) -> None:
    """Refuse `analysis` on a model without a learned position table added to the embedding."""
    if cfg.positional != "learned":
        raise NotApplicable(
            f"{analysis} needs learned absolute positions added to the token embedding (W_pos); "
            f"{NAMES.get(cfg.family, cfg.family)} is a rotary model: positions rotate queries and keys inside "
            "attention, so there is no W_pos to split off (see the relative-position kernel instead)")


def mlp_reads_attention(cfg: Config, analysis: str) -> None:
    """Refuse `analysis` (layer-0 heads → MLP0 neurons) when MLP0 does not read layer 0's attention output."""
    if cfg.parallel_residual:
        raise NotApplicable(
            f"{analysis} needs MLP0 to read layer-0 attention's output; {NAMES.get(cfg.family, cfg.family)} has a "
            "parallel residual (MLP0 reads the block's input x, not x + attention), so no layer-0 head reaches an "
            "MLP0 neuron (the contextual circuit itself applies: `headscope neurons --fidelity`)")
