"""Stability of the layer-0 softmax denominators across texts, measured vs i.i.d. predictions.

For a fixed query token (default ' the') at every position, each head's denominator
in the seed's normalisation S = Σ_j pos·content, over windows of a corpus: mean,
relative spread across texts, input-independent trend, and the Hoeffding / Chebyshev
predictions of an i.i.d. token model (unigram distribution of the corpus).

  headscope denominators planted/ --corpus texts/ --window 256
  headscope denominators gpt2 --corpus book.txt --out denoms/ --json
  headscope denominators gpt2 --corpus texts/ --own-query    # the text's own queries (hook_denom)

--out DIR writes denominators.json and denominators.svg (traces per head).
"""

from __future__ import annotations

from pathlib import Path

from .._atomic import atomic_directory, refuse_foreign_dir
from .._json import dumps
from ..corpus import read_corpus, windows
from ..layer0.denominators import denominator_stability
from ..layer0.split import SEED_QUERY
from ..report.views import denominators as V
from .args import emit, load_model, parse_float


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, …) or checkpoint directory")
    p.add_argument("--corpus", nargs="+", required=True, metavar="PATH", help="text files or directories (UTF-8)")
    p.add_argument("--query", default=SEED_QUERY, help="fixed query token; default ' the'")
    p.add_argument("--own-query", action="store_true", help="use each text's own query tokens (model's hook_denom)")
    p.add_argument("--window", type=int, default=256, help="window length in tokens (BOS included); default 256")
    p.add_argument("--delta", default="0.1", help="level of the Hoeffding/Chebyshev bounds; default 0.1")
    p.add_argument("--out", help="directory for denominators.json and denominators.svg")


def run(args) -> int:
    if args.out:                      # refuse a foreign directory before any work
        refuse_foreign_dir(Path(args.out), "denominators.json")
    model = load_model(args)
    wins = windows(model, read_corpus(args.corpus), n_ctx=min(args.window, model.cfg.n_ctx))
    window = min(args.window, model.cfg.n_ctx)
    r = denominator_stability(model, wins, query=None if args.own_query else args.query, window=window,
                              n_min=min(32, window // 4), stride=max(1, min(16, window // 4)),
                              delta=parse_float(args.delta, "--delta"))
    d = r.to_dict()
    if args.out:  # staged, then committed together (headscope._atomic's output rule)
        with atomic_directory(Path(args.out), marker="denominators.json") as staging:
            (staging / "denominators.json").write_text(dumps(d), encoding="utf-8")
            (staging / "denominators.svg").write_text(V.traces_figure(d) + "\n", encoding="utf-8")
    emit(args, r, V.text(d))
    return 0
