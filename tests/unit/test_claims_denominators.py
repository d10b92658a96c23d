"""Issue 32: the denominator rows' texts are genuinely different texts (shipped genre texts written for
headscope), not offsets of one text; their windows are disjoint and each of a different text."""

from __future__ import annotations

import tomllib
from pathlib import Path

from headscope import shipped
from headscope.claims.work import denominator_texts
from headscope.corpus import windows


def test_genre_texts_are_shipped_distinct_and_long_enough(planted_model):
    texts = shipped.genre_texts()
    assert [t.name for t in texts] == ["dialogue", "manual", "recipe", "report"]
    assert len({t.sha256 for t in texts}) == len(texts)
    for t in texts:                                   # one full GPT-2 window each
        assert len(planted_model.tokenizer.encode(t.text)) >= planted_model.cfg.n_ctx - 1, t.name
    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["headscope"]
    assert "data/**/*" in globs and (root / "src/headscope/data/genres/README.md").is_file()


def test_denominator_windows_come_from_distinct_texts(planted_model):
    n = planted_model.cfg.n_ctx
    texts = denominator_texts()
    assert len(texts) >= 6 and len({t for _, t in texts}) == len(texts)
    full = [x for x in windows(planted_model, texts, n_ctx=n) if len(x) == n]
    assert len(full) >= 6
    heads = [tuple(x[1:33].tolist()) for x in full]
    for i, h in enumerate(heads):                     # no window is an offset of another
        for j, x in enumerate(full):
            if i != j:
                body = x[1:].tolist()
                assert not any(tuple(body[k:k + 32]) == h for k in range(len(body) - 31))
