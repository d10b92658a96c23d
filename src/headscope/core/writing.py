"""Raw weights → a Hugging Face checkpoint directory in the family's layout, written atomically.

The family (:mod:`headscope.core.families`) says which keys a checkpoint holds and how a
block's tensors are stored; this module streams them tensor by tensor into one safetensors
file under headscope's output rule (:mod:`headscope._atomic`), beside config.json and the
tokenizer files.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import torch

from .._atomic import atomic_directory
from .._errors import HeadscopeError
from ._safetensors import write_safetensors
from .config import Config
from .families import FAMILIES, GPT2, Family
from .sources import WEIGHTS_FILE
from .tokenizer import TOKENIZER_FILES, gpt2_bpe_files
from .weights import Processing, Weights

def _hf_from_weights(w: Weights, key: str, family: Family = GPT2) -> torch.Tensor:
    name = family.canonical(key)
    layer, leaf = family.layer_leaf(name)
    if layer is not None:
        return family.hf_from_block(w.blocks[layer], leaf, w.cfg)
    field = {n: f for f, n in family.top.items()}
    if name == family.unembed_bias:
        return w.b_U.detach().to("cpu", torch.float32).contiguous()
    t = w.W_U.T if name == family.unembed else getattr(w, field[name])
    if family.top_to_hf is not None and name != family.unembed:
        t = family.top_to_hf(field[name], t, w.cfg)                  # e.g. OPT's position table: + 2 rows
    return t.detach().to("cpu", torch.float32).contiguous()


def _check_writable(w: Weights) -> bool:
    """Whether `w` is untied; refuses what a checkpoint of its family cannot hold."""
    if w.processing != Processing.none():
        raise HeadscopeError("only raw weights can be written as a checkpoint")
    if bool(w.b_U.abs().max() > 0) and FAMILIES[w.cfg.family].unembed_bias is None:
        raise HeadscopeError("checkpoints of the families headscope writes have no b_U (unembedding bias)")
    return not w.tied


def to_hf_state_dict(w: Weights) -> dict[str, torch.Tensor]:
    """Canonical raw weights → HF GPT-2 state dict (``transformer.`` prefix; ``lm_head.weight``
    only when W_U is not W_Eᵀ), float32 on the CPU."""
    untied = _check_writable(w)
    return {k: _hf_from_weights(w, k) for k, _ in GPT2.write_keys(w.cfg, untied)}


def write_checkpoint(out: Path, cfg: Config, family: Family, *, untied: bool, tensor: Callable[[str], torch.Tensor],
                      tokenizer_from: Path | None, extra_files: dict[str, str] | None) -> Path:
    import json

    hf = family.hf_config(cfg, untied)
    with atomic_directory(out) as tmp:
        (tmp / "config.json").write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
        write_safetensors(tmp / WEIGHTS_FILE, [(k, torch.float32, s) for k, s in family.write_keys(cfg, untied)], tensor,
                          metadata={"format": "pt"})
        copied = False
        if tokenizer_from is not None:
            for name in TOKENIZER_FILES:
                src = Path(tokenizer_from) / name
                if src.is_file():
                    shutil.copyfile(src, tmp / name)
                    copied = True
        if not copied:
            vocab, merges = gpt2_bpe_files()
            shutil.copyfile(vocab, tmp / "vocab.json")
            shutil.copyfile(merges, tmp / "merges.txt")
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
    return out


def save_checkpoint(
    w: Weights,
    out: Path,
    *,
    tokenizer_from: Path | None = None,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """Write a complete HF GPT-2 checkpoint directory atomically.

    Files are staged and committed under headscope's output rule (:mod:`headscope._atomic`):
    `out` must be new, empty or an earlier headscope output; other files in it are kept,
    and a crash leaves no half-written checkpoint (the next write finishes or drops it).
    The weights are streamed tensor by tensor (float32, ``transformer.`` keys; ``lm_head.weight`` and
    ``tie_word_embeddings: false`` when W_U is not W_Eᵀ). Tokenizer files are copied
    from `tokenizer_from` (a checkpoint directory) or, by default, are GPT-2's BPE.
    """
    untied = _check_writable(w)
    family = FAMILIES[w.cfg.family]
    return write_checkpoint(Path(out), w.cfg, family, untied=untied, tensor=lambda k: _hf_from_weights(w, k, family),
                             tokenizer_from=tokenizer_from, extra_files=extra_files)
