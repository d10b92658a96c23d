"""testing.hub: checkpoints in the Hugging Face hub's exact layout (tiny, all-distinct dims).

n_layer=2, n_embd=24, n_head=3 (d_head 8), n_ctx=40, GPT-2's vocabulary (the real
tokenizer needs 50257 rows).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import headscope
from headscope import HeadscopeError, Processing
from headscope.testing import hub
from headscope.testing.hub import SIZES, cached_snapshot, hub_state_keys, write_hub_cache, write_hub_checkpoint

TINY = dict(n_layer=2, n_embd=24, n_head=3, n_ctx=40)
TOKENS = torch.tensor([[50256, 464, 3290, 286, 262, 3641, 318, 4171]])


def hf_load(directory):
    from transformers import GPT2LMHeadModel

    model, info = GPT2LMHeadModel.from_pretrained(directory, output_loading_info=True, attn_implementation="eager")
    return model.eval(), {k: set(v) for k, v in info.items() if k != "error_msgs"}


def read_all(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint directory, whatever its layout."""
    out = {}
    for f in sorted(directory.glob("*.safetensors")):
        out.update(load_file(str(f)))
    if not out and (directory / "pytorch_model.bin").exists():
        out = torch.load(directory / "pytorch_model.bin", weights_only=True)
    return out


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return write_hub_checkpoint(tmp_path_factory.mktemp("hub") / "plain", **TINY)


# -- the files ------------------------------------------------------------------------


