"""Processed blocks held within a byte budget (``HEADSCOPE_BLOCK_BUDGET``), the others rebuilt from the
files when read again: results are byte for byte those of a model that holds every block, and no
more blocks than the budget allows are ever held (issue 35: full-depth reports of 7-billion shapes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_families import build  # noqa: E402  (one builder for every family test)

import headscope  # noqa: E402
from headscope.claims.null import null_heads  # noqa: E402
from headscope.core.checkpoint import block_stats, parse_bytes  # noqa: E402
from headscope.maps.composition import composition_scores  # noqa: E402
from headscope.report import ReportOptions, build_report  # noqa: E402


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    """Llama's test shape: 3 layers, d_model 24, 3 query heads on 1 key/value head, d_head 10 (all distinct)."""
    return build("llama", tmp_path_factory.mktemp("evict"), n_tokens=1024)[1]


def _store(model):
    return model.weights().blocks


def _counting_builds(stages, model, builds: dict) -> list:
    """`stages` with each compute recording how often it built each block: builds[stage] = [per layer]."""
    for stage in stages:
        def counted(ctx, compute=stage.compute, name=stage.name):
            before = list(_store(model).builds)
            data = compute(ctx)
            builds[name] = [a - b for a, b in zip(_store(model).builds, before)]
            return data
        stage.compute = counted
    return stages


def test_report_is_byte_identical_with_one_block_held(llama_dir, tmp_path, monkeypatch):
    from headscope.report.builtin import default_stages

    outs, builds = {}, {}
    for budget in ("all", "1"):                      # "1": one byte, so one block at a time
        monkeypatch.setenv("HEADSCOPE_BLOCK_BUDGET", budget)
        model = headscope.load(str(llama_dir))
        # one stage at a time (lanes=1), as a report whose blocks do not all fit runs: its own builds per stage
        build_report(model, tmp_path / budget, ReportOptions(progress=False, n_neurons=4, deep_dives=2, lanes=1,
                                                             semantic_tokens=1500, kernel_windows=4, atlas_tokens=500),
                     stages=_counting_builds(default_stages(), model, builds) if budget == "1" else None)
        outs[budget] = _store(model).stats()
    assert outs["all"]["budget"] is None and outs["all"]["rebuilds"] == 0 and outs["all"]["peak_held"] == 3
    assert outs["1"]["peak_held"] == 1 and outs["1"]["rebuilds"] > 0          # eviction did happen
    # each stage walks the blocks once, every consumer of a block using it while it is held (the
    # semantic deep dives' means, embeddings, heads and prompt orders; the steering measurement and
    # its prompt; the atlas's means and embeddings); the attention stage runs one pass per sample text
    assert {"survey", "semantic", "steering", "atlas", "composition"} <= builds.keys()
    assert sum(builds["semantic"]) >= 2                                       # the deep dives read layer ≥ 1
    for stage, per_layer in builds.items():
        if stage != "attention":
            assert max(per_layer) <= 1, (stage, per_layer)
    files = sorted(p.relative_to(tmp_path / "all") for p in (tmp_path / "all" / "data").glob("*.json"))
    assert len(files) >= 10
    for f in files:
        assert (tmp_path / "all" / f).read_bytes() == (tmp_path / "1" / f).read_bytes(), f


