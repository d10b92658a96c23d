"""`headscope sweep` on 2 local workers vs serially, in the same run: a Pythia-70m-shaped model at ≥ 6 revisions.

Issue 34's target: a grid of ≥ 6 revisions of a Pythia-70m-shaped checkpoint (GPT-NeoX: 6 layers,
d_model 512, 8 heads, rotary on a quarter of each head, parallel residual, untied unembedding,
vocabulary 50304; stored in float16 as Pythia ships it, each revision its own random weights)
runs ≥ 1.6× faster on 2 local workers than serially, on 2 cores; each worker's peak RSS ≈ one
model. Both runs are fresh `headscope sweep` processes over the same offline Hugging Face cache
(wall time includes starting Python and, for the workers, the LocalCluster); their task JSON must
be byte-identical. Printed: the machine's matmul rate and load average now (machine speed varies;
the machine may be shared), per-task wall and CPU seconds, each run's wall time, CPU-seconds
(the process and all its children) and mean cores busy, their ratio, the peak RSS of the serial
process and of each task's worker. A third run, serial with torch on one thread, measures what a
one-thread worker does per task: two such workers can at best be 2 × (serial / serial-1-thread)
faster than serial — the bound printed beside the measured ratio.

  python benchmarks/bench_sweep.py                       # 6 revisions, the atlas
  python benchmarks/bench_sweep.py --revisions 8 --analyses atlas,composition --tokens 1000
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(SRC))

REPO = "EleutherAI/pythia-70m"
CONFIG = dict(vocab_size=50304, hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048,
              hidden_act="gelu", rotary_pct=0.25, rotary_emb_base=10000, max_position_embeddings=2048,
              layer_norm_eps=1e-5, use_parallel_residual=True, tie_word_embeddings=False, bos_token_id=0,
              eos_token_id=0)


def write_cache(cache: Path, steps: list[int]) -> float:
    """Each revision ``stepN`` of a Pythia-70m-shaped model (its own seed) into an offline HF cache; seconds."""
    import torch
    import transformers

    from headscope.core.tokenizer import bundled_gpt2_tokenizer
    from headscope.testing.hub import cache_directory

    t0 = time.perf_counter()
    for i, step in enumerate(steps):
        torch.manual_seed(i)
        model = transformers.AutoModelForCausalLM.from_config(transformers.GPTNeoXConfig(**CONFIG),
                                                              dtype=torch.float32).half()
        with tempfile.TemporaryDirectory(prefix="bench-sweep-") as d:
            model.save_pretrained(d)
            del model
            bundled_gpt2_tokenizer().backend_tokenizer.save(str(Path(d) / "tokenizer.json"))
            cache_directory(cache, REPO, d, revision=f"step{step}")
    return time.perf_counter() - t0


TASK_RE = re.compile(r": computed \(([\d.]+) s(?:, ([\d.]+) CPU-s on (\d+) threads?)?(?:, worker peak RSS (\d+) MiB)?\)")


def sweep(cache: Path, out: Path, revisions: str, analyses: str, tokens: int, mode: list[str],
          threads: int | None = None) -> dict:
    """One fresh `headscope sweep` process: wall and CPU seconds (with its children), per-task (wall, CPU-s,
    threads, worker RSS), the child's peak RSS."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache),
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    argv = [sys.executable, "-m", "headscope", "sweep", REPO, "--analyses", analyses, "--revisions", revisions,
            "--out", str(out), *mode]
    if "atlas" in analyses.split(","):
        argv += ["--set", f"atlas.tokens={tokens}"]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"sweep failed ({p.returncode}):\n{p.stderr[-3000:]}")
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)     # the sweep process and every process it reaped
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    tasks = [{"wall": float(m.group(1)), "cpu": float(m.group(2)) if m.group(2) else None,
              "threads": int(m.group(3)) if m.group(3) else None, "rss": float(m.group(4)) if m.group(4) else None}
             for m in TASK_RE.finditer(p.stderr)]
    plan = next((l for l in p.stderr.splitlines() if "LocalCluster:" in l), "")
    return {"wall": wall, "cpu": cpu, "tasks": tasks, "plan": plan,
            "child_rss_mb": r1.ru_maxrss / 1024 if r1.ru_maxrss > r0.ru_maxrss else None}


