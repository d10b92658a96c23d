"""Seed 000's layer-0 study on rotary models, validated against the models' own computation.

On random-weight checkpoints built by transformers from each rotary family's config class (one layer,
realistic widths, GPT-2's real BPE so that the calibration and sample texts are ordinary English):
Llama (GQA 8/2, SwiGLU, θ base 5e5), Qwen2 (GQA 7/1, Q/K/V biases), Pythia sequential (rotary on a
quarter of each head) and Pythia with its parallel residual. Two variants of each: ``init`` (the
initialiser's weights, std 0.02: near-uniform layer-0 attention) and ``sharp`` (layer-0 W_Q, W_K and
the Q/K biases × 8, norms and biases randomised: attention that depends on content and distance).
And the planted rotary checkpoint (:mod:`headscope.planted.rotary`, its contextual heads 0.0/0.2 and
neuron 7), its neuron traced on texts whose topic density varies from 0 to 0.5.

Printed per model (docs/rotary-layer0.md quotes them): TV(true, approx) of the rotary split (median
and 90th percentile over heads × query positions of 4 windows of 128 tokens), the denominators'
median relative spread and predicted/measured relative std, the automatic head choice, the contextual
circuit's fidelity (median r and FVU against the chosen heads' true summed output, fixed query ' the'),
the neurons above the default threshold and the traces (r, FVU of MLP0's hook_pre vs the circuit's
prediction, the texts' own queries) of the three neurons with the largest max.

  python benchmarks/bench_rotary_layer0.py                     # every model
  python benchmarks/bench_rotary_layer0.py --models planted llama:sharp
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

#: family → (config class, kwargs, tokenizer family)
SHAPES = {
    "llama": ("LlamaConfig", dict(hidden_size=512, num_hidden_layers=1, num_attention_heads=8, num_key_value_heads=2,
                                  intermediate_size=1376, max_position_embeddings=256, rope_theta=500000.0,
                                  vocab_size=50259, tie_word_embeddings=True), "llama"),
    "qwen2": ("Qwen2Config", dict(hidden_size=448, num_hidden_layers=1, num_attention_heads=7, num_key_value_heads=1,
                                  intermediate_size=1216, max_position_embeddings=256, vocab_size=50257,
                                  tie_word_embeddings=True), "qwen2"),
    "pythia": ("GPTNeoXConfig", dict(hidden_size=512, num_hidden_layers=1, num_attention_heads=8, intermediate_size=2048,
                                     max_position_embeddings=256, rotary_pct=0.25, use_parallel_residual=False,
                                     vocab_size=50304, tie_word_embeddings=False), "gpt_neox"),
    "pythia_parallel": ("GPTNeoXConfig", dict(hidden_size=512, num_hidden_layers=1, num_attention_heads=8,
                                              intermediate_size=2048, max_position_embeddings=256, rotary_pct=0.25,
                                              use_parallel_residual=True, vocab_size=50304,
                                              tie_word_embeddings=False), "gpt_neox"),
}
SHARP = 8.0


def build(name: str, variant: str, out: Path) -> Path:
    import torch
    import transformers

    from headscope.core.tokenizer import bundled_gpt2_tokenizer

    cls, kwargs, fam = SHAPES[name]
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**kwargs), dtype=torch.float32)
    if variant == "sharp":
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for n, p in hf.named_parameters():
                if "norm" in n or "layernorm" in n or n.endswith("bias"):
                    p.add_(0.1 * torch.randn(p.shape, generator=g))
                if any(k in n for k in ("q_proj", "k_proj", "query_key_value")):
                    if "query_key_value" in n:           # GPT-NeoX: q, k, v interleaved per head; scale q and k
                        h, e = hf.config.num_attention_heads, hf.config.hidden_size // hf.config.num_attention_heads
                        v = p.view(h, 3, e, *p.shape[1:])
                        v[:, :2] *= SHARP
                    else:
                        p.mul_(SHARP)
    d = out / f"{name}-{variant}"
    hf.save_pretrained(d)
    tok = bundled_gpt2_tokenizer().backend_tokenizer
    if fam == "llama":
        tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    tok.save(str(d / "tokenizer.json"))
    return d


def planted_texts(model, manifest, n: int = 12, p: int = 64):
    """Token windows whose topic density runs from 0 to 0.5 (the planted neuron's contexts)."""
    import numpy as np
    import torch

    topic = manifest["contextual"]["topic_tokens"]
    rng = np.random.default_rng(0)
    others = [t for t in range(256, 1024) if t not in set(topic)]
    return [torch.tensor([model.bos_id] + [int(rng.choice(topic)) if rng.random() < k / (2 * (n - 1)) else
                                           int(rng.choice(others)) for _ in range(p - 1)]) for k in range(n)]


def measure(path: Path, planted: dict | None = None) -> dict:
    import torch

    import headscope
    from headscope._errors import NotApplicable
    from headscope.corpus import windows
    from headscope.layer0 import calibration as C, contextual as X, denominators as D, neurons as N, rotary_split as RS
    from headscope.shipped import calibration_text, samples
    from headscope.stats import median

    t0 = time.perf_counter()
    m = headscope.load(path)
    out: dict = {"family": m.cfg.family, "parallel_residual": m.cfg.parallel_residual}
    texts = [calibration_text().text] + [t.text for t in samples()]
    win = min(128, m.cfg.n_ctx)
    wins = [x for x in windows(m, texts, n_ctx=win) if len(x) == win]
    w = RS.view(m)
    tv = RS.split_tv(w, wins[:4])
    out["tv_median"], out["tv_p90"] = float(tv.median()), float(tv.quantile(0.9))
    ds = D.denominator_stability(m, texts, window=win, n_min=16, stride=8)
    out["denominator_rel_spread"] = median(torch.tensor(ds.median_rel_spread))
    ratio = torch.tensor(ds.predicted_rel_std) / torch.tensor(ds.measured_rel_std).clamp_min(1e-300)
    out["predicted_over_measured_std"] = median(ratio.flatten())
    cal = C.calibrate(m, texts[0])
    try:
        circ, choice = X.build_circuit(m, cal)
    except NotApplicable as e:
        out["circuit"] = f"not applicable: {e}"
        return out | {"seconds": time.perf_counter() - t0}
    out["heads"] = choice.heads
    fid = X.circuit_fidelity(circ, wins[:8])
    out["fidelity_r"], out["fidelity_fvu"] = fid.median_correlation, fid.median_fvu
    try:
        scan = N.scan_neurons(circ, choice, m.tokenizer)
    except NotApplicable as e:
        out["neurons"] = f"not applicable: {e}"
        return out | {"seconds": time.perf_counter() - t0}
    out["n_above_threshold"] = len(scan.neurons)
    top = sorted(range(len(scan.max_all)), key=lambda j: -scan.max_all[j])[:3]
    if planted is not None:
        top = [planted["contextual"]["neuron"]] + [j for j in top if j != planted["contextual"]["neuron"]][:1]
        traced = planted_texts(m, planted)
    else:
        traced = wins[:8]
    rows = []
    for t in N.neuron_traces(circ, top, m.tokenizer, traced):
        T = torch.tensor([v for x in t.texts for v in x["true"][1:]])
        P = torch.tensor([v for x in t.texts for v in x["predicted"][1:]])
        rows.append((t.neuron, round(float(scan.max_all[t.neuron]), 3), t.correlation,
                     float((T - P).pow(2).sum() / (T - T.mean()).pow(2).sum())))
    out["traces (neuron, max, r, FVU)"] = rows
    return out | {"seconds": time.perf_counter() - t0}


def main(argv=None) -> int:
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=None,
                    help="planted and/or FAMILY:VARIANT (llama, qwen2, pythia, pythia_parallel; init, sharp)")
    args = ap.parse_args(argv)
    models = args.models or ["planted"] + [f"{f}:{v}" for f in SHAPES for v in ("init", "sharp")]
    with tempfile.TemporaryDirectory(prefix="bench-rotary-layer0-") as tmp:
        for name in models:
            if name == "planted":
                from headscope.planted import rotary

                d = rotary.build(Path(tmp) / "planted", seed=0, n_layers=3)
                res = measure(d, json.loads((d / rotary.MANIFEST).read_text()))
            else:
                fam, _, variant = name.partition(":")
                res = measure(build(fam, variant or "init", Path(tmp)))
            print(name, json.dumps(res, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
