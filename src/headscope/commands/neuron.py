"""One MLP0 neuron on texts: its true pre-activation beside the contextual circuit's prediction.

  headscope neuron planted/ 1602 --text british.txt american.txt --calibration calib.json
  headscope neuron planted/ 1602 --text a.txt --out heat.html --json

The HTML heatmap colours every token by the true pre-activation (blue negative, red
positive; a colour-blind-safe diverging scale) with the prediction in its tooltip.
JSON: neuron, heads, query, correlation (all positions), texts (name, tokens, ids, true,
predicted, correlation per text). A text longer than the calibrated window is cut into
windows ([BOS] + chunk), one entry of texts each, named "FILE [window i/n]".
"""

from __future__ import annotations

from pathlib import Path

from ._calib import add_calibration_arguments, circuit_from_args
from ._common import emit, load_model


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, …) or checkpoint directory")
    p.add_argument("neuron", type=int, help="layer-0 MLP neuron index")
    p.add_argument("--text", nargs="+", required=True, metavar="FILE", help="UTF-8 text files")
    add_calibration_arguments(p)
    p.add_argument("--out", metavar="HTML", help="write a token heatmap (HTML)")


def _colour(v: float, scale: float) -> str:
    """Diverging blue (#2166ac) – white – red (#b2182b), colour-blind-safe (ColorBrewer RdBu)."""
    t = max(-1.0, min(1.0, v / scale)) if scale > 0 else 0.0
    end = (178, 24, 43) if t > 0 else (33, 102, 172)
    rgb = [round(255 + (e - 255) * abs(t)) for e in end]
    return "#%02x%02x%02x" % tuple(rgb)


def render_html(trace, names: list[str]) -> str:
    from ..tokenizer import escape_token

    vals = [abs(v) for t in trace.texts for v in t["true"][1:]]
    scale = max(vals) if vals else 1.0
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>neuron "
             f"{trace.neuron}</title><style>body{{font-family:sans-serif}} .t{{white-space:pre-wrap;"
             "font-family:monospace;line-height:1.8}} span{{padding:1px 0}}</style></head><body>",
             f"<h1>MLP0 neuron {trace.neuron}</h1><p>heads {escape_token(str(trace.heads))}, query "
             f"{escape_token(repr(trace.query))}; correlation of true pre-activation and circuit prediction "
             f"{trace.correlation:.3f}. Colour: true pre-activation (blue &lt; 0 &lt; red), scale ±{scale:.3g}.</p>"]
    for name, t in zip(names, trace.texts):
        parts.append(f"<h2>{escape_token(name)} (r = {t['correlation']:.3f})</h2><div class='t'>")
        for tok, tv, pv in zip(t["tokens"], t["true"], t["predicted"]):
            parts.append(f"<span style='background:{_colour(tv, scale)}' title='true {tv:.3f}, predicted {pv:.3f}'>"
                         f"{escape_token(tok)}</span>")
        parts.append("</div>")
    parts.append("</body></html>\n")
    return "".join(parts)


def run(args) -> int:
    from .._atomic import atomic_write_text
    from .._errors import HeadscopeError
    from ..corpus import read_text_file, windows
    from ..neurons import neuron_trace

    model = load_model(args)
    circuit, _ = circuit_from_args(args, model)
    # a text longer than the calibrated window is cut into windows, each traced on its own
    texts, names = [], []
    for f in args.text:
        text = read_text_file(f)
        if not text.strip():
            raise HeadscopeError(f"--text {f}: expected some text, got an empty file")
        wins = windows(model, [text], n_ctx=circuit.calibration.n_positions)
        texts += wins
        names += [f if len(wins) == 1 else f"{f} [window {i + 1}/{len(wins)}]" for i in range(len(wins))]
    trace = neuron_trace(circuit, args.neuron, model.tokenizer, texts)
    for name, t in zip(names, trace.texts):
        t["name"] = name
    if args.out:
        atomic_write_text(Path(args.out), render_html(trace, names))
    lines = [f"neuron {trace.neuron}: correlation {trace.correlation:.3f} (heads {trace.heads})"]
    lines += [f"  {f}: r = {t['correlation']:.3f}, mean true {sum(t['true'][1:]) / max(len(t['true']) - 1, 1):.3f}"
              for f, t in zip(names, trace.texts)]
    emit(args, trace, "\n".join(lines))
    return 0
