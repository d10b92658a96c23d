"""Every checkpoint layout the hub uses, loaded exactly: headscope vs the stored tensors and vs
transformers' GPT2LMHeadModel (eager attention), offline from an HF cache, at revisions.

Tiny all-distinct shapes: n_layer 3, n_head 4, d_head 5, d_model 20, d_mlp 28, n_ctx 24,
GPT-2's vocabulary (the real tokenizer needs 50257 rows).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2LMHeadModel

import headscope
from headscope import Processing
from headscope.testing.hub import cached_snapshot, write_hub_cache, write_hub_checkpoint
from headscope.core.families import gpt2 as gpt2_family

TINY = dict(n_layer=3, n_embd=20, n_head=4, n_ctx=24, n_inner=28)
SRC = str(Path(__file__).resolve().parents[2] / "src")


def tokens(seed: int = 0, batch: int = 2, n: int = 24) -> torch.Tensor:
    return torch.randint(0, 50257, (batch, n), generator=torch.Generator().manual_seed(seed))


def stored(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint directory as stored, whatever its layout."""
    out = {}
    for f in sorted(directory.glob("*.safetensors")):
        out.update(load_file(str(f)))
    if not out:
        out = torch.load(directory / "pytorch_model.bin", weights_only=True)
    return {k.removeprefix("transformer."): v for k, v in out.items()}


def hf_model(directory, dtype=torch.float32):
    # HF's reorder_and_upcast_attn path only runs below float64 (it insists on float32 scores);
    # in float64 the plain path is the same maths
    extra = {"reorder_and_upcast_attn": False} if dtype == torch.float64 else {}
    return GPT2LMHeadModel.from_pretrained(directory, attn_implementation="eager", dtype=dtype, **extra).eval()


def compare_with_hf(model, directory, toks, processing=Processing.none()) -> None:
    """Logits (log-probabilities once processed) and every layer's attention pattern equal HF's
    float32 ones to float32 tolerance: within 4× (+1e-6) HF's own float32 rounding error,
    measured against HF run in float64 on the same weights (both stay ≤ 1e-4 here, with
    logits of magnitude ~100)."""
    ref = {}
    for dtype in (torch.float32, torch.float64):
        with torch.no_grad():
            out = hf_model(directory, dtype)(toks, output_attentions=True)
        ref[dtype] = [out.logits.log_softmax(-1) if processing != Processing.none() else out.logits,
                      *out.attentions]
    c = headscope.run_with_cache(model.weights(processing), toks, names=["logits", "blocks.*.attn.hook_pattern"])
    got = [c.logits.log_softmax(-1) if processing != Processing.none() else c.logits,
           *(c[f"blocks.{l}.attn.hook_pattern"] for l in range(model.cfg.n_layers))]
    for i, (g, r32, r64) in enumerate(zip(got, ref[torch.float32], ref[torch.float64])):
        hf_error = float((r32.double() - r64).abs().max())
        torch.testing.assert_close(g, r32, atol=4 * hf_error + 1e-6, rtol=0,
                                   msg=lambda m: f"{'logits' if i == 0 else f'pattern of layer {i - 1}'}: {m}")


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def legacy_bin(directory: Path) -> None:
    """Rewrite pytorch_model.bin in torch's pre-1.6 (non-zip) format."""
    state = torch.load(directory / "pytorch_model.bin", weights_only=True)
    torch.save(state, directory / "pytorch_model.bin", _use_new_zipfile_serialization=False)


# -- every layout and dtype ---------------------------------------------------------------

LAYOUTS = [
    ("safetensors", torch.float32), ("safetensors", torch.float16), ("safetensors", torch.bfloat16),
    ("sharded", torch.float32), ("sharded", torch.bfloat16), ("bin", torch.float32), ("bin", torch.float16),
    ("legacy-bin", torch.float32), ("safetensors+bin", torch.float32),
]


