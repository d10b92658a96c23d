"""Loading: local directories, the offline HF cache, no network, and one-line errors."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import headscope
from headscope.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, pattern):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("headscope: error: ")
    assert pattern in lines[0], lines[0]
    assert "Traceback" not in err


def fake_hub_cache(root: Path, repo_id: str, checkpoint: Path) -> Path:
    """Lay `checkpoint` out as huggingface_hub lays out its cache (refs/main → snapshot)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = root / "hub" / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap.mkdir(parents=True)
    blobs = repo / "blobs"
    blobs.mkdir()
    for f in checkpoint.iterdir():
        if f.name in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
            blob = blobs / f"blob-{f.name}"
            shutil.copyfile(f, blob)
            (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    return root


def test_local_path_makes_no_network_connection(tiny_hf_dir, no_network):
    model = headscope.load(tiny_hf_dir)
    assert model.source.startswith("local:")
    assert model.cfg.n_heads == 3


def offline_env(hf_home):
    env = dict(os.environ, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
    env.pop("HF_HUB_CACHE", None)
    env.pop("HUGGINGFACE_HUB_CACHE", None)
    return env


def test_hub_id_resolves_from_offline_cache(tiny_hf_dir, tmp_path):
    home = fake_hub_cache(tmp_path / "hf", "gpt2", tiny_hf_dir)
    r = subprocess.run([sys.executable, "-m", "headscope", "info", "gpt2", "--json"],
                       env=offline_env(home), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["source"] == "hub:gpt2"
    assert info["config"]["d_model"] == 12
    assert info["fingerprint"] == headscope.load(tiny_hf_dir).fingerprint


def test_unknown_hub_id_offline_is_one_line(tmp_path):
    (tmp_path / "hf").mkdir()
    r = subprocess.run([sys.executable, "-m", "headscope", "info", "gpt2-medium"],
                       env=offline_env(tmp_path / "hf"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert "not in the local Hugging Face cache" in r.stderr and "HF_HUB_OFFLINE=1" in r.stderr


def copy_ckpt(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_missing_config(tiny_hf_dir, tmp_path, capsys):
    d = copy_ckpt(tiny_hf_dir, tmp_path / "c")
    (d / "config.json").unlink()
    assert_one_line_error(*run_cli(capsys, "info", str(d))[::2], "missing config.json")


def test_missing_weights(tiny_hf_dir, tmp_path, capsys):
    d = copy_ckpt(tiny_hf_dir, tmp_path / "c")
    (d / "model.safetensors").unlink()
    assert_one_line_error(*run_cli(capsys, "info", str(d))[::2], "missing model.safetensors")


class _RunsCode:
    """Unpickling this calls open(MARKER, "w"): what a hostile pytorch_model.bin would do."""

    marker = ""

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_bin_that_runs_code_is_refused(tiny_hf_dir, tmp_path, capsys):
    d = copy_ckpt(tiny_hf_dir, tmp_path / "c")
    (d / "model.safetensors").unlink()
    _RunsCode.marker = str(tmp_path / "pwned")
    torch.save({"wte.weight": torch.zeros(1), "evil": _RunsCode()}, d / "pytorch_model.bin")
    assert_one_line_error(*run_cli(capsys, "info", str(d))[::2], "holds more than plain tensors and is refused")
    assert not (tmp_path / "pwned").exists()


def test_bin_with_a_foreign_tensor_is_refused(tiny_hf_dir, tmp_path, capsys):
    d = copy_ckpt(tiny_hf_dir, tmp_path / "c")
    (d / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(1)}, d / "pytorch_model.bin")
    assert_one_line_error(*run_cli(capsys, "info", str(d))[::2], "unexpected tensor 'x'")


def test_truncated_safetensors(tiny_hf_dir, tmp_path, capsys):
    d = copy_ckpt(tiny_hf_dir, tmp_path / "c")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert_one_line_error(*run_cli(capsys, "info", str(d))[::2], "truncated or corrupt")


def test_non_gpt2_config(tiny_hf_dir, tmp_path, capsys):
    d = copy_ckpt(tiny_hf_dir, tmp_path / "c")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "mamba"
    (d / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(*run_cli(capsys, "info", str(d))[::2], "model_type 'mamba'")


def test_config_shapes_disagree_with_weights(tiny_hf_dir, tmp_path, capsys):
    d = copy_ckpt(tiny_hf_dir, tmp_path / "c")
    cfg = json.loads((d / "config.json").read_text())
    cfg["n_inner"] = 24
    (d / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(*run_cli(capsys, "info", str(d))[::2], "expected [12, 24], got [12, 20]")


def test_tokenizer_vocab_must_match_W_E(tiny_hf_dir, tmp_path, capsys):
    d = copy_ckpt(tiny_hf_dir, tmp_path / "c")
    vocab = json.loads((d / "vocab.json").read_text())
    vocab = {k: v for k, v in vocab.items() if v < 50000}
    vocab["<|endoftext|>"] = 50000          # kept (without it the vocabulary is refused for that, issue 25)
    (d / "vocab.json").write_text(json.dumps(vocab))
    merges = (d / "merges.txt").read_text().splitlines()
    (d / "merges.txt").write_text("\n".join(merges[: 50000 - 256]) + "\n")
    assert_one_line_error(*run_cli(capsys, "info", str(d))[::2], "tokenizer vocabulary size")


def test_nan_weights_in_checkpoint(tiny_hf_dir, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    d = copy_ckpt(tiny_hf_dir, tmp_path / "c")
    state = load_file(str(d / "model.safetensors"))
    state["transformer.h.0.attn.c_attn.weight"][0, 0] = float("inf")
    save_file(state, str(d / "model.safetensors"))
    assert_one_line_error(*run_cli(capsys, "info", str(d))[::2], "NaN or Inf")


def test_cuda_without_cuda(tiny_hf_dir, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert_one_line_error(*run_cli(capsys, "info", str(tiny_hf_dir), "--device", "cuda")[::2], "CUDA is not available")


def test_info_json(tiny_hf_dir, capsys):
    code, out, _ = run_cli(capsys, "info", str(tiny_hf_dir), "--json")
    assert code == 0
    info = json.loads(out)
    assert info["config"]["d_head"] == 4 and info["tokenizer_vocab"] == 50257
    assert info["processing_default"] == headscope.Processing.default().to_dict()


def test_to_str_tokens_real_bpe(tiny_hf_dir):
    model = headscope.load(tiny_hf_dir)
    ids = model.to_tokens(" colour <script>")
    assert int(ids[0]) == 50256
    assert model.to_str_tokens(ids[1:]) == [" colour", " <", "script", ">"]
    assert headscope.escape_token("<script") == "&lt;script"


def test_loading_builds_the_vocabulary_dict_once(tiny_hf_dir, monkeypatch):
    """Loading (size and id checks, Config.vocab) builds the tokenizer's 50k-entry vocabulary dict
    once, and the BOS record once more: each build is a measurable part of a small command's start."""
    from headscope.core.tokenizer import Tokenizer

    calls = []
    real = Tokenizer.get_vocab
    monkeypatch.setattr(Tokenizer, "get_vocab", lambda self: calls.append(1) or real(self))
    model = headscope.load(tiny_hf_dir)
    assert isinstance(model.tokenizer, Tokenizer) and len(calls) == 1
    assert model.cfg.vocab == 50257
    assert model.bos == {"token": "<|endoftext|>", "id": 50256, "source": "gpt2 convention",
                         "prepended_by_tokenizer": False, "padding_row": False}
    assert len(calls) == 2
