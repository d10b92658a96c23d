"""Fixtures for tests and benchmarks (not used by the library or the CLI at run time).

:mod:`.hub` writes checkpoints in the Hugging Face hub's exact layout (and offline HF caches).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..core.sources import open_source


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every stored tensor of a checkpoint directory (any layout), by stored key, in memory."""
    source = open_source(Path(directory))
    with source.open() as get:
        return {k: get(k) for k in source.infos}


def assert_matches_transformers(model, hf, tokens: torch.Tensor):
    """headscope's unprocessed forward equals the transformers model `hf` on `tokens` [1 n]: logits
    (rtol, atol 1e-5) and every layer's attention probabilities (atol 1e-6), with assert_close.
    Returns transformers' output (with its attentions)."""
    from ..core.forward import run_with_cache
    from ..core.weights import Processing

    with torch.no_grad():
        out = hf(tokens, output_attentions=True)
    cache = run_with_cache(model.weights(Processing.none()), tokens)
    torch.testing.assert_close(cache["logits"], out.logits, rtol=1e-5, atol=1e-5)
    for l, att in enumerate(out.attentions):
        torch.testing.assert_close(cache[f"blocks.{l}.attn.hook_pattern"], att, rtol=1e-5, atol=1e-6)
    return out
