"""The claims table's supporting figures (the JSON's ``details``): the kernels, the head choice, the
neuron count under every contribution variant, head set and calibration text, the steering sweep."""

from __future__ import annotations

import dataclasses
import math

import torch

from .. import shipped
from .._errors import HeadscopeError
from ..layer0.calibration import MIN_SAMPLES, STRIDE, calibrate
from ..layer0.contextual import build_circuit
from ..layer0.neurons import AUTHORS_LN2, DEFAULT_THRESHOLD, ln2_divisor, parse_variant, rank_neurons, scan_neurons
from ..layer0.split import SEED_QUERY
from .reference import Reference, resolve_heads
from .work import Work

#: contribution variants whose neuron counts the details list (neurons.parse_variant specs)
NEURON_VARIANTS = ("paper", "scaled", "code", "pos=without", f"ln2={AUTHORS_LN2:g}", "max=abs", "glitch=exclude",
                   "position=500", "position=255")


def details(w: Work, claims: dict, ref: Reference) -> dict:
    """Supporting figures (each only if its measurement succeeded)."""
    d: dict = {}

    def put(key, fn):
        try:
            d[key] = fn()
        except HeadscopeError as e:
            d[key] = {"error": str(e)}

    put("kernels", lambda: [{"head": k.head, "category": k.category, "width": k.width, "tv_median": k.tv_median,
                              "tv_p90": k.tv_p90, "category_width": k.category_width,
                              "shape_decay_rate": k.shape_decay_rate} for k in w.kernels.heads])
    put("heads_used", lambda: {"spec": w.heads_spec if isinstance(w.heads_spec, str) else list(w.heads_spec),
                               "heads": w.circuit[1].heads})
    put("head_choice", lambda: w.circuit[1].to_dict())
    put("head_choice_auto", lambda: w.auto_choice.to_dict())
    put("neurons_above_threshold", lambda: [{"neuron": n["neuron"], "max_contribution": n["max_contribution"]}
                                            for n in w.scan.neurons])
    put("calibration", lambda: {"n_text_tokens": w.calibration.n_text_tokens, "n_windows": w.calibration.n_windows,
                                "stride": STRIDE, "min_samples": MIN_SAMPLES,
                                "samples_at": {str(n): w.calibration.counts[n] for n in sorted(
                                    {0, 255, 500, w.calibration.n_positions - 1}) if n < w.calibration.n_positions}})
    # the neuron count under other variants, head sets and texts: kept for the process (claims.work.shared)
    for key, fn, deps in (("neuron_variants", _neuron_variants, ("heads",)),
                          ("neuron_head_sets", _neuron_head_sets, ("heads", "variant", "threshold", "published")),
                          ("neuron_calibration_texts", _neuron_calibrations, ("heads", "variant", "threshold")),
                          ("neurons_robust_top", _robust_top, ("heads", "variant"))):
        put(key, lambda key=key, fn=fn, deps=deps: w.memo(key, deps, lambda: fn(w)))
    put("neuron", lambda: {"neuron": ref.neuron, **w.neuron_tokens(ref.neuron)})
    put("denominators", lambda: {"window": w.denominators.window, "n_windows": w.denominators.n_texts,
                                 "median_rel_spread": w.denominators.median_rel_spread})
    put("circuit_fidelity", lambda: {"heads": w.fidelity.heads, "query": w.fidelity.query,
                                     "scan_position": w.scan.position,
                                     "by_position": [{"position": m, "r": w.fidelity.correlation[0][k],
                                                      "fvu": w.fidelity.fvu[0][k]}
                                                     for k, m in enumerate(w.fidelity.positions)],
                                     "median_all_positions": [w.fidelity.median_correlation, w.fidelity.median_fvu]})
    put("survey_top5", lambda: [r.to_dict() for r in w.survey.rows[:5]])
    put("survey_seed_top5", lambda: {"prompts": w.seed_survey.prompts,
                                     "rows": [r.to_dict() for r in w.seed_survey.rows[:5]]})
    put("eigenvalues_top64", lambda: w.form.eigenvalues[:64].tolist())
    sweep = next(c for c in claims["claims"] if c["id"] == "steer_restores_self")["sweep"]
    put("steering_sweep", lambda: [{"alpha": a, "self_attention_before": w.steer(a).self_attention_before,
                                    "self_attention_after": w.steer(a).self_attention_after,
                                    "self_rank_after": w.steer(a).self_rank_after,
                                    "rebuild_error": w.steer(a).rebuild_error} for a in sweep])
    put("authors_steering", lambda: {k: v for k, v in w.authors_steer.to_dict().items() if k != "scores"})
    return d