def test_key_set_is_the_hubs(plain):
    state = load_file(str(plain / "model.safetensors"))
    assert set(state) == hub_state_keys(2)
    assert not any(k.startswith("transformer.") for k in state) and "lm_head.weight" not in state
    expected = {"wte.weight": (50257, 24), "wpe.weight": (40, 24), "ln_f.weight": (24,), "ln_f.bias": (24,)}
    for i in range(2):
        p = f"h.{i}."
        expected |= {
            p + "ln_1.weight": (24,), p + "ln_1.bias": (24,), p + "ln_2.weight": (24,), p + "ln_2.bias": (24,),
            p + "attn.bias": (1, 1, 40, 40),
            p + "attn.c_attn.weight": (24, 72), p + "attn.c_attn.bias": (72,),
            p + "attn.c_proj.weight": (24, 24), p + "attn.c_proj.bias": (24,),
            p + "mlp.c_fc.weight": (24, 96), p + "mlp.c_fc.bias": (96,),
            p + "mlp.c_proj.weight": (96, 24), p + "mlp.c_proj.bias": (24,),
        }
    assert {k: tuple(v.shape) for k, v in state.items()} == expected
    mask = state["h.1.attn.bias"]
    assert mask.dtype == torch.float32 and torch.equal(mask[0, 0], torch.tril(torch.ones(40, 40)))
    assert all(v.dtype == torch.float32 for v in state.values())
    with safe_open(str(plain / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}


def test_config_and_side_files_are_the_hubs(plain):
    cfg = json.loads((plain / "config.json").read_text())
    assert cfg == {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 40, "n_embd": 24, "n_head": 3,
        "n_layer": 2, "n_positions": 40, "resid_pdrop": 0.1, "summary_activation": None,
        "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
        "summary_use_proj": True, "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "vocab_size": 50257,
    }
    assert sorted(p.name for p in plain.iterdir()) == [  # + headscope's manifest (the output rule)
        ".headscope-manifest.json", "config.json", "generation_config.json", "merges.txt", "model.safetensors",
        "tokenizer.json", "tokenizer_config.json", "vocab.json",
    ]
    gen = json.loads((plain / "generation_config.json").read_text())
    assert gen["bos_token_id"] == gen["eos_token_id"] == 50256
    from headscope.core.tokenizer import gpt2_bpe_files, load_tokenizer

    vocab, merges = gpt2_bpe_files()
    assert (plain / "vocab.json").read_bytes() == vocab.read_bytes()
    assert (plain / "merges.txt").read_bytes() == merges.read_bytes()
    tok = load_tokenizer(plain)  # reads tokenizer.json
    assert len(tok) == 50257 and tok.encode(" the colour") == [262, 9568]


def test_size_presets_config_extras_and_no_tokenizer(tmp_path):
    out = write_hub_checkpoint(tmp_path / "d", size="distilgpt2", n_layer=1, n_embd=24, n_head=3, n_ctx=40,
                               tokenizer=False, config_overrides={"scale_attn_by_inverse_layer_idx": True})
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["id2label"] == {"0": "LABEL_0"} and cfg["label2id"] == {"LABEL_0": 0} and cfg["_num_labels"] == 1
    assert cfg["n_layer"] == 1 and cfg["scale_attn_by_inverse_layer_idx"] is True
    assert not any(p.name.startswith(("tokenizer", "vocab", "merges")) for p in out.iterdir())


def test_sizes_have_the_published_parameter_counts():
    assert {k: (v["n_layer"], v["n_embd"], v["n_head"]) for k, v in SIZES.items()} == {
        "distilgpt2": (6, 768, 12), "gpt2": (12, 768, 12), "gpt2-medium": (24, 1024, 16),
        "gpt2-large": (36, 1280, 20), "gpt2-xl": (48, 1600, 25),
    }
    assert SIZES["gpt2"]["repo_id"] == "openai-community/gpt2" and SIZES["distilgpt2"]["repo_id"] == "distilbert/distilgpt2"

    def n_params(s):
        specs = hub._specs(s["n_layer"], s["n_embd"], s["n_ctx"], s["vocab_size"], 4 * s["n_embd"], torch.float32,
                           untied_lm_head=False, mask_buffers=True, masked_bias=False)
        return sum(math.prod(x.shape) for x in specs if not x.buffer)

    assert n_params(SIZES["gpt2"]) == 124_439_808
    assert n_params(SIZES["gpt2-xl"]) == 1_557_611_200


def test_untied_masked_bias_and_prefix_keys(tmp_path):
    out = write_hub_checkpoint(tmp_path / "u", **TINY, untied_lm_head=True, masked_bias=True, tokenizer=False)
    state = load_file(str(out / "model.safetensors"))
    assert set(state) == hub_state_keys(2, untied_lm_head=True, masked_bias=True)
    assert state["lm_head.weight"].shape == (50257, 24) and not torch.equal(state["lm_head.weight"], state["wte.weight"])
    assert state["h.0.attn.masked_bias"].shape == () and float(state["h.0.attn.masked_bias"]) == -1e4
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False
    out = write_hub_checkpoint(tmp_path / "p", **TINY, key_prefix="transformer.", mask_buffers=False, tokenizer=False)
    keys = set(load_file(str(out / "model.safetensors")))
    assert keys == hub_state_keys(2, key_prefix="transformer.", mask_buffers=False)
    assert "transformer.wte.weight" in keys and not any(".attn.bias" in k for k in keys)


# -- transformers loads every layout --------------------------------------------------


@pytest.mark.parametrize("layout, dtype", [
    ("safetensors", torch.float32), ("sharded", torch.float32), ("bin", torch.float32),
    ("safetensors", torch.float16), ("sharded", torch.bfloat16), ("safetensors+bin", torch.float32),
], ids=["safetensors", "sharded", "bin", "float16", "sharded-bfloat16", "safetensors+bin"])
def test_transformers_loads_it(tmp_path, layout, dtype):
    out = write_hub_checkpoint(tmp_path / "c", **TINY, layout=layout, dtype=dtype, shard_size=1_500_000, tokenizer=False)
    names = {p.name for p in out.iterdir()}
    if layout == "sharded":
        index = json.loads((out / "model.safetensors.index.json").read_text())
        shards = sorted(n for n in names if n.startswith("model-"))
        assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
        assert set(index["weight_map"].values()) == set(shards)
        assert set(index["weight_map"]) == hub_state_keys(2)
        assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in read_all(out).values())
        assert "model.safetensors" not in names
    if layout == "bin":
        assert not any(n.endswith(".safetensors") for n in names)
        state = torch.load(out / "pytorch_model.bin", weights_only=True)
        assert type(state) is dict and set(state) == hub_state_keys(2)
    model, info = hf_load(out)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    state = read_all(out)
    assert state["h.1.mlp.c_fc.weight"].dtype == dtype
    torch.testing.assert_close(model.transformer.h[1].mlp.c_fc.weight.to(dtype), state["h.1.mlp.c_fc.weight"], rtol=0, atol=0)
    torch.testing.assert_close(model.transformer.wte.weight.to(dtype), state["wte.weight"], rtol=0, atol=0)
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()  # tied
    with torch.no_grad():
        logits = model(TOKENS).logits
    assert logits.shape == (1, 8, 50257) and bool(torch.isfinite(logits).all())


