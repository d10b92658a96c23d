"""The float64 layer-0 view is built once per model and processing, beside the processed weights."""

from __future__ import annotations

import torch

from headscope import Processing
from headscope.layer0 import split


def test_view_is_built_once_per_processing_and_equals_a_fresh_build(tiny):
    v = split.view(tiny)
    assert split.view(tiny) is v and split.view(tiny.bound(Processing.default())) is v
    raw = split.view(tiny.bound(Processing.none()))
    assert raw is not v and split.view(tiny.bound(Processing.none())) is raw
    fresh = split._view(tiny.weights())
    assert v.W_E.dtype == torch.float64 and v.cfg.n_layers == 1
    assert torch.equal(v.W_E, fresh.W_E) and torch.equal(v.blocks[0].W_Q, fresh.blocks[0].W_Q)
    assert not torch.equal(raw.W_E, v.W_E)            # the raw view is not the processed one
