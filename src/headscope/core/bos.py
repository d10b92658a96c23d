"""Which token headscope prepends as BOS, per family — stated in every result (``model.describe()["bos"]``).

Wherever an analysis says "BOS prepended" (the seeds' convention: GPT-2 has no BOS of its own,
and the studies prepend ``<|endoftext|>``), headscope prepends the first of the family's
candidates below that the tokenizer's vocabulary holds; if none is there, config.json's
``bos_token_id``; GPT-2-family checkpoints fall back on the last id (GPT-2's ``<|endoftext|>``
is id 50256 = d_vocab − 1).

============  =========================================  ============================================
family        token prepended                            what the family's own tokenizer does
============  =========================================  ============================================
gpt2          ``<|endoftext|>``                          prepends nothing
gpt_neo       ``<|endoftext|>``                          prepends nothing
gpt_neox      ``<|endoftext|>`` (Pythia: id 0)           prepends nothing (Pythia has no BOS by default)
opt           ``</s>`` (id 2)                            prepends ``</s>``
llama         ``<|begin_of_text|>`` (Llama 3), ``<s>``   prepends it
              (Llama 2, TinyLlama), SmolLM's
              ``<|endoftext|>``
qwen2         ``<|endoftext|>``                          prepends nothing (Qwen2 has no BOS)
mistral       ``<s>`` (id 1)                             prepends it
gptj          ``<|endoftext|>`` (GPT-2's tokenizer)      prepends nothing
gemma2        ``<bos>`` (id 2)                           prepends it
phi3          ``<s>`` (id 1)                             prepends nothing (add_bos_token false)
olmo2         ``<|endoftext|>`` (its document separator)  not checked offline (recorded as nothing)
============  =========================================  ============================================

Tokenizers are always called without their own special tokens (``add_special_tokens=False``),
so the BOS is prepended once, by headscope, the same way for every family.
"""

from __future__ import annotations

#: family → (candidate BOS tokens in order, whether the family's own tokenizer prepends one)
TABLE: dict[str, tuple[tuple[str, ...], bool]] = {
    "gpt2": (("<|endoftext|>",), False),
    "gpt_neo": (("<|endoftext|>",), False),
    "gpt_neox": (("<|endoftext|>",), False),
    "opt": (("</s>",), True),
    "llama": (("<|begin_of_text|>", "<s>", "<|endoftext|>"), True),
    "qwen2": (("<|endoftext|>",), False),
    "mistral": (("<s>",), True),
    "gptj": (("<|endoftext|>",), False),
    "gemma2": (("<bos>",), True),
    "phi3": (("<s>",), False),
    "olmo2": (("<|endoftext|>",), False),
}


def bos(tokenizer, family: str, d_vocab: int, config_bos: int | None = None) -> dict:
    """The BOS record of a model: token, id, how it was chosen, whether the family's own
    tokenizer prepends it, and ``padding_row``: whether the id is no token of the tokenizer (an
    embedding row past its vocabulary, added as padding and most likely never trained)."""
    vocab = tokenizer.get_vocab()       # built once (50k entries for GPT-2)
    record = _choose(tokenizer, vocab, family, d_vocab, config_bos)
    record["padding_row"] = record["id"] not in set(vocab.values())
    return record


def _choose(tokenizer, vocab: dict, family: str, d_vocab: int, config_bos: int | None) -> dict:
    candidates, own = TABLE.get(family, TABLE["gpt2"])
    for token in candidates:
        if token in vocab and 0 <= vocab[token] < d_vocab:
            return {"token": token, "id": int(vocab[token]), "source": f"{family} convention",
                    "prepended_by_tokenizer": own}
    if isinstance(config_bos, int) and not isinstance(config_bos, bool) and 0 <= config_bos < d_vocab:
        return {"token": tokenizer.decode([config_bos]), "id": config_bos, "source": "config.json bos_token_id",
                "prepended_by_tokenizer": own}
    tid = getattr(tokenizer, "bos_token_id", None)
    i = int(tid) if isinstance(tid, int) and 0 <= tid < d_vocab else d_vocab - 1
    return {"token": tokenizer.decode([i]), "id": i, "source": "tokenizer bos_token" if i == tid else "last id",
            "prepended_by_tokenizer": own}
