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
    assert json.loads((out / "data" / "model.json").read_text())["data"]["config"]["family"] == model.cfg.family


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