def test_transformers_loads_untied_masked_bias_and_config_overrides(tmp_path):
    out = write_hub_checkpoint(tmp_path / "c", **TINY, untied_lm_head=True, masked_bias=True, tokenizer=False,
                               config_overrides={"scale_attn_by_inverse_layer_idx": True, "reorder_and_upcast_attn": True})
    model, info = hf_load(out)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    # transformers 5 keeps attn.bias on its ignore list but not the old masked_bias buffer
    assert info["unexpected_keys"] <= {"h.0.attn.masked_bias", "h.1.attn.masked_bias"}
    assert model.config.scale_attn_by_inverse_layer_idx and model.config.reorder_and_upcast_attn
    state = load_file(str(out / "model.safetensors"))
    assert model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr()
    torch.testing.assert_close(model.lm_head.weight, state["lm_head.weight"], rtol=0, atol=0)
    with torch.no_grad():
        assert bool(torch.isfinite(model(TOKENS).logits).all())


# -- headscope.load (plain layout only) -----------------------------------------------


def test_headscope_loads_the_plain_layout(plain):
    model = headscope.load(plain)
    state = load_file(str(plain / "model.safetensors"))
    assert (model.cfg.n_layers, model.cfg.d_model, model.cfg.n_heads, model.cfg.d_mlp, model.cfg.n_ctx) == (2, 24, 3, 96, 40)
    assert torch.equal(model.raw.W_E, state["wte.weight"])
    assert torch.equal(model.raw.blocks[1].W_in, state["h.1.mlp.c_fc.weight"])
    hf, _ = hf_load(plain)
    with torch.no_grad():
        ref = hf(TOKENS).logits
    logits = headscope.run_with_cache(model.weights(Processing.none()), TOKENS, names=["logits"]).logits
    torch.testing.assert_close(logits, ref, rtol=1e-4, atol=1e-4)  # logits have std ≈ 6 here


@pytest.mark.parametrize("options", [{"dtype": torch.float16}, {"untied_lm_head": True, "masked_bias": True}],
                         ids=["float16", "untied-masked_bias"])
def test_headscope_loads_plain_layout_variants(tmp_path, options):
    out = write_hub_checkpoint(tmp_path / "c", **TINY, **options)
    model = headscope.load(out)
    state = load_file(str(out / "model.safetensors"))
    assert model.raw.W_E.dtype == torch.float32 and torch.equal(model.raw.W_E, state["wte.weight"].float())
    if "lm_head.weight" in state:
        assert torch.equal(model.raw.W_U, state["lm_head.weight"].T)
    w = model.weights()
    assert bool(torch.isfinite(headscope.run_with_cache(w, TOKENS, names=["logits"]).logits).all())


