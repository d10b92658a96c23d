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

#: stages that apply only with learned absolute positions (the seed-000 key split)
POSITIONAL = {"kernels", "denominators", "calibration", "neurons"}


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
            assert rotary and f.stem in POSITIONAL, (f.stem, reason)      # nothing else may be skipped
            assert "rotary" in reason or "calibration" in reason
        else:
            _finite(data, f.stem)
    assert {"model", "attention", "survey", "semantic", "steering", "atlas", "composition"} <= seen
    assert (out / "index.html").is_file() and (out / "atlas.html").is_file()
    assert json.loads((out / "data" / "model.json").read_text())["data"]["config"]["family"] == model.cfg.family
