"""Planted-mechanism GPT-2 checkpoints: the ground truth every analysis is tested on.

A planted checkpoint is a real Hugging Face GPT-2 directory (config.json,
model.safetensors, GPT-2's BPE tokenizer) whose weights are unremarkable random
matrices except for mechanisms built by hand and listed in ``planted.json``.

How it is built (the maths of each mechanism lives in its module's docstring):

- :mod:`._base` lays out the residual stream in disjoint blocks of coordinates
  (:class:`Space`) and draws unremarkable GPT-2-like weights: token embeddings of
  norm ≈ 3.5 in the ``free`` block, small position embeddings, LayerNorms 1/0,
  small random attention and MLP matrices.
- :mod:`.layer0` plants the seed-000 mechanisms in block 0 (positional-kernel
  categories, contextual heads, a keyword-density head, contextual MLP0 neurons).
- :mod:`.layer1` plants the seed-002 semantic head in block 1.
- :mod:`.layer2` (only with ≥ 3 layers) plants a copying and a copy-suppression head
  in block 2 (their OV circuits; for the atlas's two copying columns) and a K-composition
  edge 0.1 → 2.5 (for :mod:`headscope.composition`).

Same seed → byte-identical files.
"""

from .build import build, build_weights
from ._base import Space

__all__ = ["Space", "build", "build_weights"]
