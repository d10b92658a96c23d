"""Issue 36, trust nothing on disk: what the bad-input matrix cannot say in one case — a wedged
directory that the next writer must recover, a cached stage edited by hand, a model whose
directory is re-planted while it is in memory."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from headscope.cli import main


def _steer(model: str, out: Path) -> list[str]:
    return ["steer", model, "1.2", "--scale-negative", "0", "--out", str(out)]


@pytest.mark.parametrize("replace", ["directory", "symlink", "missing"])
def test_a_killed_commit_whose_staging_lock_was_replaced_is_recovered(replace, tiny_hf_dir, tmp_path, capsys):
    """A killed commit whose staging lock became a directory, a link or nothing: the next writer finishes it
    (it used to skip it as a live writer's forever, so `info` said "half-committed" after every rerun)."""
    out = tmp_path / "steered"
    assert main(_steer(str(tiny_hf_dir), out)) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    staging = out / ".headscope-staging-0123456789ab"
    staging.mkdir()
    (staging / "extra.txt").write_text("committed by the killed run\n")
    (staging / ".headscope-commit.json").write_text(json.dumps({"files": ["extra.txt"], "stale": []}))
    if replace == "directory":
        (staging / ".headscope-lock").mkdir()
    elif replace == "symlink":
        os.symlink(victim, staging / ".headscope-lock")
    capsys.readouterr()
    assert main(["info", str(out)]) == 2
    assert "half-committed" in capsys.readouterr().err
    assert main(_steer(str(tiny_hf_dir), out)) == 0                 # the next writer rolls it forward
    assert not staging.exists()
    assert main(["info", str(out)]) == 0, capsys.readouterr().err
    assert victim.read_text() == "mine\n"
    manifest = json.loads((out / ".headscope-manifest.json").read_text())
    assert not (out / "extra.txt").exists() and "extra.txt" not in manifest["files"]   # rolled in, then stale
    assert "steering.json" in manifest["files"]


def _first_number(d):
    """(container, key) of the first int/float leaf of `d` (not a bool)."""
    items = d.items() if isinstance(d, dict) else enumerate(d)
    for k, v in items:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return d, k
        if isinstance(v, (dict, list)) and (found := _first_number(v)) is not None:
            return found
    return None


@pytest.mark.parametrize("edit", ["value changed", "data replaced"])
def test_a_report_stage_cache_edited_by_hand_is_recomputed(edit, tiny_hf_dir, tmp_path, capsys):
    """data/<stage>.json edited with its key kept: not reused (its sha256 is not the manifest's), recomputed —
    the report is byte-identical to a fresh one; it used to be reused (wrong numbers) or to raise a traceback."""
    argv = ["report", str(tiny_hf_dir), "--stages", "model", "--no-progress", "--json"]
    out = tmp_path / "rep"
    assert main([*argv, "--out", str(out)]) == 0
    fresh = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    doc = json.loads((out / "data/model.json").read_text())
    if edit == "value changed":
        box, k = _first_number(doc["data"])
        box[k] = box[k] + 7
    else:
        doc["data"] = {"surprise": [1, 2]}
    (out / "data/model.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
    run = json.loads(capsys.readouterr().out)
    assert run["stages"][0]["cached"] is False
    again = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert again == fresh
    assert main([*argv, "--out", str(out)]) == 0                     # unedited now: reused
    assert json.loads(capsys.readouterr().out)["stages"][0]["cached"] is True


@pytest.mark.parametrize("how", ["replaced", "rewritten in place"])
def test_a_model_in_memory_reads_only_the_checkpoint_it_loaded(how, tiny_hf_dir, tmp_path):
    """The directory re-planted while its Model is in memory: a later read of the weights, or the fingerprint,
    is refused in one line (it used to mix the new raw weights and fingerprint with the old config and caches)."""
    import headscope
    from headscope._errors import HeadscopeError
    from safetensors.torch import load_file, save_file

    d = tmp_path / "ckpt"
    shutil.copytree(tiny_hf_dir, d)
    model = headscope.load(d)
    state = load_file(str(d / "model.safetensors"))
    state = {k: v * 1.5 for k, v in state.items()}
    if how == "replaced":
        save_file(state, str(tmp_path / "new.safetensors"))
        os.replace(tmp_path / "new.safetensors", d / "model.safetensors")
    else:
        st = os.stat(d / "model.safetensors")
        save_file(state, str(d / "model.safetensors"))
        os.utime(d / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))     # even with its time kept
    with pytest.raises(HeadscopeError, match="changed after the model was loaded"):
        model.raw
    with pytest.raises(HeadscopeError, match="changed after the model was loaded"):
        model.fingerprint
    fresh = headscope.load(d)                                          # loading again reads the new checkpoint
    assert fresh.fingerprint != headscope.load(tiny_hf_dir).fingerprint


def test_load_of_a_model_on_the_meta_device_is_one_clear_error():
    """headscope.load of a transformers model whose weights are on the meta device: a HeadscopeError naming it
    (it used to be a raw NotImplementedError from copying a meta tensor)."""
    import headscope
    import torch
    from headscope._errors import HeadscopeError
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.device("meta"):
        hf = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=40, n_embd=12, n_layer=2, n_head=3, n_inner=20))
    with pytest.raises(HeadscopeError, match="on the meta device"):
        headscope.load(hf)


