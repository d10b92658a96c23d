"""Survey presets and category relations (issue 16, item 6) on handmade patterns and prompts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from headscope import shipped
from headscope._errors import HeadscopeError
from headscope.semantic.prompts import RELATED, load_categories, load_relations, make_prompts
from headscope.semantic.survey import PRESETS, pattern_metrics, target_masks


def test_related_category_is_not_counted_wrong():
    tokens = torch.tensor([[9, 1, 5, 2]])            # BOS, Monday (days), January (months), Tuesday (days)
    labels = torch.tensor([[-1, 0, 1, 0]])
    A = torch.zeros(1, 1, 4, 4)
    A[0, 0, 1, 0] = 1                                # Monday → BOS (fallback)
    A[0, 0, 2, 1] = 1                                # January → Monday: related category
    A[0, 0, 3, 1] = 1                                # Tuesday → Monday: partner
    plain = pattern_metrics(A, target_masks(tokens, labels))
    rel = pattern_metrics(A, target_masks(tokens, labels, related=[(0, 1)]))
    # without the relation January → Monday is wrong (−log 1e-30 of 3 queries); with it, allowed
    assert plain["semantic_loss"][0] == pytest.approx(-np.log(1e-30) / 3)
    assert rel["semantic_loss"][0] == pytest.approx(0.0, abs=1e-12)
    assert rel["same_category"][0] == plain["same_category"][0] == 1.0
    # the relation is symmetric and only looks back
    m = target_masks(tokens, labels, related=[(1, 0)])
    assert m["related"][0, 2, 1] and m["related"][0, 3, 2]                       # either direction
    assert not m["related"][0, 1, 2] and not m["related"][0, 3, 1]               # only earlier, only across


def test_bos_query_row_dilutes_the_loss_as_the_authors():
    tokens = torch.tensor([[9, 1, 2]])
    labels = torch.tensor([[-1, 0, 0]])
    A = torch.zeros(1, 1, 3, 3)
    A[0, 0, 0, 0] = 1
    A[0, 0, 1, 0] = 1                                # fallback: target
    A[0, 0, 2, 0] = 0.5                              # half on BOS (not a target: 2 has a partner)
    A[0, 0, 2, 1] = 0.5                              # half on the partner
    m = target_masks(tokens, labels)
    without = pattern_metrics(A, m)["semantic_loss"][0]
    with_bos = pattern_metrics(A, m, include_bos_query=True)["semantic_loss"][0]
    assert without == pytest.approx(np.log(2) / 2) and with_bos == pytest.approx(np.log(2) / 3)


def test_shipped_relations_and_seed_lists(tmp_path):
    cats = load_categories()
    assert RELATED not in cats and {"days", "months", "colours", "metals"} <= set(cats)
    assert sorted(map(sorted, load_relations())) == [["colours", "metals"], ["days", "months"]]
    seed = shipped.seed_categories()
    assert len(seed) == 8 and sum(map(len, seed.values())) == 41 and load_relations(seed) == []
    steer = shipped.seed_steering_tokens()
    assert [len(v) for v in steer.values()] == [6] * 5
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"a": ["x", "y"], "b": ["z", "w"], RELATED: [["a", "c"]]}))
    with pytest.raises(HeadscopeError, match="unknown categories"):
        load_relations(f)
    f.write_text(json.dumps({"a": ["x", "y"], RELATED: "a,b"}))
    with pytest.raises(HeadscopeError, match="pairs"):
        load_relations(f)


def test_seed_preset_prompt_draws_every_category_uniformly():
    ids = {f"c{i}": [100 * i + j for j in range(5)] for i in range(8)}
    p = make_prompts(ids, 50256, n_prompts=1, length=255, cats_per_prompt=8, seed=3)
    assert p.tokens.shape == (1, 256) and p.tokens[0, 0] == 50256
    counts = torch.bincount(p.labels[0, 1:], minlength=8)
    assert (counts > 0).all() and counts.sum() == 255
    assert PRESETS["seed"]["length"] == 255 and PRESETS["seed"]["n_prompts"] == 1 and PRESETS["seed"]["bos_query"]