@pytest.mark.parametrize("layout, dtype", LAYOUTS, ids=[f"{l}-{str(d)[6:]}" for l, d in LAYOUTS])
def test_every_layout_and_dtype_loads_exactly(tmp_path, layout, dtype):
    out = write_hub_checkpoint(tmp_path / "c", **TINY, layout=layout.removeprefix("legacy-"), dtype=dtype,
                               shard_size=1_500_000, seed=3)
    if layout == "legacy-bin":
        legacy_bin(out)
    model = headscope.load(out)
    assert model.checkpoint.layout == {"legacy-bin": "bin", "safetensors+bin": "safetensors"}.get(layout, layout)
    s = stored(out)
    assert s["h.1.mlp.c_fc.weight"].dtype == dtype
    # raw weights are the stored ones, cast exactly to float32
    raw = model.raw
    assert raw.W_E.dtype == torch.float32 and torch.equal(raw.W_E, s["wte.weight"].float())
    assert torch.equal(raw.blocks[2].W_in, s["h.2.mlp.c_fc.weight"].float())
    W_K = s["h.1.attn.c_attn.weight"].float()[:, 20:40].reshape(20, 4, 5).permute(1, 0, 2)      # [d h*e] → [h d e]
    assert torch.equal(raw.blocks[1].W_K, W_K)
    assert raw.tied and raw.W_U.data_ptr() == raw.W_E.data_ptr()                              # a view, not a copy
    # fingerprint: the one weight file's sha256; for shards, the sha256 of their sha256sum lines
    if layout == "sharded":
        shards = sorted(out.glob("model-*.safetensors"))
        assert len(shards) > 1
        lines = "".join(f"{sha256(p)}  {p.name}\n" for p in shards)
        assert model.fingerprint == hashlib.sha256(lines.encode()).hexdigest()
    else:
        weights_file = "pytorch_model.bin" if "bin" in layout and layout != "safetensors+bin" else "model.safetensors"
        assert model.fingerprint == sha256(out / weights_file)
    # writing it back streams tensor by tensor from whatever layout it came from: save_file's bytes
    saved = model.save(tmp_path / "saved")
    save_file(headscope.to_hf_state_dict(raw), str(tmp_path / "ref.safetensors"), metadata={"format": "pt"})
    assert (saved / "model.safetensors").read_bytes() == (tmp_path / "ref.safetensors").read_bytes()
    compare_with_hf(model, out, tokens(1))  # transformers casts half-precision files to float32 too
    compare_with_hf(model, out, tokens(2), Processing.default())


def test_same_weights_same_analysis_whatever_the_layout(tmp_path):
    """Processed weights are identical bit for bit across layouts (same seed, float32)."""
    ref = headscope.load(write_hub_checkpoint(tmp_path / "a", **TINY, seed=5)).weights()
    for layout in ("sharded", "bin"):
        w = headscope.load(write_hub_checkpoint(tmp_path / layout, **TINY, seed=5, layout=layout,
                                                shard_size="1MB")).weights()
        for (name, a), (_, b) in zip(ref.named_tensors(), w.named_tensors()):
            assert torch.equal(a, b), (layout, name)


# -- attention options: exact against transformers -----------------------------------------

OPTIONS = [{"scale_attn_by_inverse_layer_idx": True}, {"reorder_and_upcast_attn": True},
           {"scale_attn_by_inverse_layer_idx": True, "reorder_and_upcast_attn": True}]


@pytest.mark.parametrize("options", OPTIONS, ids=["inverse_layer_idx", "reorder_and_upcast", "both"])
def test_attention_options_exact_against_transformers(tmp_path, options):
    out = write_hub_checkpoint(tmp_path / "c", **TINY, config_overrides=options, scales={"h.*.attn.c_attn.weight": 4.0})
    model = headscope.load(out)
    hf = hf_model(out)
    for k, v in options.items():
        assert getattr(hf.config, k) is v and getattr(model.cfg, k) is v
    compare_with_hf(model, out, tokens(3))
    compare_with_hf(model, out, tokens(4), Processing.default())
    assert gpt2_family.hf_config(model.cfg)["reorder_and_upcast_attn"] is options.get("reorder_and_upcast_attn", False)
    if options.get("scale_attn_by_inverse_layer_idx"):
        # the option matters: layer 1 (whose input layer 0 leaves unchanged) divides its scores by 2·√5, not √5
        plain = headscope.load(write_hub_checkpoint(tmp_path / "p", **TINY, scales={"h.*.attn.c_attn.weight": 4.0}))
        a = headscope.run_with_cache(model.raw, tokens(5), names=["blocks.1.attn.hook_attn_scores"])
        b = headscope.run_with_cache(plain.raw, tokens(5), names=["blocks.1.attn.hook_attn_scores"])
        finite = torch.isfinite(b["blocks.1.attn.hook_attn_scores"])
        torch.testing.assert_close(a["blocks.1.attn.hook_attn_scores"][finite] * 2,
                                   b["blocks.1.attn.hook_attn_scores"][finite])


