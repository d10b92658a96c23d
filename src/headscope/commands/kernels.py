"""Positional kernels of layer-0 heads, their categories, and how well the key split works.

Splits every layer-0 key into content + position (seed 000), computes each head's
positional kernel for a query token, its width, decay rate, translation equivariance,
query and content dependence, and its category (local / slowly_decaying / uniform);
with a corpus, the total-variation distance between true and approximate attention.

  headscope kernels gpt2
  headscope kernels planted/ --corpus texts/ --json
  headscope kernels planted/ --sample-corpus --c gpt2 --out kernels/
  headscope kernels planted/ --query " of" --max-windows 8

--c: 'measured' (default; median token-embedding norm), 'gpt2' (3.5) or a number.
--rule: 'shape' (default; a decay length fitted at several query positions, position 0
left out) or 'width' (headscope's first rule: effective width at n_ref); see
headscope.kernels and docs/fidelity.md.
--out DIR writes kernels.json, kernels.svg (kernel curves) and, with a corpus,
tv_hist.svg and tv_position.svg.
"""

from __future__ import annotations

from pathlib import Path

from .._atomic import atomic_directory, refuse_foreign_dir
from .._errors import HeadscopeError
from .._json import dumps
from ..corpus import read_corpus, windows
from ..layer0.kernels import DEFAULT_RULE, RULES, analyse_kernels, check_n_ref
from ..layer0.split import SEED_QUERY
from ..report.views import kernels as V
from ..shipped import sample_corpus
from .args import emit, int_at_least, load_model

OUT_MARKER = "kernels.json"


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, …) or checkpoint directory")
    p.add_argument("--layer", type=int, default=0, help="layer (the split is defined for layer 0); default 0")
    p.add_argument("--corpus", nargs="+", metavar="PATH", help="text files or directories (UTF-8) for TV distances")
    p.add_argument("--sample-corpus", action="store_true", help="use headscope's bundled sample text as corpus")
    p.add_argument("--max-windows", type=int, default=None, help="at most this many n_ctx windows; default 32")
    p.add_argument("--window", type=int, default=None, help="window length in tokens (BOS included); default n_ctx")
    p.add_argument("--query", default=None, help="query token for the kernels; default ' the'")
    p.add_argument("--c", default=None, help="'measured' (default), 'gpt2' (3.5) or a positive number")
    p.add_argument("--n-ref", type=int_at_least(1, "a query position"), default=None,
                   help="reference query position, 1..n_ctx-1; default 255 (capped at n_ctx-1)")
    p.add_argument("--rule", default=None, choices=RULES,
                   help="category rule: 'shape' (default: fitted decay length at several n, position 0 left out) "
                        "or 'width' (effective width 1/Σpos² at n_ref)")
    p.add_argument("--out", help="directory for kernels.json and SVG figures")


def _check_indices(args, cfg) -> None:
    """--layer, --window and --n-ref against config.json's sizes."""
    cfg.check_layer(args.layer)
    if args.window is not None and not 2 <= args.window <= cfg.n_ctx:
        raise HeadscopeError(f"--window: expected 2..{cfg.n_ctx}, got {args.window}")
    if args.n_ref is not None and cfg.positional != "rotary":
        check_n_ref(cfg, args.n_ref)


def run(args) -> int:
    if args.out:
        refuse_foreign_dir(Path(args.out), OUT_MARKER)
    model = load_model(args, check=lambda cfg: _check_indices(args, cfg))      # before any weight is read
    model.cfg.check_layer(args.layer)
    if model.cfg.positional == "rotary":                    # no W_pos: the relative-position analogue
        return _run_relative(args, model)
    args.query = SEED_QUERY if args.query is None else args.query
    args.c = "measured" if args.c is None else args.c
    args.rule = DEFAULT_RULE if args.rule is None else args.rule
    args.max_windows = 32 if args.max_windows is None else args.max_windows
    if args.max_windows < 1:
        raise HeadscopeError(f"--max-windows: expected ≥ 1, got {args.max_windows}")
    if args.window is not None and not 2 <= args.window <= model.cfg.n_ctx:
        raise HeadscopeError(f"--window: expected 2..{model.cfg.n_ctx}, got {args.window}")
    texts = []
    if args.corpus:
        texts += read_corpus(args.corpus)
    if args.sample_corpus:
        texts += sample_corpus()
    wins = windows(model, texts, n_ctx=args.window, max_windows=args.max_windows) if texts else None
    report = analyse_kernels(model, layer=args.layer, query=args.query, c=args.c, windows=wins, n_ref=args.n_ref,
                             rule_name=args.rule)
    d = report.to_dict()
    if args.out:  # staged, then committed together (headscope._atomic's output rule)
        with atomic_directory(Path(args.out), marker=OUT_MARKER) as staging:
            (staging / OUT_MARKER).write_text(dumps(d), encoding="utf-8")
            for name, svg in V.figures(d):          # kernels.svg, tv_hist.svg, tv_position.svg
                (staging / name).write_text(svg + "\n", encoding="utf-8")
    emit(args, report, V.text(d))
    return 0


#: options of the learned-position kernels that a rotary model's relative kernel has no use for, and why
NOT_ROTARY = {
    "query": "the relative kernel is that of the mean query and key over the vocabulary, not of one query token",
    "c": "c is the typical embedding norm of the W_pos key split; a rotary model has no W_pos",
    "corpus": "the TV of the W_pos key split needs learned positions (the rotary split's TV is the report's "
              "kernels stage, headscope.layer0.rotary_split.split_tv)",
    "sample_corpus": "the TV of the W_pos key split needs learned positions",
    "max_windows": "it bounds the corpus of the W_pos key split's TV, which a rotary model has not",
    "window": "it sets the corpus windows of the W_pos key split's TV, which a rotary model has not",
}


def _run_relative(args, model) -> int:
    """A rotary model's layer-0 relative kernels (headscope.layer0.relative), text or --json; --n-ref,
    --rule (the category shown) and --out apply, the options of the W_pos split are refused."""
    from ..layer0 import relative

    if args.layer != 0:
        raise HeadscopeError(f"--layer: the relative kernel reads layer 0's token queries and keys; expected 0, "
                             f"got {args.layer}")
    for name, why in NOT_ROTARY.items():
        if getattr(args, name) not in (None, False):
            raise HeadscopeError(f"--{name.replace('_', '-')} does not apply to a rotary model: {why}")
    if args.n_ref is not None and args.n_ref < 1:
        raise HeadscopeError(f"--n-ref: expected a query position ≥ 1, got {args.n_ref}")
    rk = relative.relative_kernels(model.weights(), n_ref=args.n_ref)
    d = rk.to_dict() | {"rule": args.rule or DEFAULT_RULE}
    if args.out:
        with atomic_directory(Path(args.out), marker=OUT_MARKER) as staging:
            (staging / OUT_MARKER).write_text(dumps(d), encoding="utf-8")
            for name, svg in V.relative_figures(d):
                (staging / name).write_text(svg + "\n", encoding="utf-8")
    emit(args, rk, V.relative_text(d))
    return 0
