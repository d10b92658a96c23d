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
from ..layer0.kernels import DEFAULT_RULE, RULES, TV_BINS, analyse_kernels
from ..layer0.split import SEED_QUERY
from ..report import figures as F
from ..shipped import sample_corpus
from .args import emit, load_model

OUT_MARKER = "kernels.json"


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, …) or checkpoint directory")
    p.add_argument("--layer", type=int, default=0, help="layer (the split is defined for layer 0); default 0")
    p.add_argument("--corpus", nargs="+", metavar="PATH", help="text files or directories (UTF-8) for TV distances")
    p.add_argument("--sample-corpus", action="store_true", help="use headscope's bundled sample text as corpus")
    p.add_argument("--max-windows", type=int, default=32, help="at most this many n_ctx windows; default 32")
    p.add_argument("--window", type=int, default=None, help="window length in tokens (BOS included); default n_ctx")
    p.add_argument("--query", default=SEED_QUERY, help="query token for the kernels; default ' the'")
    p.add_argument("--c", default="measured", help="'measured' (default), 'gpt2' (3.5) or a positive number")
    p.add_argument("--n-ref", type=int, default=None, help="reference query position; default 255 (capped at n_ctx-1)")
    p.add_argument("--rule", default=DEFAULT_RULE, choices=RULES,
                   help="category rule: 'shape' (default: fitted decay length at several n, position 0 left out) "
                        "or 'width' (effective width 1/Σpos² at n_ref)")
    p.add_argument("--out", help="directory for kernels.json and SVG figures")


def render(report) -> str:
    lines = [f"layer {report.layer}  query {report.query!r}  n_ref {report.n_ref}  "
             f"c {report.c:.4g} ({report.c_source})  processing {','.join(k for k, v in report.processing.items() if v)}  "
             f"categories by the {report.rule.get('name', 'width')} rule",
             f"{'head':>4} {'category':<16} {'width':>8} {'decay':>7} {'transl':>7} {'query':>7} "
             f"{'c_std':>6} {'boost':>6} {'tv_med':>7} {'tv_p90':>7}"]
    for h in report.heads:
        tv = (f"{h.tv_median:7.4f} {h.tv_p90:7.4f}" if h.tv_median is not None else f"{'-':>7} {'-':>7}")
        lines.append(f"{h.head:>4} {h.category:<16} {h.width:8.2f} {h.decay_rate:7.3f} {h.translation_tv:7.4f} "
                     f"{h.query_tv:7.4f} {h.content_std:6.3f} {h.content_boost:6.2f} {tv}")
    if report.corpus:
        lines.append(f"corpus: {report.corpus['n_windows']} windows, {report.corpus['n_queries']} query positions")
    return "\n".join(lines)


def write_figures(report, out: Path) -> list[Path]:
    """kernels.svg and, with a corpus, tv_hist.svg and tv_position.svg: one panel per head (into `out`)."""
    def save(name, figs, title):
        (out / name).write_text(F.panels(figs, cols=4, title=title) + "\n", encoding="utf-8")
        return out / name

    files = []
    kern = [F.line_plot([F.Series(list(range(len(h.kernel))), h.kernel, "")], log_y=True, width=300, height=210,
                        title=f"head {h.head}: {h.category}", xlabel="distance d = n − i", ylabel="pos")
            for h in report.heads]
    files.append(save("kernels.svg", kern, f"positional kernels pos(n={report.n_ref}, n−d), query {report.query!r}"))
    if report.corpus:
        hist = [F.histogram(edges=TV_BINS, counts=h.tv_hist, width=300, height=210, xlabel="TV(true, approx)",
                            title=f"head {h.head}: median {h.tv_median:.3f}", ylabel="query positions")
                for h in report.heads]
        files.append(save("tv_hist.svg", hist, "TV(true, approx) per query position"))
        per_pos = [F.line_plot([F.Series(list(range(len(h.tv_by_position))), h.tv_by_position, "")], width=300,
                               height=210, title=f"head {h.head}", xlabel="query position n", ylabel="mean TV")
                   for h in report.heads]
        files.append(save("tv_position.svg", per_pos, "mean TV by query position"))
    return files


def run(args) -> int:
    if args.out:
        refuse_foreign_dir(Path(args.out), OUT_MARKER)
    model = load_model(args)
    model.cfg.check_layer(args.layer)
    if model.cfg.positional == "rotary":                    # no W_pos: the relative-position analogue
        return _run_relative(args, model)
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
    if args.out:  # staged, then committed together (headscope._atomic's output rule)
        with atomic_directory(Path(args.out), marker=OUT_MARKER) as staging:
            (staging / OUT_MARKER).write_text(dumps(report.to_dict()), encoding="utf-8")
            write_figures(report, staging)
    emit(args, report, render(report))
    return 0


def _run_relative(args, model) -> int:
    """A rotary model's layer-0 relative kernels (headscope.layer0.relative), text or --json."""
    from ..layer0 import relative

    if args.layer != 0:
        raise HeadscopeError(f"--layer: the relative kernel reads layer 0's token queries and keys; expected 0, "
                             f"got {args.layer}")
    rk = relative.relative_kernels(model.weights())
    lines = [f"layer-0 relative kernels (rotary; n = {rk.n_ref}): head, peak offset Δ, width, category"]
    lines += [f"  L0H{h}  Δ={rk.peak_offset[h]}  width {rk.widths[h]:.2f}  {rk.shape[h]}" for h in range(len(rk.shape))]
    emit(args, rk, "\n".join(lines))
    return 0
