"""Contextual MLP0 neurons from weights and one calibration (seed 000).

Builds the calibrated contextual circuit (heads chosen automatically unless --heads),
scans the whole vocabulary for every layer-0 MLP neuron, and lists the neurons whose
maximum token contribution reaches --threshold (default 5.0, the seed's), with their
top and bottom tokens.

  headscope neurons planted/ --calibration calib.json
  headscope neurons planted/ --calibration-text calib.txt --threshold 5 --top 20 --json
  headscope neurons gpt2 --calibration calib.json --heads 0,2,6,8,9,10

JSON: heads (chosen heads), head_choice (metrics and reason), neurons (neuron,
max_contribution, min_contribution, top_tokens/top_ids/top_values, bottom_tokens/…;
sorted by max_contribution descending), threshold, position, query, fingerprint,
processing, ln2_scale.
"""

from __future__ import annotations

from .._errors import HeadscopeError
from ..neurons import scan_neurons
from .args import emit, load_model, parse_float
from .circuit_args import add_calibration_arguments, circuit_from_args


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, …) or checkpoint directory")
    add_calibration_arguments(p)
    p.add_argument("--threshold", default="5.0", help="minimum max token contribution; default 5.0")
    p.add_argument("--top", type=int, default=50, help="top/bottom tokens per neuron; default 50")


def render(scan, shown: int = 10) -> str:
    lines = [f"heads {scan.heads} ({scan.head_choice.reason})",
             f"position {scan.position}  query {scan.query!r}  threshold {scan.threshold:g}: "
             f"{len(scan.neurons)} of {len(scan.max_all)} neurons"]
    for nr in scan.neurons:
        lines.append(f"{nr['neuron']:>6} {nr['max_contribution']:8.2f}  top {nr['top_tokens'][:shown]!r}")
        lines.append(f"{'':>15}  bottom {nr['bottom_tokens'][:shown]!r}")
    return "\n".join(lines)


def run(args) -> int:
    threshold = parse_float(args.threshold, "--threshold")
    if args.top < 1:
        raise HeadscopeError(f"--top: expected at least 1, got {args.top}")
    model = load_model(args)
    circuit, choice = circuit_from_args(args, model)
    scan = scan_neurons(circuit, choice, model.tokenizer, threshold=threshold, top=args.top)
    emit(args, scan, render(scan))
    return 0
