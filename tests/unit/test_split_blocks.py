"""The kernels stage's split TV against the model's pattern computed block by block (speed18): the
forward's scores of rows a..z−1 against keys 0..z−1 (``core.forward.masked_scores``), their softmax,
and the TV they give, against the [h p p] square of ``true_pattern`` — equal up to an ulp of a
score (BLAS blocks a product's columns by its width), on a causal and on a local layer 0."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from headscope.core.forward import masked_scores, run_with_cache
from headscope.layer0 import split as L0

TOKENS = [464, 3290, 318, 257, 1332, 13, 383, 262, 3797, 11, 290, 257, 1110, 13, 464, 1332, 286, 262, 1110, 373,
          922, 13]


@pytest.mark.parametrize("window", [0, 4])            # causal; a local layer 0 (GPT-Neo's local layers)
def test_rows_of_the_pattern_are_the_forwards(tiny, window):
    w = L0.view(tiny)
    if window:
        w = dataclasses.replace(w, cfg=dataclasses.replace(w.cfg, attn_windows=(window,)))
    tokens = torch.tensor([tiny.bos_id, *TOKENS])
    names = ["blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_attn_scores"]
    cache = run_with_cache(w, tokens[None], names=names, stop_at_layer=1)
    q, k, scores = (cache[n] for n in names)
    assert torch.equal(masked_scores(q, k, 0, w.cfg), scores)          # the forward's own, bit for bit
    true = L0.true_pattern(w, tokens)
    qk = L0.true_qk(w, tokens)
    for a, z in [(0, 1), (0, 5), (5, 12), (12, len(tokens)), (3, 4)]:
        torch.testing.assert_close(masked_scores(q, k, 0, w.cfg, a, z), scores[:, :, a:z, :z], rtol=0, atol=1e-12)
        rows = L0.true_pattern_rows(w, qk, a, z)                                  # [h z−a z]
        torch.testing.assert_close(rows, true[:, a:z, :z], rtol=0, atol=1e-15)
        assert not bool(true[:, a:z, z:].any())                               # keys after the block: exactly 0
        assert torch.equal(rows == 0, true[:, a:z, :z] == 0)                  # hidden keys exactly 0 in both


@pytest.mark.parametrize("window", [0, 4])
def test_split_tv_without_the_square_is_the_tv_against_it(tiny, window):
    w = L0.view(tiny)
    if window:
        w = dataclasses.replace(w, cfg=dataclasses.replace(w.cfg, attn_windows=(window,)))
    tokens = torch.tensor([tiny.bos_id, *TOKENS])
    true = L0.true_pattern(w, tokens)
    ref = L0.tv_distance(true, L0.approx_pattern(w, tokens, 0.7))                   # [h p]
    for rows in (1, 5, 64):
        got = L0.approx_tv(w, tokens, 0.7, rows=rows)                               # no [h p p] pattern passed
        torch.testing.assert_close(got, L0.approx_tv(w, tokens, 0.7, true, rows=rows), rtol=0, atol=1e-15)
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-12)
        assert bool((got[:, 0] == 0).all()) and got.shape == ref.shape              # n = 0: one key, exact
