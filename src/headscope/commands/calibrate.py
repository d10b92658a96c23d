"""Sample the layer-0 softmax denominators on a calibration text (seed 000).

Every layer-0 head's denominator at every query position, with a fixed query token
(default ' the') against the text's own keys, averaged over the text's windows. The
file records the model's sha256, the processing, the query and the text's sha256;
`headscope neurons --calibration` refuses it for another model or other processing.

  headscope calibrate planted/ --text calib.txt --out calib.json
  headscope calibrate gpt2 --text book.txt --query " of" --window 512 --out calib.json --json
"""

from __future__ import annotations

from .._atomic import check_output_file
from ..layer0.calibration import MAX_WINDOWS, OWNED, SAMPLE_SEED, calibrate
from .._input import read_text_file
from ..layer0.split import SEED_QUERY
from .args import emit, int_at_least, load_model


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, …) or checkpoint directory")
    p.add_argument("--text", required=True, metavar="FILE", help="calibration text (UTF-8)")
    p.add_argument("--query", default=SEED_QUERY, help="query token (one token); default ' the'")
    p.add_argument("--window", type=int, default=None, help="window length in tokens (BOS included); default n_ctx")
    p.add_argument("--max-windows", type=int_at_least(1, "a window count"), default=MAX_WINDOWS, metavar="N",
                   help=f"run at most N windows: a uniform sample (seed {SAMPLE_SEED}) of the text's windows when it "
                        f"has more, so time and memory stay bounded (default {MAX_WINDOWS})")
    p.add_argument("--out", required=True, metavar="JSON", help="where to write the calibration (atomically)")


def run(args) -> int:
    check_output_file(args.out, owned=OWNED)            # before any work
    model = load_model(args)
    cal = calibrate(model, read_text_file(args.text, "calibration text"), query=args.query, window=args.window,
                    max_windows=args.max_windows)
    cal.save(args.out)
    summary = {"out": args.out, "fingerprint": cal.fingerprint, "processing": cal.processing,
               "query": cal.query, "text_sha256": cal.text_sha256, "n_windows": cal.n_windows,
               "n_text_windows": cal.n_text_windows,
               "n_positions": cal.n_positions, "ln2_scale": cal.ln2_scale}
    emit(args, summary, f"wrote {args.out}: {cal.n_windows} of the text's {cal.n_text_windows} windows, "
                        f"{cal.n_positions} positions, "
                        f"query {cal.query!r}, ln2 scale {cal.ln2_scale:.4g}")
    return 0
