"""The full report on other families' realistic shapes, in their hub layout: time and peak RSS per stage.

Issue 23's targets (2 CPU cores, float32): a Pythia-160m-shaped checkpoint (GPT-NeoX: 12 layers,
d_model 768, 12 heads, rotary on a quarter of each head, parallel residual, untied unembedding,
vocabulary padded to 50304 rows) ≤ 60 s and ≤ 3 GB; a Llama-3.2-1B-shaped one (16 layers, d_model
2048, 32 query heads sharing 8 key/value heads, SwiGLU d_mlp 8192, llama3 rope scaling, tied
unembedding, vocabulary 128256) ≤ 10 min and ≤ 12 GB. One row for each other family at its
smallest hub size: GPT-Neo-125M and OPT-125m held to Pythia-160m's target (the same size class),
Qwen2-0.5B to Llama-3.2-1B's.

Each checkpoint is built by transformers itself from the family's config class (random weights at
its initialiser's scale, std 0.02), written with ``save_pretrained`` (the hub's layout) beside a
tokenizer.json (GPT-2's real BPE, with Llama 3's BOS added for the Llama shape and OPT's ``</s>``
for OPT: the padded rows
beyond it are never produced), laid out as an offline Hugging Face cache (:func:`headscope.testing.hub.cache_directory`)
and measured exactly as :mod:`bench_sizes` measures GPT-2 (its children: a baseline of load + processed
weights + one forward of the sample texts, then the report with the cache off, each in a fresh
subprocess). Stages the family does not support are reported as not applicable, not as failures.

  python benchmarks/bench_families.py                          # every shape
  python benchmarks/bench_families.py --shapes gpt-neo-125m opt-125m qwen2-0.5b
  python benchmarks/bench_families.py --shapes pythia-160m
  python benchmarks/bench_families.py --cache /tmp/famhub --keep
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

import bench_sizes  # noqa: E402  (its children and table)

#: shape → (repo id, transformers config class, its keyword arguments, tokenizer family, seconds, GB)
SHAPES = {
    "pythia-160m": ("EleutherAI/pythia-160m", "GPTNeoXConfig", dict(
        vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, hidden_act="gelu", rotary_pct=0.25, rotary_emb_base=10000,
        max_position_embeddings=2048, layer_norm_eps=1e-5, use_parallel_residual=True,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=0), "gpt_neox", 60.0, 3.0),
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B", "LlamaConfig", dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, hidden_act="silu",
        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
        bos_token_id=128000, eos_token_id=128001), "llama", 600.0, 12.0),
    # the other families at their smallest hub size, held to the Pythia-160m target (the same size class)
    "gpt-neo-125m": ("EleutherAI/gpt-neo-125m", "GPTNeoConfig", dict(
        vocab_size=50257, hidden_size=768, num_layers=12, num_heads=12, max_position_embeddings=2048,
        attention_types=[[["global", "local"], 6]], window_size=256, activation_function="gelu_new",
        bos_token_id=50256, eos_token_id=50256), "gpt_neo", 60.0, 3.0),
    "opt-125m": ("facebook/opt-125m", "OPTConfig", dict(
        vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072, num_attention_heads=12,
        max_position_embeddings=2048, do_layer_norm_before=True, word_embed_proj_dim=768,
        activation_function="relu", bos_token_id=2, eos_token_id=2, pad_token_id=1), "opt", 60.0, 3.0),
    # Qwen2-0.5B (494 M parameters, 14 query heads on 2 key/value heads, vocabulary 151936 rows),
    # held to the Llama-3.2-1B target (the larger model's)
    "qwen2-0.5b": ("Qwen/Qwen2-0.5B", "Qwen2Config", dict(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False, bos_token_id=151643,
        eos_token_id=151643), "qwen2", 600.0, 12.0),
    # issue 35's new families at one realistic hub shape each (not yet run on the 2-core machine):
    # Gemma-2-2B (2.6 G parameters, vocabulary 256000, head_dim 256, soft-caps, alternating windows)
    # held to issue 35's target (≤ 15 min, ≤ 16 GB); OLMo-2-1B and OPT-350m to the Llama-3.2-1B and
    # Pythia-160m targets (their size classes)
    "gemma-2-2b": ("google/gemma-2-2b", "Gemma2Config", dict(
        vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=8192,
        query_pre_attn_scalar=256, sliding_window=4096, attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=2, eos_token_id=1, pad_token_id=0), "gemma2", 900.0, 16.0),
    "olmo-2-1b": ("allenai/OLMo-2-0425-1B", "Olmo2Config", dict(
        vocab_size=100352, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=4096, rope_theta=500000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None, eos_token_id=100257,
        pad_token_id=100277), "olmo2", 600.0, 12.0),
    "opt-350m": ("facebook/opt-350m", "OPTConfig", dict(
        vocab_size=50272, hidden_size=1024, num_hidden_layers=24, ffn_dim=4096, num_attention_heads=16,
        max_position_embeddings=2048, do_layer_norm_before=False, word_embed_proj_dim=512,
        activation_function="relu", bos_token_id=2, eos_token_id=2, pad_token_id=1), "opt", 60.0, 3.0),
}


def write_shape(shape: str, cache: Path) -> tuple[str, int, float]:
    """Build `shape` with transformers, save it in the hub's layout into `cache`; (repo id, parameters, seconds)."""
    import torch
    import transformers

    from headscope.core.tokenizer import bundled_gpt2_tokenizer
    from headscope.testing.hub import cache_directory

    repo_id, cls, kwargs, tok_family, _, _ = SHAPES[shape]
    t0 = time.perf_counter()
    torch.manual_seed(0)
    config = getattr(transformers, cls)(**kwargs)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    n = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory(prefix=f"bench-families-{shape}-") as d:
        model.save_pretrained(d)
        del model
        # GPT-2's real BPE (50257 tokens; Pythia's is the same kind, 50277), the family's BOS added
        tok = bundled_gpt2_tokenizer().backend_tokenizer
        if tok_family == "llama":
            tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
        elif tok_family == "opt":
            tok.add_special_tokens(["</s>"])
        elif tok_family == "gemma2":
            tok.add_special_tokens(["<bos>"])
        tok.save(str(Path(d) / "tokenizer.json"))
        cache_directory(cache, repo_id, d, symlinks=False)
    return repo_id, n, time.perf_counter() - t0