def test_held_blocks_never_exceed_the_budget(llama_dir, monkeypatch):
    monkeypatch.setenv("HEADSCOPE_BLOCK_BUDGET", "all")
    ref = headscope.load(str(llama_dir)).weights().blocks
    one = ref.block_bytes
    monkeypatch.setenv("HEADSCOPE_BLOCK_BUDGET", str(2 * one + one // 2))  # two blocks and a half: two held
    model = headscope.load(str(llama_dir))
    blocks = model.weights().blocks
    assert blocks.budget == 2 * one + one // 2
    for l in (0, 1, 2, 0, 2, 1, 1, 0, -1):
        b = blocks[l]
        assert len(blocks.held()) <= 2 and len(blocks.held()) * one <= blocks.budget
        assert blocks.held()[-1] == range(3)[l]                             # the block just read is kept
        for k in b.shapes(model.cfg):                                        # rebuilt bit for bit
            assert torch.equal(getattr(b, k), getattr(ref[l], k)), (l, k)
    assert blocks.stats()["peak_held"] == 2 and blocks.builds == [3, 2, 2]
    assert any(s["budget"] == blocks.budget for s in block_stats())


def test_copies_and_composition_read_each_block_without_holding_all(llama_dir, monkeypatch):
    monkeypatch.setenv("HEADSCOPE_BLOCK_BUDGET", "1")
    model = headscope.load(str(llama_dir))
    W = model.weights()
    composition_scores(W)
    assert W.blocks.builds == [1, 1, 1]                                      # one pass over the layers
    monkeypatch.setenv("HEADSCOPE_BLOCK_BUDGET", "all")
    full = composition_scores(headscope.load(str(llama_dir)).weights())
    monkeypatch.setenv("HEADSCOPE_BLOCK_BUDGET", "1")
    again = composition_scores(headscope.load(str(llama_dir)).weights())
    assert all(torch.equal(full[m], again[m]) for m in full)
    null = null_heads(W, 1, 0, torch.Generator().manual_seed(0))             # a copy with layer 1 replaced
    assert len(W.blocks.held()) == 1 and torch.equal(null.blocks[2].W_Q, W.blocks[2].W_Q)
    assert len(W.blocks.held()) == 1 and null.blocks[1] is null.blocks[1]    # the replacement is its own


def test_batches_advance_together_when_blocks_are_dropped(llama_dir, monkeypatch):
    from headscope.core.forward import run_with_cache

    tokens = torch.arange(6 * 9).reshape(6, 9) % 1000 + 3                   # [6 9]: three batches of 2
    names = ["blocks.2.hook_resid_post", "blocks.1.attn.hook_pattern", "logits"]
    monkeypatch.setenv("HEADSCOPE_BLOCK_BUDGET", "all")
    ref = run_with_cache(headscope.load(str(llama_dir)).weights(), tokens, names, batch_size=2)
    monkeypatch.setenv("HEADSCOPE_BLOCK_BUDGET", "1")
    W = headscope.load(str(llama_dir)).weights()
    got = run_with_cache(W, tokens, names, batch_size=2)
    assert W.blocks.builds == [1, 1, 1]                                      # one pass, not one per batch
    assert all(torch.equal(ref[n], got[n]) for n in names)


def test_budget_parsing():
    assert parse_bytes("2G") == 2 << 30 and parse_bytes("512m") == 512 << 20 and parse_bytes("all") is None
    assert parse_bytes("1048576") == 1 << 20
    with pytest.raises(headscope.HeadscopeError, match="HEADSCOPE_BLOCK_BUDGET"):
        parse_bytes("lots")


def test_default_budget_holds_every_block_within_a_third_of_available_memory(monkeypatch):
    """Unset, the budget keeps every block while the blocks take at most a third of MemAvailable (GPT-2 XL's
    5.9 GB on a machine with 18 GB or more available), else that third, and never less than one block."""
    from headscope.core import checkpoint

    monkeypatch.delenv(checkpoint.BLOCK_BUDGET_ENV, raising=False)
    block = 122_963_200                                                       # one processed GPT-2 XL block
    monkeypatch.setattr(checkpoint, "available_bytes", lambda: 18 << 30)
    assert checkpoint.block_budget(48, block) is None                        # 5.9 GB ≤ 6 GB: all held
    monkeypatch.setattr(checkpoint, "available_bytes", lambda: 16 << 30)
    assert checkpoint.block_budget(48, block) == (16 << 30) // 3             # 5.9 GB > 5.33 GB: a third
    monkeypatch.setattr(checkpoint, "available_bytes", lambda: 1 << 20)
    assert checkpoint.block_budget(48, block) == block                       # at least one block
    monkeypatch.setattr(checkpoint, "available_bytes", lambda: None)
    assert checkpoint.block_budget(48, block) is None                        # unknown: no budget
    monkeypatch.setenv(checkpoint.BLOCK_BUDGET_ENV, "2G")
    assert checkpoint.block_budget(48, block) == 2 << 30                     # the variable wins
