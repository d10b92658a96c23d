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


# -- issue 36: what a vocabulary lacks is said as such ------------------------------------------


def _word_level(words: list[str]):
    """A word-level tokenizer.json (every word outside `words` → "<unk>"), through transformers."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<unk>", "<|endoftext|>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def test_category_words_outside_the_vocabulary_are_said_to_be_so():
    """Every category word unknown to a word-level vocabulary: each reads as the one token <unk>; it used to be
    refused as "token 'January' is in both 'days' and 'months'" (a duplicate), now as words not in the vocabulary."""
    from headscope._errors import NotApplicable
    import re

    tok = _word_level(["the", "cat"])
    cats = {"days": ["Monday", "Tuesday"], "months": ["January", "February", "March", "April"]}
    with pytest.raises(NotApplicable) as e:
        category_tokens(tok, cats)
    assert str(e.value) == ("categories: expected at least 2 categories with ≥ 2 words that are single tokens in this "
                            "tokenizer's vocabulary (4 tokens), got 0 (0 single-token words of 6; 6 not in the "
                            "vocabulary (read as its unknown token '<unk>': 'Monday', 'Tuesday', 'January', …))")
    known = _word_level(["Monday", "Tuesday", "January", "February"])
    assert category_tokens(known, cats) == {"days": [2, 3], "months": [4, 5]}      # March, April dropped


def test_a_vocabulary_without_frequent_tokens_says_what_is_needed_and_found():
    """A 100-token vocabulary: the merge-order stand-in for frequency (ids from 256 up) has no token; it used to be
    refused as "the vocabulary offers 0 frequent tokens"; wordfreq's words outside the vocabulary count for none
    (they all used to count for <unk>, making it the most frequent token)."""
    from headscope._errors import HeadscopeError
    from headscope.semantic.clustering import frequent_tokens, wordfreq_tokens

    tok = _word_level([f"zq{i}" for i in range(96)] + ["the", "of"])
    assert len(tok) == 100
    with pytest.raises(HeadscopeError) as e:
        frequent_tokens(tok, 50)
    assert str(e.value) == ("frequent tokens: without a corpus they are the ids from 256 up (a byte-level BPE's merges "
                            "after its 256 bytes, in merge order, standing in for frequency); expected at least 2, got 0 "
                            "in this vocabulary of 100 tokens — give a corpus (--corpus FILE) to count the tokens of a "
                            "text instead")
    assert wordfreq_tokens(tok, 2, bos_first=False) == [tok.convert_tokens_to_ids("the"), tok.convert_tokens_to_ids("of")]


@pytest.fixture(scope="module")
def small_bpe(tmp_path_factory):
    """A 1024-token byte-level BPE (the vocabulary of every family's test checkpoint)."""
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    build_tokenizer("gpt_neox", 1024).save(str(path))
    return _family_tokenizer(str(path))


def _listing(monkeypatch, clustering):
    """wordfreq.top_n_list recording the sizes asked for, and word_ids counting its calls."""
    import wordfreq

    sizes, calls, top_n_list, ids = [], [0], wordfreq.top_n_list, clustering.word_ids

    def listed(lang, n, *a, **k):
        sizes.append(n)
        assert n <= 32768, f"the word list grows past 32768 words: {sizes}"       # fail fast, not in minutes
        return top_n_list(lang, n, *a, **k)

    monkeypatch.setattr(wordfreq, "top_n_list", listed)

    def counted(tok, word):
        calls[0] += 1
        return ids(tok, word)

    monkeypatch.setattr(clustering, "word_ids", counted)
    return sizes, calls


def test_wordfreq_tokens_of_a_small_vocabulary_stop_at_max_words(small_bpe, monkeypatch):
    """Fewer word-initial tokens than the 2999 nodes of the semantic clusters: the word list doubles up to
    MAX_WORDS and stops (it used to double on to wordfreq's whole list, ~320 k words and two tokenizer calls
    each: minutes each time `reproduce --find` built the nodes), each word encoded at most twice in all."""
    from headscope.semantic import clustering

    sizes, calls = _listing(monkeypatch, clustering)
    got = clustering.wordfreq_tokens(small_bpe, 3000, bos_first=False)
    assert sizes == [12000, 24000, clustering.MAX_WORDS] and clustering.MAX_WORDS == 32768
    assert clustering.MAX_WORDS <= calls[0] <= 2 * clustering.MAX_WORDS
    assert 200 < len(got) < 1024 and len(set(got)) == len(got)


def test_wordfreq_tokens_counted_as_the_list_grows_equal_one_count_of_the_longest(small_bpe, monkeypatch):
    """The counts kept across doublings (each list extends the last) give the tokens of one naive count of
    the longest list read: every word's frequency added to its token, ties by id."""
    import wordfreq

    from headscope.core.tokenizer import word_ids
    from headscope.semantic import clustering

    monkeypatch.setattr(clustering, "MAX_WORDS", 7000)
    sizes, _ = _listing(monkeypatch, clustering)
    got = clustering.wordfreq_tokens(small_bpe, 600, bos_first=False)
    assert sizes == [2400, 4800, 7000]
    counts = {}
    for word in wordfreq.top_n_list("en", 7000):
        ids = word_ids(small_bpe, word)
        if len(ids) > 1 and len(cap := word_ids(small_bpe, word[:1].upper() + word[1:])) == 1:
            ids = cap
        if ids and ids[0] != small_bpe.unk_token_id:
            counts[ids[0]] = counts.get(ids[0], 0.0) + wordfreq.word_frequency(word, "en")
    assert got == sorted(counts, key=lambda t: (-counts[t], t))[:600] and len(got) < 600
