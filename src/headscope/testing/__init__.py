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
