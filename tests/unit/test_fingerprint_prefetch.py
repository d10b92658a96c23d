"""The weight files' hash in the background (issue 33: what small commands spend before any analysis).

``Checkpoint.prefetch_fingerprint`` hashes in a thread while the caller goes on (the CLI starts it
before the tokenizer's load); ``fingerprint()`` waits for it and gives the same digest, hashed once,
or raises what the thread raised.
"""

from __future__ import annotations

import argparse
import hashlib
import threading

import pytest

import headscope
from headscope._errors import HeadscopeError
from headscope.commands.args import load_model
from headscope.core.loading import load_checkpoint
from headscope.core.sources import file_sha256


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_file_sha256_is_the_files_hash_for_every_chunk_size(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(bytes(range(256)) * 1000 + b"tail")              # 256 004 bytes: not a multiple of any chunk
    for chunk in (1, 7, 4096, 1 << 20, 1 << 23):
        assert file_sha256(p, chunk) == _sha256(p)


def test_prefetched_fingerprint_is_the_files_hash_hashed_once(tiny_hf_dir, monkeypatch):
    model = headscope.load(tiny_hf_dir)
    ckpt = model.checkpoint
    calls = []
    real = type(ckpt)._hash_files
    gate = threading.Event()

    def counted(self):
        gate.wait(5)                          # still hashing when fingerprint() is asked: it must wait
        calls.append(threading.current_thread().name)
        return real(self)

    monkeypatch.setattr(type(ckpt), "_hash_files", counted)
    ckpt.prefetch_fingerprint()
    ckpt.prefetch_fingerprint()               # a second call starts nothing
    assert ckpt._fingerprint_thread.is_alive()
    gate.set()
    assert model.fingerprint == _sha256(tiny_hf_dir / "model.safetensors")
    assert ckpt.fingerprint() == model.fingerprint
    assert calls == ["headscope-fingerprint"]  # hashed once, in the background thread


def test_prefetch_error_is_raised_by_fingerprint(tiny_hf_dir, monkeypatch):
    model = headscope.load(tiny_hf_dir)
    ckpt = model.checkpoint

    def broken(self):
        raise HeadscopeError("checkpoint file model.safetensors changed after the model was loaded")

    monkeypatch.setattr(type(ckpt), "_hash_files", broken)
    ckpt.prefetch_fingerprint()
    with pytest.raises(HeadscopeError, match="changed after the model was loaded"):
        ckpt.fingerprint()
    with pytest.raises(HeadscopeError, match="changed after the model was loaded"):
        ckpt.fingerprint()                    # every later ask too, not a digest of something else


def test_the_cli_loads_with_the_hash_started(tiny_hf_dir):
    args = argparse.Namespace(model=str(tiny_hf_dir), device="cpu", dtype="float32", revision=None)
    model = load_model(args)
    assert model.checkpoint._fingerprint_thread is not None
    assert model.fingerprint == headscope.load(tiny_hf_dir).fingerprint
    plain = load_checkpoint(str(tiny_hf_dir))
    assert getattr(plain.checkpoint, "_fingerprint_thread", None) is None   # the library hashes only when asked