@pytest.mark.parametrize("dtype, atol", [(torch.float16, 2e-4), (torch.bfloat16, 1e-3)], ids=["float16", "bfloat16"])
def test_reorder_and_upcast_attn_upcasts_half_precision(tmp_path, dtype, atol):
    """With the option, scores and softmax run in float32 as in HF: layer 0 (identical inputs)
    matches HF's half-precision pattern to float32 rounding of the pattern, which the
    half-precision softmax does not (its error is ≥ 5× these tolerances here)."""
    out = write_hub_checkpoint(tmp_path / "c", **TINY, config_overrides={"reorder_and_upcast_attn": True})
    hf = hf_model(out, dtype)
    with torch.no_grad():
        ref = hf(tokens(6), output_attentions=True).attentions[0]
    model = headscope.load(out, dtype=dtype)
    c = headscope.run_with_cache(model.raw, tokens(6), names=["blocks.0.attn.hook_attn_scores",
                                                              "blocks.0.attn.hook_pattern"])
    assert c["blocks.0.attn.hook_attn_scores"].dtype == torch.float32 and c["blocks.0.attn.hook_pattern"].dtype == dtype
    torch.testing.assert_close(c["blocks.0.attn.hook_pattern"], ref, atol=atol, rtol=0)


# -- the HF cache, offline, at revisions ----------------------------------------------------

_LOAD_REVISIONS = r"""
import json, sys, headscope
out = {}
for rev in (None, "step-1", "step-2"):
    m = headscope.load("openai-community/gpt2", revision=rev)
    out[str(rev)] = {"fingerprint": m.fingerprint, "source": m.source, "layout": m.checkpoint.layout,
                     "directory": str(m.directory), "W_E": m.raw.W_E[7, :4].tolist(),
                     "dtype": str(m.raw.dtype)}
print(json.dumps(out))
"""


def offline_env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    return {**env, "HF_HUB_OFFLINE": "1", "PYTHONPATH": SRC, **extra}


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("hf") / "hub"
    write_hub_cache(cache, "openai-community/gpt2", **TINY, revision_branches={
        "step-1": {"layout": "sharded", "shard_size": "1MB"},
        "step-2": {"layout": "bin", "dtype": torch.float16},
    })
    return cache


def test_revisions_load_offline_in_every_layout(hub_cache):
    r = subprocess.run([sys.executable, "-c", _LOAD_REVISIONS], capture_output=True, text=True, timeout=300,
                       env=offline_env(HF_HUB_CACHE=str(hub_cache)))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    repo = "openai-community/gpt2"
    snaps = {rev: cached_snapshot(hub_cache, repo, rev) for rev in ("main", "step-1", "step-2")}
    assert got["None"]["directory"] == str(snaps["main"]) and got["None"]["source"] == f"hub:{repo}"
    assert got["step-1"]["source"] == f"hub:{repo}@step-1" and got["step-1"]["layout"] == "sharded"
    assert got["step-2"]["layout"] == "bin" and got["step-2"]["dtype"] == "torch.float32"
    assert got["None"]["fingerprint"] == sha256(snaps["main"] / "model.safetensors")
    assert got["step-2"]["fingerprint"] == sha256(snaps["step-2"] / "pytorch_model.bin")
    shards = sorted(p for p in snaps["step-1"].iterdir() if p.name.startswith("model-"))
    assert got["step-1"]["fingerprint"] == hashlib.sha256(
        "".join(f"{sha256(p)}  {p.name}\n" for p in shards).encode()).hexdigest()
    for rev, key in (("None", "main"), ("step-1", "step-1"), ("step-2", "step-2")):
        assert got[rev]["W_E"] == stored(snaps[key])["wte.weight"][7, :4].float().tolist(), rev
    assert len({tuple(v["W_E"]) for v in got.values()}) == 3                  # three different checkpoints


