"""``headscope report`` on a random-weight checkpoint of every family (weights whose statistics we did
not choose: transformers' initialiser, perturbed norms and biases), reached offline through an HF
cache: every stage computed or not applicable with its reason, every number finite."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_families import build  # noqa: E402  (one builder for every family test)

import headscope  # noqa: E402
from headscope.report import ReportOptions, build_report  # noqa: E402
from headscope.testing.hub import cache_directory  # noqa: E402

#: every stage applies to every family (rotary models: layer0.rotary_split, the kernels stage's relative kernel)
#: except the contextual MLP0 neurons of a parallel residual, where MLP0 does not read layer-0 attention
PARALLEL = {"neurons"}


def _finite(x, where):
    if isinstance(x, float):
        assert math.isfinite(x), where
    elif isinstance(x, dict):
        for k, v in x.items():
            _finite(v, f"{where}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _finite(v, f"{where}[{i}]")


@pytest.mark.parametrize("case", ["gpt_neo", "gpt_neox", "opt", "llama", "qwen2"])
def test_report_on_every_family(case, tmp_path, monkeypatch):
    from huggingface_hub import constants

    _, d = build(case, tmp_path, n_tokens=1024)
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    cache_directory(cache, f"org/{case.replace('_', '-')}", d)
    model = headscope.load(f"org/{case.replace('_', '-')}")
    out = tmp_path / "report"
    build_report(model, out, ReportOptions(progress=False))
    rotary = model.cfg.positional == "rotary"
    seen = set()
    for f in sorted((out / "data").glob("*.json")):
        data = json.loads(f.read_text())["data"]
        seen.add(f.stem)
        reason = data.get("not_applicable") if isinstance(data, dict) else None
        if reason is not None:
            assert isinstance(reason, str) and reason and "\n" not in reason
            assert model.cfg.parallel_residual and f.stem in PARALLEL, (f.stem, reason)   # nothing else is skipped
            assert "parallel residual" in reason
        else:
            _finite(data, f.stem)
    assert {"model", "attention", "kernels", "survey", "semantic", "steering", "atlas", "composition"} <= seen
    kernels = json.loads((out / "data" / "kernels.json").read_text())["data"]
    assert kernels.get("relative", False) == rotary and "not_applicable" not in kernels
    assert (out / "index.html").is_file() and (out / "atlas.html").is_file()
    described = json.loads((out / "data" / "model.json").read_text())["data"]
    assert described["config"]["family"] == model.cfg.family
    # the processing applied (RMSNorm: no centring), not the one asked for
    assert described["processing"] == model.weights().processing.to_dict()
    assert described["processing"]["center_reading_weights"] == (model.cfg.norm == "layernorm")


@pytest.mark.parametrize("case", ["llama", "gpt_neo"])
def test_steered_checkpoint_of_a_family_that_limits_the_rebuild(case, tmp_path, capsys):
    """Grouped-query attention (Llama, 1 key/value head for 3 query heads: only the query side may
    change) and GPT-Neo (no query/key biases to hold the bias terms): the steered checkpoint is one
    the family's transformers class loads, with headscope's logits, and the written weights respect
    the layout (shared keys unchanged, biases absent)."""
    transformers = pytest.importorskip("transformers")
    import torch

    from headscope import cli
    from headscope.core.forward import run_with_cache
    from headscope.core.weights import Processing

    _, d = build(case, tmp_path, n_tokens=1024)
    out = tmp_path / "steered"
    assert cli.main(["steer", str(d), "1.0", "--scale-negative", "0", "--out", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["self_rank_after"] != res["self_rank_before"] and math.isfinite(res["rebuild_error"])
    before, after = headscope.load(d), headscope.load(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    tokens = after.to_tokens("the red dog and the blue cat sat on Monday")[None]
    with torch.no_grad():
        torch.testing.assert_close(run_with_cache(after.weights(Processing.none()), tokens, ["logits"])["logits"],
                                   hf(tokens).logits, rtol=1e-5, atol=1e-5)
    b0, b1 = before.raw_block(1), after.raw_block(1)
    assert not torch.equal(b0.W_Q[0], b1.W_Q[0])
    if case == "llama":
        assert torch.equal(b0.W_K, b1.W_K) and torch.equal(b0.W_V, b1.W_V)          # the group's key is shared
    else:
        assert not b1.b_Q.any() and not b1.b_K.any()                                # GPT-Neo stores no such biases


def test_survey_counts_only_partners_inside_each_layers_window(tmp_path):
    """GPT-Neo's local layers (window 5, prompts of 16 words): the survey's target masks are the
    layer's own (Config.hidden_keys), so a partner outside the window is no partner; they used to
    be every layer's causal mask, which scored the local heads on partners they cannot see."""
    import torch

    from headscope.core.forward import run_with_cache
    from headscope.semantic.prompts import prompts_for
    from headscope.semantic.survey import PRESETS, pattern_metrics, survey, target_masks

    _, d = build("gpt_neo", tmp_path, n_tokens=1024)
    model = headscope.load(d)
    assert [model.cfg.window(l) for l in range(3)] == [0, 5, 5]
    rows = {(r.layer, r.head): r for r in survey(model).rows}
    pre = PRESETS["headscope"]
    prompts, _ = prompts_for(model, None, n_prompts=pre["n_prompts"], length=pre["length"], seed=0,
                             cats_per_prompt=pre["cats_per_prompt"])
    pos = torch.arange(prompts.tokens.shape[1])
    cache = run_with_cache(model.weights(), prompts.tokens, names=[f"blocks.{l}.attn.hook_pattern" for l in range(3)])
    causal = target_masks(prompts.tokens, prompts.labels, prompts.related)
    for l in range(3):
        own = target_masks(prompts.tokens, prompts.labels, prompts.related,
                           hidden=model.cfg.hidden_keys(l, pos[:, None], pos[None, :]))
        met = pattern_metrics(cache[f"blocks.{l}.attn.hook_pattern"], own)
        old = pattern_metrics(cache[f"blocks.{l}.attn.hook_pattern"], causal)
        for h in range(model.cfg.n_heads):
            r = rows[(l, h)]
            assert r.same_category == pytest.approx(float(met["same_category"][h]), abs=1e-12)
            assert r.semantic_loss == pytest.approx(float(met["semantic_loss"][h]), abs=1e-12)
            if l > 0:        # local: partners beyond the window were counted (as misses) before
                assert r.same_category > float(old["same_category"][h]) + 1e-6
                assert r.semantic_loss < float(old["semantic_loss"][h])
            else:
                assert r.same_category == pytest.approx(float(old["same_category"][h]), abs=1e-12)


