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
