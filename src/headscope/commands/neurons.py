"""Contextual MLP0 neurons from weights and one calibration (seed 000).

Builds the calibrated contextual circuit (heads chosen automatically unless --heads),
scans the whole vocabulary for every layer-0 MLP neuron, and lists the neurons whose
maximum token contribution reaches --threshold (default 5.0, the seed's), with their
top and bottom tokens.

  headscope neurons planted/ --calibration calib.json
  headscope neurons planted/ --calibration-text calib.txt --threshold 5 --top 20 --json
  headscope neurons gpt2 --calibration calib.json --heads 0,2,6,8,9,10
  headscope neurons gpt2 --variant code --heads 0,2,6,8,9,10,11     # Gibson's code's definitions
  headscope neurons gpt2 --variant paper,ln2=none,max=abs --rank robust

--variant: how a token's contribution becomes a neuron's score, a name (paper: the
seed's formula, no LayerNorm-2 scale, the default; scaled: paper divided by the
calibrated median LayerNorm-2 scale, the change of the neuron's pre-activation; code:
Gibson's public code, piece by piece) optionally followed by ,key=value overrides:
pos=with|without (the W_pos[n] part of the value), ln2=median|none|X (divide by the
calibrated median LayerNorm-2 scale, nothing, or X),
max=signed|abs, glitch=keep|exclude|FILE (under-trained tokens out of the max, or the
token strings of a JSON list), position=N (query position n). docs/fidelity.md
compares every choice with the authors' code.

--rank robust also scores every neuron by its k-th largest token score over the same
statistic for random readouts of its norm (the null), so that a neuron reaching a high
max through one outlier token does not outrank neurons driven by many tokens.

JSON: heads (chosen heads), head_choice (metrics and reason), neurons (neuron,
max_contribution, min_contribution, top_tokens/top_ids/top_values, bottom_tokens/…;
sorted by max_contribution descending), threshold, position, query, fingerprint,
processing, ln2_scale.
"""

from __future__ import annotations

from .._errors import HeadscopeError
from ..layer0.neurons import check_k, parse_variant, rank_neurons, scan_neurons
from ..report.views import neurons as V
from .args import emit, load_model, parse_float
from .circuit_args import add_calibration_arguments, circuit_from_args, parse_heads


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, …) or checkpoint directory")
    add_calibration_arguments(p)
    p.add_argument("--threshold", default="5.0", help="minimum max token contribution; default 5.0")
    p.add_argument("--top", type=int, default=50, help="top/bottom tokens per neuron; default 50")
    p.add_argument("--variant", default=None, metavar="SPEC",
                   help="contribution variant: paper (default) or code, with ,key=value overrides "
                        "(pos=with|without, ln2=median|none|X, max=signed|abs, glitch=keep|exclude|FILE, position=N)")
    p.add_argument("--rank", default="max", choices=["max", "robust"],
                   help="max: the seed's max token contribution (default); robust: also a null-calibrated k-th largest score")
    p.add_argument("--k", type=int, default=10, help="the robust score reads the k-th largest token score (default 10)")


def run(args) -> int:
    threshold = parse_float(args.threshold, "--threshold")
    if args.top < 1:
        raise HeadscopeError(f"--top: expected at least 1, got {args.top}")
    if args.k < 1:
        raise HeadscopeError(f"--k: expected at least 1, got {args.k}")
    check_k(args.k)                                     # before any work
    variant = parse_variant(args.variant) if args.variant is not None else None
    model = load_model(args, check=lambda cfg: parse_heads(args.heads, cfg))     # before any weight is read
    circuit, choice = circuit_from_args(args, model)
    if variant is not None and variant.position is not None:
        circuit._check_n(variant.position)
    scan = scan_neurons(circuit, choice, model.tokenizer, threshold=threshold, top=args.top, variant=variant)
    if args.rank == "robust":
        ranking = rank_neurons(circuit, choice, model.tokenizer, variant=variant, k=args.k)
        d = scan.to_dict()
        d["ranking"] = ranking.to_dict(top=max(args.top, 50))
        emit(args, d, V.text(d) + "\n" + V.ranking_text(d["ranking"]))
        return 0
    emit(args, scan, V.text(scan.to_dict()))
    return 0
