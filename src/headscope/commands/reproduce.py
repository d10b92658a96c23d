"""Measure the claims of the two seed studies on a model: one row per claim.

Each row gives the published figure, headscope's figure, the stated tolerance and
PASS / FAIL. On GPT-2 Small (the default, ``--model gpt2``) the published column holds
the seeds' figures; on a checkpoint written by ``headscope plant`` it holds what its
planted.json manifest documents. Exit status 0 when every claim passes, 1 when one
fails, 2 when the model cannot be loaded (offline without a cached copy, say).

  headscope reproduce                       # GPT-2 Small from the hub (or the HF cache)
  headscope reproduce --model ./gpt2-dir    # a local GPT-2 directory
  headscope reproduce planted/ --json       # a planted checkpoint vs its manifest
  headscope reproduce --out claims.json     # also write the JSON (atomically)
  headscope reproduce --heads code          # downstream layer-0 rows with heads 0,2,6,8,9,10,11
  headscope reproduce ./any-model --find    # locate the model's own components first, then the claims

--find: instead of GPT-2's indices or a manifest, locate the components by criteria relative to the
model's own null and scale (headscope.claims.find); every row names its component and why.

--heads: the layer-0 heads of the downstream rows (neuron count and lists, neuron
704's texts, circuit fidelity, worst denominators): published (default; 0,2,6,8,9,10
for GPT-2 Small, the manifest's for a planted model), seed, code (0,2,6,8,9,10,11 as
Gibson's code), auto (headscope's automatic choice) or indices. The automatic choice
is always its own row (contextual_heads_auto). --variant: the neurons' contribution
variant (see `headscope neurons --help`); the JSON details list the neuron count under
every variant, head set and a second calibration text. docs/fidelity.md compares each
definition with the authors' code.

--revisions A,B,… --revisions-out DIR runs the claims table once per hub revision (a
JSON per revision, revisions.json with each claim's measured value and verdict per
revision, revisions.svg); exit 1 when a claim fails on any revision (docs/revisions.md).
"""

from __future__ import annotations

from pathlib import Path

from .._atomic import atomic_write_text, check_output_file, json_object_with
from .._errors import HeadscopeError
from .._json import dumps
from ..report.views import reproduce as V
from ..reproduce import reproduce
from . import revisions as _revisions
from .args import emit, load_model


def add_arguments(p):
    p.add_argument("model", nargs="?", default=None, help="hub id or checkpoint directory (default gpt2)")
    p.add_argument("--model", dest="model_opt", default=None, metavar="MODEL",
                   help="the same as the positional MODEL")
    p.add_argument("--out", default=None, help="also write the JSON result to this file")
    p.add_argument("--no-details", action="store_true", help="leave the supporting figures out of the JSON")
    p.add_argument("--heads", default="published",
                   help="heads of the downstream layer-0 rows: published (default), seed, code, auto or indices "
                        "such as 0,2,6,8,9,10,11")
    p.add_argument("--variant", default=None, metavar="SPEC",
                   help="contribution variant of the neuron rows: paper (default), code, with ,key=value overrides")
    p.add_argument("--find", action="store_true",
                   help="first locate the model's own components (contextual heads, semantic head, contextual and "
                        "dialect neurons, worst denominator heads) and run every claim on them")
    _revisions.add_arguments(p)


#: recognises an earlier `reproduce --out` file, which a rerun may replace (the output rule)
OWNED = json_object_with("source", "fingerprint", "reference", "rows")


def run(args) -> int:
    if args.model and args.model_opt and args.model != args.model_opt:
        raise HeadscopeError(f"two models given: {args.model!r} and --model {args.model_opt!r}")
    args.model = args.model or args.model_opt or "gpt2"
    if args.find and args.revisions is not None:
        raise HeadscopeError("--find runs on one model; leave out --revisions")
    revisions = _revisions.requested(args)
    if revisions is not None and args.out:
        raise HeadscopeError("--out writes one revision's JSON; with --revisions they go to --revisions-out")
    if args.out:                                        # before any work
        check_output_file(args.out, owned=OWNED)
    from ..layer0.neurons import parse_variant

    variant = parse_variant(args.variant) if args.variant is not None else None
    if args.heads not in ("published", "auto", "seed", "code") and \
            not all(x.strip().isdigit() for x in args.heads.split(",") if x.strip()):
        raise HeadscopeError(f"--heads: expected published, auto, seed, code or indices such as 0,2,6, "
                             f"got {args.heads!r}")
    if revisions is not None:
        return _revisions.run(args, revisions, "reproduce", {"details": not args.no_details, "heads": args.heads,
                                                             "variant": args.variant})
    model = load_model(args)
    res = reproduce(model, details=not args.no_details, heads=args.heads, variant=variant, find=args.find)
    if args.out:
        atomic_write_text(Path(args.out), dumps(res.to_dict()), owned=OWNED)
    emit(args, res, V.text(res.to_dict()))
    return 0 if res.ok else 1
