"""The benchmarks' baseline runs the forward it names (benchmarks/bench_sizes.baseline_forward).

From 2026-12-04 until 2026-12-06 the baseline of bench_sizes and bench_floors asked the forward to
keep nothing, so it stopped before its first block: every "× baseline" ratio was against load and
processed weights alone. These hold the baseline to a full forward of each sample text.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_sizes import baseline_forward  # noqa: E402


def test_baseline_forward_reaches_the_logits_of_every_sample(tiny, tiny_hf_dir):
    """Each sample's last-position log-probabilities equal transformers' (every block and the
    unembedding ran; logits compared through log_softmax: the processed unembedding is centred)."""
    from transformers import GPT2LMHeadModel

    from headscope.report.inputs import load_inputs

    hf = GPT2LMHeadModel.from_pretrained(tiny_hf_dir).eval()
    last = baseline_forward(tiny)
    samples = load_inputs().samples
    assert len(last) == len(samples) >= 2
    for t, got in zip(samples, last):
        toks = tiny.to_tokens(t.text)[: tiny.cfg.n_ctx][None]                       # [1 p]
        with torch.no_grad():
            want = hf(toks).logits[0, -1]                                           # [vocab]
        torch.testing.assert_close(got.log_softmax(-1), want.log_softmax(-1), rtol=1e-4, atol=1e-4)

