"""Rope settings read exactly as transformers 5 reads them (issue 36): every scaling type, the old
``"type"`` key, ``rope_scaling`` beside ``rope_parameters``, top-level keys beside nested ones,
``partial_rotary_factor`` on Llama/Qwen2 — each a config.json that transformers' own
``from_pretrained`` and ``headscope.load`` both read, compared on logits and attention
probabilities; what headscope does not implement (or transformers cannot run) refused in one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import headscope
from headscope._errors import HeadscopeError
from headscope.testing import assert_matches_transformers
from headscope.testing.tokenizers import write_family_tokenizer

transformers = pytest.importorskip("transformers")

E = 10                                     # head_dim: 5 rotary frequencies
BASE = {"llama": ("LlamaConfig", dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1,
                                      head_dim=E, intermediate_size=40, max_position_embeddings=37)),
        "qwen2": ("Qwen2Config", dict(hidden_size=30, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1,
                                      intermediate_size=44, max_position_embeddings=41))}
LONG = [1.0, 1.5, 2.0, 4.0, 9.0]
SHORT = [1.0, 1.1, 1.3, 1.2, 2.5]

#: (family, config.json changes, why): the rope keys of each as the hub writes them
VARIANTS = {
    "yarn_old_type_key": ("llama", {"rope_theta": 500.0, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                                          "original_max_position_embeddings": 8}}),
    "yarn_attention_factor_beta": ("qwen2", {"rope_scaling": {"rope_type": "yarn", "factor": 3.0, "beta_fast": 8,
                                                              "beta_slow": 2, "attention_factor": 1.3,
                                                              "original_max_position_embeddings": 10}}),
    "yarn_mscale_no_truncate": ("llama", {"rope_parameters": {"rope_type": "yarn", "factor": 5.0, "mscale": 2.0,
                                                              "mscale_all_dim": 1.0, "truncate": False,
                                                              "rope_theta": 300.0}}),
    "dynamic_old_type_key": ("qwen2", {"rope_theta": 50.0, "rope_scaling": {"type": "dynamic", "factor": 3.0}}),
    "longrope_long": ("llama", {"rope_scaling": {"type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                                                 "original_max_position_embeddings": 16}}),
    "longrope_short_with_factor": ("llama", {"rope_scaling": {"rope_type": "longrope", "short_factor": SHORT,
                                                              "long_factor": LONG, "factor": 2.0,
                                                              "original_max_position_embeddings": 32}}),
    "llama3_old_type_key": ("llama", {"rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 12}}),
    "linear_theta_inside_wins": ("llama", {"rope_theta": 5000.0, "rope_parameters": {"rope_type": "linear",
                                                                                     "factor": 2.0, "rope_theta": 50.0}}),
    "rope_scaling_beats_rope_parameters": ("qwen2", {"rope_theta": 70.0,
                                                     "rope_scaling": {"rope_type": "linear", "factor": 3.0},
                                                     "rope_parameters": {"rope_type": "yarn", "factor": 2.0,
                                                                         "rope_theta": 9000.0}}),
    "empty_rope_scaling_uses_parameters": ("llama", {"rope_scaling": {}, "rope_parameters": {"rope_type": "linear",
                                                                                              "factor": 2.5}}),
    "rope_type_beats_type": ("llama", {"rope_scaling": {"rope_type": "linear", "type": "dynamic", "factor": 2.0}}),
    "partial_factor_ignored_by_default_rope": ("qwen2", {"partial_rotary_factor": 0.5, "rope_theta": 300.0}),
    "top_level_original_ignored": ("llama", {"original_max_position_embeddings": 4,
                                             "rope_scaling": {"type": "yarn", "factor": 2.0}}),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """One random-weight transformers checkpoint per family (hub layout, tokenizer.json only)."""
    out = {}
    for fam, (cls, kwargs) in BASE.items():
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(vocab_size=301, **kwargs))
        d = tmp_path_factory.mktemp(fam)
        model.save_pretrained(d)
        write_family_tokenizer(d, fam, 301)
        out[fam] = d
    return out


def _variant(src, tmp_path, change: dict):
    d = tmp_path / "v"
    shutil.copytree(src, d)
    cfg = json.loads((d / "config.json").read_text())
    for key in ("rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor"):
        cfg.pop(key, None)                              # the variant states its own rope keys only
    (d / "config.json").write_text(json.dumps(cfg | change))
    return d


@pytest.mark.parametrize("name", list(VARIANTS))
def test_rope_settings_match_transformers(name, checkpoints, tmp_path):
    fam, change = VARIANTS[name]
    d = _variant(checkpoints[fam], tmp_path, change)
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager").eval()
    model = headscope.load(d)
    for n in (29, 12):                                  # longrope switches tables at its original length
        tokens = torch.arange(3, 3 + n)[None]
        out = assert_matches_transformers(model, hf, tokens)
    # the written-back config.json reads the same in transformers
    saved = model.save(tmp_path / "saved")
    again = transformers.AutoModelForCausalLM.from_pretrained(saved, attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(again(tokens).logits, out.logits, rtol=1e-5, atol=1e-5)


def test_the_variants_differ_from_default_rope(checkpoints, tmp_path):
    """Each scaled variant changes transformers' logits (so matching them tests the scaling)."""
    tokens = torch.arange(3, 32)[None]
    base = {f: transformers.AutoModelForCausalLM.from_pretrained(d).eval()(tokens).logits for f, d in checkpoints.items()}
    for name, (fam, change) in VARIANTS.items():
        if name == "partial_factor_ignored_by_default_rope":
            continue
        d = _variant(checkpoints[fam], tmp_path / name, change)
        logits = transformers.AutoModelForCausalLM.from_pretrained(d).eval()(tokens).logits
        assert (logits - base[fam]).abs().max() > 1e-4, name


@pytest.mark.parametrize("change, needle", [
    ({"rope_scaling": {"type": "proportional", "factor": 2.0}}, "unsupported rope_scaling type 'proportional'"),
    ({"partial_rotary_factor": 0.6, "rope_scaling": {"type": "linear", "factor": 2.0}}, "cannot run"),
    ({"rope_scaling": {"type": "yarn", "factor": "4"}}, "factor"),
    ({"rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": LONG}}, "short_factor"),
    ({"rope_scaling": {"type": "llama3", "factor": 8.0}}, "low_freq_factor"),
    ({"rope_scaling": {"rope_type": None, "factor": 8.0}}, "rope_type"),
    ({"rope_parameters": {"full_attention": {"rope_type": "default"}}}, "per layer type"),
])
def test_unimplemented_rope_settings_are_refused_in_one_line(change, needle, checkpoints, tmp_path):
    d = _variant(checkpoints["llama"], tmp_path, change)
    with pytest.raises(HeadscopeError, match=needle) as e:
        headscope.load(d)
    assert "\n" not in str(e.value)


def test_llama_partial_rotary_with_scaling_does_not_run_in_transformers(checkpoints, tmp_path):
    """The refusal above is transformers' own limit, not headscope's."""
    d = _variant(checkpoints["llama"], tmp_path, {"partial_rotary_factor": 0.6,
                                                  "rope_scaling": {"type": "linear", "factor": 2.0}})
    hf = transformers.AutoModelForCausalLM.from_pretrained(d).eval()
    with pytest.raises(RuntimeError):
        hf(torch.arange(3, 12)[None])
