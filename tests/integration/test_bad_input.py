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

import contextlib
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
    keep: list = dataclasses.field(default_factory=list)   # objects to keep alive during the case (sockets)

    def ckpt(self, mutate: Callable[[Path], None] | None = None, name: str = "ckpt") -> str:
        """A copy of the tiny checkpoint under root, broken by `mutate(dir)`."""
        d = self.root / name
        shutil.copytree(self.tiny, d)
        if mutate:
            mutate(d)
        return str(d)

    def model(self) -> str:
        """The unbroken tiny checkpoint under root (copied on first use)."""
        d = self.root / "ckpt"
        return str(d) if d.exists() else self.ckpt()

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
    may_hang: bool = False          # run under an alarm: a regression fails instead of hanging the suite


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


# -- inputs of the analysis commands ---------------------------------------------------

TEXT = "The cat sat on the mat, and the dog lay by the door of the old house. " * 2


def text(c: Ctx) -> str:
    """A short valid UTF-8 text."""
    return str(c.file("ok.txt", TEXT))


def empty(c: Ctx) -> str:
    return str(c.file("empty.txt", b""))


def not_utf8(c: Ctx) -> str:
    return str(c.file("latin1.txt", b"\xff\xfe caf\xe9"))


def binary(c: Ctx) -> str:
    return str(c.file("binary.txt", b"abc\x00\x01\x02def\x00"))


def weights_file(c: Ctx) -> str:
    """A copy of model.safetensors given where text is expected."""
    return str(c.file("weights.txt", (Path(c.model()) / "model.safetensors").read_bytes()))


def empty_dir(c: Ctx) -> str:
    d = c.root / "emptydir"
    d.mkdir()
    return str(d)


def calibration(c: Ctx, edit: Callable[[str], str] | None = None, other_model: bool = False) -> str:
    """A calibration written by `headscope calibrate` (for another checkpoint if `other_model`),
    its JSON text then passed through `edit`. Built before the snapshot, so it belongs to the scratch state."""
    c.model()
    source = c.ckpt(edit_tensor("transformer.h.0.attn.c_attn.weight", 0.5), name="other") if other_model \
        else c.model()
    out = c.root / "cal.json"
    assert main(["calibrate", source, "--text", text(c), "--out", str(out)]) == 0
    if edit:
        out.write_text(edit(out.read_text()))
    return str(out)


def json_edit(fn: Callable[[dict], None]) -> Callable[[str], str]:
    def edit(raw: str) -> str:
        d = json.loads(raw)
        fn(d)
        return json.dumps(d)
    return edit


def ragged(d: dict) -> None:
    d["log_denom"] = [row + [0.0] for row in d["log_denom"]]


def steer_out(c: Ctx) -> str:
    return str(c.root / "steered")


def steer0(c: Ctx, *extra: str) -> list[str]:
    """`steer MODEL 1.2 --scale-negative 0 EXTRA… --out DIR`, DIR a fresh path under the scratch root."""
    return ["steer", c.model(), "1.2", "--scale-negative", "0", *extra, "--out", steer_out(c)]


