"""``headscope.load(model)`` for a transformers GPT-2 model already in memory (notebooks).

    >>> from transformers import GPT2LMHeadModel          # doctest: +SKIP
    >>> hf = GPT2LMHeadModel.from_pretrained("gpt2")
    >>> model = headscope.load(hf)                        # no second download, no file

Accepted: ``GPT2LMHeadModel`` and ``GPT2Model`` (any object with a GPT-2 ``config``,
``model_type == "gpt2"``, and a ``state_dict()``).

- Config: ``model.config.to_dict()`` read by its family (:mod:`headscope.core.families`) — the
  validation config.json gets.
- Weights: a :class:`Checkpoint` over the state dict, detached — the mapping and checks
  a checkpoint on disk gets. Tensors that need no reshape, move or cast share storage
  with the transformers model (no second copy of the embeddings and MLPs): change the
  transformers model afterwards and load it again, since the fingerprint and the
  processed weights are taken at load time.
- Fingerprint: sha256 over the weight tensors in sorted key order (``transformer.``
  prefix removed; causal-mask buffers ``attn.bias``/``attn.masked_bias`` skipped; a
  ``lm_head.weight`` equal to ``wte.weight`` — tied — skipped), each contributing its
  key, dtype and shape as UTF-8 text, then its raw bytes (contiguous, CPU). So a tied
  ``GPT2LMHeadModel`` and its ``GPT2Model`` have the same fingerprint. It differs from
  the sha256 of a ``model.safetensors`` holding the same weights (that hashes a file,
  header included).
- Tokenizer: ``tokenizer=`` (a transformers GPT-2 tokenizer), or GPT-2's own BPE
  (bundled) when the model has GPT-2's 50,257-token vocabulary; otherwise refused.
- ``source`` is ``memory:<class name>``; ``directory`` is None.
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch

from .._errors import BadArgument, HeadscopeError, expected_got
from .families import GPT2, Family, read_config
from .checkpoint import state_dict_checkpoint
from .loading import check_device
from .model import Model
from .sources import DictSource
from .tokenizer import bundled_gpt2_tokenizer, check_tokenizer, with_tokens
from .weights import Processing


@dataclasses.dataclass
class InMemoryModel(Model):
    """A :class:`headscope.Model` made from a transformers model object (no directory)."""

    weights_sha256: str = ""

    @property
    def fingerprint(self) -> str:  # the file hash of Model does not apply: see the module docstring
        return self.weights_sha256

    def describe(self) -> dict:
        return {**super().describe(), "directory": None}


def _weight_items(kept: dict[str, torch.Tensor], family: Family = GPT2) -> list[tuple[str, torch.Tensor]]:
    """The tensors the fingerprint covers, by stripped key (module docstring), from a state
    dict as a state-dict source keeps it (detached, a tied lm_head dropped)."""
    skipped = tuple("." + b for b in family.buffers)   # causal-mask buffers, not weights
    items = ((family.canonical(k), v) for k, v in kept.items())
    return sorted((k, v) for k, v in items if not k.endswith(skipped))


def _sha256(kept: dict[str, torch.Tensor], family: Family = GPT2) -> str:
    h = hashlib.sha256()
    for k, v in _weight_items(kept, family):
        t = v.to("cpu").contiguous()
        h.update(f"{k}\0{str(t.dtype).replace('torch.', '')}\0{list(t.shape)}\0".encode("utf-8"))
        h.update(t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b"")
    return h.hexdigest()


def state_sha256(state: dict[str, torch.Tensor]) -> str:
    """sha256 of a GPT-2 state dict's weights: key, dtype, shape, bytes of each tensor in key order."""
    return _sha256(DictSource(state).state)


def from_transformers(hf_model, *, device="cpu", dtype: torch.dtype = torch.float32, tokenizer=None) -> Model:
    """A :class:`headscope.Model` of a transformers GPT-2 model object (see the module docstring)."""
    config = getattr(hf_model, "config", None)
    if config is None or not hasattr(config, "to_dict") or not callable(getattr(hf_model, "state_dict", None)):
        raise HeadscopeError(f"expected a hub id, a checkpoint directory or a transformers GPT-2 model, "
                             f"got {type(hf_model).__name__}")
    check_device(device)
    hf = config.to_dict()
    family, cfg = read_config(hf)
    state = hf_model.state_dict()                # detached by the state-dict source
    meta = sorted(k for k, v in state.items() if isinstance(v, torch.Tensor) and v.device.type == "meta")
    if meta:                                     # shapes without values: nothing to read
        raise HeadscopeError(f"the model's weights are on the meta device (shapes without values, e.g. built "
                             f"under init_empty_weights or torch.device('meta')): {meta[0]} and {len(meta) - 1} "
                             "more; load its weights (from_pretrained, to_empty + load_state_dict) first")
    if tokenizer is None:
        tokenizer = bundled_gpt2_tokenizer()
        if len(tokenizer) != cfg.d_vocab:
            raise HeadscopeError(f"the model's vocabulary has {cfg.d_vocab} tokens, not GPT-2's {len(tokenizer)}: "
                                 "pass its tokenizer, headscope.load(model, tokenizer=…)")
    else:
        if not all(callable(getattr(tokenizer, m, None)) for m in ("encode", "decode", "get_vocab", "__len__")):
            raise BadArgument(expected_got("tokenizer=", "a transformers GPT-2 tokenizer (encode, decode, get_vocab, "
                                           "len)", type(tokenizer).__name__))
        check_tokenizer(tokenizer, cfg.d_vocab, "tokenizer=")
    cfg = with_tokens(cfg, tokenizer)            # padding rows of a padded vocabulary: Config.vocab
    ckpt = state_dict_checkpoint(state, cfg, family=family, tie_word_embeddings=family.tied(hf),
                                 where="model in memory")
    ckpt.check_values()                          # finite, and inside the float32 bound (as a checkpoint on disk)
    raw = ckpt.raw(dtype, device).validate()     # shares the transformers tensors where no cast or move is needed
    return InMemoryModel(cfg=cfg, checkpoint=ckpt, tokenizer=tokenizer, source=f"memory:{type(hf_model).__name__}",
                         directory=None, device=torch.device(device), dtype=dtype, _processed={Processing.none(): raw},
                         weights_sha256=_sha256(ckpt.source.state, family))
