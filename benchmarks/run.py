"""Every headscope benchmark in one command: ratios against baselines measured in the same run.

  python benchmarks/run.py            # GPT-2-small shape, a few minutes on 2 cores
  python benchmarks/run.py --quick    # smaller sizes, for a smoke test
  python benchmarks/run.py --json     # the raw results

Each benchmark runs in its own subprocess, so its peak RSS is its own (the child's
``getrusage(RUSAGE_SELF).ru_maxrss`` at the end of its run, when the module does not
report one itself). A module that is missing, lacks ``run``, or
raises is shown as "not available" (with the reason) instead of stopping the table.
Exit status: 0 when every measured row passes, 1 when any fails.

Interface for a benchmark module ``benchmarks/bench_<name>.py``
-----------------------------------------------------------------

``run(quick: bool = False) -> dict`` measures the headscope operation AND its baseline
in the same process (same sizes, same threads, interleaved repetitions, medians), and
returns::

    {
      "rows": [                      # one per claim; at least one
        {"name": "neuron scan vs bare matmuls",   # str, what is compared
         "measured": 1.23,           # number: headscope's figure (seconds, tok/s, MB, …)
         "baseline": 1.01,           # number or None: the baseline's figure, same unit
         "ratio": 1.22,              # number or None: the quantity the target is about
         "target": "≤ 2.0",          # str: "≤ X", "< X", "≥ X" or "> X", applied to ratio,
                                     #   or to measured when ratio is None
         "unit": "s",                # str, unit of measured/baseline
         "pass": True},              # bool (run.py re-checks it against target)
        ...
      ],
      "peak_rss_mb": 812.0,          # optional: the module's own peak RSS (MB)
      "rss_target_mb": 4096,         # optional: if given, run.py adds a row
                                     #   "<module> peak RSS" checked as "< rss_target_mb"
                                     #   against peak_rss_mb (the child's own peak)
      "details": {...},              # optional, anything JSON-serialisable (kept in --json)
      "report_text": "..."           # optional: printed after the table (e.g. per-stage figures)
    }

Keep "quick" runs under a minute; full runs under ~5 minutes each on 2 CPU cores
(bench_sizes, the full report on three model sizes, takes longer: see TIMEOUTS).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: benchmark module → what it measures (in table order)
BENCHMARKS = {
    "bench_neurons": "neuron scan vs bare matmuls (target ≤ 2×); `headscope neurons` vs load + those matmuls (≤ 3×)",
    "bench_head": "vocab × vocab top-k vs bare matmul (target ≤ 2×)",
    "bench_forward": "forward with full cache vs HF eager output_attentions (target ≥ 1.0×)",
    "bench_report": "full report time and peak RSS (target < 5 min, < 4 GB)",
    "bench_load": "load + processed weights + forward peak RSS vs the weights' own size, hub layouts",
    "bench_sizes": "full report per stage on hub-layout distilgpt2, gpt2, gpt2-medium (targets of issue 15)",
    "bench_families": "full report on Pythia-160m, Llama-3.2-1B, GPT-Neo-125M, OPT-125m and Qwen2-0.5B shapes in their hub layouts (targets of issue 23)",
    "bench_floors": "every report stage vs its bare matmuls and eigen-solves (≤ 2×), the report vs load + weights + forward (≤ 5×), gpt2 (issue 33)",
}
#: seconds a module may run when --timeout is not given (default 900)
TIMEOUTS = {"bench_sizes": 3600, "bench_families": 3600, "bench_floors": 3600}
MARK = "@@BENCH-RESULT@@"


# -- child ---------------------------------------------------------------------------


def child(module: str, quick: bool) -> int:
    """Import benchmarks/<module>.py, call run(quick=…), print its dict after MARK."""
    import importlib
    import resource
    import traceback

    sys.path[:0] = [str(HERE), str(ROOT / "src")]
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        print(MARK + json.dumps({"unavailable": f"cannot import {module}: {e}"}))
        return 0
    fn = getattr(mod, "run", None)
    if not callable(fn):
        print(MARK + json.dumps({"unavailable": f"{module} has no run()"}))
        return 0
    try:
        result = fn(quick=quick)
    except Exception as e:  # a broken benchmark must not stop the table
        traceback.print_exc()
        print(MARK + json.dumps({"unavailable": f"{module}.run() raised {type(e).__name__}: {e}"}))
        return 0
    if not isinstance(result, dict) or not isinstance(result.get("rows"), list):
        print(MARK + json.dumps({"unavailable": f"{module}.run() did not return {{'rows': [...]}}"}))
        return 0
    result.setdefault("peak_rss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(MARK + json.dumps(result, default=str))
    return 0


# -- parent --------------------------------------------------------------------------


def run_child(module: str, quick: bool, timeout: float) -> dict:
    """Run one benchmark in a subprocess; its result dict plus its wall time."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", module] + (["--quick"] if quick else [])
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"unavailable": f"timed out after {timeout:.0f} s", "wall_s": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    result = None
    for line in out.splitlines():
        if line.startswith(MARK):
            result = json.loads(line[len(MARK):])
    if result is None:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        result = {"unavailable": f"exit {proc.returncode}: {tail}"}
    result["wall_s"] = wall
    return result


