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
from ..layer0.denominators import DenominatorStability, denominator_stability
from ..layer0.split import SEED_QUERY
from ..report import figures as F
from .args import emit, load_model, parse_float


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, …) or checkpoint directory")
    p.add_argument("--corpus", nargs="+", required=True, metavar="PATH", help="text files or directories (UTF-8)")
    p.add_argument("--query", default=SEED_QUERY, help="fixed query token; default ' the'")
    p.add_argument("--own-query", action="store_true", help="use each text's own query tokens (model's hook_denom)")
    p.add_argument("--window", type=int, default=256, help="window length in tokens (BOS included); default 256")
    p.add_argument("--delta", default="0.1", help="level of the Hoeffding/Chebyshev bounds; default 0.1")
    p.add_argument("--out", help="directory for denominators.json and denominators.svg")


def render(r) -> str:
    lines = [f"{r.n_texts} windows of {r.window} tokens, query {r.query!r}; {r.normalisation}",
             f"{'head':>4} {'spread':>8} {'slope':>10} {'pred_std':>9} {'meas_std':>9} {'cheb':>8} {'hoeff':>8} {'meas_q':>8}"]
    for h in r.heads:
        last = -1
        pred = f"{r.predicted_rel_std[h][last]:9.4f}" if r.predicted_rel_std else f"{'-':>9}"
        cheb = f"{r.chebyshev_rel[h][last]:8.4f}" if r.chebyshev_rel else f"{'-':>8}"
        hoef = f"{r.hoeffding_rel[h][last]:8.4f}" if r.hoeffding_rel else f"{'-':>8}"
        lines.append(f"{h:>4} {r.median_rel_spread[h]:8.4f} {r.trend_slope[h]:10.2e} {pred} "
                     f"{r.measured_rel_std[h][last]:9.4f} {cheb} {hoef} {r.measured_rel_quantile[h][last]:8.4f}")
    lines.append(f"(std/bounds relative to the mean, at position {r.positions[-1]}; bounds at level δ = {r.delta})")
    return "\n".join(lines)


def traces_svg(r: DenominatorStability) -> str:
    """One panel per head: S_h[n] of the sampled texts (thin) and their mean (thick), against n."""
    figs = []
    log = r.mean is None                 # S beyond float64: plot log S (r.absolute_overflow says why)
    mean, traces = (r.log_mean, r.log_traces) if log else (r.mean, r.traces)
    for h in r.heads:
        n = list(range(len(mean[h])))
        series = [F.Series(n, t[h], "") for t in traces] + [F.Series(n, mean[h], "mean over texts")]
        figs.append(F.line_plot(series, width=300, height=210, xlabel="query position n",
                                ylabel="log S[n]" if log else "S[n]",
                                title=f"head {h}: spread {r.median_rel_spread[h]:.3g}"))
    return F.panels(figs, cols=4, title=f"softmax denominators per head ({r.normalisation.split(':')[0]} "
                                        f"normalisation, query {r.query!r}, {r.n_texts} texts)") + "\n"


def run(args) -> int:
    if args.out:                      # refuse a foreign directory before any work
        refuse_foreign_dir(Path(args.out), "denominators.json")
    model = load_model(args)
    wins = windows(model, read_corpus(args.corpus), n_ctx=min(args.window, model.cfg.n_ctx))
    window = min(args.window, model.cfg.n_ctx)
    r = denominator_stability(model, wins, query=None if args.own_query else args.query, window=window,
                              n_min=min(32, window // 4), stride=max(1, min(16, window // 4)),
                              delta=parse_float(args.delta, "--delta"))
    if args.out:  # staged, then committed together (headscope._atomic's output rule)
        with atomic_directory(Path(args.out), marker="denominators.json") as staging:
            (staging / "denominators.json").write_text(dumps(r.to_dict()), encoding="utf-8")
            (staging / "denominators.svg").write_text(traces_svg(r), encoding="utf-8")
    emit(args, r, render(r))
    return 0
