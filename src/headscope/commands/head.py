"""Analyse one head from its weights (seed 002): QK bilinear form, eigenvalues, clusters.

Effective embeddings (--variant full: LN(W_E + mean W_pos + mean attn0 + MLP0);
mlp: LN(MLP0 output) only), W_QK = W_Q W_Kᵀ split into symmetric and skew parts,
float64 eigenvalues of the symmetric part (negative ones = self-suppression),
top-k attention targets, a kNN graph of the N most frequent tokens clustered by
Leiden and spectrally, and the share of score variance due to token identity.

  headscope head gpt2 1.5
  headscope head planted/ 1.5 --json --tokens 2000 --keys nodes
  headscope head gpt2 1.5 --corpus my_text.txt --k 20
  headscope head gpt2 1.5 --preset seed           # the L1H5 authors' clustering and embeddings

--preset headscope (default): 5000 nodes by BPE merge order + the category words,
top-10 targets per query, symmetrised, Leiden (RB configuration) and spectral,
attention means from category prompts. --preset seed: as the authors — BOS + the
2999 most frequent tokens (wordfreq word frequencies mapped to tokens, or --corpus),
raw key×query scores, top 4 per key, directed, Leiden modularity with communities of
at most 512, attention means from token ids 0-1023 as one sequence at the mean
position, no BOS. --tokens, --k, --frequency and --attn-mean override the preset.
"""

from __future__ import annotations

from .._errors import HeadscopeError
from ..report.views import head as V
from ..semantic.head import analyse_head
from ..semantic.options import HeadOptions
from .args import emit, load_model, parse_float, parse_head


def add_arguments(p):
    p.add_argument("model", help="hub id or checkpoint directory")
    p.add_argument("head", help="LAYER.HEAD, e.g. 1.5")
    p.add_argument("--variant", default="full", choices=["full", "mlp"], help="effective embedding variant (default full)")
    p.add_argument("--preset", default="headscope", choices=["headscope", "seed"],
                   help="clustering recipe: headscope (default) or seed (the L1H5 authors')")
    p.add_argument("--tokens", type=int, default=None, help="N most frequent tokens in the graph (default 5000; seed 3000)")
    p.add_argument("--k", type=int, default=None, help="neighbours per token (default 10; seed 4)")
    p.add_argument("--frequency", default=None, choices=["bpe", "wordfreq"],
                   help="token frequency without --corpus: BPE merge order (headscope) or wordfreq (seed)")
    p.add_argument("--attn-mean", default=None, choices=["prompts", "authors"],
                   help="mean attention outputs for the effective embeddings: category prompts (headscope) or "
                        "token ids 0-1023 at the mean position (seed)")
    p.add_argument("--keys", default="vocab", choices=["vocab", "nodes"],
                   help="rank example neighbours over the whole vocabulary (default) or the graph's nodes")
    p.add_argument("--corpus", default=None, help="text file for token frequencies (default: --frequency)")
    p.add_argument("--categories", default=None, help="JSON file {category: [words]} (default: the shipped lists)")
    p.add_argument("--resolution", default="1.0", help="Leiden resolution (default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="seed for prompts and clustering (default 0)")


def run(args) -> int:
    resolution = parse_float(args.resolution, "--resolution")
    if resolution <= 0:
        raise HeadscopeError(f"--resolution: expected > 0, got {args.resolution}")
    for name in ("tokens", "k"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise HeadscopeError(f"--{name}: expected ≥ 1, got {getattr(args, name)}")
    model = load_model(args, check=lambda cfg: parse_head(args.head, cfg))       # before any weight is read
    layer, head = parse_head(args.head, model.cfg)
    options = HeadOptions(preset=args.preset, variant=args.variant, n_tokens=args.tokens, k=args.k,
                          frequency=args.frequency, attn_mean=args.attn_mean, keys=args.keys,
                          categories=args.categories, corpus=args.corpus, resolution=resolution, seed=args.seed)
    res = analyse_head(model, layer, head, options)
    emit(args, res, V.text(res.to_dict()))
    return 0
