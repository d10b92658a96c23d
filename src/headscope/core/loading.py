"""Checkpoints → :class:`~headscope.core.model.Model`: a hub id or a directory, validated.

``load_checkpoint`` resolves the argument (:mod:`headscope.core.hub`), lets the family read
and check config.json (:mod:`headscope.core.families`), opens and checks the weight files
(:mod:`headscope.core.sources`, :mod:`headscope.core.checkpoint`) and the tokenizer, and
returns a :class:`Model` whose weights are built on demand.
"""

from __future__ import annotations

import os
import re

import torch

from .._atomic import refuse_unfinished
from .._errors import BadArgument, HeadscopeError, expected_got
from .checkpoint import Checkpoint
from .config import read_hf_config
from .families import read_config
from typing import Callable

from .hub import resolve
from .model import Model
from .sources import FLOAT_DTYPES, open_source
from .tokenizer import check_tokenizer, load_tokenizer, with_tokens

def load_checkpoint(
    model: str | os.PathLike,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    revision: str | None = None,
    check_config: Callable | None = None,
    prefetch_fingerprint: bool = False,
) -> Model:
    """Load a checkpoint by hub id (at `revision`) or directory (``headscope.load`` for paths).

    `check_config(cfg)`, if given, runs on the :class:`Config` read from config.json, before the
    tokenizer is read and before any weight is (the CLI's index arguments: refused in a moment).
    `prefetch_fingerprint`: start hashing the weight files in the background now
    (:meth:`Checkpoint.prefetch_fingerprint`), for a caller that will read ``model.fingerprint``.

    Reads config.json (its family validates it: :mod:`headscope.core.families`), the weight
    files' headers and the tokenizer, and checks every weight is finite; the weights
    themselves are built on demand (:class:`Model`).
    """
    check_dtype(dtype)
    check_device(device)
    directory, source = resolve(model, revision)
    refuse_unfinished(directory)        # never a half-committed mix of two outputs
    hf = read_hf_config(directory / "config.json")
    files = open_source(directory)      # the weight files' headers: what every size in config.json must fit
    check_layers_present(hf, files, directory)
    family, cfg = read_config(hf)
    if check_config is not None:
        check_config(cfg)
    ckpt = Checkpoint(files, cfg, family=family, tie_word_embeddings=family.tied(hf), where=str(directory))
    if prefetch_fingerprint:
        ckpt.prefetch_fingerprint()                 # beside the tokenizer's load and the weights' check
    tokenizer = load_tokenizer(directory, cfg.family)
    vocab = tokenizer.get_vocab()                   # built once for both (50k entries for GPT-2)
    check_tokenizer(tokenizer, cfg.d_vocab, directory, cfg.family, vocab=vocab)
    ckpt.cfg = cfg = with_tokens(cfg, tokenizer, vocab=vocab)   # padding rows of a padded vocabulary: Config.vocab
    del vocab
    ckpt.check_values()
    return Model(cfg=cfg, checkpoint=ckpt, tokenizer=tokenizer, source=source, directory=directory,
                 device=torch.device(device), dtype=dtype, config_bos=hf.get("bos_token_id"))


#: the keys that give the number of layers (GPT-2; GPT-Neo; Pythia, OPT, Llama, Qwen2)
_LAYER_KEYS = ("n_layer", "num_layers", "num_hidden_layers")
_FEW_LAYERS = 1 << 12        #: layer counts cheap to check tensor by tensor
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:h|layers)\.(\d{1,10})\.")


def check_layers_present(hf: dict, source, directory) -> None:
    """Refuse (one line) a config.json whose number of layers passes the layers the weight files hold,
    before anything is allocated per layer (2³¹ − 1 layers used to take gigabytes before any check)."""
    present = {int(m.group(1)) for key in source.infos if (m := _LAYER_INDEX.search(key))}
    n = max(present) + 1 if present else 0
    for key in _LAYER_KEYS:
        value = hf.get(key)
        # a few more layers than the files hold get the checkpoint's own message (the missing tensor, named)
        if isinstance(value, int) and not isinstance(value, bool) and value > max(n, _FEW_LAYERS):
            raise HeadscopeError(f"config.json has {key} {value}, but the weight files in {directory} hold "
                                 f"{n} layer{'s' if n != 1 else ''}: expected {key} at most {n}")


def check_dtype(dtype) -> None:
    """Refuse (:class:`BadArgument`, a ValueError) anything but a floating torch dtype headscope computes in."""
    if not isinstance(dtype, torch.dtype) or dtype not in FLOAT_DTYPES.values():
        raise BadArgument(expected_got("dtype", f"one of {', '.join(FLOAT_DTYPES)} (torch dtypes)",
                                       f"{dtype!r} ({type(dtype).__name__})"))


def check_device(device) -> None:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise BadArgument(f"--device {device!r} is not a torch device (expected cpu, cuda, cuda:1, mps)") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise BadArgument(expected_got(f"--device {device}", "cpu, cuda, cuda:N or mps (devices that compute)",
                                       dev.type))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise HeadscopeError(f"--device {device}: CUDA is not available on this machine")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise HeadscopeError(f"--device {device}: MPS is not available on this machine")
