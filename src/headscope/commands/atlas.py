"""An atlas of every head from the weights alone: one row per head.

Per head, over the effective embeddings of the N most frequent tokens (float64):
qk_symmetry ‖sym‖/(‖sym‖+‖skew‖) of W_QK; qk_negative_fraction of the top-64
eigenvalues of its symmetric part; qk_self, the mean standardised score of a token for
itself (negative: self-suppression); qk_negative_mass, the negative eigenvalues' share
of sym(W_QK) over the centred effective embeddings (0.5 random, → 1 self-suppression);
ov_copying_framework, Σλ/Σ|λ| of the full OV circuit W_E·W_OV·W_U, and
ov_copying_effective, the same over the effective embeddings (negative: copy
suppression); positional_share of the score variance; the layer-0 kernel category;
with --survey, the survey's semantic loss; with --logit-diff A B, the head's OV
direct logit attribution to A − B. Definitions in headscope.atlas.

  headscope atlas gpt2
  headscope atlas planted/ --layers 1 2 --tokens 1000 --json
  headscope atlas gpt2 --corpus my_text.txt --survey
  headscope atlas gpt2 --logit-diff " Mrs" " Mr"
  headscope atlas EleutherAI/pythia-160m --revisions step1000,step8000,step143000 --revisions-out emergence/

--revisions runs the atlas once per hub revision into --revisions-out DIR (a JSON per
revision, revisions.json with per metric the max and min over heads, revisions.svg);
a rerun reuses the revisions already complete there (docs/revisions.md).
"""

from __future__ import annotations

from .._errors import HeadscopeError
from ..maps.atlas import DEFAULT_TOKENS, atlas
from ..report.views import atlas as V
from . import revisions as _revisions
from .args import emit, load_model


def add_arguments(p):
    p.add_argument("model", help="hub id or checkpoint directory")
    p.add_argument("--layers", type=int, nargs="+", default=None, metavar="L",
                   help="layers to map (default: every layer)")
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS,
                   help=f"N most frequent tokens the metrics average over (default {DEFAULT_TOKENS})")
    p.add_argument("--corpus", default=None, help="text file for token frequencies (default: BPE merge order)")
    p.add_argument("--survey", action="store_true", help="also run the semantic-head survey for its loss")
    p.add_argument("--no-kernels", action="store_true", help="skip the layer-0 kernel categories")
    p.add_argument("--logit-diff", nargs=2, default=None, metavar=("A", "B"),
                   help="add each head's OV direct logit attribution to token A minus token B (one token each)")
    _revisions.add_arguments(p)


def run(args) -> int:
    if args.tokens < 2:
        raise HeadscopeError(f"--tokens: expected ≥ 2, got {args.tokens}")
    revisions = _revisions.requested(args)
    if revisions is not None:
        return _revisions.run(args, revisions, "atlas", {
            "layers": args.layers, "tokens": args.tokens, "corpus": args.corpus, "survey": args.survey,
            "kernels": not args.no_kernels, "logit_diff": None if args.logit_diff is None else list(args.logit_diff)})
    model = load_model(args, check=lambda cfg: [cfg.check_layer(l) for l in args.layers or []])
    layers = None if args.layers is None else [model.cfg.check_layer(l) for l in args.layers]
    res = atlas(model, layers, n_tokens=args.tokens, corpus=args.corpus, kernels=not args.no_kernels,
                survey=args.survey, logit_diff=None if args.logit_diff is None else tuple(args.logit_diff))
    emit(args, res, V.text(res.to_dict()))
    return 0

