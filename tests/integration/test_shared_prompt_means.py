"""The survey's first batch is the atlas's, the semantic and steering stages' reference prompts: their
mean attention outputs are kept from the survey's forward pass, not computed by a second one."""

from __future__ import annotations

import dataclasses

import torch

from headscope.semantic import bilinear
from headscope.semantic.prompts import prompts_for
from headscope.semantic.survey import survey


def test_survey_shares_the_prompt_attention_means(planted_model):
    W = planted_model.weights()
    toks = prompts_for(planted_model, None, n_prompts=32, length=16, seed=0)[0].tokens
    fresh = bilinear.attn_means_for(dataclasses.replace(W), 1, "prompts", toks)      # weights without the memo
    survey(planted_model, n_prompts=64, length=16, seed=0)
    means = bilinear.attn_means_as_needed(W, 1, "prompts", toks)
    assert means._forward is None                                                   # read, not run again
    for a, b in zip(fresh, means, strict=True):
        assert torch.equal(a, b)                                                    # the very values
    other = bilinear.attn_means_as_needed(W, 1, "prompts", toks[:16])              # other prompts: computed
    assert other._forward is not None
    assert bilinear.attn_means_as_needed(W, 2, "prompts", toks)._forward is not None   # a block the survey did not run
