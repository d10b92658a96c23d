"""`reproduce --find`'s own clusters of the semantic head on a SentencePiece-style vocabulary (Phi-3, Gemma 2,
Mistral, Llama 2: "▁w", decoded without its space): the nodes are the words a prompt holds as one token after a
space (core.tokenizer.word_ids). They used to require a decoded leading space, kept no word, and the top-4
graph of no node crashed --find with an IndexError (phi3, gemma2)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_families import build  # noqa: E402  (one builder for every family test)

import headscope  # noqa: E402
from headscope.core.tokenizer import word_ids  # noqa: E402

pytest.importorskip("transformers")


def test_sentencepiece_vocabulary_gives_cluster_nodes(tmp_path):
    from headscope.claims.own_clusters import ClusterNodes, head_clusters
    from headscope.semantic import bilinear

    _, d = build("phi3", tmp_path, n_tokens=1024)
    model = headscope.load(d)
    assert model.to_str_tokens(word_ids(model.tokenizer, "the")) == ["the"]          # no decoded space here
    nodes = ClusterNodes(model, 1)
    assert len(nodes.ids) > 50 and nodes.X.shape == (len(nodes.ids), model.cfg.d_model)
    for t, w in zip(nodes.ids, nodes.words):
        assert w.startswith(" ") and word_ids(model.tokenizer, w.strip()) == [t]
    clusters = head_clusters(nodes, *bilinear.qk_factors(model.weights(), 1, 0))
    assert all(set(ws) <= set(nodes.words) for ws in clusters.values())
    # no node at all (a vocabulary without whole words): no clusters of its own, not a crash
    nodes.ids, nodes.words, nodes.X = [], [], nodes.X[:0]
    assert head_clusters(nodes, *bilinear.qk_factors(model.weights(), 1, 0)) == {}