@pytest.mark.parametrize("family, key, prefix", [
    ("gpt2", "n_layer", "h.{}.attn.c_attn.weight"), ("gpt_neo", "num_layers", "transformer.h.{}.attn.attention.k_proj.weight"),
    ("gpt_neox", "num_hidden_layers", "gpt_neox.layers.{}.attention.dense.weight"),
    ("opt", "num_hidden_layers", "model.decoder.layers.{}.fc1.weight"),
    ("llama", "num_hidden_layers", "model.layers.{}.mlp.up_proj.weight"),
    ("qwen2", "num_hidden_layers", "model.layers.{}.self_attn.q_proj.bias")])
def test_a_layer_count_past_the_weights_is_refused_before_allocating(family, key, prefix):
    """Every family's layer count is checked against the layer indices the weight files hold (2³¹ − 1 layers used
    to reach gigabytes before any check)."""
    import types

    from headscope._errors import HeadscopeError
    from headscope.core.loading import check_layers_present

    source = types.SimpleNamespace(infos={prefix.format(i): ("float32", (2, 2)) for i in range(3)})
    check_layers_present({"model_type": family, key: 3}, source, "ckpt")
    with pytest.raises(HeadscopeError, match=f"config.json has {key} 2147483647, but .* hold 3 layers"):
        check_layers_present({"model_type": family, key: 2**31 - 1}, source, "ckpt")


def test_a_bos_falling_back_on_a_padding_row_is_said():
    """No BOS candidate in the vocabulary, no bos_token_id: the last id is prepended — a padding row past the
    tokenizer's vocabulary here — and the BOS record (shown by `info`) says so; it used to say nothing."""
    import types

    from headscope.core.bos import bos

    tok = types.SimpleNamespace(get_vocab=lambda: {"a": 0, "b": 1, "c": 2}, decode=lambda ids: f"<{ids[0]}>",
                                bos_token_id=None)
    padded = bos(tok, "llama", d_vocab=8)
    assert padded["id"] == 7 and padded["source"] == "last id" and padded["padding_row"] is True
    tok.get_vocab = lambda: {"a": 0, "b": 1, "<|endoftext|>": 2}
    assert bos(tok, "qwen2", d_vocab=8)["padding_row"] is False


def test_info_states_the_bos(tiny_hf_dir, capsys):
    assert main(["info", str(tiny_hf_dir)]) == 0
    line = [l for l in capsys.readouterr().out.splitlines() if l.startswith("bos")]
    assert line == ["bos          '<|endoftext|>' (id 50256, gpt2 convention)"]


def test_a_long_context_model_reads_long_samples_in_bounded_windows(tmp_path):
    """max_position_embeddings far above GPT-2's: texts are cut into windows of at most 2048 tokens by default
    (corpus.DEFAULT_WINDOW), and the report's sample stages read at most one such window per text — n_ctx 131072
    with a long --samples file used to ask for a 58.6 GB pattern."""
    import headscope
    import torch
    from headscope.corpus import DEFAULT_WINDOW, windows
    from headscope.maps.activations import activation_profile
    from headscope.maps.patterns import attention_summary
    from headscope.shipped import Text
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=3001, n_embd=12, n_layer=1, n_head=3,
                               n_inner=20)).save_pretrained(tmp_path / "long")
    from headscope.core.tokenizer import gpt2_bpe_files
    vocab, merges = gpt2_bpe_files()
    shutil.copyfile(vocab, tmp_path / "long" / "vocab.json")
    shutil.copyfile(merges, tmp_path / "long" / "merges.txt")
    model = headscope.load(tmp_path / "long")
    text = " ".join(["harbour", "town", "gulls", "quay"] * 700)                  # 2800 tokens
    assert max(len(w) for w in windows(model, [text])) == DEFAULT_WINDOW == 2048
    summary = attention_summary(model, [Text("long", text)], [0])
    assert summary.n_queries == DEFAULT_WINDOW - 1
    profile = activation_profile(model, [Text("long", text)], n_neurons=2)
    assert profile.n_tokens == DEFAULT_WINDOW - 1


