"""Corpus reading and windowing: clear errors, BOS-prefixed windows of at most n_ctx tokens."""

from __future__ import annotations

import pytest

from headscope import HeadscopeError
from headscope.corpus import read_corpus, windows
from headscope.shipped import sample_corpus


class _Tok:
    def encode(self, text):
        return [len(w) for w in text.split()]


class _Cfg:
    n_ctx = 8


class _Model:
    tokenizer, cfg, bos_id = _Tok(), _Cfg(), 99


def test_read_directory_sorted_recursive_skips_hidden_and_blank(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "z.txt").write_text("zed", encoding="utf-8")
    (tmp_path / "a.txt").write_text("alpha", encoding="utf-8")
    (tmp_path / ".hidden").write_text("no", encoding="utf-8")
    (tmp_path / "blank.txt").write_text("  \n", encoding="utf-8")
    got = read_corpus(tmp_path)
    assert [t for _, t in got] == ["alpha", "zed"]
    assert got[0][0].endswith("a.txt")


@pytest.mark.parametrize("content,msg", [(b"ab\x00cd", "binary"), (b"caf\xe9", "not UTF-8: invalid byte 0xe9 at offset 3")])
def test_bad_files(tmp_path, content, msg):
    (tmp_path / "f.txt").write_bytes(content)
    with pytest.raises(HeadscopeError, match=msg):
        read_corpus([tmp_path / "f.txt"])


def test_empty_and_missing(tmp_path):
    with pytest.raises(HeadscopeError, match="empty corpus"):
        read_corpus(tmp_path)
    with pytest.raises(HeadscopeError, match="not found"):
        read_corpus(tmp_path / "nope")


def test_windows_prepend_bos_and_respect_n_ctx():
    text = " ".join("x" * k for k in range(1, 16))  # 15 tokens 1..15
    ws = windows(_Model(), [("t", text), "ab"])
    assert [w.tolist() for w in ws] == [[99, 1, 2, 3, 4, 5, 6, 7], [99, 8, 9, 10, 11, 12, 13, 14],
                                        [99, 15], [99, 2]]
    assert len(windows(_Model(), [text], max_windows=2)) == 2
    assert [w.tolist() for w in windows(_Model(), [text], n_ctx=4)][0] == [99, 1, 2, 3]
    with pytest.raises(HeadscopeError, match="empty corpus"):
        windows(_Model(), [""])
    with pytest.raises(HeadscopeError):
        windows(_Model(), [text], n_ctx=9)


def test_sample_corpus_is_text():
    (name, text), = sample_corpus()
    assert len(text.split()) > 300 and name.startswith("headscope:")
