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
"""

from __future__ import annotations

from pathlib import Path

from .._atomic import atomic_write_text, check_output_file, json_object_with
from .._errors import HeadscopeError
from .._json import dumps
from ..reproduce import reproduce
from .args import emit, load_model


def add_arguments(p):
    p.add_argument("model", nargs="?", default=None, help="hub id or checkpoint directory (default gpt2)")
    p.add_argument("--model", dest="model_opt", default=None, metavar="MODEL",
                   help="the same as the positional MODEL")
    p.add_argument("--out", default=None, help="also write the JSON result to this file")
    p.add_argument("--no-details", action="store_true", help="leave the supporting figures out of the JSON")


#: recognises an earlier `reproduce --out` file, which a rerun may replace (the output rule)
OWNED = json_object_with("source", "fingerprint", "reference", "rows")


def run(args) -> int:
    if args.model and args.model_opt and args.model != args.model_opt:
        raise HeadscopeError(f"two models given: {args.model!r} and --model {args.model_opt!r}")
    args.model = args.model or args.model_opt or "gpt2"
    if args.out:                                        # before any work
        check_output_file(args.out, owned=OWNED)
    model = load_model(args)
    res = reproduce(model, details=not args.no_details)
    if args.out:
        atomic_write_text(Path(args.out), dumps(res.to_dict()), owned=OWNED)
    emit(args, res, res.render())
    return 0 if res.ok else 1
