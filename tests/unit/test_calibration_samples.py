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


def test_a_long_text_runs_a_seeded_sample_of_at_most_max_windows(tiny, monkeypatch, capsys):
    """Issue 36: calibrate's work and memory are bounded by max_windows, not by the text's length (a 60 MiB
    text took 240 s at 3.3 GB): a text of 26 windows with max_windows=5 runs exactly 5 forward passes, on 5 of
    the text's own windows (seeded: the same 5 every run), keeps at most 5 windows' LayerNorm scales, and says
    so on stderr; with the cap above the text's windows the result is that of every window (the tests above)."""
    from headscope.corpus import iter_windows
    from headscope.layer0 import calibration as C

    every = [x.tolist() for x in iter_windows(tiny, TEXT, 16, stride=5)]
    assert len(every) == 26
    run, real = [], C.run_with_cache
    monkeypatch.setattr(C, "run_with_cache", lambda w, x, **kw: run.append(x[0].tolist()) or real(w, x, **kw))
    full = calibrate(tiny, TEXT, window=16, stride=5)
    assert run == every and full.n_windows == full.n_text_windows == 26             # under the cap: every window
    run.clear()
    capsys.readouterr()
    cal = calibrate(tiny, TEXT, window=16, stride=5, max_windows=5, progress=True)
    assert len(run) == cal.n_windows == 5 and cal.n_text_windows == 26
    assert all(x in every for x in run) and len({tuple(x) for x in run}) == 5
    assert sum(cal.counts[:1]) == 5 and cal.tokens == every[0] and cal.n_text_tokens == full.n_text_tokens
    again = calibrate(tiny, TEXT, window=16, stride=5, max_windows=5, progress=False)
    assert run[5:] == run[:5] and again.to_dict() == cal.to_dict()                  # seeded
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"calibrate: {full.n_text_tokens} tokens; running a sample of 5 (seed 0) of 26 windows of up " \
                     "to 16 tokens" and err[-1] == "calibrate: 100% of 5 windows"
    assert cal.to_dict()["n_text_windows"] == 26
    with pytest.raises(Exception, match="max_windows: expected a positive integer or None, got 0"):
        calibrate(tiny, TEXT, max_windows=0)
