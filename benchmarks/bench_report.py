"""The full report on a GPT-2-small-shaped checkpoint: wall time, peak RSS, cached rerun.

Measured in one process, after the checkpoint is built in a subprocess (so its RSS is
not counted): ``headscope.load`` + ``build_report`` of every registered stage with the
cache off (target < 5 min), the same report rerun with the cache on (every stage
skipped; build_report time of the rerun / of the uncached run, model loading excluded,
target < 0.5), and as the floor the full report is compared with, the
load plus one layer-0..1 forward pass over the sample texts. Peak RSS target < 4 GB.

  python benchmarks/bench_report.py                 # planted, 12 layers (GPT-2 Small's shape)
  python benchmarks/bench_report.py --quick         # planted, 2 layers
  python benchmarks/bench_report.py --model DIR     # any checkpoint directory
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _plant(out: Path, n_layers: int) -> Path:
    env_path = str(ROOT / "src")
    subprocess.run([sys.executable, "-m", "headscope", "plant", "--out", str(out), "--layers", str(n_layers)],
                   check=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, stdout=subprocess.DEVNULL)
    return out


def run(model_dir: str | Path | None = None, quick: bool = False) -> dict:
    """Time the full report of `model_dir` (default: a planted GPT-2-small-shaped checkpoint)."""
    import torch

    import headscope
    from headscope.core.forward import run_with_cache
    from headscope.report import ReportOptions, build_report, default_stages
    from headscope.report.inputs import load_inputs

    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    if model_dir is None:
        model_dir = _plant(tmp / "planted", 2 if quick else 12)
    torch.set_num_threads(max(1, torch.get_num_threads()))

    # baseline: load + a layer-0/1 forward over the sample texts (the least any report must do)
    t0 = time.perf_counter()
    m0 = headscope.load(model_dir)
    W = m0.weights()
    for t in load_inputs().samples:
        run_with_cache(W, m0.to_tokens(t.text)[None], ["blocks.1.attn.hook_pattern"], stop_at_layer=2)
    baseline = time.perf_counter() - t0
    del m0, W

    t0 = time.perf_counter()
    model = headscope.load(model_dir)
    t1 = time.perf_counter()
    result = build_report(model, tmp / "report", ReportOptions(use_cache=False, progress=False))
    t2 = time.perf_counter()
    full, build_full = t2 - t0, t2 - t1

    model = headscope.load(model_dir)  # a fresh model: nothing cached in memory
    t0 = time.perf_counter()
    rerun_result = build_report(model, tmp / "report", ReportOptions(progress=False))
    rerun = time.perf_counter() - t0
    assert all(s.cached for s in rerun_result.stages)

    size = sum(f.stat().st_size for f in (tmp / "report").rglob("*") if f.is_file())
    rows = [
        {"name": "full report, cache off", "measured": full, "baseline": baseline, "ratio": None,
         "target": "< 300", "unit": "s", "pass": full < 300},
        {"name": "cached rerun vs uncached build", "measured": rerun, "baseline": build_full,
         "ratio": rerun / build_full, "target": "< 0.5", "unit": "s", "pass": rerun / build_full < 0.5},
    ]
    return {
        "rows": rows,
        "peak_rss_mb": peak_rss_mb(),
        "rss_target_mb": 4096,
        "details": {
            "model": str(model_dir), "n_layers": model.cfg.n_layers, "stages": [s.name for s in default_stages()],
            "stage_seconds": {s.name: s.seconds for s in result.stages}, "pages": len(result.pages),
            "report_mb": size / 2**20, "full_over_baseline": full / baseline, "threads": torch.get_num_threads(),
        },
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint directory (default: build a planted one)")
    ap.add_argument("--quick", action="store_true", help="2-layer planted checkpoint")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = run(a.model, quick=a.quick)
    if a.json:
        print(json.dumps(r, indent=2, default=str))
        return 0
    d = r["details"]
    for row in r["rows"]:
        ratio = f"  ratio {row['ratio']:.3f}" if row["ratio"] is not None else ""
        print(f"{row['name']:<30} {row['measured']:8.2f} {row['unit']}  (baseline {row['baseline']:.2f} s){ratio}"
              f"  target {row['target']}  {'PASS' if row['pass'] else 'FAIL'}")
    print(f"{'peak RSS':<30} {r['peak_rss_mb']:8.0f} MB  target < {r['rss_target_mb']} MB  "
          f"{'PASS' if r['peak_rss_mb'] < r['rss_target_mb'] else 'FAIL'}")
    print(f"full / baseline (load + forward) = {d['full_over_baseline']:.2f}×; stages {d['stage_seconds']}; "
          f"{d['pages']} pages, {d['report_mb']:.1f} MB on disk; {d['n_layers']} layers")
    return 0 if all(row["pass"] for row in r["rows"]) and r["peak_rss_mb"] < r["rss_target_mb"] else 1


if __name__ == "__main__":
    sys.exit(main())
