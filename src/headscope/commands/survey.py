"""Rank the heads of a model as semantic heads (seed 002's behaviour metrics).

Every head of --layer (default: all layers) is scored on seeded category prompts
(BOS + words of a few categories): the loss L = mean −log Σ (M ⊙ A), self/copy
attention, attention to same-category tokens and the BOS fallback. Best first.

  headscope survey gpt2 --layer 1
  headscope survey planted/ --json
  headscope survey gpt2 --categories my_categories.json --prompts 128
"""

from __future__ import annotations

from .._errors import HeadscopeError
from ..survey import survey
from .args import emit, load_model


def add_arguments(p):
    p.add_argument("model", help="hub id or checkpoint directory")
    p.add_argument("--layer", type=int, default=None, help="survey this layer only (default: all)")
    p.add_argument("--categories", default=None, help="JSON file {category: [words]} (default: the shipped lists)")
    p.add_argument("--prompts", type=int, default=64, help="number of category prompts (default 64)")
    p.add_argument("--length", type=int, default=16, help="words per prompt (default 16)")
    p.add_argument("--seed", type=int, default=0, help="prompt seed (default 0)")
    p.add_argument("--top", type=int, default=None, help="show only the best N heads in the text output")


def run(args) -> int:
    for name in ("prompts", "length"):
        if getattr(args, name) < 1:
            raise HeadscopeError(f"--{name}: expected ≥ 1, got {getattr(args, name)}")
    model = load_model(args)
    layers = None if args.layer is None else [model.cfg.check_layer(args.layer)]
    res = survey(model, layers, categories=args.categories, n_prompts=args.prompts, length=args.length,
                 seed=args.seed)
    emit(args, res, res.render(args.top))
    return 0
