"""Rank the heads of a model as semantic heads (seed 002's behaviour metrics).

Every head of --layer (default: all layers) is scored on seeded category prompts
(BOS + words of a few categories): the loss L = mean −log Σ (M ⊙ A), self/copy
attention, attention to same-category tokens and the BOS fallback. Best first.

  headscope survey gpt2 --layer 1
  headscope survey planted/ --json
  headscope survey gpt2 --categories my_categories.json --prompts 128
  headscope survey gpt2 --preset seed          # the L1H5 authors' prompt: 255 words, their 8 categories

--preset headscope (default): 64 seeded prompts of 16 words from 5 of the shipped
categories each, BOS query left out of the loss. --preset seed: one prompt of 255 words
drawn from the authors' 8 categories (category, then word, uniformly, with
replacement), BOS query in the loss, as their code does. --prompts, --length,
--categories and --bos-query override the preset. Attention to a token of a
semantically overlapping category (days / months, colours / metals; the "_related"
pairs of the categories file) is not counted as wrong.
"""

from __future__ import annotations

from .._errors import HeadscopeError
from ..report.views import survey as V
from ..semantic.survey import survey
from .args import emit, load_model


def add_arguments(p):
    p.add_argument("model", help="hub id or checkpoint directory")
    p.add_argument("--layer", type=int, default=None, help="survey this layer only (default: all)")
    p.add_argument("--categories", default=None, help="JSON file {category: [words]} (default: the shipped lists)")
    p.add_argument("--preset", default="headscope", choices=["headscope", "seed"],
                   help="prompt recipe: headscope (default) or seed (the L1H5 authors': 1 prompt of 255 words, "
                        "8 categories, BOS query in the loss)")
    p.add_argument("--prompts", type=int, default=None, help="number of category prompts (default: the preset's, 64 or 1)")
    p.add_argument("--length", type=int, default=None, help="words per prompt (default: the preset's, 16 or 255)")
    p.add_argument("--bos-query", default=None, choices=["include", "exclude"],
                   help="count the BOS query row in the loss (default: the preset's; seed includes it)")
    p.add_argument("--seed", type=int, default=0, help="prompt seed (default 0)")
    p.add_argument("--top", type=int, default=None, help="show only the best N heads in the text output")


def run(args) -> int:
    for name in ("prompts", "length"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise HeadscopeError(f"--{name}: expected ≥ 1, got {getattr(args, name)}")
    model = load_model(args, check=lambda cfg: args.layer is None or cfg.check_layer(args.layer))
    layers = None if args.layer is None else [model.cfg.check_layer(args.layer)]
    bos = None if args.bos_query is None else args.bos_query == "include"
    res = survey(model, layers, categories=args.categories, n_prompts=args.prompts, length=args.length,
                 seed=args.seed, preset=args.preset, include_bos_query=bos)
    d = res.to_dict()
    emit(args, res, V.prompts_text(d) + "\n" + V.text(d, args.top))
    return 0