def _neuron_variants(w: Work) -> list[dict]:
    """The neuron count (threshold 5.0) under every contribution variant, same heads and calibration.

    Variants that differ only in the LN2 divisor or in max vs max |·| share one pass over
    the vocabulary: a neuron's scores are linear in 1/divisor, so its max (and min) under
    divisor D is (max, min) at divisor 1 over D (tests/integration/test_fidelity_neurons.py
    checks this against separate scans).
    """
    circuit, choice = w.circuit
    passes: dict = {}
    out = []
    for spec in NEURON_VARIANTS:
        v = parse_variant(spec)
        key = (v.position, v.position_part, v.glitch)
        try:
            if key not in passes:
                base = dataclasses.replace(v, ln2="none", max="signed")
                passes[key] = scan_neurons(circuit, choice, w.model.tokenizer, threshold=math.inf, top=1, variant=base)
            scan = passes[key]
        except HeadscopeError as e:
            out.append({"variant": spec, "spec": v.spec(), "error": str(e)})
            continue
        d = ln2_divisor(circuit, v)
        hi, lo = torch.tensor(scan.max_all) / d, torch.tensor(scan.min_all) / d
        score = hi if v.max == "signed" else torch.maximum(hi, -lo)
        found = (score >= DEFAULT_THRESHOLD).nonzero().squeeze(1).tolist()
        out.append({"variant": spec, "spec": v.spec(), "position": scan.position, "n_neurons": len(found),
                    "neurons": sorted(found) if len(found) <= 30 else None})
    return out


def _neuron_head_sets(w: Work) -> list[dict]:
    """The neuron count (variant ``paper``) with the published, Gibson's and the automatic head sets."""
    out = []
    for spec in ("published", "code", "auto"):
        try:
            heads = resolve_heads(spec, w.ref, w.model.cfg.n_heads)
            if heads == w.circuit[1].heads and w.variant.name == "paper":
                choice, n = w.circuit[1], len(w.scan.neurons)
            else:
                circuit, choice = build_circuit(w.model, w.calibration, heads=heads)
                n = len(scan_neurons(circuit, choice, w.model.tokenizer, threshold=DEFAULT_THRESHOLD, top=1).neurons)
        except HeadscopeError as e:
            out.append({"heads": spec, "error": str(e)})
            continue
        out.append({"heads": spec, "head_ids": choice.heads, "n_neurons": n})
    return out


def _neuron_calibrations(w: Work) -> list[dict]:
    """The neuron count (variant ``paper``, the heads used) with another calibration text, at the
    largest position it samples at least MIN_SAMPLES times."""
    name, text = shipped.sample_corpus()[0]
    cal = calibrate(w.model, text, query=SEED_QUERY)
    ok = [n for n, k in enumerate(cal.counts) if k >= MIN_SAMPLES]
    out = [{"calibration": "headscope:calibration.txt", "position": w.scan.position, "n_neurons": len(w.scan.neurons),
            "samples": w.calibration.counts[w.scan.position]}]
    if not ok:
        return out + [{"calibration": name, "error": f"no position has {MIN_SAMPLES} samples"}]
    circuit, choice = build_circuit(w.model, cal, heads=w.circuit[1].heads, position=ok[-1])
    scan = scan_neurons(circuit, choice, w.model.tokenizer, threshold=DEFAULT_THRESHOLD, top=1)
    return out + [{"calibration": name, "position": scan.position, "n_neurons": len(scan.neurons),
                   "samples": cal.counts[scan.position]}]


def _robust_top(w: Work, n: int = 10) -> dict:
    circuit, choice = w.circuit
    r = rank_neurons(circuit, choice, w.model.tokenizer, variant=w.variant)
    return {"k": r.k, "n_random": r.n_random,
            "by_robust": [{"neuron": j, "robust": r.robust[j], "max": r.max[j]} for j in r.order_robust[:n]],
            "by_max": r.order_max[:n]}