def describe(name: str, run: dict) -> str:
    """One run: wall, CPU-seconds, cores busy on average; per task median wall, CPU-s, threads."""
    t = run["tasks"]
    walls = sorted(x["wall"] for x in t)
    cpus = sorted(x["cpu"] for x in t if x["cpu"] is not None)
    th = sorted({x["threads"] for x in t if x["threads"] is not None})
    per = (f"; per task median {walls[len(walls) // 2]:.1f} s wall" +
           (f", {cpus[len(cpus) // 2]:.1f} CPU-s ({sum(cpus) / sum(walls):.2f} cores busy in tasks)" if cpus else "")
           + (f", torch on {'/'.join(map(str, th))} thread(s)" if th else "")) if walls else ""
    each = ", ".join(f"{x['wall']:.1f}/{x['cpu']:.1f}" for x in t if x["cpu"] is not None)
    return (f"{name}: {run['wall']:.1f} s wall, {run['cpu']:.1f} CPU-s "
            f"({run['cpu'] / run['wall']:.2f} cores busy on average){per}" +
            (f"\n    each task in finishing order, s wall/CPU-s: {each}" if each else ""))


def task_files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "tasks").rglob("*.json"))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--revisions", type=int, default=6, help="revisions step0, step1000, … (default 6)")
    ap.add_argument("--analyses", default="atlas", help="comma-separated (default atlas)")
    ap.add_argument("--tokens", type=int, default=2000, help="the atlas's --tokens (default 2000)")
    ap.add_argument("--cache", default=None, help="keep the HF cache here (default: a temporary directory)")
    args = ap.parse_args(argv)
    if args.revisions < 6:
        ap.error("--revisions: the target is stated for ≥ 6 revisions")

    from bench_sizes import matmul_gflops

    steps = [1000 * i for i in range(args.revisions)]
    spec = f"step0:{steps[-1]}:1000"
    tmp = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    cache = Path(args.cache) if args.cache else tmp / "hub"
    try:
        if not (cache / ("models--" + REPO.replace("/", "--"))).is_dir():
            print(f"writing {args.revisions} revisions of a Pythia-70m-shaped model: "
                  f"{write_cache(cache, steps):.0f} s", flush=True)
        rate, load = matmul_gflops(), os.getloadavg()
        print(f"float32 matmul {rate:.0f} GFLOP/s now ({os.cpu_count()} cores; load average "
              f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}: other processes may share them)", flush=True)
        serial = sweep(cache, tmp / "serial", spec, args.analyses, args.tokens, ["--serial"])
        par = sweep(cache, tmp / "workers", spec, args.analyses, args.tokens, ["--workers", "2"])
        one = sweep(cache, tmp / "serial1", spec, args.analyses, args.tokens, ["--serial"], threads=1)
        rate2, load2 = matmul_gflops(), os.getloadavg()
        same = task_files(tmp / "serial") == task_files(tmp / "workers") == task_files(tmp / "serial1")
        n = len(serial["tasks"])
        print(f"grid: {REPO}-shaped × {args.revisions} revisions × {args.analyses}: {n} tasks")
        print(describe("serial             ", serial) +
              f"; peak RSS {serial['child_rss_mb'] or float('nan'):.0f} MB (the whole process: one model at a time)")
        print(describe("serial, 1 thread   ", one))
        print(describe("2 workers          ", par) + " (with the LocalCluster's start)")
        print(f"  {par['plan'].strip()}")
        rss = [x["rss"] for x in par["tasks"] if x["rss"] is not None]
        if rss:
            print(f"worker peak RSS after each task: {', '.join(f'{r:.0f}' for r in rss)} MiB (max {max(rss):.0f})")
        ratio = serial["wall"] / par["wall"]
        w2 = sum(x["wall"] for x in serial["tasks"])
        w1 = sum(x["wall"] for x in one["tasks"])
        bound = 2 * w2 / w1
        print(f"torch's threads in a serial task: {w1 / w2:.2f}× faster on {os.cpu_count()} threads than on 1 "
              f"(task seconds {w2:.1f} vs {w1:.1f}), so 2 one-thread workers can be at most {bound:.2f}× serial")
        print(f"speed-up 2 workers vs serial: {ratio:.2f}× measured (bound {bound:.2f}×; target ≥ 1.6×: "
              f"{'met' if ratio >= 1.6 else 'NOT met'}); CPU-seconds 2 workers / serial {par['cpu'] / serial['cpu']:.2f}")
        print(f"task JSON byte-identical serial vs 2 workers vs serial on 1 thread: {same}")
        print(f"float32 matmul {rate2:.0f} GFLOP/s at the end (machine speed drift: {rate2 / rate:.2f}×); "
              f"load average {load2[0]:.1f} {load2[1]:.1f} {load2[2]:.1f}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
