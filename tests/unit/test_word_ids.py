"""Category words are found in SentencePiece-style vocabularies too (Llama 2, TinyLlama: "▁word"),
and nothing changes for byte-level BPE (GPT-2's words are exactly ``encode(" " + word)``)."""

import pytest

from headscope.core.tokenizer import _family_tokenizer, bundled_gpt2_tokenizer, word_ids
from headscope.semantic.prompts import RELATED, category_tokens, load_categories
from headscope.testing.tokenizers import build_tokenizer


@pytest.fixture(scope="module")
def sentencepiece(tmp_path_factory):
    path = tmp_path_factory.mktemp("sp") / "tokenizer.json"
    build_tokenizer("llama2", 1200).save(str(path))
    return _family_tokenizer(str(path))


def test_a_leading_space_is_its_own_token_there(sentencepiece):
    tok = sentencepiece
    spaced = tok.encode(" red")
    assert len(spaced) == 2 and tok.convert_ids_to_tokens(spaced) == ["▁", "▁red"]
    assert tok.convert_ids_to_tokens(word_ids(tok, "red")) == ["▁red"]
    assert word_ids(tok, " red") == word_ids(tok, "red")
    # a word that is not one token stays as it encodes after a space
    assert len(word_ids(tok, "xqzvj")) > 1


def test_category_words_survive_in_a_sentencepiece_vocabulary(sentencepiece):
    cats = load_categories()
    ids = category_tokens(sentencepiece, cats)
    given = sum(len(w) for k, w in cats.items() if k != RELATED)
    found = sum(len(v) for v in ids.values())
    assert len(ids) >= 10 and found >= given // 2
    for name, toks in ids.items():
        for t in toks:
            piece = sentencepiece.convert_ids_to_tokens(t)
            assert piece.startswith("▁") and len(piece) > 1, (name, piece)


def test_byte_level_bpe_is_unchanged():
    tok = bundled_gpt2_tokenizer()
    words = [w for k, ws in load_categories().items() if k != RELATED for w in ws][:300]
    words += ["colour", "harbour", "neighbourhood", "don't", "1234", "Ünïcode", " leading"]
    for w in words:
        assert word_ids(tok, w) == tok.encode(w if w.startswith(" ") else " " + w), w