def stored_parameters(snapshot: Path) -> int:
    """Elements of every tensor stored in the snapshot's safetensors files (read from their headers)."""
    from safetensors import safe_open

    n = 0
    for f in sorted(snapshot.glob("*.safetensors")):
        with safe_open(str(f), "pt") as s:
            for k in s.keys():
                shape = s.get_slice(k).get_shape()
                n += int(__import__("math").prod(shape))
    return n


def measure(shape: str, cache: Path, dtype: str = "float32") -> dict:
    from headscope.testing.hub import cached_snapshot

    repo_id, _, _, _, t_target, m_target = SHAPES[shape]
    written = None
    try:
        cached_snapshot(cache, repo_id)
    except Exception:  # not there yet
        repo_id, _, written = write_shape(shape, cache)
    n = stored_parameters(cached_snapshot(cache, repo_id))
    env = bench_sizes.child_env(cache)
    load_before = bench_sizes._loadavg()
    timeout = max(1800.0, 4 * t_target)
    base = bench_sizes._run_child(["--child-baseline", repo_id, dtype], env, timeout)
    with tempfile.TemporaryDirectory(prefix=f"bench-families-{shape}-") as out:
        rep = bench_sizes._run_child(["--child-report", repo_id, str(Path(out) / "report"), dtype], env, timeout)
    peak = max(max(p["peak_mb"], p.get("between_peak_mb") or 0.0) for p in rep["phases"])
    return {"size": shape, "repo_id": repo_id, "parameters": n, "dtype": dtype,
            "cache_write_s": written, "loadavg_before": load_before, "loadavg_after": bench_sizes._loadavg(),
            "matmul_gflops": bench_sizes.matmul_gflops(),
            "baseline": base, "report": rep, "report_wall_s": rep["process_wall_s"], "report_peak_mb": peak,
            "target_s": t_target, "target_mb": m_target * 1024}


def run(quick: bool = False, shapes=None, cache: str | Path | None = None, keep: bool = False) -> dict:
    shapes = list(shapes or (("pythia-160m",) if quick else SHAPES))
    tmp = Path(cache) if cache else Path(tempfile.mkdtemp(prefix="bench-families-hub-"))
    results = []
    try:
        for shape in shapes:
            print(f"bench_families: {shape} …", file=sys.stderr, flush=True)
            tmp.mkdir(parents=True, exist_ok=True)
            results.append(measure(shape, tmp))
            print(bench_sizes.table(results[-1]), file=sys.stderr, flush=True)
            if not keep and not cache:
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if not keep and not cache:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"rows": [row for r in results for row in bench_sizes.rows(r)], "details": {"shapes": results},
            "report_text": "\n\n".join(bench_sizes.table(r) for r in results)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--cache", help="HF cache directory to use (and keep); shapes already in it are not rewritten")
    ap.add_argument("--keep", action="store_true", help="keep the temporary HF cache")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = run(shapes=a.shapes, cache=a.cache, keep=a.keep)
    print(json.dumps(r, indent=2, default=str) if a.json else r["report_text"])
    return 0 if all(row["pass"] for row in r["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
