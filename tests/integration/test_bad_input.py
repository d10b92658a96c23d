"""The bad-input matrix: every bad input gives ONE line "headscope: error: ...", exit 2,
no traceback, and leaves nothing half-written.

Each case is one line in :data:`CASES`: ``Case(name, argv_builder, expected_substring)``.
``argv_builder(ctx)`` gets a :class:`Ctx` (a scratch directory plus helpers that make
broken checkpoints) and returns the argv for ``headscope``. Options:
``env=`` (extra environment variables: the case then runs in a subprocess, since
huggingface_hub reads its environment at import time), ``skip_if=`` (a callable → reason
or None).

After each case the whole scratch directory is compared with its state before the run:
no file may appear (no temp files, no half-written output), change or vanish.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch

from headscope.cli import main


@dataclasses.dataclass
class Ctx:
    """Scratch space for one case; `tiny` is a valid tiny HF GPT-2 checkpoint to break."""

    root: Path
    tiny: Path

    def ckpt(self, mutate: Callable[[Path], None] | None = None, name: str = "ckpt") -> str:
        """A copy of the tiny checkpoint under root, broken by `mutate(dir)`."""
        d = self.root / name
        shutil.copytree(self.tiny, d)
        if mutate:
            mutate(d)
        return str(d)

    def file(self, name: str, data: bytes | str = b"") -> Path:
        p = self.root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        return p


@dataclasses.dataclass
class Case:
    name: str
    argv: Callable[[Ctx], list[str]]
    expect: str
    env: dict[str, str] | None = None
    skip_if: Callable[[], str | None] | None = None


# -- checkpoint breakers --------------------------------------------------------------


def edit_config(**changes):
    def mutate(d: Path):
        cfg = json.loads((d / "config.json").read_text())
        for k, v in changes.items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        (d / "config.json").write_text(json.dumps(cfg))
    return mutate


def edit_tensor(name: str, value: float):
    def mutate(d: Path):
        from safetensors.torch import load_file, save_file

        state = load_file(str(d / "model.safetensors"))
        state[name].view(-1)[3] = value
        save_file(state, str(d / "model.safetensors"))
    return mutate


def truncate(d: Path):
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 3])


def corrupt_header(d: Path):
    data = bytearray((d / "model.safetensors").read_bytes())
    n = int.from_bytes(data[:8], "little")
    data[8:8 + n] = b"#" * n  # same length, not JSON
    (d / "model.safetensors").write_bytes(bytes(data))


def huge_header_length(d: Path):
    data = bytearray((d / "model.safetensors").read_bytes())
    data[:8] = (2**62).to_bytes(8, "little")
    (d / "model.safetensors").write_bytes(bytes(data))


def pickle_only(d: Path):
    (d / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(1)}, d / "pytorch_model.bin")


def remove(*names):
    def mutate(d: Path):
        for n in names:
            (d / n).unlink()
    return mutate


def write(name: str, text: str):
    def mutate(d: Path):
        (d / name).write_text(text)
    return mutate


def extra_vocab_token(d: Path):
    vocab = json.loads((d / "vocab.json").read_text())
    vocab["<|extra|>"] = len(vocab)
    (d / "vocab.json").write_text(json.dumps(vocab))


def no_cuda():
    return "this machine has CUDA" if torch.cuda.is_available() else None


def offline() -> dict[str, str]:
    """Environment of an offline machine with an empty Hugging Face cache ({root} = scratch dir)."""
    return {"HF_HUB_OFFLINE": "1", "HF_HOME": "{root}/hf-empty"}


def foreign_dir(ctx: Ctx) -> str:
    ctx.file("mine/notes.txt", "my own notes\n")
    return str(ctx.root / "mine")


def unwritable_out(ctx: Ctx) -> str:
    """An output path whose parent cannot be written (root ignores chmod: use a file as the parent)."""
    parent = ctx.root / "locked"
    parent.mkdir()
    os.chmod(parent, 0o500)
    if os.access(parent, os.W_OK):  # running as root: permissions do not stop writes
        os.chmod(parent, 0o755)
        parent.rmdir()
        blocker = ctx.file("locked", "a regular file, not a directory\n")
        return str(blocker / "sub")
    return str(parent / "out")


CASES: list[Case] = [
    # -- checkpoints (headscope info) ------------------------------------------------
    Case("unknown hub id offline", lambda c: ["info", "gpt2-medium"], "not in the local Hugging Face cache",
         env=offline()),
    Case("made-up hub id offline", lambda c: ["info", "nobody/no-such-model"], "HF_HUB_OFFLINE=1", env=offline()),
    Case("no such directory", lambda c: ["info", str(c.root / "nowhere") + "/"], "no such checkpoint directory"),
    Case("model path is a file", lambda c: ["info", str(c.file("f.txt", "x"))], "not a checkpoint directory"),
    Case("missing config.json", lambda c: ["info", c.ckpt(remove("config.json"))], "missing config.json"),
    Case("config.json not JSON", lambda c: ["info", c.ckpt(write("config.json", "{n_layer: 2,"))], "not valid JSON"),
    Case("config.json a JSON list", lambda c: ["info", c.ckpt(write("config.json", "[1, 2]"))], "not a JSON object"),
    Case("config missing n_layer", lambda c: ["info", c.ckpt(edit_config(n_layer=None))], "missing key 'n_layer'"),
    Case("non-GPT-2 architecture", lambda c: ["info", c.ckpt(edit_config(model_type="llama"))], "model_type 'llama'"),
    Case("config n_head does not divide n_embd", lambda c: ["info", c.ckpt(edit_config(n_head=5))],
         "not divisible by n_heads"),
    Case("config n_layer not an integer", lambda c: ["info", c.ckpt(edit_config(n_layer="two"))],
         "n_layers must be a positive integer"),
    Case("unsupported activation", lambda c: ["info", c.ckpt(edit_config(activation_function="swish"))],
         "activation_function 'swish'"),
    Case("config shapes disagree with weights", lambda c: ["info", c.ckpt(edit_config(n_inner=24))],
         "expected [12, 24], got [12, 20]"),
    Case("missing model.safetensors", lambda c: ["info", c.ckpt(remove("model.safetensors"))],
         "missing model.safetensors"),
    Case("pickle-only checkpoint", lambda c: ["info", c.ckpt(pickle_only)], "pickle checkpoint"),
    Case("truncated safetensors", lambda c: ["info", c.ckpt(truncate)], "truncated or corrupt"),
    Case("corrupt safetensors header", lambda c: ["info", c.ckpt(corrupt_header)], "truncated or corrupt"),
    Case("safetensors header length absurd", lambda c: ["info", c.ckpt(huge_header_length)], "truncated or corrupt"),
    Case("NaN weight", lambda c: ["info", c.ckpt(edit_tensor("transformer.h.1.mlp.c_fc.weight", float("nan")))],
         "NaN or Inf"),
    Case("Inf weight", lambda c: ["info", c.ckpt(edit_tensor("transformer.wte.weight", float("-inf")))],
         "NaN or Inf"),
    Case("no tokenizer files", lambda c: ["info", c.ckpt(remove("vocab.json", "merges.txt"))], "no tokenizer"),
    Case("tokenizer vocabulary ≠ W_E rows", lambda c: ["info", c.ckpt(extra_vocab_token)],
         "tokenizer vocabulary size (W_E rows): expected 50257, got 50258"),
    Case("--device cuda without CUDA", lambda c: ["info", c.ckpt(), "--device", "cuda"], "CUDA is not available",
         skip_if=no_cuda),
    Case("--device nonsense", lambda c: ["info", c.ckpt(), "--device", "gpu0"], "--device"),
    Case("--dtype not a dtype", lambda c: ["info", c.ckpt(), "--dtype", "int8"], "invalid choice: 'int8'"),
    Case("unknown subcommand", lambda c: ["frobnicate"], "invalid choice: 'frobnicate'"),
    # -- outputs (headscope plant) ---------------------------------------------------
    Case("plant --out unwritable", lambda c: ["plant", "--out", unwritable_out(c)], "cannot create output directory"),
    Case("plant --out dir with other files", lambda c: ["plant", "--out", foreign_dir(c)], "already holds other files"),
    Case("plant --out is a regular file", lambda c: ["plant", "--out", str(c.file("taken", "x"))], "not a directory"),
    Case("plant --layers 1", lambda c: ["plant", "--out", str(c.root / "p"), "--layers", "1"], "at least 2 layers"),
    Case("plant --layers 0", lambda c: ["plant", "--out", str(c.root / "p"), "--layers", "0"], "at least 2 layers"),
    Case("plant --seed notanint", lambda c: ["plant", "--out", str(c.root / "p"), "--seed", "notanint"],
         "invalid int value: 'notanint'"),
    Case("plant --seed negative", lambda c: ["plant", "--out", str(c.root / "p"), "--seed", "-1"],
         "the seed must be a non-negative integer"),
    Case("plant without --out", lambda c: ["plant"], "--out"),
]


# -- running a case -------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root → a digest of its content (or 'dir')."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_headscope(argv: list[str], env: dict[str, str] | None, root: Path, capsys) -> tuple[int, str]:
    """Run the CLI; in-process through cli.main, or as a subprocess when env vars matter."""
    if env is not None:
        full = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
        full.update({k: v.format(root=root) for k, v in env.items()})
        r = subprocess.run([sys.executable, "-m", "headscope", *argv], env=full, capture_output=True,
                           text=True, timeout=120, cwd=root)
        return r.returncode, r.stderr
    try:
        code = main(argv)
    except SystemExit as e:  # argparse errors exit through SystemExit(2)
        code = e.code
    return code, capsys.readouterr().err


@pytest.fixture()
def ctx(tiny_hf_dir, tmp_path):
    root = tmp_path / "scratch"
    root.mkdir()
    (root / "hf-empty").mkdir()
    yield Ctx(root=root, tiny=tiny_hf_dir)
    for p in [root, *root.rglob("*")]:  # let pytest clean up even after chmod
        if p.is_dir() and not p.is_symlink():
            os.chmod(p, 0o755)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case: Case, ctx: Ctx, capsys, monkeypatch):
    if case.skip_if and (reason := case.skip_if()):
        pytest.skip(reason)
    monkeypatch.chdir(ctx.root)
    argv = case.argv(ctx)
    capsys.readouterr()
    before = snapshot(ctx.root)
    code, err = run_headscope(argv, case.env, ctx.root, capsys)
    assert code == 2, f"exit {code}, stderr: {err}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got:\n{err}"
    assert lines[0].startswith("headscope: error: "), lines[0]
    assert case.expect in lines[0], lines[0]
    after = snapshot(ctx.root)
    assert after == before, f"files changed: {sorted(set(after.items()) ^ set(before.items()))}"


def test_matrix_is_large_enough():
    assert len(CASES) >= 25
    assert len({c.name for c in CASES}) == len(CASES)
