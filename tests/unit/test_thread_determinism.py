"""Same inputs → the same bits at any torch thread count (the guide's byte-identical JSON).

torch splits a reduction of more than 32768 entries between its threads, so a whole-vocabulary
std differs in its last digits between one and two threads; what reaches JSON is reduced in a
fixed order (:func:`headscope.stats.vector_std`). Compared at full precision (``json.dumps`` of
the unrounded result), where the 7-digit JSON would only catch a change across a rounding edge.
"""

from __future__ import annotations

import json

import pytest
import torch

from headscope.layer0 import kernels


def _at_threads(fn, threads=(1, 2)):
    old = torch.get_num_threads()
    try:
        out = []
        for t in threads:
            torch.set_num_threads(t)
            out.append(fn())
        return out
    finally:
        torch.set_num_threads(old)


def test_kernels_same_bytes_at_one_and_two_threads(planted_model):
    one, two = _at_threads(lambda: json.dumps(kernels.analyse_kernels(planted_model).to_dict(), sort_keys=True))
    assert one == two


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_vector_std_and_mean_independent_of_threads(dtype):
    from headscope.stats import vector_mean, vector_std

    x = (torch.randn(50257, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 3 + 1).to(dtype)
    assert len(set(_at_threads(lambda: (vector_std(x), vector_mean(x)), threads=(1, 2, 3)))) == 1
    assert vector_std(x) == pytest.approx(float(x.double().std()), rel=1e-12)
    assert vector_mean(x) == pytest.approx(float(x.double().mean()), rel=1e-12)


def test_small_stages_run_on_one_thread(planted_model, monkeypatch):
    """The attention summary, the denominators and the kernels' per-head reductions run on one torch
    thread (products and reductions this small spend a second thread's time synchronising), and
    leave the caller's thread count as it was."""
    from headscope.layer0 import denominators
    from headscope.maps import patterns
    from headscope.report.inputs import load_inputs

    seen: dict[str, set] = {}

    def spy(module, name, key):
        real = getattr(module, name)

        def wrapped(*a, **k):
            seen.setdefault(key, set()).add(torch.get_num_threads())
            return real(*a, **k)
        monkeypatch.setattr(module, name, wrapped)

    spy(patterns, "run_with_cache", "attention")
    spy(denominators, "run_with_cache", "denominators")
    spy(kernels, "decay_rate", "kernel heads")
    texts = load_inputs().samples
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        patterns.attention_summary(planted_model, texts[:2], [0, 1])
        denominators.denominator_stability(planted_model, [t.text for t in texts], window=32, n_min=4, stride=4)
        kernels.analyse_kernels(planted_model)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)
    assert seen == {"attention": {1}, "denominators": {1}, "kernel heads": {1}}