def test_a_tokenizer_regex_that_backtracks_catastrophically_ends_in_headscope_error(tiny_hf_dir, tmp_path):
    """A pre-tokenizer regex ((a+)+$) that passes Onig's retry limit on the text: tokenizers panics; the run ends
    with exit 2 and a last line "headscope: error: …" and no Python traceback (it used to be a PanicException
    traceback). Only that line reaches stderr: the Rust panic's own three-line note, printed on fd 2 by the
    extension before Python sees the panic, is held back (it used to precede the line)."""
    import subprocess
    import sys

    from tokenizers import Regex, pre_tokenizers

    from headscope.core.tokenizer import load_tokenizer

    d = tmp_path / "ckpt"
    shutil.copytree(tiny_hf_dir, d)
    tok = load_tokenizer(d).backend_tokenizer
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("(a+)+$"), behavior="isolated")
    tok.save(str(d / "tokenizer.json"))
    (tmp_path / "t.txt").write_text("a" * 40 + "b\n")
    src = str(Path(__import__("headscope").__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": src, "RUST_BACKTRACE": "0"}
    r = subprocess.run([sys.executable, "-m", "headscope", "neuron", str(d), "3", "--text", str(tmp_path / "t.txt")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr == ("headscope: error: the tokenizer failed on this text (a panic in a Rust extension: Onig: Regex "
                        "search error: retry-limit-in-match over); a tokenizer.json whose pre-tokenizer regex "
                        "backtracks catastrophically does this — fix or replace that regex\n")
    ok = tmp_path / "ok.txt"
    ok.write_text("b" * 40 + "\n")                  # the same tokenizer on a text it handles: exit 0, stderr empty
    r = subprocess.run([sys.executable, "-m", "headscope", "neuron", str(d), "3", "--text", str(ok)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert (r.returncode, r.stderr) == (0, "")


def test_a_tokenizer_keeps_what_the_extension_prints_when_it_does_not_panic(tiny_hf_dir, capfd):
    """The panic note is held back only on a panic: anything else written on fd 2 during an encode comes through."""
    from headscope.core.tokenizer import _QuietPanics

    class Backend:
        def encode(self, text):
            os.write(2, b"a note from the extension\n")
            return [1, 2]
    assert _QuietPanics(Backend()).encode("x") == [1, 2]
    assert capfd.readouterr().err == "a note from the extension\n"




def test_a_reused_file_over_the_cap_is_never_read(tmp_path, monkeypatch):
    """OutputDir.verified: a file headscope hashed, since replaced by a 3 GiB (sparse) one, is refused from its size
    before a byte is read (a report's 3 GiB data/atlas.json used to be read whole, 5 GB); an edited file is refused
    by its hash; the file as written is returned."""
    from headscope._atomic import OutputDir

    with OutputDir(tmp_path / "out", "m.json") as odir:
        odir.write("m.json", "{}")
        odir.write("data/a.json", '{"key": 1}', record_hash=True)
    with OutputDir(tmp_path / "out", "m.json") as odir:
        assert odir.verified("data/a.json", 1 << 20) == b'{"key": 1}'
        (tmp_path / "out/data/a.json").write_text('{"key": 2}')
        assert odir.verified("data/a.json", 1 << 20) is None
        with open(tmp_path / "out/data/a.json", "wb") as f:
            f.truncate(3 << 30)
        reads = []
        real = os.read
        monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real(fd, n))
        assert odir.verified("data/a.json", 64 << 20) is None
        assert reads == []
        assert odir.verified("m.json", 1 << 20) is None                   # written without a hash: never "proven"
