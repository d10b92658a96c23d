"""Calibration samples the denominators over every window start of the text (issue 22, item 1):
counts per position from an independent count of window starts, the averaged denominator from
separate forward passes, and a refusal below the documented minimum."""

from __future__ import annotations

import math

import pytest
import torch

from headscope import layer0
from headscope._errors import NotApplicable
from headscope.layer0.calibration import MIN_SAMPLES, calibrate, check_samples
from headscope.core.forward import run_with_cache

TEXT = ("The river ran past the mill and the old bridge, and every morning the miller walked to the market "
        "with bread, cheese and apples for the people of the town, who paid him in coins and stories. ") * 3


def test_counts_are_the_window_starts_reaching_each_position(tiny):
    ids = tiny.tokenizer.encode(TEXT)
    T, stride = len(ids), 7
    cal = calibrate(tiny, TEXT, window=20, stride=stride)
    starts = list(range(0, T, stride))
    assert cal.n_windows == len(starts) and cal.n_text_tokens == T
    # window [BOS] + ids[s:s+19] reaches position n iff it has more than n tokens
    want = [sum(1 + min(19, T - s) > n for s in starts) for n in range(20)]
    assert cal.counts == want


def test_denominator_is_the_mean_over_every_window(tiny):
    stride, n = 5, 12
    cal = calibrate(tiny, TEXT, window=16, stride=stride)
    ids = tiny.tokenizer.encode(TEXT)
    w = layer0.view(tiny)
    qid = cal.query_id
    vals = []
    for s in range(0, len(ids), stride):                     # every window start, one forward each
        x = torch.tensor([tiny.bos_id] + ids[s:s + 15])
        if x.numel() <= n:
            continue
        k = run_with_cache(w, x[None], names=["blocks.0.attn.hook_k"], stop_at_layer=1)["blocks.0.attn.hook_k"]
        vals.append(torch.logsumexp(layer0.fixed_query_scores(w, k, qid)[0, :, n], dim=-1))   # [head]
    want = torch.logsumexp(torch.stack(vals), 0) - math.log(len(vals))
    assert cal.counts[n] == len(vals) > 1
    torch.testing.assert_close(cal.log_denom[:, n], want.double(), rtol=1e-6, atol=1e-6)


def test_too_few_samples_are_refused_in_one_line(tiny):
    cal = calibrate(tiny, TEXT, window=20, stride=7)
    last = cal.n_positions - 1
    assert check_samples(cal, 0) == cal.counts[0] >= MIN_SAMPLES
    short = calibrate(tiny, "A short text about the sea.", window=20)
    n = short.n_positions - 1
    assert short.counts[n] == 1
    with pytest.raises(NotApplicable, match=f"1 sample\\(s\\) .* position {n}, fewer than the minimum {MIN_SAMPLES}") as e:
        check_samples(short, n)
    assert "\n" not in str(e.value)
    assert check_samples(cal, last, minimum=1) == cal.counts[last]
