"""The loaded model: config, lazily read weights bound to one processing, tokenizer, fingerprint."""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import threading
from pathlib import Path
from typing import Callable

import torch

from .bos import bos as bos_record
from .checkpoint import Checkpoint
from .config import Config
from .tokenizer import to_str_tokens
from .weights import Block, Processing, Weights
from .writing import write_checkpoint

_ONCE = threading.Lock()
_BUILDING: dict = {}


def _once(cache: dict, key, build: Callable[[], object]):
    """``cache[key]``, built by ``build()`` if missing, once however many threads ask at the same time
    (the report's lanes share one model: a second build would be a second copy, and memos kept on
    the first would be missed). Builds of other keys go on meanwhile."""
    if key in cache:
        return cache[key]
    with _ONCE:
        lock = _BUILDING.setdefault((id(cache), key), threading.Lock())
    with lock:
        if key not in cache:
            cache[key] = build()
    with _ONCE:
        _BUILDING.pop((id(cache), key), None)
    return cache[key]


@dataclasses.dataclass(eq=False)
class Model:
    """A loaded checkpoint: config, its weight files, tokenizer, and where it came from.

    Weights are built on demand: :meth:`weights` (processed, cached per processing),
    :attr:`raw` (unprocessed, built on first access), :meth:`raw_block` (one block).

    A model is bound to one processing (:attr:`processing`; ``None``: the seed studies'
    default): analyses take the model and read ``model.weights()``, which is the bound
    processing's weights. :meth:`bound` returns the same model bound to another processing;
    the copies share the files, the tokenizer and every cache.
    """

    cfg: Config
    checkpoint: "Checkpoint" = dataclasses.field(repr=False)
    tokenizer: object = dataclasses.field(repr=False)
    source: str = ""
    directory: Path = Path(".")
    device: torch.device = torch.device("cpu")
    dtype: torch.dtype = torch.float32
    _processed: dict = dataclasses.field(default_factory=dict, repr=False)
    _derived: dict = dataclasses.field(default_factory=dict, repr=False)
    config_bos: int | None = None                   #: config.json's bos_token_id, if any
    processing: Processing | None = None            #: the bound processing (None: Processing.default())
    edited: bool = False                            #: weights replaced by :meth:`with_weights` (not the files')

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 of the weight files (module docstring): identifies the weights in every result."""
        return self.checkpoint.fingerprint()

    @property
    def raw(self) -> Weights:
        """The unprocessed weights (built from the files on first access, then kept)."""
        # kept with the processed weights: shared by bound copies
        return _once(self._processed, Processing.none(), lambda: self.checkpoint.raw(self.dtype, self.device))

    def bound(self, processing: Processing | None) -> "Model":
        """This model bound to `processing` (``None``: the default), sharing files and caches."""
        if processing == self.processing:
            return self
        other = copy.copy(self)             # shallow: the checkpoint, tokenizer and caches are shared
        other.processing = processing
        return other

    def with_weights(self, weights: Weights) -> "Model":
        """This model with other processed weights under its bound processing (a null draw, an
        edit): shares the files and the tokenizer, not the caches of weights or derived views."""
        other = copy.copy(self)
        other._processed = {self.resolved_processing(): weights}
        other._derived = {}
        other.edited = True                 # its fingerprint still names the files: see claims.work's memo
        return other

    def resolved_processing(self, processing: Processing | None = None) -> Processing:
        """`processing` (default: the bound one, else the seed studies') with the options that are
        exact for this family only."""
        if processing is None:
            processing = Processing.default() if self.processing is None else self.processing
        return processing.applicable(self.cfg)

    def weights(self, processing: Processing | None = None) -> Weights:
        """Weights under `processing` (default: the bound processing), cached.

        Built block by block from the files in float32 (float64 for a float64 model),
        then cast to the model's dtype and moved to its device.
        """
        processing = self.resolved_processing(processing)
        if processing == Processing.none():
            return self.raw
        return _once(self._processed, processing,
                     lambda: self.checkpoint.processed(processing, self.dtype, self.device))

    def derived(self, name: str, build: Callable[[Weights], object]):
        """``build(self.weights())``, computed once per (`name`, bound processing) and kept
        beside the processed weights (e.g. the float64 layer-0 view, :func:`headscope.layer0.view`).
        Callers must not modify what it returns."""
        processing = self.resolved_processing()
        return _once(self._derived, (name, processing), lambda: build(self.weights(processing)))

    def raw_block(self, layer: int) -> Block:
        """The raw (unprocessed) weights of block `layer`, a copy the caller may modify."""
        return self.checkpoint.raw_block(self.cfg.check_layer(layer), self.dtype, self.device)

    def save(self, out: str | os.PathLike, *, blocks: dict[int, Block] | None = None,
             extra_files: dict[str, str] | None = None) -> Path:
        """Write this checkpoint to `out` with the raw blocks in `blocks` replacing the model's.

        The tokenizer files are copied from the model's directory; `extra_files` (name →
        text) are added. The rest of the weights are the model's own, copied tensor by
        tensor from its files (float32, ``transformer.`` keys, ``lm_head.weight`` when
        untied), so the model is never held twice.
        """
        replaced = {self.cfg.check_layer(l): b for l, b in (blocks or {}).items()}
        ckpt = self.checkpoint
        family = ckpt.family

        def tensor(key: str) -> torch.Tensor:
            name = family.canonical(key)
            layer, leaf = family.layer_leaf(name)
            if layer in replaced:
                return family.hf_from_block(replaced[layer], leaf, self.cfg)
            return ckpt.read([name], torch.float32)[name]

        return write_checkpoint(Path(out), self.cfg, family, untied=ckpt.untied, tensor=tensor,
                                 tokenizer_from=self.directory, extra_files=extra_files)

    def to_tokens(self, text: str, prepend_bos: bool = True) -> torch.Tensor:
        """Token ids [pos] of `text`, with BOS (``<|endoftext|>``) prepended."""
        ids = self.tokenizer.encode(text)
        if prepend_bos:
            ids = [self.bos_id] + ids
        return torch.tensor(ids, dtype=torch.long)

    def to_str_tokens(self, ids) -> list[str]:
        return to_str_tokens(self.tokenizer, ids)

    @functools.cached_property
    def bos(self) -> dict:
        """The BOS headscope prepends and why (:mod:`headscope.core.bos`): token, id, source."""
        return bos_record(self.tokenizer, self.cfg.family, self.cfg.d_vocab, self.config_bos)

    @property
    def bos_id(self) -> int:
        return self.bos["id"]

    @property
    def n_parameters(self) -> int:
        """Parameters of the GPT-2 (W_U counted once when tied to W_E; mask buffers not)."""
        return self.checkpoint.n_parameters

    def describe(self) -> dict:
        c = self.cfg
        return {
            "source": self.source,
            "directory": str(self.directory),
            "fingerprint": self.fingerprint,
            "config": c.to_dict(),
            "n_parameters": self.n_parameters,
            "dtype": str(self.dtype).replace("torch.", ""),
            "tokenizer_vocab": len(self.tokenizer),
            "bos": self.bos,
            "processing_default": Processing.default().applicable(c).to_dict(),
        }