# -- determinism and the hand-written safetensors ---------------------------------------


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path, plain):
    again = write_hub_checkpoint(tmp_path / "again", **TINY)
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (again / name).read_bytes() == (plain / name).read_bytes(), name
    other = write_hub_checkpoint(tmp_path / "other", **TINY, seed=1, tokenizer=False)
    a, b = load_file(str(plain / "model.safetensors")), load_file(str(other / "model.safetensors"))
    assert not torch.equal(a["h.0.attn.c_attn.weight"], b["h.0.attn.c_attn.weight"])
    assert torch.equal(a["h.0.attn.bias"], b["h.0.attn.bias"])
    bins = [write_hub_checkpoint(tmp_path / f"bin{i}", **TINY, layout="bin", tokenizer=False) for i in range(2)]
    assert (bins[0] / "pytorch_model.bin").read_bytes() == (bins[1] / "pytorch_model.bin").read_bytes()


def test_values_do_not_depend_on_layout(tmp_path, plain):
    ref = load_file(str(plain / "model.safetensors"))
    sharded = write_hub_checkpoint(tmp_path / "s", **TINY, layout="sharded", shard_size="1MB", tokenizer=False)
    binary = write_hub_checkpoint(tmp_path / "b", **TINY, layout="bin", tokenizer=False)
    prefixed = write_hub_checkpoint(tmp_path / "p", **TINY, key_prefix="transformer.", tokenizer=False)
    for other in (read_all(sharded), read_all(binary),
                  {k.removeprefix("transformer."): v for k, v in read_all(prefixed).items()}):
        assert set(other) == set(ref) and all(torch.equal(other[k], ref[k]) for k in ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_hand_written_safetensors_equal_save_file(tmp_path, dtype):
    out = write_hub_checkpoint(tmp_path / "c", n_layer=1, n_embd=24, n_head=3, n_ctx=40, dtype=dtype,
                               masked_bias=True, untied_lm_head=True, tokenizer=False)
    ours = load_file(str(out / "model.safetensors"))
    assert {v.dtype for k, v in ours.items() if k.endswith((".attn.bias", "masked_bias"))} == {torch.float32}
    assert {v.dtype for k, v in ours.items() if k.endswith(".weight")} == {dtype}
    save_file(ours, str(tmp_path / "ref.safetensors"), metadata={"format": "pt"})
    assert (out / "model.safetensors").read_bytes() == (tmp_path / "ref.safetensors").read_bytes()
    theirs = load_file(str(tmp_path / "ref.safetensors"))
    assert set(theirs) == set(ours) and all(torch.equal(theirs[k], ours[k]) for k in ours)


# -- scales -----------------------------------------------------------------------------


def test_realistic_scales(plain):
    s = load_file(str(plain / "model.safetensors"))
    norms = s["wte.weight"].norm(dim=1)
    assert 3.0 < float(norms.median()) < 4.2
    assert int((norms > 2 * norms.median()).sum()) >= 5                      # a few outlier tokens
    pos = s["wpe.weight"].norm(dim=1)
    assert float(pos[0]) > 3 * float(pos[1:].median()) and float(pos[1:].median()) < 2
    assert float(s["h.0.ln_1.weight"].mean()) < 0.5 < float(s["h.1.ln_1.weight"].mean())
    assert float(s["h.0.mlp.c_fc.bias"].mean()) < 0
    for k, v in s.items():
        if k.endswith("bias") and not k.endswith(".attn.bias"):
            assert float(v.std()) < 0.15, k
    # at GPT-2 small's width, entries of W_E have std ≈ 0.11-0.14 and matrices ≈ 0.02-0.2
    shape = hub._Shape(n_layer=12, d=768, n_head=12, n_ctx=1024, vocab=50257, d_mlp=3072)
    wte = hub._draw(hub._Spec("wte.weight", (50257, 768), torch.float32), shape, 0)
    assert 0.11 < float(wte.std()) < 0.14 and 3.0 < float(wte.norm(dim=1).median()) < 4.2
    del wte
    for key, sh in (("h.3.attn.c_attn.weight", (768, 2304)), ("h.3.mlp.c_proj.weight", (3072, 768))):
        W = hub._draw(hub._Spec(key, sh, torch.float32), shape, 0)
        assert 0.02 < float(W.std()) < 0.2, key


def test_scales_dict_and_callable(tmp_path, plain):
    ref = load_file(str(plain / "model.safetensors"))
    out = write_hub_checkpoint(tmp_path / "d", **TINY, tokenizer=False,
                               scales={"h.*.mlp.c_fc.weight": 10.0, "h.1.*": 0.5, "wte.weight": 1e-3})
    got = load_file(str(out / "model.safetensors"))
    assert torch.equal(got["h.0.mlp.c_fc.weight"], ref["h.0.mlp.c_fc.weight"] * 10.0)
    assert torch.equal(got["h.1.mlp.c_fc.weight"], ref["h.1.mlp.c_fc.weight"] * 10.0 * 0.5)
    assert torch.equal(got["h.1.ln_2.bias"], ref["h.1.ln_2.bias"] * 0.5)
    assert torch.equal(got["wte.weight"], ref["wte.weight"] * 1e-3)
    assert torch.equal(got["h.1.attn.bias"], ref["h.1.attn.bias"])          # masks are never scaled

    g = torch.Generator().manual_seed(7)
    factors = {k: 10 ** float(torch.empty(()).uniform_(-3, 3, generator=g)) for k in sorted(ref)}
    out = write_hub_checkpoint(tmp_path / "c", **TINY, tokenizer=False, scales=factors.__getitem__)
    got = load_file(str(out / "model.safetensors"))
    for k in ref:
        expected = ref[k] if k.endswith(".attn.bias") else ref[k] * factors[k]
        assert torch.equal(got[k], expected), k
    model, info = hf_load(out)
    assert not info["missing_keys"] and not info["unexpected_keys"]


@pytest.mark.parametrize("kwargs, message", [
    ({"scales": {"h.9.*": 2.0}}, "matches no weight"),
    ({"scales": {"h.0.attn.bias": 2.0}}, "matches no weight"),
    ({"scales": {"wpe.weight": float("inf")}}, "finite"),
    ({"scales": lambda k: "x"}, "not a number"),
    ({"scales": {"wte.weight": 1e6}, "dtype": torch.float16}, "overflows float16"),
    ({"n_embd": 25}, "not divisible"),
    ({"layout": "gguf"}, "layout"),
    ({"dtype": torch.float64}, "dtype"),
    ({"shard_size": "lots"}, "shard_size"),
    ({"key_prefix": "model."}, "key_prefix"),
])
def test_bad_options_are_one_line_errors(tmp_path, kwargs, message):
    with pytest.raises(HeadscopeError, match=message) as e:
        write_hub_checkpoint(tmp_path / "c", **{**TINY, **kwargs}, tokenizer=False)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "c").exists()


