"""Weight memory: ``headscope.load`` + ``model.weights()`` + one forward pass, at every GPT-2 size.

For each size a hub-layout checkpoint (random weights, float32, the hub's single
``model.safetensors``) is written by ``headscope.testing.hub`` in a subprocess, then
measured in fresh subprocesses so that each peak RSS (``ru_maxrss``) is its own:

- baseline: ``safetensors.torch.load_file`` of the file with every tensor read (what
  loading the whole state dict costs: one copy of the file);
- headscope, step by step: ``import headscope`` (the interpreter, torch, tokenizers),
  ``headscope.load`` (headers, tokenizer, the streamed finiteness check),
  ``model.weights()`` (processed weights, default processing), and a forward pass over
  16 tokens keeping the logits.

Printed per step: wall time, running peak RSS, and the ratios the design is about:
(peak RSS − RSS after import) / bytes of the processed weights W (≈ 1: one copy of the
weights is resident; W is the file's weights plus the processed W_U, which differs from
W_E) and headscope's peak / the baseline's peak.

  python benchmarks/bench_load.py                                   # distilgpt2, gpt2
  python benchmarks/bench_load.py --sizes gpt2-medium gpt2-large gpt2-xl --tmp /tmp
  python benchmarks/bench_load.py --quick                           # distilgpt2 only

``run(quick)`` follows benchmarks/run.py's interface (rows with ratios and targets).
Checkpoints are written under ``--tmp`` (XL needs ≈ 6.4 GB of disk) and deleted after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = ("distilgpt2", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
#: (peak RSS − RSS after import) / bytes of the processed weights: one copy of them plus the
#: tokenizer (≈ 70 MB), the QKV memo (≤ forward.QKV_MEMO_BYTES) and one block in flight.
TARGET_ONE_COPY = 1.5

_WRITE = r"""
import sys
from headscope.testing.hub import write_hub_checkpoint
write_hub_checkpoint(sys.argv[1], size=sys.argv[2])
print("{}")
"""

_BASELINE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from safetensors.torch import load_file
state = load_file(sys.argv[1] + "/model.safetensors")
total = sum(float(t.float().sum()) for t in state.values())   # read every page
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_HEADSCOPE = r"""
import json, resource, sys, time
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20
steps = []
def step(name, t0):
    steps.append({"step": name, "seconds": time.perf_counter() - t0, "rss_mb": rss_mb(),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
t0 = time.perf_counter(); import torch, headscope; step("import", t0)
t0 = time.perf_counter(); model = headscope.load(sys.argv[1]); step("load", t0)
t0 = time.perf_counter(); W = model.weights(); step("weights()", t0)
toks = model.to_tokens("The colour of the centre of the old harbour town was grey")[None, :16]
t0 = time.perf_counter(); logits = headscope.run_with_cache(W, toks, names=["logits"]).logits; step("forward", t0)
assert bool(torch.isfinite(logits).all())
processed = sum(t.numel() * t.element_size() for _, t in W.named_tensors()) / 2**20
print(json.dumps({"steps": steps, "n_parameters": model.n_parameters, "processed_mb": processed}))
"""


def _python(code: str, *args: str) -> dict:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(size: str, tmp: Path) -> dict:
    """Write `size` under `tmp`, measure the baseline and headscope, delete the checkpoint."""
    out = Path(tempfile.mkdtemp(prefix=f"bench-load-{size}-", dir=tmp)) / "ckpt"
    try:
        _python(_WRITE, str(out), size)
        file_mb = (out / "model.safetensors").stat().st_size / 2**20
        base = _python(_BASELINE, str(out))
        hs = _python(_HEADSCOPE, str(out))
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    after_import = hs["steps"][0]["rss_mb"]
    for s in hs["steps"]:
        s["weights_share"] = (s["peak_mb"] - after_import) / hs["processed_mb"]   # ≈ 1: one copy resident
        s["vs_load_file"] = s["peak_mb"] / base["peak_mb"]
    return {"size": size, "file_mb": file_mb, "baseline": base, "headscope": hs}


def table(results: list[dict]) -> str:
    lines = [f"{'size':<12} {'step':<10} {'time s':>7} {'peak RSS MB':>12} {'RSS MB':>8} "
             f"{'(peak-import)/W':>16} {'peak/load_file':>15}"]
    for r in results:
        b = r["baseline"]
        lines.append(f"{r['size']:<12} {'load_file':<10} {b['seconds']:7.1f} {b['peak_mb']:12.0f} {'':>8} "
                     f"{'':>16} {'(baseline)':>15}   file {r['file_mb']:.0f} MB, "
                     f"processed weights W {r['headscope']['processed_mb']:.0f} MB")
        for s in r["headscope"]["steps"]:
            lines.append(f"{'':<12} {s['step']:<10} {s['seconds']:7.1f} {s['peak_mb']:12.0f} {s['rss_mb']:8.0f} "
                         f"{s['weights_share']:16.2f} {s['vs_load_file']:15.2f}")
    return "\n".join(lines)


def run(quick: bool = False, sizes: tuple[str, ...] | None = None, tmp: str | None = None) -> dict:
    sizes = sizes or (("distilgpt2",) if quick else ("distilgpt2", "gpt2"))
    tmp_dir = Path(tmp or tempfile.gettempdir())
    results = [measure(s, tmp_dir) for s in sizes]
    rows = []
    for r in results:
        last = r["headscope"]["steps"][-1]
        rows.append({"name": f"{r['size']}: load + weights() + forward, (peak RSS − import) / processed weights",
                     "measured": last["weights_share"], "baseline": None, "ratio": last["weights_share"],
                     "target": f"≤ {TARGET_ONE_COPY}", "unit": "×", "pass": last["weights_share"] <= TARGET_ONE_COPY})
    return {"rows": rows, "details": {"results": results, "table": table(results)}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", choices=SIZES, help="default: distilgpt2 gpt2")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tmp", help="where to write the checkpoints (default: the system temp dir)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = run(args.quick, tuple(args.sizes) if args.sizes else None, args.tmp)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(res["details"]["table"])
        for row in res["rows"]:
            print(f"{'PASS' if row['pass'] else 'FAIL'}  {row['name']}: {row['measured']:.2f} (target {row['target']})")
    return 0 if all(r["pass"] for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
