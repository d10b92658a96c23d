"""The interface every model family implements: how its checkpoints map to headscope's weights.

A *family* is one architecture's key layout and config.json (GPT-2 today; GPT-NeoX, Llama …
next). The rest of headscope reads checkpoints only through a :class:`Family`:

- ``config(hf)``: validate a config.json dict and return the family-neutral :class:`Config`
  (one-line :class:`HeadscopeError` for anything unsupported);
- ``tied(hf)``: whether the unembedding is the embedding's transpose;
- the stored tensors: ``prefix`` (optional on stored keys), ``top`` (the :class:`Weights`
  fields outside the blocks → their canonical names), ``leaves`` (one block's canonical leaf
  names), ``buffers`` (stored block leaves that are not weights, e.g. causal masks),
  ``unembed`` (the key of a separate unembedding, stored only when untied), ``shapes(cfg)``
  (canonical name → shape of every weight but the unembedding, in model order);
- ``block_from_hf(tensors, cfg)`` → a :class:`Block` in TransformerLens names and shapes (its
  transposes and reshapes, shapes asserted by the checkpoint before), and its inverse
  ``hf_from_block(block, leaf, cfg)`` with ``hf_config(cfg, untied)`` for writing back.

A new family is one module in this package defining a ``FAMILY`` and one line in
:data:`headscope.core.families.MODULES`, plus its tests (a checkpoint in the hub's layout
against transformers' forward). Rotary embeddings, RMSNorm, gated MLPs and grouped-query
attention will need new :class:`Block`/:class:`Config` fields and forward branches; the
interface here stays the same.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Mapping

import torch

from ..config import Config
from ..weights import Block


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family's config and state-dict layout (module docstring)."""

    name: str                                   #: short name, e.g. "gpt2"
    title: str                                  #: in messages, e.g. "GPT-2-family"
    model_types: tuple[str, ...]                #: config.json ``model_type`` values it reads
    hf_class: str                               #: the transformers class whose weights these are
    prefix: str                                 #: optional prefix of stored keys ("transformer.")
    top: Mapping[str, str]                      #: Weights field → canonical name (W_E, W_pos, ln_final_*)
    leaves: tuple[str, ...]                     #: canonical leaf names of one block's weights
    buffers: tuple[str, ...]                    #: stored block leaves that are not weights
    unembed: str                                #: stored key of an untied unembedding [d_vocab d_model]
    block_re: re.Pattern                        #: canonical block name → (layer, leaf)
    block_name: Callable[[int, str], str]       #: (layer, leaf) → canonical name
    config: Callable[[dict], Config]            #: config.json dict → validated Config
    tied: Callable[[dict], bool]                #: config.json ties the unembedding to the embedding
    hf_config: Callable[[Config, bool], dict]   #: (cfg, untied) → config.json to write
    shapes: Callable[[Config], dict]            #: canonical name → shape, all weights but the unembedding
    block_from_hf: Callable[[dict, Config], Block]
    hf_from_block: Callable[[Block, str, Config], torch.Tensor]
    #: rows of the stored position embedding before position 0 (OPT: 2); W_pos is the rows after them
    pos_offset: int = 0

    def canonical(self, key: str) -> str:
        """A stored key without the optional prefix."""
        return key[len(self.prefix):] if self.prefix and key.startswith(self.prefix) else key

    def layer_leaf(self, name: str) -> tuple[int | None, str | None]:
        """(layer, leaf) of a canonical block tensor name, (None, None) for any other name."""
        m = self.block_re.fullmatch(name)
        return (int(m.group(1)), m.group(2)) if m else (None, None)

    def write_keys(self, cfg: Config, untied: bool) -> list[tuple[str, tuple[int, ...]]]:
        """(key, shape) of a checkpoint as headscope writes it: prefixed keys, the unembedding when untied."""
        out = [(self.prefix + n, s) for n, s in self.shapes(cfg).items()]
        return out + ([(self.unembed, (cfg.d_vocab, cfg.d_model))] if untied else [])