CASES: list[Case] = [
    # -- checkpoints (headscope info) ------------------------------------------------
    Case("unknown hub id offline", lambda c: ["info", "gpt2-medium"], "not in the local Hugging Face cache",
         env=offline()),
    Case("made-up hub id offline", lambda c: ["info", "nobody/no-such-model"], "HF_HUB_OFFLINE=1", env=offline()),
    Case("reproduce offline, gpt2 not cached", lambda c: ["reproduce"], "not in the local Hugging Face cache",
         env=offline()),
    Case("reproduce --model unknown hub id offline", lambda c: ["reproduce", "--model", "gpt2-medium"],
         "not in the local Hugging Face cache", env=offline()),
    Case("reproduce two different models", lambda c: ["reproduce", c.model(), "--model", "gpt2"], "two models given"),
    Case("reproduce --out an existing directory", lambda c: ["reproduce", c.model(), "--out", empty_dir(c)],
         "got an existing directory"),
    Case("no such directory", lambda c: ["info", str(c.root / "nowhere") + "/"], "no such checkpoint directory"),
    Case("model path is a file", lambda c: ["info", str(c.file("f.txt", "x"))], "not a checkpoint directory"),
    Case("missing config.json", lambda c: ["info", c.ckpt(remove("config.json"))], "missing config.json"),
    Case("config.json not JSON", lambda c: ["info", c.ckpt(write("config.json", "{n_layer: 2,"))], "not valid JSON"),
    Case("config.json a JSON list", lambda c: ["info", c.ckpt(write("config.json", "[1, 2]"))], "not a JSON object"),
    Case("config missing n_layer", lambda c: ["info", c.ckpt(edit_config(n_layer=None))], "missing key 'n_layer'"),
    Case("unsupported architecture", lambda c: ["info", c.ckpt(edit_config(model_type="mamba"))], "model_type 'mamba'"),
    Case("config n_head does not divide n_embd", lambda c: ["info", c.ckpt(edit_config(n_head=5))],
         "not divisible by n_heads"),
    Case("config n_layer not an integer", lambda c: ["info", c.ckpt(edit_config(n_layer="two"))],
         "n_layer must be a positive integer"),
    Case("unsupported activation", lambda c: ["info", c.ckpt(edit_config(activation_function="swish"))],
         "activation_function 'swish'"),
    Case("config shapes disagree with weights", lambda c: ["info", c.ckpt(edit_config(n_inner=24))],
         "expected [12, 24], got [12, 20]"),
    Case("missing model.safetensors", lambda c: ["info", c.ckpt(remove("model.safetensors"))],
         "missing model.safetensors"),
    Case("pickle-only checkpoint", lambda c: ["info", c.ckpt(pickle_only)], "unexpected tensor 'x'"),
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
    # -- heads, layers, neurons out of range (analysis commands, tiny model: 2 layers × 3 heads, 20 neurons) --
    Case("kernels --layer 5", lambda c: ["kernels", c.model(), "--layer", "5"], "layer 5 out of range"),
    Case("survey --layer 9", lambda c: ["survey", c.model(), "--layer", "9"], "layer 9 out of range"),
    Case("head 1.7 on a 3-head model", lambda c: ["head", c.model(), "1.7"], "head index 7 out of range"),
    Case("head 1.99 on a 3-head model", lambda c: ["head", c.model(), "1.99"], "head index 99 out of range"),
    Case("head 5.0 on a 2-layer model", lambda c: ["head", c.model(), "5.0"], "layer 5 out of range"),
    Case("head spec one.five", lambda c: ["head", c.model(), "one.five"], "LAYER.HEAD (e.g. 1.5), got 'one.five'"),
    Case("head spec without a dot", lambda c: ["head", c.model(), "1"], "LAYER.HEAD (e.g. 1.5), got '1'"),
    Case("head spec 1.5.2", lambda c: ["head", c.model(), "1.5.2"], "LAYER.HEAD (e.g. 1.5), got '1.5.2'"),
    Case("steer head 1.7 on a 3-head model",
         lambda c: ["steer", c.model(), "1.7", "--scale-negative", "0", "--out", steer_out(c)], "head index 7 out of range"),
    Case("neuron 20 of 20", lambda c: ["neuron", c.model(), "20", "--text", text(c)], "neuron 20 out of range"),
    Case("neurons --heads 7", lambda c: ["neurons", c.model(), "--calibration-text", text(c), "--heads", "7"],
         "--heads: expected indices in 0..2, got '7'"),
    Case("neurons --position not calibrated",
         lambda c: ["neurons", c.model(), "--calibration-text", text(c), "--position", "99"], "position 99 is not calibrated"),
    # -- texts: empty, not UTF-8, binary, empty directories --------------------------
    Case("calibrate --text empty", lambda c: ["calibrate", c.model(), "--text", empty(c), "--out", "cal.json"],
         "calibration text is empty"),
    Case("calibrate --text not UTF-8", lambda c: ["calibrate", c.model(), "--text", not_utf8(c), "--out", "cal.json"],
         "is not UTF-8: invalid byte 0xff at offset 0"),
    Case("calibrate --text binary", lambda c: ["calibrate", c.model(), "--text", binary(c), "--out", "cal.json"],
         "is binary (contains NUL bytes)"),
    Case("calibrate --text model.safetensors",
         lambda c: ["calibrate", c.model(), "--text", weights_file(c), "--out", "cal.json"], "is binary (contains NUL bytes)"),
    Case("calibrate --text a directory", lambda c: ["calibrate", c.model(), "--text", empty_dir(c), "--out", "cal.json"],
         "expected a file, got a directory"),
    Case("neuron --text empty", lambda c: ["neuron", c.model(), "3", "--text", empty(c)], "expected some text, got an empty file"),
    Case("neuron --text not UTF-8", lambda c: ["neuron", c.model(), "3", "--text", text(c), not_utf8(c)],
         "is not UTF-8: invalid byte 0xff"),
    Case("neuron --text binary", lambda c: ["neuron", c.model(), "3", "--text", binary(c)], "is binary (contains NUL bytes)"),
    Case("neuron --text model.safetensors", lambda c: ["neuron", c.model(), "3", "--text", weights_file(c)],
         "is binary (contains NUL bytes)"),
    Case("neurons --calibration-text not UTF-8", lambda c: ["neurons", c.model(), "--calibration-text", not_utf8(c)],
         "is not UTF-8"),
    Case("neurons --calibration-text empty", lambda c: ["neurons", c.model(), "--calibration-text", empty(c)],
         "calibration text is empty"),
    Case("denominators --corpus empty file", lambda c: ["denominators", c.model(), "--corpus", empty(c)], "empty corpus"),
    Case("denominators --corpus not UTF-8", lambda c: ["denominators", c.model(), "--corpus", text(c), not_utf8(c)],
         "is not UTF-8: invalid byte 0xff at offset 0"),
    Case("denominators --corpus binary", lambda c: ["denominators", c.model(), "--corpus", binary(c)], "is binary"),
    Case("denominators --corpus model.safetensors", lambda c: ["denominators", c.model(), "--corpus", weights_file(c)],
         "is binary"),
    Case("denominators --corpus empty directory", lambda c: ["denominators", c.model(), "--corpus", empty_dir(c)],
         "empty corpus: no text found in"),
    Case("denominators --corpus missing", lambda c: ["denominators", c.model(), "--corpus", str(c.root / "nowhere")],
         "corpus path not found"),
    Case("kernels --corpus empty file", lambda c: ["kernels", c.model(), "--corpus", empty(c)], "empty corpus"),
    Case("kernels --corpus not UTF-8", lambda c: ["kernels", c.model(), "--corpus", not_utf8(c)], "is not UTF-8"),
    Case("kernels --corpus binary", lambda c: ["kernels", c.model(), "--corpus", binary(c)], "is binary"),
    Case("kernels --corpus model.safetensors", lambda c: ["kernels", c.model(), "--corpus", weights_file(c)], "is binary"),
    Case("kernels --corpus empty directory", lambda c: ["kernels", c.model(), "--corpus", empty_dir(c)],
         "empty corpus: no text found in"),
    Case("head --corpus not UTF-8", lambda c: ["head", c.model(), "1.2", "--corpus", not_utf8(c)], "is not UTF-8"),
    Case("head --corpus model.safetensors", lambda c: ["head", c.model(), "1.2", "--corpus", weights_file(c)], "is binary"),
    Case("survey --categories not UTF-8", lambda c: ["survey", c.model(), "--categories", not_utf8(c)],
         "is not UTF-8: invalid byte 0xff at offset 0"),
    Case("survey --categories a JSON list", lambda c: ["survey", c.model(), "--categories", str(c.file("l.json", "[1]"))],
         "expected an object of name → list of words"),
    Case("steer --categories not UTF-8",
         lambda c: steer0(c, "--categories", not_utf8(c)),
         "is not UTF-8"),
    # -- calibration files ------------------------------------------------------------
    Case("neurons --calibration of another model",
         lambda c: ["neurons", c.model(), "--calibration", calibration(c, other_model=True)], "was made for another model"),
    Case("neuron --calibration of another model",
         lambda c: ["neuron", c.model(), "3", "--text", text(c), "--calibration", calibration(c, other_model=True)],
         "was made for another model"),
    Case("neurons --calibration with other processing",
         lambda c: ["neurons", c.model(), "--calibration",
                    calibration(c, json_edit(lambda d: d["processing"].update(fold_ln=False)))],
         "was made with other processing"),
    Case("neuron --calibration with other processing",
         lambda c: ["neuron", c.model(), "3", "--text", text(c), "--calibration",
                    calibration(c, json_edit(lambda d: d["processing"].update(center_unembed=False)))],
         "was made with other processing"),
    Case("neurons --calibration truncated",
         lambda c: ["neurons", c.model(), "--calibration", calibration(c, lambda s: s[: len(s) // 2])], "not valid JSON"),
    Case("neuron --calibration truncated",
         lambda c: ["neuron", c.model(), "3", "--text", text(c), "--calibration", calibration(c, lambda s: s[:100])],
         "not valid JSON"),
    Case("neurons --calibration a JSON list",
         lambda c: ["neurons", c.model(), "--calibration", calibration(c, lambda s: "[1, 2, 3]")],
         "not a headscope calibration file"),
    Case("neurons --calibration missing log_denom",
         lambda c: ["neurons", c.model(), "--calibration", calibration(c, json_edit(lambda d: d.pop("log_denom")))],
         "missing the field 'log_denom'"),
    Case("neuron --calibration missing fingerprint",
         lambda c: ["neuron", c.model(), "3", "--text", text(c), "--calibration",
                    calibration(c, json_edit(lambda d: d.pop("fingerprint")))], "missing the field 'fingerprint'"),
    Case("neurons --calibration processing with unknown keys",
         lambda c: ["neurons", c.model(), "--calibration",
                    calibration(c, json_edit(lambda d: d.update(processing={"bogus": True})))],
         "calibration field 'processing': expected booleans"),
    Case("neurons --calibration processing a string",
         lambda c: ["neurons", c.model(), "--calibration",
                    calibration(c, json_edit(lambda d: d.update(processing="all")))],
         "calibration field 'processing': expected an object"),
    Case("neurons --calibration ragged arrays",
         lambda c: ["neurons", c.model(), "--calibration", calibration(c, json_edit(ragged))], "inconsistent shapes"),
    Case("neurons --calibration version 7",
         lambda c: ["neurons", c.model(), "--calibration", calibration(c, json_edit(lambda d: d.update(version=7)))],
         "format version: expected 1, got 7"),
    Case("neurons --calibration model.safetensors",
         lambda c: ["neurons", c.model(), "--calibration", weights_file(c)], "calibration file"),
    Case("neurons --calibration missing", lambda c: ["neurons", c.model(), "--calibration", "nowhere.json"],
         "calibration file not found"),
    # -- numbers and counts -----------------------------------------------------------
    Case("neurons --threshold abc", lambda c: ["neurons", c.model(), "--threshold", "abc"],
         "--threshold must be a number, got 'abc'"),
    Case("neurons --threshold nan", lambda c: ["neurons", c.model(), "--threshold", "nan"],
         "--threshold must be finite, got 'nan'"),
    Case("steer --scale-negative abc",
         lambda c: ["steer", c.model(), "1.2", "--scale-negative", "abc", "--out", steer_out(c)],
         "--scale-negative must be a number, got 'abc'"),
    Case("steer --scale-negative inf",
         lambda c: ["steer", c.model(), "1.2", "--scale-negative", "inf", "--out", steer_out(c)],
         "--scale-negative must be finite"),
    Case("denominators --delta abc", lambda c: ["denominators", c.model(), "--corpus", text(c), "--delta", "abc"],
         "--delta must be a number, got 'abc'"),
    Case("denominators --delta 2", lambda c: ["denominators", c.model(), "--corpus", text(c), "--delta", "2"],
         "delta must lie in (0, 1), got 2.0"),
    Case("head --resolution abc", lambda c: ["head", c.model(), "1.2", "--resolution", "abc"],
         "--resolution must be a number, got 'abc'"),
    Case("head --resolution 0", lambda c: ["head", c.model(), "1.2", "--resolution", "0"], "--resolution: expected > 0"),
    Case("neurons --top -3", lambda c: ["neurons", c.model(), "--top", "-3"], "--top: expected at least 1, got -3"),
    Case("head --k -1", lambda c: ["head", c.model(), "1.2", "--k", "-1"], "--k: expected ≥ 1, got -1"),
    Case("head --tokens 0", lambda c: ["head", c.model(), "1.2", "--tokens", "0"], "--tokens: expected ≥ 1, got 0"),
    Case("survey --prompts 0", lambda c: ["survey", c.model(), "--prompts", "0"], "--prompts: expected ≥ 1, got 0"),
    Case("survey --length 0", lambda c: ["survey", c.model(), "--length", "0"], "--length: expected ≥ 1, got 0"),
    Case("survey --prompts abc", lambda c: ["survey", c.model(), "--prompts", "abc"], "invalid int value: 'abc'"),
    Case("kernels --max-windows 0", lambda c: ["kernels", c.model(), "--max-windows", "0"],
         "--max-windows: expected ≥ 1, got 0"),
    Case("kernels --window 1 without a corpus", lambda c: ["kernels", c.model(), "--window", "1"],
         "--window: expected 2..40, got 1"),
    Case("kernels --window beyond n_ctx", lambda c: ["kernels", c.model(), "--corpus", text(c), "--window", "100"],
         "--window: expected 2..40, got 100"),
    Case("kernels --c abc", lambda c: ["kernels", c.model(), "--c", "abc"], "got 'abc'"),
    Case("kernels --query of two tokens", lambda c: ["kernels", c.model(), "--query", "the cat"],
         "expected a single token"),
    Case("calibrate --window 0", lambda c: ["calibrate", c.model(), "--text", text(c), "--window", "0", "--out", "cal.json"],
         "window length: expected 2..40, got 0"),
    Case("calibrate --window 1", lambda c: ["calibrate", c.model(), "--text", text(c), "--window", "1", "--out", "cal.json"],
         "window length: expected 2..40, got 1"),
    Case("denominators --window 0", lambda c: ["denominators", c.model(), "--corpus", text(c), "--window", "0"],
         "window length: expected 2..40, got 0"),
    Case("neurons --window 0", lambda c: ["neurons", c.model(), "--calibration-text", text(c), "--window", "0"],
         "window length: expected 2..40, got 0"),
    Case("steer --eigen out of range",
         lambda c: steer0(c, "--eigen", "99"),
         "eigenvalue index 99 out of range"),
    Case("steer --eigen -1",
         lambda c: steer0(c, "--eigen", "0,-1"),
         "eigenvalue index -1 out of range"),
    Case("steer --eigen a,b",
         lambda c: steer0(c, "--eigen", "a,b"),
         "--eigen: expected comma-separated integers, got 'a,b'"),
    Case("steer --eigen empty",
         lambda c: steer0(c, "--eigen", ","),
         "--eigen: expected at least one eigenvalue index"),
    # -- outputs of the analysis commands -----------------------------------------------
    Case("calibrate --out an existing directory",
         lambda c: ["calibrate", c.model(), "--text", text(c), "--out", empty_dir(c)], "got an existing directory"),
    Case("neuron --out an existing directory",
         lambda c: ["neuron", c.model(), "3", "--text", text(c), "--out", empty_dir(c)], "got an existing directory"),
    Case("calibrate --out unwritable",
         lambda c: ["calibrate", c.model(), "--text", text(c), "--out", unwritable_out(c) + "/cal.json"],
         "cannot create output directory"),
    Case("kernels --out dir with other files", lambda c: ["kernels", c.model(), "--out", foreign_dir(c)],
         "already holds other files"),
    Case("denominators --out dir with other files",
         lambda c: ["denominators", c.model(), "--corpus", text(c), "--out", foreign_dir(c)], "already holds other files"),
    Case("steer --out dir with other files",
         lambda c: ["steer", c.model(), "1.2", "--scale-negative", "0", "--out", foreign_dir(c)], "already holds other files"),
    Case("steer --out is a regular file",
         lambda c: ["steer", c.model(), "1.2", "--scale-negative", "0", "--out", str(c.file("taken", "x"))],
         "not a directory"),
    Case("report --out unwritable", lambda c: ["report", c.model(), "--out", unwritable_out(c), "--no-progress"],
         "cannot create output directory"),
    Case("report --out dir with other files", lambda c: ["report", c.model(), "--out", foreign_dir(c)],
         "already holds other files"),
    Case("report --out is a regular file", lambda c: ["report", c.model(), "--out", str(c.file("taken", "x"))],
         "not a directory"),
    Case("report --stages unknown", lambda c: ["report", c.model(), "--out", "rep", "--stages", "bogus", "--no-progress"],
         "unknown report stage 'bogus'"),
    Case("report --deep-dives -1", lambda c: ["report", c.model(), "--out", "rep", "--deep-dives", "-1"],
         "--deep-dives: expected 0 or more, got -1"),
    Case("report --lanes 0", lambda c: ["report", c.model(), "--out", "rep", "--lanes", "0"],
         "--lanes: expected ≥ 1, got 0"),
    Case("report --calibration-text binary",
         lambda c: ["report", c.model(), "--out", "rep", "--calibration-text", binary(c)], "is binary (contains NUL bytes)"),
    Case("report --samples not UTF-8", lambda c: ["report", c.model(), "--out", "rep", "--samples", not_utf8(c)],
         "is not UTF-8"),
    Case("report --samples empty", lambda c: ["report", c.model(), "--out", "rep", "--samples", empty(c)],
         "got an empty file"),
    # -- presets and variants (issue 16: the authors' definitions) ----------------------
    Case("neurons --variant bogus", lambda c: ["neurons", c.model(), "--variant", "bogus"],
         "--variant: expected one of paper, code, scaled or key=value pairs, got 'bogus'"),
    Case("neurons --variant ln2=-1", lambda c: ["neurons", c.model(), "--variant", "paper,ln2=-1"],
         "--variant ln2: expected median, none or a positive number, got '-1'"),
    Case("neurons --variant max=min", lambda c: ["neurons", c.model(), "--variant", "max=min"], "got 'max=min'"),
    Case("neurons --variant position=x", lambda c: ["neurons", c.model(), "--variant", "position=x"],
         "--variant position: expected a query position ≥ 0, got 'x'"),
    Case("neurons --variant position beyond the calibration",
         lambda c: ["neurons", c.model(), "--calibration-text", text(c), "--variant", "position=999"],
         "position 999 is not calibrated"),
    Case("neurons --variant glitch=missing file",
         lambda c: ["neurons", c.model(), "--calibration-text", text(c), "--variant", "glitch=nowhere.json"],
         "nowhere.json"),
    Case("neurons --rank bogus", lambda c: ["neurons", c.model(), "--rank", "bogus"], "invalid choice: 'bogus'"),
    Case("neurons --k 0", lambda c: ["neurons", c.model(), "--rank", "robust", "--k", "0"], "--k: expected at least 1, got 0"),
    Case("neurons --heads code on a 3-head model", lambda c: ["neurons", c.model(), "--heads", "code"],
         "--heads: expected indices in 0..2"),
    Case("head --preset bogus", lambda c: ["head", c.model(), "1.2", "--preset", "bogus"], "invalid choice: 'bogus'"),
    Case("head --frequency bogus", lambda c: ["head", c.model(), "1.2", "--frequency", "bogus"], "invalid choice"),
    Case("head --attn-mean bogus", lambda c: ["head", c.model(), "1.2", "--attn-mean", "bogus"], "invalid choice"),
    Case("head --preset seed --k 0", lambda c: ["head", c.model(), "1.2", "--preset", "seed", "--k", "0"],
         "--k: expected ≥ 1, got 0"),
    Case("survey --preset bogus", lambda c: ["survey", c.model(), "--preset", "bogus"], "invalid choice: 'bogus'"),
    Case("survey --bos-query maybe", lambda c: ["survey", c.model(), "--bos-query", "maybe"], "invalid choice"),
    Case("survey --categories with unknown _related",
         lambda c: ["survey", c.model(), "--categories",
                    str(c.file("rel.json", '{"a": ["red", "blue"], "b": ["cat", "dog"], "_related": [["a", "z"]]}'))],
         "\"_related\" names unknown categories ['z']"),
    Case("steer --select bogus", lambda c: steer0(c, "--select", "bogus"), "invalid choice: 'bogus'"),
    Case("steer --preset bogus", lambda c: steer0(c, "--preset", "bogus"), "invalid choice: 'bogus'"),
    Case("kernels --rule bogus", lambda c: ["kernels", c.model(), "--rule", "bogus"], "invalid choice: 'bogus'"),
    Case("reproduce --heads 1,x", lambda c: ["reproduce", c.model(), "--heads", "1,x"],
         "--heads: expected published, auto, seed, code or indices such as 0,2,6, got '1,x'"),
    Case("reproduce --heads out of range", lambda c: ["reproduce", c.model(), "--heads", "0,7", "--no-details"],
         "--heads: expected layer-0 head indices in 0..2"),
    Case("reproduce --variant bogus", lambda c: ["reproduce", c.model(), "--variant", "bogus"],
         "--variant: expected one of paper, code"),
]


# -- issue 18: the output rule, the input rule, config values (the safety helper's block) ------
# Cases marked may_hang=True would block forever if the input/output rule broke (a FIFO opened,
# /dev/zero read): they run under an alarm, so a regression fails in seconds instead of hanging.


def fifo(c: Ctx, name: str = "pipe") -> str:
    """A FIFO with no writer (opening it for reading, or for writing, blocks)."""
    p = c.root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(p)
    return str(p)


def unix_socket(c: Ctx, rel: str) -> str:
    """A bound Unix socket at root/rel (bound through a relative path: socket paths are short)."""
    import socket

    (c.root / rel).parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX)
    cwd = os.getcwd()
    os.chdir((c.root / rel).parent)
    try:
        s.bind(Path(rel).name)
    finally:
        os.chdir(cwd)
    c.keep.append(s)
    return str(c.root / rel)


def corpus_dir_with(make: Callable[[Ctx, str], str]) -> Callable[[Ctx], str]:
    """A corpus directory holding a good text and, beside it, what `make` puts there."""
    def build(c: Ctx) -> str:
        c.file("corp/a.txt", TEXT)
        make(c, "corp/b")
        return str(c.root / "corp")
    return build


def dangling(c: Ctx, name: str = "link.txt") -> str:
    p = c.root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    os.symlink("no-such-target.txt", p)
    return str(p)


def deep_json(c: Ctx, name: str) -> str:
    return str(c.file(name, "[" * 100_000 + "]" * 100_000))


def replace_with(name: str, make: Callable[[Path], None]):
    """A checkpoint breaker: `name` replaced by what `make(path)` creates."""
    def mutate(d: Path):
        (d / name).unlink()
        make(d / name)
    return mutate


def earlier_steer(c: Ctx, break_it: Callable[[Path], None] | None = None) -> str:
    """An earlier `steer --out` output (made before the snapshot), then broken by `break_it(dir)`."""
    out = c.root / "steered"
    assert main(steer0(c)) == 0
    if break_it:
        break_it(out)
    return str(out)


def earlier_report(c: Ctx, break_it: Callable[[Path], None] | None = None) -> str:
    out = c.root / "rep"
    assert main(["report", c.model(), "--out", str(out), "--stages", "model", "--no-progress"]) == 0
    if break_it:
        break_it(out)
    return str(out)


def own_dir_of_other_kind(c: Ctx) -> str:
    """A directory headscope wrote for another command (its manifest lists planted.json, not kernels.json)."""
    c.file("other/planted.json", "{}")
    c.file("other/.headscope-manifest.json",
           json.dumps({"format": "headscope-output", "version": 1, "files": ["planted.json"]}))
    return str(c.root / "other")


def report_marker_without_manifest(c: Ctx) -> str:
    c.file("old/.headscope-report", '{"format": "headscope-report", "version": 1}')
    c.file("old/index.html", "<p>mine</p>")
    return str(c.root / "old")


def link_to_foreign_dir(c: Ctx) -> str:
    os.symlink(foreign_dir(c), c.root / "link")
    return str(c.root / "link")


def over(c: Ctx, name: str, n_bytes: int) -> str:
    return str(c.file(name, ("lorem ipsum dolor sit amet " * (n_bytes // 27 + 1))[:n_bytes]))


CASES += [
    # -- class 1: outputs (single files) ------------------------------------------------
    Case("calibrate --out a user's file", lambda c: ["calibrate", c.model(), "--text", text(c), "--out",
                                                     str(c.file("notes.json", '{"mine": 1}'))],
         "already exists and was not written by headscope"),
    Case("calibrate --out a FIFO", lambda c: ["calibrate", c.model(), "--text", text(c), "--out", fifo(c)],
         "is a FIFO; headscope writes only regular files", may_hang=True),
    Case("calibrate --out /dev/null", lambda c: ["calibrate", c.model(), "--text", text(c), "--out", "/dev/null"],
         "is a character device; headscope writes only regular files"),
    Case("calibrate --out a dangling symlink", lambda c: ["calibrate", c.model(), "--text", text(c), "--out",
                                                          dangling(c, "cal.json")], "which does not exist"),
    Case("neuron --out a user's page", lambda c: ["neuron", c.model(), "3", "--text", text(c), "--out",
                                                  str(c.file("page.html", "<!DOCTYPE html>\n<p>mine</p>"))],
         "already exists and was not written by headscope"),
    Case("neuron --out a FIFO", lambda c: ["neuron", c.model(), "3", "--text", text(c), "--out", fifo(c)],
         "is a FIFO", may_hang=True),
    Case("reproduce --out a FIFO", lambda c: ["reproduce", c.model(), "--out", fifo(c)], "is a FIFO", may_hang=True),
    Case("reproduce --out a user's JSON", lambda c: ["reproduce", c.model(), "--out",
                                                     str(c.file("claims.json", '{"rows": []}'))],
         "already exists and was not written by headscope"),
    # -- class 1: outputs (directories) ----------------------------------------------
    Case("plant --out a FIFO", lambda c: ["plant", "--out", fifo(c)], "not a directory (a FIFO)", may_hang=True),
    Case("steer --out a dangling symlink", lambda c: steer0(c)[:-1] + [dangling(c, "steered")], "which does not exist"),
    Case("report --out a symlink to a user's directory", lambda c: ["report", c.model(), "--out", link_to_foreign_dir(c)],
         "already holds other files"),
    Case("kernels --out a headscope directory of another kind", lambda c: ["kernels", c.model(), "--out",
                                                                          own_dir_of_other_kind(c)],
         "no kernels.json listed in headscope's .headscope-manifest.json"),
    Case("report --out a marker without a manifest", lambda c: ["report", c.model(), "--out",
                                                               report_marker_without_manifest(c)],
         "already holds other files"),
    Case("steer --out earlier output, config.json now a user's symlink",
         lambda c: steer0(c)[:-1] + [earlier_steer(c, lambda d: (
             (d / "config.json").unlink(), os.symlink(c.file("mine.json", "{}"), d / "config.json")))],
         "config.json is a symbolic link"),
    Case("steer --out earlier output, steering.json now a FIFO",
         lambda c: steer0(c)[:-1] + [earlier_steer(c, lambda d: ((d / "steering.json").unlink(),
                                                                  os.mkfifo(d / "steering.json")))],
         "steering.json is a FIFO", may_hang=True),
    Case("steer --out earlier output with a user's file where headscope writes",
         lambda c: steer0(c)[:-1] + [earlier_steer(c, lambda d: (
             d / ".headscope-manifest.json").write_text(json.dumps(
                 {"format": "headscope-output", "version": 1, "files": ["steering.json"]})))],
         "already exists and was not written by headscope"),
    Case("report --out earlier report, data/model.json now a FIFO",
         lambda c: ["report", c.model(), "--out", earlier_report(c, lambda d: (
             (d / "data/model.json").unlink(), os.mkfifo(d / "data/model.json"))), "--stages", "model",
                    "--no-progress"], "data/model.json is a FIFO", may_hang=True),
    # -- class 2: inputs that never end, and sizes --------------------------------------
    Case("calibrate --text /dev/zero", lambda c: ["calibrate", c.model(), "--text", "/dev/zero", "--out", "cal.json"],
         "/dev/zero is a character device, not a regular file", may_hang=True),
    Case("calibrate --text a FIFO", lambda c: ["calibrate", c.model(), "--text", fifo(c), "--out", "cal.json"],
         "is a FIFO, not a regular file", may_hang=True),
    Case("neuron --text a FIFO", lambda c: ["neuron", c.model(), "3", "--text", text(c), fifo(c)], "is a FIFO",
         may_hang=True),
    Case("neurons --calibration-text /dev/zero", lambda c: ["neurons", c.model(), "--calibration-text", "/dev/zero"],
         "is a character device", may_hang=True),
    Case("neurons --calibration a FIFO", lambda c: ["neurons", c.model(), "--calibration", fifo(c)], "is a FIFO",
         may_hang=True),
    Case("kernels --corpus /dev/zero", lambda c: ["kernels", c.model(), "--corpus", "/dev/zero"],
         "is a character device", may_hang=True),
    Case("denominators --corpus a FIFO", lambda c: ["denominators", c.model(), "--corpus", fifo(c)], "is a FIFO",
         may_hang=True),
    Case("denominators --corpus a directory holding a FIFO",
         lambda c: ["denominators", c.model(), "--corpus", corpus_dir_with(fifo)(c)], "corp/b is a FIFO", may_hang=True),
    Case("kernels --corpus a directory holding a socket",
         lambda c: ["kernels", c.model(), "--corpus", corpus_dir_with(unix_socket)(c)], "corp/b is a socket"),
    Case("kernels --corpus a directory holding a dangling link",
         lambda c: ["kernels", c.model(), "--corpus", corpus_dir_with(dangling)(c)], "symbolic link to a missing file"),
    Case("head --corpus /dev/zero", lambda c: ["head", c.model(), "1.2", "--corpus", "/dev/zero"],
         "is a character device", may_hang=True),
    Case("survey --categories a FIFO", lambda c: ["survey", c.model(), "--categories", fifo(c)], "is a FIFO",
         may_hang=True),
    Case("report --samples a FIFO", lambda c: ["report", c.model(), "--out", "rep", "--samples", fifo(c)], "is a FIFO",
         may_hang=True),
    Case("report --calibration-text /dev/zero",
         lambda c: ["report", c.model(), "--out", "rep", "--calibration-text", "/dev/zero"], "is a character device",
         may_hang=True),
    Case("calibrate --text a dangling symlink",
         lambda c: ["calibrate", c.model(), "--text", dangling(c), "--out", "cal.json"], "symbolic link to a missing file"),
    Case("calibrate --text over --max-input-mb",
         lambda c: ["calibrate", c.model(), "--text", over(c, "big.txt", 2000), "--out", "cal.json",
                    "--max-input-mb", "0.001"], "over the input size limit: expected at most 1048 bytes, got 2000 bytes"),
    Case("kernels --corpus over --max-input-mb in all",
         lambda c: ["kernels", c.model(), "--corpus", over(c, "c/a.txt", 700), over(c, "c/b.txt", 700),
                    "--max-input-mb", "0.001"], "expected at most 1048 bytes in all"),
    Case("--max-input-mb 0", lambda c: ["kernels", c.model(), "--max-input-mb", "0"],
         "--max-input-mb: expected a positive number of MiB, got 0.0"),
    Case("--max-input-mb nan", lambda c: ["kernels", c.model(), "--max-input-mb", "nan"],
         "--max-input-mb: expected a positive number of MiB, got nan"),
    Case("--max-input-mb abc", lambda c: ["kernels", c.model(), "--max-input-mb", "abc"], "invalid float value: 'abc'"),
    Case("neurons --calibration nested too deeply",
         lambda c: ["neurons", c.model(), "--calibration", deep_json(c, "deep.json")], "nested too deeply"),
    Case("survey --categories nested too deeply",
         lambda c: ["survey", c.model(), "--categories", deep_json(c, "deep.json")], "nested too deeply"),
    Case("config.json a FIFO", lambda c: ["info", c.ckpt(replace_with("config.json", os.mkfifo))],
         "config.json is a FIFO, not a regular file", may_hang=True),
    Case("config.json a link to /dev/zero",
         lambda c: ["info", c.ckpt(replace_with("config.json", lambda p: os.symlink("/dev/zero", p)))],
         "config.json is a character device", may_hang=True),
    # -- class 3 and the config half of class 4: config values ----------------------------
    Case("config layer_norm_epsilon 'abc'", lambda c: ["info", c.ckpt(edit_config(layer_norm_epsilon="abc"))],
         "layer_norm_epsilon must be a finite positive number, got 'abc'"),
    Case("config layer_norm_epsilon NaN", lambda c: ["info", c.ckpt(edit_config(layer_norm_epsilon=float("nan")))],
         "layer_norm_epsilon must be a finite positive number, got nan"),
    Case("config layer_norm_epsilon inf", lambda c: ["info", c.ckpt(edit_config(layer_norm_epsilon=float("inf")))],
         "layer_norm_epsilon must be a finite positive number, got inf"),
    Case("config layer_norm_epsilon negative", lambda c: ["info", c.ckpt(edit_config(layer_norm_epsilon=-1e-5))],
         "layer_norm_epsilon must be a finite positive number, got -1e-05"),
    Case("config layer_norm_epsilon 0", lambda c: ["info", c.ckpt(edit_config(layer_norm_epsilon=0))],
         "layer_norm_epsilon must be a finite positive number, got 0"),
    Case("config layer_norm_epsilon 10^400", lambda c: ["info", c.ckpt(edit_config(layer_norm_epsilon=10**400))],
         "layer_norm_epsilon must be a finite positive number, got 1000000000"),
    Case("config layer_norm_epsilon true", lambda c: ["info", c.ckpt(edit_config(layer_norm_epsilon=True))],
         "layer_norm_epsilon must be a finite positive number, got True"),
    Case("config scale_attn_weights 'false'", lambda c: ["info", c.ckpt(edit_config(scale_attn_weights="false"))],
         "scale_attn_weights must be true or false, got 'false' (a string)"),
    Case("config scale_attn_by_inverse_layer_idx 'true'",
         lambda c: ["info", c.ckpt(edit_config(scale_attn_by_inverse_layer_idx="true"))],
         "scale_attn_by_inverse_layer_idx must be true or false, got 'true'"),
    Case("config scale_attn_weights 0", lambda c: ["info", c.ckpt(edit_config(scale_attn_weights=0))],
         "scale_attn_weights must be true or false, got 0"),
    Case("config add_cross_attention 'no'", lambda c: ["info", c.ckpt(edit_config(add_cross_attention="no"))],
         "add_cross_attention must be true or false, got 'no'"),
    Case("config tie_word_embeddings 'false'", lambda c: ["info", c.ckpt(edit_config(tie_word_embeddings="false"))],
         "tie_word_embeddings must be true or false"),
    Case("config.json nested too deeply", lambda c: ["info", c.ckpt(write("config.json", "[" * 100_000 + "]" * 100_000))],
         "JSON nested too deeply"),
    Case("config.json with a key twice", lambda c: ["info", c.ckpt(write("config.json", '{"model_type": "gpt2", '
                                                                      '"n_layer": 2, "n_layer": 3}'))],
         "key 'n_layer' appears twice"),
    Case("config n_positions 10^12", lambda c: ["info", c.ckpt(edit_config(n_positions=10**12))],
         "n_positions must be a positive integer (at most 2147483647), got 1000000000000"),
    Case("config n_embd 12.0", lambda c: ["info", c.ckpt(edit_config(n_embd=12.0))],
         "n_embd must be a positive integer (at most 2147483647), got 12.0"),
    Case("config vocab_size negative", lambda c: ["info", c.ckpt(edit_config(vocab_size=-5))],
         "vocab_size must be a positive integer (at most 2147483647), got -5"),
    Case("config n_inner a string", lambda c: ["info", c.ckpt(edit_config(n_inner="20"))],
         "n_inner must be a positive integer (at most 2147483647), got '20'"),
    Case("config n_layer true", lambda c: ["info", c.ckpt(edit_config(n_layer=True))],
         "n_layer must be a positive integer"),
    Case("config n_embd missing", lambda c: ["info", c.ckpt(edit_config(n_embd=None))], "missing key 'n_embd'"),
    Case("config activation_function a number", lambda c: ["info", c.ckpt(edit_config(activation_function=3))],
         "activation_function must be a string, got 3"),
]


# -- weights: dtypes, keys, tying, layouts, revisions (store) ---------------------------


def edit_state(fn: Callable[[dict], None]):
    """Rewrite model.safetensors after `fn(state)` edits its tensors in place."""
    def mutate(d: Path):
        from safetensors.torch import load_file, save_file

        state = dict(load_file(str(d / "model.safetensors")))
        fn(state)
        save_file(state, str(d / "model.safetensors"))
    return mutate


def shard(d: Path, index_edit: Callable[[dict], None] | None = None, drop: str | None = None):
    """model.safetensors → two shards + model.safetensors.index.json, then `index_edit` / remove `drop`."""
    from safetensors.torch import load_file, save_file

    state = load_file(str(d / "model.safetensors"))
    keys = sorted(state)
    parts = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for name, ks in parts.items():
        save_file({k: state[k] for k in ks}, str(d / name), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: n for n, ks in parts.items() for k in ks}}
    if index_edit:
        index_edit(index)
    (d / "model.safetensors").unlink()
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    if drop:
        (d / drop).unlink()


class _Hostile:
    """Unpickling it would call print(...): torch.load(weights_only=True) must refuse it."""

    def __reduce__(self):
        return (print, ("unpickled",))


def hostile_bin(d: Path):
    from safetensors.torch import load_file

    state = dict(load_file(str(d / "model.safetensors")))
    state["transformer.h.0.ln_1.weight"] = _Hostile()
    (d / "model.safetensors").unlink()
    torch.save(state, d / "pytorch_model.bin")


def truncated_bin(d: Path):
    from safetensors.torch import load_file

    torch.save(dict(load_file(str(d / "model.safetensors"))), d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()
    data = (d / "pytorch_model.bin").read_bytes()
    (d / "pytorch_model.bin").write_bytes(data[: len(data) // 2])


C_FC = "transformer.h.0.mlp.c_fc.weight"

CASES += [
    Case("integer weight tensor", lambda c: ["info", c.ckpt(edit_state(lambda s: s.update({C_FC: s[C_FC].to(torch.int32)})))],
         "has dtype int32; headscope reads floating-point weights only"),
    Case("bool weight tensor",
         lambda c: ["info", c.ckpt(edit_state(lambda s: s.update({"transformer.ln_f.weight": s["transformer.ln_f.weight"] > 0})))],
         "'transformer.ln_f.weight' has dtype bool"),
    Case("X and transformer.X both stored",
         lambda c: ["info", c.ckpt(edit_state(lambda s: s.update({"h.0.mlp.c_fc.weight": s[C_FC].clone()})))],
         "holds both 'h.0.mlp.c_fc.weight' and 'transformer.h.0.mlp.c_fc.weight'"),
    Case("tensor of a layer beyond n_layer",
         lambda c: ["info", c.ckpt(edit_state(lambda s: s.update({"transformer.h.2.mlp.c_fc.weight": s[C_FC].clone()})))],
         "for layer 2, but config.json has n_layer 2"),
    Case("tensor of no GPT-2 weight",
         lambda c: ["info", c.ckpt(edit_state(lambda s: s.update({"score.weight": torch.zeros(2, 12)})))],
         "unexpected tensor 'score.weight'"),
    Case("tie_word_embeddings false without lm_head.weight",
         lambda c: ["info", c.ckpt(edit_config(tie_word_embeddings=False))], "there is no lm_head.weight"),
    Case("tie_word_embeddings not a boolean",
         lambda c: ["info", c.ckpt(edit_config(tie_word_embeddings="no"))], "tie_word_embeddings must be true or false"),
    Case("lm_head.weight of the wrong shape",
         lambda c: ["info", c.ckpt(edit_state(lambda s: s.update({"lm_head.weight": torch.zeros(50257, 11)})))],
         "shape of lm_head.weight: expected [50257, 12], got [50257, 11]"),
    Case("sharded: index names a shard outside the checkpoint",
         lambda c: ["info", c.ckpt(lambda d: shard(d, lambda i: i["weight_map"].update({C_FC: "../model.safetensors"})))],
         "is not a .safetensors file name in the checkpoint directory"),
    Case("sharded: a shard is missing",
         lambda c: ["info", c.ckpt(lambda d: shard(d, drop="model-00002-of-00002.safetensors"))],
         "missing shard model-00002-of-00002.safetensors"),
    Case("sharded: index lists a tensor in the wrong shard",
         lambda c: ["info", c.ckpt(lambda d: shard(d, lambda i: i["weight_map"].update(
             {k: "model-00001-of-00002.safetensors" for k in i["weight_map"]})))],
         "which does not hold it"),
    Case("pytorch_model.bin that unpickles code", lambda c: ["info", c.ckpt(hostile_bin)],
         "holds more than plain tensors and is refused"),
    Case("pytorch_model.bin truncated", lambda c: ["info", c.ckpt(truncated_bin)], "truncated or corrupt"),
    Case("--revision with a local directory", lambda c: ["info", c.model(), "--revision", "step-1"],
         "--revision step-1 applies to hub ids"),
    Case("--revision not in the offline cache", lambda c: ["info", "gpt2", "--revision", "step-1"],
         "'gpt2' at revision 'step-1' is not in the local Hugging Face cache", env=offline()),
]


# -- issue 25: containment, capped reads, numbers JSON cannot hold, tokenizers -------------


def sparse(name: str, size: int = 4 << 30):
    """A checkpoint breaker: `name` becomes a sparse file of `size` bytes (4 GiB), no disk used."""
    def mutate(d: Path):
        with open(d / name, "wb") as f:
            f.truncate(size)
    return mutate


def outside_manifest(c: Ctx, entry: str = "../victim.txt") -> str:
    """An earlier report whose manifest (edited, or received from someone) lists a file outside it."""
    c.file("victim.txt", "a file outside the output directory")
    def edit(d: Path):
        m = json.loads((d / ".headscope-manifest.json").read_text())
        m["files"].append(entry)
        (d / ".headscope-manifest.json").write_text(json.dumps(m))
    return earlier_report(c, edit)


def outside_commit(c: Ctx) -> str:
    """An earlier steer output holding an abandoned commit record whose names leave the directory."""
    c.file("victim.txt", "a file outside the output directory")
    def craft(d: Path):
        st = d / ".headscope-staging-0123456789ab"
        st.mkdir()
        (st / ".headscope-lock").write_text("")
        (st / ".headscope-commit.json").write_text(json.dumps({"files": [], "stale": ["../victim.txt"]}))
    return earlier_steer(c, craft)


def renumbered_vocab(d: Path):
    """vocab.json with as many tokens as W_E rows, one of them with an id past the last row."""
    vocab = json.loads((d / "vocab.json").read_text())
    vocab["ĠTheir"] = 60000
    (d / "vocab.json").write_text(json.dumps(vocab))


def without_eot(d: Path):
    vocab = json.loads((d / "vocab.json").read_text())
    del vocab["<|endoftext|>"]
    (d / "vocab.json").write_text(json.dumps(vocab))


def torch_bin(d: Path):
    """The weights also as pytorch_model.bin; model.safetensors removed (the breaker puts something there)."""
    from safetensors.torch import load_file

    torch.save(dict(load_file(str(d / "model.safetensors"))), d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()


def sharded_index(text: str):
    """A checkpoint breaker: sharded, then its index.json replaced by `text`."""
    def mutate(d: Path):
        shard(d)
        (d / "model.safetensors.index.json").write_text(text)
    return mutate


BIG_INT = "1" * 5000
C_ATTN1 = "transformer.h.1.attn.c_attn.weight"


def scaled(name: str, factor: float, dtype: torch.dtype | None = None):
    """A checkpoint breaker: tensor `name` times `factor` (every tensor cast to `dtype` first, if given)."""
    def fn(state: dict):
        if dtype is not None:
            state.update({k: v.to(dtype) for k, v in state.items()})
        state[name] = state[name].to(dtype or state[name].dtype) * factor
    return edit_state(fn)

CASES += [
    Case("report --out whose manifest lists ../victim.txt",
         lambda c: ["report", c.model(), "--out", outside_manifest(c), "--stages", "model", "--no-progress"],
         "lists '../victim.txt', which is not a normalised path inside the directory"),
    Case("report --out whose manifest lists an absolute path",
         lambda c: ["report", c.model(), "--out", outside_manifest(c, str(c.root / "victim.txt")), "--stages", "model",
                    "--no-progress"], "which is not a relative path"),
    Case("steer --out holding a commit record that names ../victim.txt",
         lambda c: steer0(c)[:-1] + [outside_commit(c)], "lists '../victim.txt', which is not a normalised path"),
    Case("info on a directory half-committed by a killed run",
         lambda c: ["info", outside_commit(c)], "is half-committed"),
    Case("neuron --out a report's index.html",
         lambda c: ["neuron", c.model(), "3", "--text", text(c), "--out", earlier_report(c) + "/index.html"],
         "already exists and was not written by headscope"),
    Case("sharded: a 4 GiB sparse index.json",
         lambda c: ["info", c.ckpt(lambda d: (shard(d), sparse("model.safetensors.index.json")(d)))],
         "model.safetensors.index.json is over the input size limit"),
    Case("a 4 GiB sparse vocab.json", lambda c: ["info", c.ckpt(sparse("vocab.json"))],
         "vocab.json is over the input size limit: expected at most 64.0 MiB, got 4096.0 MiB"),
    Case("a 4 GiB sparse tokenizer.json", lambda c: ["info", c.ckpt(sparse("tokenizer.json"))],
         "tokenizer.json is over the input size limit"),
    Case("config.json with a 5000-digit integer", lambda c: ["info", c.ckpt(write("config.json", '{"n_layer": '
                                                                            + BIG_INT + "}"))],
         "holds a number headscope does not read"),
    Case("index.json with a 5000-digit integer",
         lambda c: ["info", c.ckpt(sharded_index('{"metadata": {"total_size": ' + BIG_INT + '}, "weight_map": {}}'))],
         "holds a number headscope does not read"),
    Case("index.json nested too deeply",
         lambda c: ["info", c.ckpt(sharded_index("[" * 100_000 + "]" * 100_000))], "JSON nested too deeply"),
    Case("survey --categories with a 5000-digit integer",
         lambda c: ["survey", c.model(), "--categories", str(c.file("cat.json", '{"a": ' + BIG_INT + "}"))],
         "holds a number headscope does not read"),
    Case("neurons --calibration with a 5000-digit integer",
         lambda c: ["neurons", c.model(), "--calibration", str(c.file("cal.json", '{"version": ' + BIG_INT + "}"))],
         "holds a number headscope does not read"),
    Case("layer-1 c_attn scaled by 1e20 (finite float32): survey",
         lambda c: ["survey", c.ckpt(scaled(C_ATTN1, 1e20))], f"weight {C_ATTN1} holds a value of magnitude"),
    Case("layer-1 c_attn scaled by 1e20: head --json",
         lambda c: ["head", c.ckpt(scaled(C_ATTN1, 1e20)), "1.2", "--json"], "within which float32 analyses"),
    Case("a float64 checkpoint holding 1e300: atlas",
         lambda c: ["atlas", c.ckpt(scaled(C_ATTN1, 1e300, torch.float64))], f"weight {C_ATTN1} holds a value of"),
    Case("a float64 checkpoint holding 1e300: kernels",
         lambda c: ["kernels", c.ckpt(scaled(C_ATTN1, 1e300, torch.float64))], "over the bound"),
    Case("--device meta", lambda c: ["info", c.model(), "--device", "meta"],
         "--device meta: expected cpu, cuda, cuda:N or mps (devices that compute), got meta"),
    Case("--device xla", lambda c: ["atlas", c.model(), "--device", "xla"], "got xla"),
    Case("head spec with a superscript digit", lambda c: ["head", c.model(), "1.²"],
         "LAYER.HEAD (e.g. 1.5), got '1.²'"),
    Case("head spec with Arabic-Indic digits", lambda c: ["head", c.model(), "١.٢"], "LAYER.HEAD (e.g. 1.5)"),
    Case("head spec with a 5000-digit layer", lambda c: ["head", c.model(), BIG_INT + ".1"], "LAYER.HEAD (e.g. 1.5)"),
    Case("steer --scale-negative 1e308", lambda c: ["steer", c.model(), "1.2", "--scale-negative", "1e308", "--out",
                                                    steer_out(c)], "--scale-negative 1e+308: the steered QK form"),
    Case("kernels --c 1e308", lambda c: ["kernels", c.model(), "--c", "1e308"],
         "c: expected a positive number at most"),
    Case("steer --eigen 0,0", lambda c: steer0(c, "--eigen", "0,0"), "expected distinct eigenvalue indices, got 0"),
    Case("steer --eigen with an Arabic-Indic digit", lambda c: steer0(c, "--eigen", "0,١"),
         "--eigen: expected comma-separated integers"),
    Case("model.safetensors a FIFO beside pytorch_model.bin",
         lambda c: ["info", c.ckpt(lambda d: (torch_bin(d), os.mkfifo(d / "model.safetensors")))],
         "model.safetensors is a FIFO, not a regular file", may_hang=True),
    Case("model.safetensors a link to /dev/zero beside pytorch_model.bin",
         lambda c: ["info", c.ckpt(lambda d: (torch_bin(d), os.symlink("/dev/zero", d / "model.safetensors")))],
         "model.safetensors is a character device", may_hang=True),
    Case("checkpoint path not UTF-8", lambda c: ["info", c.ckpt(name=os.fsdecode(b"ck\xffpt"))],
         "is not valid UTF-8"),
    Case("neurons --rank robust --k 100000", lambda c: ["neurons", c.model(), "--rank", "robust", "--k", "100000"],
         "--k: expected at most 1024 (the robust score's running top-k takes memory in proportion to k), got 100000"),
    Case("vocab.json without <|endoftext|>", lambda c: ["info", c.ckpt(without_eot)], "has no <|endoftext|> token"),
    Case("tokenizer ids beyond the embedding", lambda c: ["info", c.ckpt(renumbered_vocab)],
         "has token ids up to 60000, but the embedding W_E has 50257 rows"),
]


# -- running a case -------------------------------------------------------------------


# -- issue 36: trust nothing on disk ------------------------------------------------------------


def hard_linked_lock(c: Ctx) -> str:
    """An earlier report whose `.headscope-lock` is a hard link to a user's file outside it."""
    victim = c.file("victim.txt", "a user's file, hard-linked into the output directory\n")
    def link(d: Path):
        with contextlib.suppress(FileNotFoundError):
            (d / ".headscope-lock").unlink()
        os.link(victim, d / ".headscope-lock")
    return earlier_report(c, link)


CASES += [
    Case("report --out whose lock file is a hard link to a user's file",
         lambda c: ["report", c.model(), "--out", hard_linked_lock(c), "--stages", "model", "--no-progress"],
         ".headscope-lock is a hard link"),
    Case("steer --out whose lock file is a hard link to a user's file",
         lambda c: steer0(c)[:-1] + [earlier_steer(c, lambda d: os.link(c.file("victim.txt", "mine\n"),
                                                                      d / ".headscope-lock"))],
         ".headscope-lock is a hard link"),
    Case("report --out whose manifest is over the manifest size limit (4 GiB, sparse)",
         lambda c: ["report", c.model(), "--out", earlier_report(c, sparse(".headscope-manifest.json")), "--stages",
                    "model", "--no-progress"], "is over headscope's size limit for a manifest"),
    Case("neuron -1 (refused before the model loads)", lambda c: ["neuron", str(c.root / "never-read"), "-1", "--text",
                                                                  str(c.file("t.txt", "Hello there."))],
         "argument neuron: expected a neuron index ≥ 0, got -1"),
    Case("kernels --n-ref 0 (refused before the model loads)", lambda c: ["kernels", str(c.root / "never-read"),
                                                                         "--n-ref", "0"],
         "argument --n-ref: expected a query position ≥ 1, got 0"),
    Case("kernels --n-ref 5000 past n_ctx − 1 (no longer capped silently)",
         lambda c: ["kernels", c.model(), "--n-ref", "5000"], "--n-ref: expected a query position in 1..39"),
    Case("layer_norm_epsilon 1e-50 with a zero embedding row (0/0 = NaN in float32)",
         lambda c: ["atlas", c.ckpt(lambda d: (edit_config(layer_norm_epsilon=1e-50)(d),
                                               edit_state(lambda s: s["transformer.wte.weight"][7].zero_())(d)))],
         "the norm epsilon (layer_norm_epsilon, layer_norm_eps or rms_norm_eps) is 1e-50: expected at least 1.18e-38"),
    Case("n_layer 2³¹ − 1 (checked against the weights before anything per layer is allocated)",
         lambda c: ["info", c.ckpt(edit_config(n_layer=2**31 - 1))],
         "config.json has n_layer 2147483647, but the weight files in", may_hang=True),
    Case("GPT-Neo attention_types repeated 10⁹ times (counted, never expanded)",
         lambda c: ["info", c.ckpt(edit_config(model_type="gpt_neo", num_layers=2, hidden_size=12, num_heads=3,
                                               intermediate_size=20, max_position_embeddings=40, window_size=5,
                                               attention_types=[[["global", "local"], 10**9]]))],
         "attention_types expand to 2000000000 layers, expected 2", may_hang=True),
]

# -- issue 36: index arguments are checked against config.json before any weight is read ----------
# The checkpoint holds a NaN weight, which loading refuses once it reads the weights: a refusal of the argument
# proves that it came first (they used to be checked after the load: `neuron 20` read every weight first).

def nan_model(c: Ctx) -> str:
    d = c.root / "nan-ckpt"
    return str(d) if d.exists() else c.ckpt(edit_tensor("transformer.h.1.mlp.c_fc.weight", float("nan")),
                                            name="nan-ckpt")


CASES += [
    Case("neuron 20 of 20, before the weights", lambda c: ["neuron", nan_model(c), "20", "--text", text(c)],
         "neuron 20 out of range (MLP0 has neurons 0..19)"),
    Case("neuron --heads 7, before the weights", lambda c: ["neuron", nan_model(c), "3", "--text", text(c), "--heads",
                                                            "7"], "--heads: expected indices in 0..2, got '7'"),
    Case("head 1.7, before the weights", lambda c: ["head", nan_model(c), "1.7"],
         "head index 7 out of range (the model has 3 heads per layer)"),
    Case("head 5.0, before the weights", lambda c: ["head", nan_model(c), "5.0"],
         "layer 5 out of range (the model has layers 0..1)"),
    Case("steer 1.7, before the weights", lambda c: ["steer", nan_model(c), "1.7", "--scale-negative", "0", "--out",
                                                     steer_out(c)], "head index 7 out of range"),
    Case("kernels --layer 5, before the weights", lambda c: ["kernels", nan_model(c), "--layer", "5"],
         "layer 5 out of range"),
    Case("kernels --n-ref 5000, before the weights", lambda c: ["kernels", nan_model(c), "--n-ref", "5000"],
         "--n-ref: expected a query position in 1..39 (n_ctx − 1), got 5000"),
    Case("kernels --window 999, before the weights", lambda c: ["kernels", nan_model(c), "--window", "999"],
         "--window: expected 2..40, got 999"),
    Case("survey --layer 9, before the weights", lambda c: ["survey", nan_model(c), "--layer", "9"],
         "layer 9 out of range"),
    Case("atlas --layers 0 9, before the weights", lambda c: ["atlas", nan_model(c), "--layers", "0", "9"],
         "layer 9 out of range"),
    Case("neurons --heads 7, before the weights",
         lambda c: ["neurons", nan_model(c), "--calibration-text", text(c), "--heads", "7"],
         "--heads: expected indices in 0..2, got '7'"),
    Case("calibrate --max-windows 0", lambda c: ["calibrate", c.model(), "--text", text(c), "--out", "cal.json",
                                                 "--max-windows", "0"],
         "argument --max-windows: expected a window count ≥ 1, got 0"),
]



def snapshot(root: Path) -> dict[str, str]:
    """Every path under root → a digest of its content ('dir', 'link:…', or the kind of a FIFO/socket)."""
    import stat

    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        mode = os.lstat(p).st_mode
        if stat.S_ISLNK(mode):
            out[rel] = "link:" + os.readlink(p)
        elif stat.S_ISDIR(mode):
            out[rel] = "dir"
        elif not stat.S_ISREG(mode):   # never opened: a FIFO would block
            out[rel] = f"special:{stat.S_IFMT(mode)}"
        elif os.lstat(p).st_size > 1 << 26:    # a sparse giant: its size and time, never read whole
            out[rel] = f"large:{os.lstat(p).st_size}:{os.lstat(p).st_mtime_ns}"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out




def run_headscope(argv: list[str], env: dict[str, str] | None, root: Path, capsys) -> tuple[int, str]:
    """Run the CLI; in-process through cli.main, or as a subprocess when env vars matter."""
    if env is not None:
        full = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
        full.update({k: v.format(root=root) for k, v in env.items()})
        src = str(Path(__import__("headscope").__file__).resolve().parent.parent)   # the package under test
        full["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
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
def test_bad_input(case: Case, ctx: Ctx, capsys, monkeypatch, alarm):
    if case.skip_if and (reason := case.skip_if()):
        pytest.skip(reason)
    monkeypatch.chdir(ctx.root)
    argv = case.argv(ctx)
    capsys.readouterr()
    before = snapshot(ctx.root)
    with alarm(60, case.name) if case.may_hang else contextlib.nullcontext():
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


# -- a text longer than n_ctx is windowed, not an error ------------------------------------

LONG = ("The old harbour town woke slowly: gulls over the quay, bread in the ovens, boats "
        "knocking against the stone. ") * 12          # ≈ 260 tokens, n_ctx of the tiny model = 40


def test_text_longer_than_n_ctx_is_windowed(ctx: Ctx, capsys, monkeypatch):
    monkeypatch.chdir(ctx.root)
    model = ctx.model()
    long = ctx.file("long.txt", LONG)
    n_tokens = len(__import__("headscope").load(model).tokenizer.encode(LONG))
    assert n_tokens > 4 * 40
    # neuron: one trace per window ([BOS] + 39 tokens each), all of the text covered
    capsys.readouterr()
    assert main(["neuron", model, "3", "--text", str(long), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = [t["name"] for t in out["texts"]]
    n_win = -(-n_tokens // 39)
    assert names == [f"{long} [window {i + 1}/{n_win}]" for i in range(n_win)]
    assert sum(len(t["ids"]) - 1 for t in out["texts"]) == n_tokens
    assert all(len(t["ids"]) <= 40 for t in out["texts"])
    # calibrate and kernels: accepted, and they use more than one window
    assert main(["calibrate", model, "--text", str(long), "--out", "cal.json", "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert cal["n_windows"] > 1
    assert main(["kernels", model, "--corpus", str(long), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["corpus"]["n_windows"] > 1


def test_weights_just_inside_the_bound_give_finite_figures(ctx: Ctx, capsys, monkeypatch):
    """Every weight matrix scaled to 0.9 × the load bound (headscope.core.checkpoint.max_weight): accepted, and every
    analysis prints finite numbers (the bound is what keeps float32 from overflowing, README JSON notes)."""
    from headscope.core.config import read_hf_config
    from headscope.core.families import read_config
    from headscope.core.checkpoint import max_weight

    bound = max_weight(read_config(read_hf_config(ctx.tiny / "config.json"))[1])

    def to_bound(state: dict):
        for k, v in state.items():
            if v.dim() and v.abs().max() > 0 and not k.endswith(("wte.weight", "wpe.weight")):
                state[k] = v / v.abs().max() * (0.9 * bound)
    model = ctx.ckpt(edit_state(to_bound))
    monkeypatch.chdir(ctx.root)
    for argv in (["survey", model], ["head", model, "1.2"], ["atlas", model], ["kernels", model]):
        capsys.readouterr()
        assert main([*argv, "--json"]) == 0, capsys.readouterr().err
        json.loads(capsys.readouterr().out, parse_constant=lambda name: pytest.fail(f"{argv[0]}: {name}"))


def test_load_arguments_raise_value_error_with_expected_and_got(tiny_hf_dir):
    """headscope.load's arguments: a ValueError (headscope.BadArgument) naming what was expected and what came."""
    import headscope
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(tiny_hf_dir)
    for model in (tiny_hf_dir, hf):
        with pytest.raises(ValueError, match=r"dtype: expected one of float16, bfloat16, float32, float64 .*got 'float32' \(str\)"):
            headscope.load(model, dtype="float32")
        with pytest.raises(ValueError, match=r"dtype: expected .*got torch.int8"):     # it used to zero the weights
            headscope.load(model, dtype=torch.int8)
        with pytest.raises(ValueError, match="got meta"):
            headscope.load(model, device="meta")
    with pytest.raises(ValueError, match="tokenizer=: expected a transformers GPT-2 tokenizer .*got object"):
        headscope.load(hf, tokenizer=object())
    with pytest.raises(ValueError, match="tokenizer=: expected None, got object"):
        headscope.load(tiny_hf_dir, tokenizer=object())


# -- standard output closed, broken or full; the file-size limit; file names that are not UTF-8 -----


def _subprocess(argv: list[str], cwd: Path, **kw) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HEADSCOPE_TEST_"))}
    src = str(Path(__import__("headscope").__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.Popen([sys.executable, "-m", "headscope", *argv], cwd=cwd, env=env, stderr=subprocess.PIPE,
                            **kw)


def _one_line(p: subprocess.Popen, expect: str) -> None:
    err = p.stderr.read().decode("utf-8", "replace")
    p.stderr.close()
    assert p.wait(timeout=120) == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("headscope: error: ") and expect in err, err


def test_standard_output_closed_broken_or_full(ctx: Ctx):
    argv = ["info", ctx.model(), "--json"]
    _one_line(_subprocess(argv, ctx.root, stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1)),
              "standard output is closed")
    with open("/dev/full", "wb") as full:
        _one_line(_subprocess(argv, ctx.root, stdout=full), "cannot write to standard output: No space left on device")
    p = _subprocess(argv, ctx.root, stdout=subprocess.PIPE)
    p.stdout.close()                                    # the reader goes away before headscope prints
    _one_line(p, "broken pipe")


def test_file_size_limit_is_one_line_and_the_earlier_output_stays_whole(ctx: Ctx, monkeypatch):
    import resource

    monkeypatch.chdir(ctx.root)
    assert main(steer0(ctx)) == 0
    before = snapshot(ctx.root)
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))  # 256 KiB: no weights fit
    argv = ["steer", ctx.model(), "1.2", "--scale-negative", "0.5", "--out", steer_out(ctx)]
    _one_line(_subprocess(argv, ctx.root, stdout=subprocess.DEVNULL, preexec_fn=limit), "File too large")
    assert snapshot(ctx.root) == before


def test_a_file_name_that_is_not_utf8_gives_valid_utf8_json(ctx: Ctx):
    name = os.fsdecode(b"t\xff.txt")
    ctx.file(name, LONG[:200])
    p = _subprocess(["neuron", ctx.model(), "3", "--text", name, "--json"], ctx.root, stdout=subprocess.PIPE)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    doc = json.loads(out.decode("utf-8"))                 # strict: valid UTF-8
    assert doc["texts"][0]["name"].startswith("t\\udcff.txt")   # the undecodable byte spelled as its surrogate escape