@pytest.mark.slow
def test_revision_on_the_command_line(hub_cache):
    """(≈ 14 s: two subprocesses)"""
    run = lambda *argv: subprocess.run([sys.executable, "-m", "headscope", *argv], capture_output=True,  # noqa: E731
                                       text=True, timeout=300, env=offline_env(HF_HUB_CACHE=str(hub_cache)))
    r = run("info", "openai-community/gpt2", "--revision", "step-2", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["source"] == "hub:openai-community/gpt2@step-2"
    assert info["fingerprint"] == sha256(cached_snapshot(hub_cache, "openai-community/gpt2", "step-2") / "pytorch_model.bin")
    r = run("info", "openai-community/gpt2", "--revision", "step-9")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "'openai-community/gpt2' at revision 'step-9' is not in the local Hugging Face cache" in r.stderr


_SIZE_CHECK = r"""
import gc, sys, torch, headscope
from transformers import GPT2LMHeadModel
repo, layers, d, heads = sys.argv[1], *map(int, sys.argv[2:])
m = headscope.load(repo)
assert (m.cfg.n_layers, m.cfg.d_model, m.cfg.n_heads) == (layers, d, heads), m.cfg
fingerprint = m.fingerprint
toks = torch.tensor([[50256, 464, 3290, 286, 262, 3641, 318, 4171, 13, 383]])
c = headscope.run_with_cache(m.weights(headscope.Processing.none()), toks, names=["logits", "blocks.*.attn.hook_pattern"])
got = [c.logits, *(c[f"blocks.{l}.attn.hook_pattern"] for l in range(layers))]
del m, c
ref = {}
for dtype in (torch.float32, torch.float64):  # one model in memory at a time
    hf = GPT2LMHeadModel.from_pretrained(repo, attn_implementation="eager", dtype=dtype).eval()
    with torch.no_grad():
        out = hf(toks, output_attentions=True)
    ref[dtype] = [out.logits, *out.attentions]
    del hf, out
    gc.collect()
for i, (g, r32, r64) in enumerate(zip(got, ref[torch.float32], ref[torch.float64])):
    hf_error = float((r32.double() - r64).abs().max())   # HF's own float32 rounding error
    torch.testing.assert_close(g, r32, atol=4 * hf_error + 1e-6, rtol=0, msg=lambda msg: f"output {i}: {msg}")
print("ok", fingerprint)
"""


#: (repo, (n_layers, d_model, n_heads), write_hub_cache overrides): distilgpt2 at its real size (every
#: tensor GPT-2 small has, its widths, n_ctx and vocabulary, 6 layers), and gpt2-medium's other widths
#: (d_model 1024, 16 heads) in its hub layout with 2 of its 24 layers. The same loading path at gpt2's and
#: medium's full depth, and the full report on gpt2 and gpt2-medium, run in benchmarks/bench_sizes.py
#: (the same checks on every report it writes: finite JSON, every stage, one atlas row per head).
HUB_SIZES = {"distilgpt2": ("distilbert/distilgpt2", (6, 768, 12), {}),
             "gpt2-medium": ("openai-community/gpt2-medium", (2, 1024, 16), {"size": "gpt2-medium", "n_layer": 2})}


@pytest.fixture(scope="module", params=list(HUB_SIZES))
def hub_size(request, tmp_path_factory):
    """(repo, shape, cache, snapshot) of one GPT-2 shape in the hub's layout (module-scoped and
    parametrized, so one size's cache is on disk at a time)."""
    repo, shape, overrides = HUB_SIZES[request.param]
    cache = tmp_path_factory.mktemp(request.param) / "hub"
    snap = write_hub_cache(cache, repo, **overrides)
    yield repo, shape, cache, snap
    shutil.rmtree(cache.parent, ignore_errors=True)


@pytest.mark.slow
def test_hub_sizes_load_offline_and_match_transformers(hub_size):
    repo, shape, cache, snap = hub_size
    assert json.loads((snap / "config.json").read_text())["n_ctx"] == 1024
    r = subprocess.run([sys.executable, "-c", _SIZE_CHECK, repo, *map(str, shape)], capture_output=True, text=True,
                       timeout=600, env=offline_env(HF_HUB_CACHE=str(cache)))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["ok", sha256(snap / "model.safetensors")]


@pytest.mark.slow
@pytest.mark.parametrize("hub_size", ["distilgpt2"], indirect=True)
def test_hub_sizes_full_report(hub_size, tmp_path, check_report):
    """The main job, as a user runs it on a downloaded model: ``headscope report REPO --out R``
    offline from the HF cache, on the smallest real hub size (distilgpt2: every stage at GPT-2's
    widths and vocabulary, on less work than the defaults: the first 450 words of the calibration
    text, one semantic deep dive, the atlas over 500 tokens; the default options on gpt2 and
    gpt2-medium: benchmarks/bench_sizes.py, which checks each report the same way)."""
    from headscope.shipped import calibration_text

    repo, (layers, d, heads), cache, snap = hub_size
    out = tmp_path / "report"
    cal = tmp_path / "calibration.txt"
    cal.write_text(" ".join(calibration_text().text.split()[:450]) + "\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "headscope", "report", repo, "--out", str(out), "--no-progress", "--json",
                        "--calibration-text", str(cal), "--deep-dives", "1", "--atlas-tokens", "500"],
                       capture_output=True, text=True, timeout=900, env=offline_env(HF_HUB_CACHE=str(cache)))
    assert r.returncode == 0, r.stderr[-3000:]
    data = check_report(out)                           # finite JSON, nulls only where declared, balanced HTML
    assert data["model"]["fingerprint"] == sha256(snap / "model.safetensors")
    cfg = data["model"]["config"]
    assert (cfg["n_layers"], cfg["d_model"], cfg["n_heads"]) == (layers, d, heads)
    stages = {s["name"] for s in json.loads(r.stdout)["stages"]}
    assert {"kernels", "calibration", "neurons", "survey", "semantic", "steering", "atlas"} <= stages
    assert len(data["atlas"]["rows"]) == layers * heads
    assert (out / "atlas.html").is_file() and (out / "index.html").is_file()
