"""The planted rotary checkpoint (Qwen2 layout): every analysis that claims to work on rotary models
finds what was planted (headscope.planted.rotary's docstring states the construction)."""

from __future__ import annotations

import json
import math

import pytest
import torch

import headscope
from headscope import cli
from headscope.core.forward import run_with_cache
from headscope.core.weights import Processing
from headscope.maps.atlas import atlas
from headscope.planted import rotary as P


@pytest.fixture(scope="module")
def planted_rotary(tmp_path_factory):
    out = tmp_path_factory.mktemp("planted-rotary") / "ckpt"
    assert cli.main(["plant", "--family", "qwen2", "--out", str(out), "--seed", "0"]) == 0
    return headscope.load(out), json.loads((out / "planted.json").read_text())


@pytest.fixture(scope="module")
def rotary_atlas(planted_rotary):
    return atlas(planted_rotary[0])


def test_it_is_a_rotary_qwen2_checkpoint_transformers_loads(planted_rotary):
    transformers = pytest.importorskip("transformers")
    model, manifest = planted_rotary
    assert (model.cfg.family, model.cfg.positional, model.cfg.norm, model.cfg.gated_mlp) == ("qwen2", "rotary",
                                                                                            "rmsnorm", True)
    assert model.raw.W_pos is None and manifest["family"] == "qwen2"
    hf = transformers.AutoModelForCausalLM.from_pretrained(model.directory, attn_implementation="eager").eval()
    tokens = model.to_tokens("The red dog and the blue cat met on Monday in May.")[None]
    with torch.no_grad():
        torch.testing.assert_close(run_with_cache(model.weights(None), tokens, names=["logits"])["logits"]
                                   .log_softmax(-1), hf(tokens).logits.log_softmax(-1), rtol=1e-4, atol=1e-4)


def test_previous_token_head_made_of_rotated_biases(planted_rotary):
    model, manifest = planted_rotary
    L, H = manifest["previous_token_head"]["layer"], manifest["previous_token_head"]["head"]
    tokens = model.to_tokens("The colour of the harbour was grey and the dog ate an apple on Monday in May.")[None]
    pattern = run_with_cache(model.weights(), tokens, [f"blocks.{L}.attn.hook_pattern"])[f"blocks.{L}.attn.hook_pattern"]
    prev = torch.diagonal(pattern[0, H], -1)                                          # A[i, i−1]
    assert prev.min() > 0.99
    others = [torch.diagonal(pattern[0, h], -1).mean() for h in range(model.cfg.n_heads) if h != H]
    assert max(others) < 0.6


def test_atlas_recovers_the_planted_heads(rotary_atlas, planted_rotary):
    _, manifest = planted_rotary
    sem, copy = manifest["semantic_head"], manifest["copy_heads"]["copying"]
    rows = [r for r in rotary_atlas.rows if r.qk_self is not None]
    lowest = min(rows, key=lambda r: r.qk_self)
    assert (lowest.layer, lowest.head) == (sem["layer"], sem["head"])
    assert lowest.qk_self < -10 * max(abs(r.qk_self) for r in rows if r is not lowest)
    assert lowest.qk_symmetry > 0.999                                        # W_QK planted exactly symmetric
    cop = [r for r in rotary_atlas.rows if r.ov_copying_effective is not None]
    top = max(cop, key=lambda r: r.ov_copying_effective)
    assert (top.layer, top.head) == (copy["layer"], copy["head"]) and top.ov_copying_effective > 0.9
    assert max(abs(r.ov_copying_effective) for r in cop if r is not top) < 0.5
    # positional columns are not applicable (no W_pos) and say so; every stated number is finite
    assert all(r.positional_share is None for r in rotary_atlas.rows)
    assert any("rotary" in n for n in rotary_atlas.notes)
    for r in rotary_atlas.rows:
        for k, v in r.to_dict().items():
            assert not isinstance(v, float) or math.isfinite(v), (r.name, k)


def test_head_analysis_recovers_the_clusters_and_the_negative_eigenvalues(planted_rotary, capsys):
    model, manifest = planted_rotary
    sem = manifest["semantic_head"]
    n_cat = len(sem["categories"])
    n_id = max(len(v) for v in sem["categories"].values())
    assert cli.main(["head", str(model.directory), f"{sem['layer']}.{sem['head']}", "--tokens", "768", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n_negative"], out["n_positive"]) == (n_id, n_cat)            # −β on identities, +α on categories
    assert max(out["sigma_skew"]) < 1e-9 * max(out["sigma_sym"])
    assert out["leiden"]["ari"] > 0.99


def test_survey_ranks_the_planted_semantic_head_first(planted_rotary, capsys):
    model, manifest = planted_rotary
    assert cli.main(["survey", str(model.directory), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    best = min(rows, key=lambda r: r["rank"])
    assert (best["layer"], best["head"]) == (manifest["semantic_head"]["layer"], manifest["semantic_head"]["head"])
    assert best["self_attention"] < 0.05 and best["same_category"] > 0.5


def test_steering_writes_a_checkpoint_transformers_loads(planted_rotary, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    model, manifest = planted_rotary
    sem = manifest["semantic_head"]
    out = tmp_path / "steered"
    assert cli.main(["steer", str(model.directory), f"{sem['layer']}.{sem['head']}", "--scale-negative", "0",
                     "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    steered = headscope.load(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    tokens = model.to_tokens("The red dog and the blue cat.")[None]
    with torch.no_grad():
        torch.testing.assert_close(run_with_cache(steered.weights(Processing.none()), tokens, names=["logits"])["logits"],
                                   hf(tokens).logits, rtol=1e-5, atol=1e-5)
    # α = 0 removes the negative eigenvalues: the head's self score is no longer the planted −(β−α)/σ²
    assert atlas(steered, layers=[sem["layer"]]).row(sem["layer"], sem["head"]).qk_self > -1.0


def test_relative_kernel_peaks_at_the_planted_offset(planted_rotary, capsys):
    """The rotary analogue of the seed's positional kernel (headscope.layer0.relative): κ_h(Δ) of the
    mean query and key; translation-equivariant by construction. Head 0.1's peaks at Δ = 1, local."""
    from headscope.layer0 import relative

    model, manifest = planted_rotary
    H = manifest["previous_token_head"]["head"]
    rk = relative.relative_kernels(model.weights())
    assert rk.peak_offset[H] == manifest["previous_token_head"]["offset"]
    assert rk.width[H] == "local" and rk.widths[H] < 1.5
    kappa = torch.tensor(rk.kappa[H])
    assert kappa[1] - max(kappa[0], kappa[2]) > 5.0                      # ≈ 13 logits by construction
    # equivariance: the kernel at query n over keys i is κ(n − i), whatever n
    for n in (5, 20):
        torch.testing.assert_close(relative.kernel_at(torch.tensor(rk.kappa), n)[:, -2],
                                   torch.softmax(torch.tensor(rk.kappa)[:, : n + 1], -1)[:, 1])
    assert cli.main(["kernels", str(model.directory), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_offset"][H] == 1
