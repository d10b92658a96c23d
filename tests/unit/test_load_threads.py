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


def test_processed_blocks_have_the_same_bits_on_one_and_two_threads(tiny_hf_dir):
    """Block processing runs on the caller's threads; its result must not depend on their number."""
    from headscope.core.weights import process_block

    old = torch.get_num_threads()
    try:
        model = headscope.load(tiny_hf_dir)
        W = model.weights()
        got = {}
        for n in (1, 2):
            torch.set_num_threads(n)
            got[n] = [process_block(model.raw_block(l), W.processing) for l in range(model.cfg.n_layers)]
        for a, b in zip(got[1], got[2]):
            for k in a.shapes(model.cfg):
                if getattr(a, k) is not None:
                    assert torch.equal(getattr(a, k), getattr(b, k)), k
    finally:
        torch.set_num_threads(old)


def test_blocks_are_processed_on_one_thread_and_the_count_restored(tiny_hf_dir, monkeypatch):
    """Processing a block (copies, scalings and means in place: memory-bound) runs on one torch thread,
    like the value check; the caller's count is back for the analysis that read the block."""
    seen = []
    real = checkpoint.process_block
    monkeypatch.setattr(checkpoint, "process_block",
                        lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        W = headscope.load(tiny_hf_dir).weights()
        W.blocks[1]
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)