def target_ok(target: str, value) -> bool | None:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    t = str(target).replace("×", "").replace("x", "").strip()
    for op, f in (("≤", lambda a, b: a <= b), ("<=", lambda a, b: a <= b), ("≥", lambda a, b: a >= b),
                  (">=", lambda a, b: a >= b), ("<", lambda a, b: a < b), (">", lambda a, b: a > b)):
        if t.startswith(op):
            try:
                bound = float(t[len(op):].split()[0])
            except (ValueError, IndexError):
                return None
            return f(value, bound)
    return None


def rows_of(module: str, result: dict) -> list[dict]:
    if "unavailable" in result:
        return [{"name": module, "unavailable": result["unavailable"]}]
    rows = []
    for r in result["rows"]:
        r = dict(r)
        value = r.get("ratio") if r.get("ratio") is not None else r.get("measured")
        checked = target_ok(r.get("target", ""), value)
        r["pass"] = bool(r.get("pass")) if checked is None else checked and bool(r.get("pass", True))
        rows.append(r)
    if result.get("rss_target_mb") is not None and result.get("peak_rss_mb") is not None:
        rss, lim = float(result["peak_rss_mb"]), float(result["rss_target_mb"])
        rows.append({"name": f"{module} peak RSS", "measured": round(rss, 1), "baseline": None, "ratio": None,
                     "target": f"< {lim:g}", "unit": "MB", "pass": rss < lim})
    return rows


def fmt(x, unit="") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        s = f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"
    else:
        s = str(x)
    return f"{s} {unit}".strip()


def print_table(all_rows: list[dict]) -> None:
    head = ("benchmark", "measured", "baseline", "ratio", "target", "result")
    lines = []
    for r in all_rows:
        if "unavailable" in r:
            lines.append((r["name"], "-", "-", "-", "-", "not available: " + r["unavailable"]))
        else:
            u = r.get("unit", "")
            lines.append((r["name"], fmt(r.get("measured"), u), fmt(r.get("baseline"), u),
                          ("-" if r.get("ratio") is None else f"{r['ratio']:.3f}"), str(r.get("target", "")), "pass" if r["pass"] else "FAIL"))
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(5)]
    for row in [head, *lines]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row[:5], widths)) + "  " + row[5])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Run every headscope benchmark and print ratios against baselines.")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    ap.add_argument("--json", action="store_true", help="print all results as JSON")
    ap.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="run only these modules")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per benchmark; default 900 (bench_sizes 3600)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child, a.quick)
    results, all_rows = {}, []
    for module in a.only or BENCHMARKS:
        if not a.json:
            print(f"running {module}: {BENCHMARKS[module]} …", file=sys.stderr, flush=True)
        res = run_child(module, a.quick, a.timeout or TIMEOUTS.get(module, 900))
        results[module] = res
        all_rows += rows_of(module, res)
    if a.json:
        print(json.dumps({"results": results, "rows": all_rows}, indent=2, sort_keys=True, default=str))
    else:
        print_table(all_rows)
        for module, res in results.items():
            if "unavailable" not in res:
                print(f"{module}: {res['wall_s']:.1f} s wall, peak RSS {res.get('peak_rss_mb', float('nan')):.0f} MB")
        for module, res in results.items():
            if res.get("report_text"):
                print(f"\n{module}:\n{res['report_text']}")
    measured = [r for r in all_rows if "unavailable" not in r]
    return 0 if all(r["pass"] for r in measured) else 1


if __name__ == "__main__":
    sys.exit(main())
