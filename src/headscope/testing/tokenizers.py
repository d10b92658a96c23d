"""Small, real tokenizers in each family's tokenizer.json layout, for tests and benchmarks.

:func:`write_family_tokenizer` trains a byte-level BPE (the ``tokenizers`` library, as GPT-2,
Pythia, Llama 3 and Qwen2 use) on the shipped calibration text, with the family's special
tokens where its hub tokenizer has them, and writes ``tokenizer.json`` (and a
``tokenizer_config.json`` naming the special tokens) — no vocab.json/merges.txt, as those hubs
ship. Deterministic: the same arguments give the same files.
"""

from __future__ import annotations

import json
from pathlib import Path

#: family → (special tokens first in the vocabulary, special tokens appended after the BPE tokens)
SPECIALS = {
    "gpt2": ((), ("<|endoftext|>",)),
    "gpt_neo": ((), ("<|endoftext|>",)),
    "gpt_neox": (("<|endoftext|>", "<|padding|>"), ()),
    "opt": (("<s>", "<pad>", "</s>", "<unk>"), ()),
    "llama": ((), ("<|begin_of_text|>", "<|end_of_text|>")),
    "llama2": (("<unk>", "<s>", "</s>"), ()),
    "qwen2": ((), ("<|endoftext|>", "<|im_start|>", "<|im_end|>")),
    "gemma2": (("<pad>", "<eos>", "<bos>", "<unk>"), ()),
    "olmo2": ((), ("<|endoftext|>", "<|pad|>")),
}
#: SentencePiece-style flavours ("▁" for spaces, "<unk>" for unknown characters)
SENTENCEPIECE = ("llama2", "gemma2")


def training_text() -> str:
    """The shipped calibration text, after the semantic survey's category words, each a line of
    itself repeated (so a vocabulary of about 1000 tokens holds them as single tokens)."""
    from importlib.resources import files

    from ..semantic.prompts import RELATED, load_categories

    data = files("headscope")
    words = [w.strip() for name, ws in load_categories().items() if name != RELATED for w in ws]
    lines = [(" " + w) * 40 for w in words]
    return "\n".join(lines) + "\n" + data.joinpath("data/calibration.txt").read_text(encoding="utf-8")


def build_tokenizer(family: str, n_tokens: int):
    """A ``tokenizers.Tokenizer`` of exactly `n_tokens` tokens with `family`'s special tokens.

    ``llama2`` (and ``gemma2``, with Gemma's specials first) is SentencePiece-style, as Llama 2's,
    TinyLlama's and Gemma's tokenizer.json are: a
    normalizer that prepends "▁" and turns every space into "▁", no pre-tokenizer, "<unk>" for
    characters outside the vocabulary (so ``" red"`` encodes as ``["▁", "▁red"]``). The others
    are byte-level BPE.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    first, last = SPECIALS[family]
    size = n_tokens - len(last)
    lines = training_text().split("\n")
    if family in SENTENCEPIECE:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")   # training only
        alphabet = sorted({c for line in lines for c in line.replace(" ", "▁")})
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=list(first), show_progress=False,
                                  initial_alphabet=alphabet)
    tok.train_from_iterator(lines, trainer)
    if family in SENTENCEPIECE:                             # the hub's legacy layout, as it encodes
        tok.pre_tokenizer = None
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    missing = size - tok.get_vocab_size()              # a short text gives fewer merges: pad with plain tokens
    if missing > 0:
        tok.add_tokens([f"tok{i}" for i in range(missing)])
    if tok.get_vocab_size() != size:
        raise ValueError(f"{n_tokens} tokens are too few for a byte-level BPE with {family}'s special tokens")
    tok.add_special_tokens(list(last))
    return tok


def write_family_tokenizer(directory, family: str, n_tokens: int) -> Path:
    """Write `family`'s tokenizer.json (exactly `n_tokens` tokens) and tokenizer_config.json into `directory`."""
    directory = Path(directory)
    tok = build_tokenizer(family, n_tokens)
    tok.save(str(directory / "tokenizer.json"))
    first, last = SPECIALS[family]
    specials = first + last
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "added_special_tokens": list(specials)}, indent=2) + "\n")
    return directory / "tokenizer.json"
