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


def test_split_heads_slices_run_side_by_side_on_one_thread_each_and_give_the_unsplit_bits():
    """One contiguous slice per caller thread, each worker on one torch thread (set once: the
    workers' own one_thread blocks leave the process-wide count alone), results in slice order,
    the caller's count restored even when a slice raises."""
    import threading

    from headscope._threads import one_thread, split_heads

    seen = []

    def fn(sl):
        with one_thread():                                   # nested in a worker: a no-op
            seen.append((sl.start, sl.stop, torch.get_num_threads(), threading.get_ident()))
        return sl

    old = torch.get_num_threads()
    try:
        for t, n, want in ((2, 7, [(0, 3), (3, 7)]), (3, 7, [(0, 2), (2, 4), (4, 7)]), (2, 1, [(0, 1)]),
                           (1, 5, [(0, 5)])):
            torch.set_num_threads(t)
            seen.clear()
            assert [(s.start, s.stop) for s in split_heads(fn, n)] == want
            assert sorted(s[:2] for s in seen) == want and {s[2] for s in seen} == {1}
            assert torch.get_num_threads() == t
        torch.set_num_threads(2)
        with pytest.raises(ZeroDivisionError):
            split_heads(lambda sl: 1 / 0, 4)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)


def test_atlas_head_metrics_same_bits_split_over_threads():
    """The atlas's per-head QK figures, its deep positional share and head_directions' SVD factors:
    the same bits whether the heads run as one slice (one thread) or split over three threads.
    Distinct small dimensions (h 5, n 37, d 24, e 4, window 9)."""
    from headscope.maps import atlas as A
    from headscope.maps.composition import _low_rank_svd
    from headscope.maps.head_metrics import _positional_share_deep

    g = torch.Generator().manual_seed(11)
    h, n, d, e, P = 5, 37, 24, 4, 9
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    X, W_Q, W_K, b_Q, b_K = r(n, d) + 0.5, r(h, d, e), r(h, d, e), r(h, e), r(h, e)
    win, delta, sigma = torch.randint(0, n, (P,), generator=g), r(P, d) * 0.1, r(n).abs() + 0.5
    hidden = ~torch.ones(P, P, dtype=torch.bool).tril()

    def run():
        Q, K = torch.einsum("nd,hde->hne", X, W_Q), torch.einsum("nd,hde->hne", X, W_K)
        qk = A._qk_metrics(Q, K, b_Q, b_K, W_Q, W_K, True)
        share = _positional_share_deep(X, sigma, win, delta, torch.ones(d, dtype=torch.float64), W_Q, b_Q, W_K, 8.0, hidden)
        return [*qk, share, *_low_rank_svd(W_Q, W_K, 3)]

    one, three = _at_threads(run, threads=(1, 3))
    assert len(one) == 9
    for i, (a, b) in enumerate(zip(one, three)):
        assert torch.equal(a.nan_to_num(), b.nan_to_num()), (i, (a - b).abs().max())