def test_soft_capped_model_keeps_the_relative_kernel_in_the_report(tmp_path):
    """Gemma 2's soft-capped scores refuse the rotary split (the kernels stage's TV), not the relative kernel that
    `headscope kernels` computes on the uncapped scores: the stage holds the kernel and says why the TV is absent
    (it used to be wholly "not applicable", with the denominators' reason)."""
    from headscope.layer0 import relative

    _, d = build("gemma2", tmp_path)
    model = headscope.load(d)
    out = tmp_path / "report"
    build_report(model, out, ReportOptions(stages=["kernels"], progress=False))
    data = json.loads((out / "data" / "kernels.json").read_text())["data"]
    assert "not_applicable" not in data and data["relative"] is True and "tv" not in data
    assert "soft-caps scores" in data["tv_not_applicable"] and "\n" not in data["tv_not_applicable"]
    import torch

    torch.testing.assert_close(torch.tensor(data["kappa"]),
                               torch.tensor(relative.relative_kernels(model.weights()).to_dict()["kappa"]))
    _finite(data, "kernels")
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "relative kernels" in page
    # the kernel is of the uncapped scores: the caveat travels with it, to the JSON, the page and the command's text
    from headscope.core.applicability import softcap_caveat
    from headscope.report.views.kernels import relative_text

    assert data["caveat"] == softcap_caveat(model.cfg) and "soft-capped" in data["caveat"]
    assert "The rotary split&#x27;s TV is not computed" in page or "The rotary split's TV is not computed" in page
    assert "Caveat: " in page and "caveat: " in relative_text(data)
