"""Assemble a planted checkpoint: base weights, layer-0, layer-1 (and, with ≥ 3 layers, layer-2) mechanisms, manifest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .._errors import HeadscopeError
from ..core.config import Config
from ..core.tokenizer import bundled_gpt2_tokenizer
from ..core.weights import Weights
from . import layer0, layer1, layer2
from ._base import Space, base_weights, gpt2_small_config

MANIFEST = "planted.json"
MANIFEST_VERSION = 1


def build_weights(seed: int = 0, n_layers: int = 2, cfg: Config | None = None,
                  categories: dict[str, list[str]] | None = None) -> tuple[Weights, dict]:
    """Raw planted weights and their manifest (a JSON-ready dict), deterministically; `categories`:
    the semantic head's (default: the shipped ones, :data:`layer1.CATEGORIES`)."""
    cfg = cfg or gpt2_small_config(n_layers)
    if cfg.n_layers < 2:
        raise HeadscopeError(f"a planted checkpoint needs at least 2 layers, got {cfg.n_layers}")
    if cfg.d_vocab != 50257:
        raise HeadscopeError(f"planted checkpoints use GPT-2's vocabulary: d_vocab must be 50257, got {cfg.d_vocab}")
    space = Space.for_d_model(cfg.d_model)
    tokenizer = bundled_gpt2_tokenizer()
    w = base_weights(cfg, space, np.random.default_rng([seed, 0]))
    manifest = {
        "version": MANIFEST_VERSION,
        "seed": seed,
        "config": cfg.to_dict(),
        "space": space.to_dict(),
        "layer0": layer0.plant(w, space, tokenizer, np.random.default_rng([seed, 1])),
        "layer1": layer1.plant(w, space, tokenizer, np.random.default_rng([seed, 2]), categories),
    }
    if cfg.n_layers > layer2.LAYER:  # copy heads in a layer of their own; 2-layer plants are unchanged
        manifest["layer2"] = layer2.plant(w, space, np.random.default_rng([seed, 3]))
    w.W_U = w.W_E.T  # tied, as in GPT-2 (planting may have replaced W_E)
    w.validate()
    return w, manifest


def build(out: str | Path, seed: int = 0, n_layers: int = 2, cfg: Config | None = None,
          categories: dict[str, list[str]] | None = None) -> Path:
    """Write a planted HF GPT-2 checkpoint with ``planted.json`` to `out` (atomically)."""
    from ..core.writing import save_checkpoint

    w, manifest = build_weights(seed=seed, n_layers=n_layers, cfg=cfg, categories=categories)
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return save_checkpoint(w, Path(out), extra_files={MANIFEST: text})


def read_manifest(directory: str | Path) -> dict:
    path = Path(directory) / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HeadscopeError(f"{directory} is not a planted checkpoint (no {MANIFEST})") from None
