"""The weight-range check at load runs on one torch thread (a memory-bound min/max pass: two
threads spent 5× the CPU of one on GPT-2 small) and gives the caller's thread count back."""

import pytest
import torch

import headscope
from headscope.core import checkpoint


def test_the_value_check_runs_on_one_thread_and_restores_the_count(tiny_hf_dir, monkeypatch):
    seen = []
    real = checkpoint._max_abs
    monkeypatch.setattr(checkpoint, "_max_abs", lambda t: seen.append(torch.get_num_threads()) or real(t))
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        headscope.load(tiny_hf_dir)
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)


def test_a_refused_weight_still_gives_the_thread_count_back(tiny_hf_dir, monkeypatch):
    monkeypatch.setattr(checkpoint, "_max_abs", lambda t: float("nan"))
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(headscope.HeadscopeError, match="NaN or Inf"):
            headscope.load(tiny_hf_dir)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)


def test_blocks_are_processed_on_one_thread_with_the_same_bits(tiny_hf_dir, monkeypatch):
    """Processing a block is elementwise and memory-bound: one thread (GPT-2 small, 2 busy cores: 3.5× less
    CPU), the caller's count back afterwards, and the processed weights bit for bit those of two threads."""
    from headscope.core.weights import process_block

    seen = []
    real = checkpoint.process_block
    monkeypatch.setattr(checkpoint, "process_block",
                        lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model = headscope.load(tiny_hf_dir)
        W = model.weights()
        got = [W.blocks[l] for l in range(model.cfg.n_layers)]
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
        for l, g in enumerate(got):                      # two threads, directly
            want = process_block(model.raw_block(l), W.processing)
            for k in g.shapes(model.cfg):
                if getattr(g, k) is not None:
                    assert torch.equal(getattr(g, k), getattr(want, k).to(getattr(g, k).dtype)), (l, k)
    finally:
        torch.set_num_threads(old)
