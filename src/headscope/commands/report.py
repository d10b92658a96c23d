"""Write a self-contained HTML report of a model (opens from disk, no network, one inline script).

  headscope report gpt2 --out report/
  headscope plant --out planted/ && headscope report planted/ --out planted-report/
  headscope report gpt2 --out report/ --calibration-text my.txt --samples a.txt b.txt
  headscope report gpt2 --out report/ --stages attention --json

DIR gets index.html, a page per item (heads/L0H3.html, neurons/n123.html, …) and
data/<stage>.json with every number shown. Finished stages are cached in data/*.json
under a key of model fingerprint, options and input-text hashes: rerunning (or resuming
an interrupted run) skips them. --no-cache recomputes everything. The default texts ship
with headscope (headscope/data/calibration.txt, headscope/data/samples/*.txt).
A stage that fails (bad input it finds, a weight file changed under the run) is marked
"failed" with its reason, the other stages run and the report is written, then the command
exits 2 with one line naming the failed stages.

Stages, in order: model, attention (layers 0–1 on the samples), kernels (layer-0
positional kernels, TV of the key split), denominators (with Hoeffding/Chebyshev
bands), calibration, neurons (contextual MLP0 neurons), activations, survey (every head
by the semantic metrics), semantic (deep dives of the best heads), steering (α = 0 on
the top head's negative eigenvalues), atlas (every head from its weights: atlas.html
with a layer × head grid per metric, and a section on every head's page), composition.
With two or more torch threads, stages run side by side in two lanes (--lanes).
"""

from __future__ import annotations

from .._errors import HeadscopeError
from ..report import ReportOptions, build_report
from ..report.build import check_out_dir
from ..report.inputs import load_inputs
from .args import emit, load_model


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, …) or checkpoint directory")
    p.add_argument("--out", required=True, help="report directory (new, empty, or an earlier report)")
    p.add_argument("--calibration-text", metavar="FILE", help="calibration text (default: the shipped one)")
    p.add_argument("--samples", metavar="FILE", nargs="+", help="sample texts (default: the shipped ones)")
    p.add_argument("--stages", metavar="NAME", nargs="+", help="run only these stages (and what they need)")
    p.add_argument("--neurons", metavar="J", type=int, nargs="+", help="MLP0 neurons to show (default: the contextual ones)")
    p.add_argument("--deep-dives", type=int, default=2, metavar="N",
                   help="semantic deep dives of the N best survey heads; default 2")
    p.add_argument("--atlas-tokens", type=int, default=2000, metavar="N",
                   help="frequent tokens the atlas's metrics average over; default 2000")
    p.add_argument("--claims", action="store_true",
                   help="also the claims page: the seeds' claims on this model (reproduce; --find semantics on a model "
                        "that is neither GPT-2 Small nor planted), each row linked to its component's page")
    p.add_argument("--lanes", type=int, metavar="N",
                   help="stages side by side, each on torch's threads ÷ N (default: 2 with two or more threads, "
                        "d_model ≤ 768 and every processed block held, else 1; calibration, survey and atlas "
                        "always run alone on every thread). A stage's last digits may depend on its thread "
                        "count: --lanes 1 gives the numbers of one stage at a time")
    p.add_argument("--no-cache", action="store_true", help="recompute every stage, ignoring data/*.json")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")


def run(args) -> int:
    if args.deep_dives < 0:
        raise HeadscopeError(f"--deep-dives: expected 0 or more, got {args.deep_dives}")
    if args.atlas_tokens < 2:
        raise HeadscopeError(f"--atlas-tokens: expected ≥ 2, got {args.atlas_tokens}")
    if args.lanes is not None and args.lanes < 1:
        raise HeadscopeError(f"--lanes: expected ≥ 1, got {args.lanes}")
    check_out_dir(args.out)                              # fail before loading the model
    inputs = load_inputs(args.calibration_text, args.samples)     # … and on unreadable texts
    options = ReportOptions(calibration_text=args.calibration_text, samples=args.samples,
                            use_cache=not args.no_cache, progress=not args.no_progress,
                            stages=args.stages, neurons=args.neurons, deep_dives=args.deep_dives,
                            atlas_tokens=args.atlas_tokens, claims=args.claims, lanes=args.lanes)
    model = load_model(args)
    result = build_report(model, args.out, options, inputs=inputs)
    lines = [f"{s.name:<14} {s.status:<14} {s.seconds:7.2f} s"
             + (f"  peak RSS {s.peak_rss_mb / 1024:5.2f} GB" if s.peak_rss_mb is not None else "")
             + (f"  ({s.not_applicable})" if s.not_applicable is not None and s.failed is None else "")
             + (f"  ({s.failed})" if s.failed is not None else "")
             for s in result.stages]
    lines.append(f"wrote {result.index} ({len(result.pages)} pages)")
    emit(args, result, "\n".join(lines))
    if result.failed:       # the other stages ran and the report is written; the run still fails (exit 2)
        raise HeadscopeError("report stage" + ("s " if len(result.failed) > 1 else " ")
                             + "; ".join(f"{s.name} failed ({s.failed})" for s in result.failed)
                             + f"; the other stages ran and {result.index} was written")
    return 0
