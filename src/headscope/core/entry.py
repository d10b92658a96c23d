"""``headscope.load``: the one entry point, for a hub id, a directory or a model already in memory.

It dispatches, and holds nothing else: a path or hub id goes to
:func:`headscope.core.loading.load_checkpoint`, a transformers model object to
:func:`headscope.core.in_memory.from_transformers` (both return a :class:`~headscope.core.model.Model`).
"""

from __future__ import annotations

import os

import torch

from .._errors import BadArgument, expected_got
from .in_memory import from_transformers
from .loading import check_dtype, load_checkpoint
from .model import Model


def load(
    model: str | os.PathLike,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    revision: str | None = None,
    tokenizer=None,
) -> Model:
    """Load a GPT-2-family checkpoint by hub id (at `revision`) or directory, or a transformers
    GPT-2 model object already in memory (then `tokenizer` may be given).

    Reads config.json, the weight files' headers and the tokenizer, and checks every
    weight is finite; the weights themselves are built on demand (:class:`Model`).

    >>> model = headscope.load("gpt2")              # doctest: +SKIP
    >>> W = model.weights()                         # processed, TransformerLens names
    """
    check_dtype(dtype)
    if not isinstance(model, (str, os.PathLike)):   # in memory: headscope.core.in_memory (tokenizer= is for it)
        return from_transformers(model, device=device, dtype=dtype, tokenizer=tokenizer)
    if tokenizer is not None:
        raise BadArgument("tokenizer= is for a model in memory (a checkpoint brings its own tokenizer): "
                          + expected_got("tokenizer=", None, type(tokenizer).__name__))
    return load_checkpoint(model, device=device, dtype=dtype, revision=revision)
