"""Steer a head by scaling eigenvalues of its QK form, and write the steered checkpoint.

Negative eigenvalues (default) or chosen ones (--eigen 0,3,7, indices by |λ| order)
of the symmetric part are multiplied by ALPHA (the post uses 1.1, 0, −0.5); W_Q and
W_K are rebuilt exactly (rank ≤ d_head, skew part kept unless --drop-skew) and
written as a Hugging Face checkpoint. Self-attention probability and the rank of
self are measured on category prompts before and after.

  headscope steer gpt2 1.5 --scale-negative 0 --out steered/
  headscope steer planted/ 1.5 --scale-negative -0.5 --out steered/ --json
  headscope steer gpt2 1.5 --scale-negative 0 --preset seed --out steered/

--preset seed also steers the authors' way and prints it beside the checkpoint's
figures: the 64 eigenpairs of largest |λ| of the symmetric part, the negative ones
scaled by ALPHA, the skew part added back, and the raw bilinear scores of their 30
tokens (mean self score, same-group and other-group scores, rank of self; JSON key
"authors"), with the top-64 truncation error; the checkpoint then scales the negative
eigenvalues among the top 64 (--select negative-top64), and its rebuild error is shown.
"""

from __future__ import annotations

import re
from pathlib import Path

from .._atomic import refuse_foreign_dir
from .._errors import HeadscopeError
from ..report.views import steering as V
from ..semantic.options import SteerOptions
from ..semantic.steering import MARKER, SELECTS, authors_steer, save_steered, steer
from .args import emit, load_model, parse_float, parse_head


def add_arguments(p):
    p.add_argument("model", help="hub id or checkpoint directory")
    p.add_argument("head", help="LAYER.HEAD, e.g. 1.5")
    p.add_argument("--scale-negative", dest="alpha", required=True, metavar="ALPHA",
                   help="factor for the selected eigenvalues (a number)")
    p.add_argument("--eigen", default=None, help="comma-separated eigenvalue indices instead of all negative ones")
    p.add_argument("--drop-skew", action="store_true", help="also drop the skew-symmetric part")
    p.add_argument("--out", required=True, help="directory for the steered checkpoint")
    p.add_argument("--categories", default=None, help="JSON file {category: [words]} for the measurement prompts")
    p.add_argument("--select", default=None, choices=SELECTS,
                   help="eigenvalues to scale: every negative one (default) or the negative ones among the top 64 "
                        "by |λ| (the authors'; default with --preset seed)")
    p.add_argument("--preset", default="headscope", choices=["headscope", "seed"],
                   help="seed: also report the authors' raw-score steering of their 30 tokens")


def run(args) -> int:
    alpha = parse_float(args.alpha, "--scale-negative")
    select = args.select                                # None: the preset's (SteerOptions)
    if args.eigen is not None:
        items = [x.strip() for x in args.eigen.split(",") if x.strip()]
        if not all(re.fullmatch(r"-?[0-9]{1,9}", x) for x in items):      # ASCII digits only
            raise HeadscopeError(f"--eigen: expected comma-separated integers, got {args.eigen!r}")
        select = tuple(int(x) for x in items)
        if not select:
            raise HeadscopeError(f"--eigen: expected at least one eigenvalue index, got {args.eigen!r}")
        twice = sorted({i for i in select if select.count(i) > 1})
        if twice:       # each selected eigenvalue is scaled once: a repeat would scale it twice
            raise HeadscopeError(f"--eigen: expected distinct eigenvalue indices, got {twice[0]} more than once "
                                 f"in {args.eigen!r}")
    refuse_foreign_dir(Path(args.out), MARKER)          # before any work
    model = load_model(args, check=lambda cfg: parse_head(args.head, cfg))       # before any weight is read
    layer, head = parse_head(args.head, model.cfg)
    options = SteerOptions(preset=args.preset, select=select, keep_skew=not args.drop_skew,
                           categories=args.categories)
    steered = steer(model, layer, head, alpha, options)
    if args.preset == "seed":
        authors = authors_steer(model, layer, head, (alpha,))
    res = save_steered(model, steered, args.out)
    d = res.to_dict()
    if args.preset == "seed":
        a = authors.to_dict()
        emit(args, {**d, "authors": a}, V.text(d) + "\n" + V.authors_text(a))
        return 0
    emit(args, res, V.text(d))
    return 0
