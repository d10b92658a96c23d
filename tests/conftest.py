"""Shared fixtures. Planted checkpoints are built once per test session."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def planted_dir(tmp_path_factory) -> Path:
    """A GPT-2-small-shaped planted checkpoint (seed 0, 2 layers), built once."""
    from headscope.planted import build

    return build(tmp_path_factory.mktemp("planted") / "seed0", seed=0)


@pytest.fixture(scope="session")
def planted_model(planted_dir):
    import headscope

    return headscope.load(planted_dir)


@pytest.fixture(scope="session")
def planted_manifest(planted_dir) -> dict:
    from headscope.planted.build import read_manifest

    return read_manifest(planted_dir)


@pytest.fixture(scope="session")
def planted3_dir(tmp_path_factory) -> Path:
    """The planted checkpoint with a third layer: layer 2 holds a copying (2.3) and a copy-suppression (2.7) head."""
    from headscope.planted import build

    return build(tmp_path_factory.mktemp("planted3") / "seed0", seed=0, n_layers=3)


@pytest.fixture(scope="session")
def planted3_model(planted3_dir):
    import headscope

    return headscope.load(planted3_dir)


@pytest.fixture(scope="session")
def planted3_manifest(planted3_dir) -> dict:
    from headscope.planted.build import read_manifest

    return read_manifest(planted3_dir)


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory) -> Path:
    """A tiny random HF GPT-2 with all-distinct dimensions, saved by save_pretrained.

    n_layers=2, n_heads=3, d_head=4, d_model=12, d_mlp=20, n_ctx=40, GPT-2's vocabulary.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    from headscope.tokenizer import gpt2_bpe_files

    torch.manual_seed(1234)
    cfg = GPT2Config(vocab_size=50257, n_positions=40, n_embd=12, n_layer=2, n_head=3, n_inner=20)
    model = GPT2LMHeadModel(cfg).eval()
    _randomise_biases_and_ln(model)
    out = tmp_path_factory.mktemp("tiny") / "tiny"
    model.save_pretrained(out)
    vocab, merges = gpt2_bpe_files()
    shutil.copyfile(vocab, out / "vocab.json")
    shutil.copyfile(merges, out / "merges.txt")
    return out


def _randomise_biases_and_ln(model) -> None:
    """HF initialises biases to 0 and LayerNorms to 1/0, which would hide bugs in folding."""
    g = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))


@pytest.fixture(scope="session")
def planted_hf(planted_dir):
    """The planted checkpoint in HF transformers (eager attention, so attentions are returned)."""
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(planted_dir, attn_implementation="eager").eval()


@pytest.fixture(scope="session")
def tiny(tiny_hf_dir):
    """headscope's view of the tiny all-distinct-dimensions checkpoint."""
    import headscope

    return headscope.load(tiny_hf_dir)


@pytest.fixture()
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""
    def refuse(*a, **k):
        raise AssertionError("headscope tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