def test_refuses_a_foreign_directory(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(HeadscopeError, match="already holds other files"):
        write_hub_checkpoint(tmp_path / "c", **TINY, tokenizer=False)
    assert (tmp_path / "c" / "notes.txt").read_text() == "mine"
    with pytest.raises(HeadscopeError, match="n_layer"):
        write_hub_checkpoint(tmp_path / "d", n_embd=24, n_head=3)


# -- the Hugging Face cache -------------------------------------------------------------

_RESOLVE = r"""
import json, sys
from huggingface_hub import hf_hub_download
repo = sys.argv[1]
out = {rev: {f: hf_hub_download(repo, f, revision=rev) for f in ("config.json", "model.safetensors", "tokenizer.json")}
       for rev in ("main", "checkpoint-400000")}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hf") / "hub"
    snap = write_hub_cache(cache, "openai-community/gpt2", revision_branches=["checkpoint-400000"], **TINY)
    return cache, snap


def offline_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {**env, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path), **extra}


def test_hf_cache_layout(hub_cache):
    cache, snap = hub_cache
    repo = cache / "models--openai-community--gpt2"
    main = (repo / "refs" / "main").read_text()
    branch = (repo / "refs" / "checkpoint-400000").read_text()
    assert len(main) == len(branch) == 40 and main != branch and all(c in "0123456789abcdef" for c in main + branch)
    assert snap == repo / "snapshots" / main == cached_snapshot(cache, "openai-community/gpt2")
    assert cached_snapshot(cache, "openai-community/gpt2", "checkpoint-400000") == repo / "snapshots" / branch
    link = snap / "model.safetensors"
    assert link.is_symlink() and os.readlink(link).startswith(os.path.join("..", "..", "blobs", ""))
    import hashlib

    data = link.read_bytes()
    assert link.resolve().name == hashlib.sha256(data).hexdigest()                 # LFS file: sha256
    cfg = (snap / "config.json").read_bytes()
    assert (snap / "config.json").resolve().name == hashlib.sha1(b"blob %d\0" % len(cfg) + cfg).hexdigest()  # git blob
    # files shared by both revisions are stored once
    assert len(list((repo / "blobs").iterdir())) == 7 + 1


def test_hf_hub_download_resolves_offline(hub_cache):
    cache, snap = hub_cache
    run = subprocess.run([sys.executable, "-c", _RESOLVE, "openai-community/gpt2"], capture_output=True, text=True,
                         env=offline_env(HF_HUB_CACHE=str(cache)), timeout=120)
    assert run.returncode == 0, run.stderr
    paths = json.loads(run.stdout)
    assert Path(paths["main"]["model.safetensors"]) == snap / "model.safetensors"
    main = load_file(paths["main"]["model.safetensors"])
    branch = load_file(paths["checkpoint-400000"]["model.safetensors"])
    assert set(main) == set(branch) and not torch.equal(main["wte.weight"], branch["wte.weight"])
    assert Path(paths["main"]["config.json"]).read_bytes() == Path(paths["checkpoint-400000"]["config.json"]).read_bytes()
    # HF_HOME works too (the cache is <HF_HOME>/hub)
    run = subprocess.run([sys.executable, "-c", _RESOLVE, "openai-community/gpt2"], capture_output=True, text=True,
                         env=offline_env(HF_HOME=str(cache.parent)), timeout=120)
    assert run.returncode == 0, run.stderr


def test_hf_cache_copies_branch_overrides_and_headscope_offline(tmp_path):
    cache = tmp_path / "hub"
    snap = write_hub_cache(cache, "gpt2", symlinks=False, n_layer=1, n_embd=24, n_head=3, n_ctx=40,
                           revision_branches={"step-1": {"seed": 0, "dtype": torch.float16}})
    assert snap.parent.parent.name == "models--gpt2" and not (snap / "model.safetensors").is_symlink()
    other = cached_snapshot(cache, "gpt2", "step-1")
    a, b = load_file(str(snap / "model.safetensors")), load_file(str(other / "model.safetensors"))
    assert b["wte.weight"].dtype == torch.float16 and torch.equal(b["wte.weight"], a["wte.weight"].half())
    code = "import headscope; m = headscope.load('gpt2'); print(m.source, m.cfg.n_layers, m.cfg.d_model)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=offline_env(HF_HUB_CACHE=str(cache)), timeout=180)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["hub:gpt2", "1", "24"]


def test_hf_cache_bad_input(tmp_path):
    with pytest.raises(HeadscopeError, match="not one of the hub sizes"):
        write_hub_cache(tmp_path, "someone/gpt-j")
    with pytest.raises(HeadscopeError, match="'main' is always written"):
        write_hub_cache(tmp_path, "gpt2", revision_branches=["main"], **TINY)
    with pytest.raises(HeadscopeError, match="no revision"):
        cached_snapshot(tmp_path, "gpt2", "nope")
