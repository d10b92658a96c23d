"""Write a GPT-2 checkpoint with planted, documented mechanisms (ground truth).

  headscope plant --out planted/ --seed 0
  headscope info planted/

The directory holds config.json, model.safetensors, GPT-2's tokenizer files and
planted.json, the manifest of every planted mechanism. With --layers 3 or more, layer 2
holds a copying head (2.3) and a copy-suppression head (2.7) (``headscope atlas``'s
copying columns) and head 2.5's key reads what head 0.1 writes (``headscope composition``).

``--family qwen2`` writes the planted rotary checkpoint instead (Qwen2 layout: RMSNorm, rotary,
SwiGLU; a 1024-token tokenizer.json): a previous-token head 0.1 made of rotated biases, the
semantic self-suppressing head 1.0 and a copying head 2.2 (:mod:`headscope.planted.rotary`).
"""

from __future__ import annotations

from pathlib import Path

from .._atomic import refuse_foreign_dir
from .._errors import HeadscopeError
from ..planted.build import MANIFEST, build
from .args import emit


def add_arguments(p):
    p.add_argument("--out", required=True, help="directory to write (new, empty, or an earlier planted checkpoint)")
    p.add_argument("--seed", type=int, default=0, help="random seed (same seed → identical files); default 0")
    p.add_argument("--layers", type=int, default=None, help="number of layers (≥ 2; with ≥ 3, layer 2 holds a copying and a copy-suppression "
                        "head; layers ≥ 3 are unremarkable); default 2 (3 with --family qwen2)")
    p.add_argument("--family", choices=("gpt2", "qwen2"), default="gpt2",
                   help="gpt2 (learned positions; default) or qwen2 (the planted rotary checkpoint)")


def run(args) -> int:
    out = Path(args.out)
    if args.seed < 0:
        raise HeadscopeError(f"--seed: the seed must be a non-negative integer, got {args.seed}")
    layers = args.layers if args.layers is not None else (3 if args.family == "qwen2" else 2)
    if layers < 2:
        raise HeadscopeError(f"--layers: a planted checkpoint needs at least 2 layers, got {layers}")
    refuse_foreign_dir(out, MANIFEST)
    if args.family == "qwen2":
        from ..planted import rotary

        rotary.build(out, seed=args.seed, n_layers=layers)
    else:
        build(out, seed=args.seed, n_layers=layers)
    emit(args, {"out": str(out), "seed": args.seed, "layers": layers, "family": args.family},
         f"wrote planted checkpoint to {out}")
    return 0
