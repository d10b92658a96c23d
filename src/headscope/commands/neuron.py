"""One MLP0 neuron on texts: its true pre-activation beside the contextual circuit's prediction.

  headscope neuron planted/ 1602 --text british.txt american.txt --calibration calib.json
  headscope neuron planted/ 1602 --text a.txt --out heat.html --json

The HTML page shows every text twice as tokens coloured by the true pre-activation and
by the circuit's prediction (blue negative, red positive; a colour-blind-safe diverging
scale shared by both; hover for the value). JSON: neuron, heads, query, correlation (all
positions), texts (name, tokens, ids, true, predicted, correlation per text). A text
longer than the calibrated window is cut into windows ([BOS] + chunk), one entry of
texts each, named "FILE [window i/n]".
"""

from __future__ import annotations

from pathlib import Path

from .._atomic import atomic_write_text, check_output_file, starts_with
from ..corpus import windows
from .._input import read_text_file
from ..layer0.neurons import neuron_trace
from ..report import html as H
from ..report.views import neuron as V
from .args import emit, int_at_least, load_model
from .circuit_args import add_calibration_arguments, circuit_from_args, parse_heads


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, …) or checkpoint directory")
    p.add_argument("neuron", type=int_at_least(0, "a neuron index"), help="layer-0 MLP neuron index")
    p.add_argument("--text", nargs="+", required=True, metavar="FILE", help="UTF-8 text files")
    add_calibration_arguments(p)
    p.add_argument("--out", metavar="HTML", help="write a token heatmap (HTML)")


#: recognises an earlier page of this command, which a rerun may replace (the output rule)
#: only by the marker naming this command, never by the prefix every headscope page shares
OWNED = starts_with(b"<!DOCTYPE html>\n", H.output_marker("neuron").encode())


def run(args) -> int:
    if args.out:                                        # before any work
        check_output_file(args.out, owned=OWNED)
    model = load_model(args, check=lambda cfg: (cfg.check_neuron(args.neuron), parse_heads(args.heads, cfg)))
    circuit, _ = circuit_from_args(args, model)
    # a text longer than the calibrated window is cut into windows, each traced on its own
    texts, names = [], []
    for f in args.text:
        text = read_text_file(f, "--text file", allow_empty=False)
        wins = windows(model, [text], n_ctx=circuit.calibration.n_positions)
        texts += wins
        names += [f if len(wins) == 1 else f"{f} [window {i + 1}/{len(wins)}]" for i in range(len(wins))]
    trace = neuron_trace(circuit, args.neuron, model.tokenizer, texts)
    for name, t in zip(names, trace.texts):
        t["name"] = name
    d = trace.to_dict()
    if args.out:
        atomic_write_text(Path(args.out), V.page(d), owned=OWNED)
    emit(args, trace, V.text(d))
    return 0
