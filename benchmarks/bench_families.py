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
  python benchmarks/bench_families.py --shapes mistral-7b gpt-j-6b phi-3-mini --layers 4

The 7-billion class (Mistral-7B, GPT-J-6B, Phi-3-mini) is stored in half precision as on the hub and
read block by block into float32 (one copy, exact upcast, as transformers reads it with
``dtype=float32``). The whole model in float32 would take Mistral-7B 29 GB plus 3.2 GB of expanded
key/value heads, GPT-J-6B 24 GB, Phi-3-mini 15 GB; processed blocks are held within a budget
(``HEADSCOPE_BLOCK_BUDGET``, default a third of the available memory) and rebuilt from the files
when read again, so full depth runs in bounded memory (each phase prints the blocks it built and
their CPU seconds). ``--layers N``: the real widths at reduced depth, rows named ``<shape>@<N>L``,
never presented as the full model's.
"""

from __future__ import annotations

import argparse
import json
import os
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
    # issue 35's 7-billion class (15–28 GB of float32 weights: on the 24 GB machine run with --layers, the
    # real widths at reduced depth; stored in half precision as on the hub), held to Gemma-2-2B's target
    "mistral-7b": ("mistralai/Mistral-7B-v0.1", "MistralConfig", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=32768,
        rope_theta=10000.0, rms_norm_eps=1e-5, sliding_window=4096, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2), "sp32000", 900.0, 16.0),
    "gpt-j-6b": ("EleutherAI/gpt-j-6b", "GPTJConfig", dict(
        vocab_size=50400, n_embd=4096, n_layer=28, n_head=16, n_inner=16384, rotary_dim=64, n_positions=2048,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=False,
        bos_token_id=50256, eos_token_id=50256), "gpt2", 900.0, 16.0),
    "phi-3-mini": ("microsoft/Phi-3-mini-4k-instruct", "Phi3Config", dict(
        vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
        original_max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5, sliding_window=2047,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=32000, pad_token_id=32000), "sp32000", 900.0, 16.0),
}
#: how each shape's hub files store their weights (the others: float32, as written by transformers)
DISK_DTYPE = {"mistral-7b": "bfloat16", "gpt-j-6b": "float16", "phi-3-mini": "bfloat16"}
#: what runs without --shapes: every shape that fits a 24 GB machine at full depth
DEFAULT_SHAPES = [s for s in SHAPES if s not in DISK_DTYPE]
#: the config key of each shape's depth (for --layers)
DEPTH_KEY = {"GPTNeoConfig": "num_layers", "GPTJConfig": "n_layer"}


def gpt2_bpe_cut(n_tokens: int, bos: str):
    """GPT-2's real BPE cut to its first `n_tokens` − 1 tokens (and the merges that make only those),
    with `bos` appended: a real English BPE for a 32000-row vocabulary (Mistral, Phi-3)."""
    from tokenizers import Tokenizer

    from headscope.core.tokenizer import bundled_gpt2_tokenizer

    j = json.loads(bundled_gpt2_tokenizer().backend_tokenizer.to_str())
    vocab = {t: i for t, i in j["model"]["vocab"].items() if i < n_tokens - 1}
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = [m for m in j["model"]["merges"]
                            if all(x in vocab for x in m) and "".join(m) in vocab]
    j["added_tokens"] = []
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_special_tokens([bos])
    return tok


def shape_config(shape: str, layers: int | None = None) -> tuple[str, dict]:
    """(config class, its keyword arguments) of `shape`, cut to `layers` blocks when given."""
    _, cls, kwargs, _, _, _ = SHAPES[shape]
    kwargs = dict(kwargs)
    if layers is not None:
        kwargs[DEPTH_KEY.get(cls, "num_hidden_layers")] = layers
        if cls == "GPTNeoConfig":
            kwargs["attention_types"] = [[["global", "local"], (layers + 1) // 2]]
    return cls, kwargs


def write_shape(shape: str, cache: Path, layers: int | None = None, repo_id: str | None = None
                ) -> tuple[str, int, float]:
    """Build `shape` with transformers, save it in the hub's layout into `cache`; (repo id, parameters, seconds)."""
    import torch
    import transformers

    from headscope.core.tokenizer import bundled_gpt2_tokenizer
    from headscope.testing.hub import cache_directory

    repo_id = repo_id or SHAPES[shape][0]
    tok_family = SHAPES[shape][3]
    cls, kwargs = shape_config(shape, layers)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    config = getattr(transformers, cls)(**kwargs)
    model = transformers.AutoModelForCausalLM.from_config(
        config, dtype=getattr(torch, DISK_DTYPE.get(shape, "float32")))
    n = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory(prefix=f"bench-families-{shape}-") as d:
        model.save_pretrained(d)
        del model
        # GPT-2's real BPE (50257 tokens; Pythia's is the same kind, 50277), the family's BOS added
        tok = (gpt2_bpe_cut(32000, "<s>") if tok_family == "sp32000" else
               bundled_gpt2_tokenizer().backend_tokenizer)
        if tok_family == "llama":
            tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
        elif tok_family == "opt":
            tok.add_special_tokens(["</s>"])
        elif tok_family == "gemma2":
            tok.add_special_tokens(["<bos>"])
        tok.save(str(Path(d) / "tokenizer.json"))
        # moved, not copied; the half-precision 7B class linked as the hub links (one copy on disk: 14.5 GB)
        cache_directory(cache, repo_id, d, symlinks=shape in DISK_DTYPE, move=True)
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


def measure(shape: str, cache: Path, dtype: str = "float32", layers: int | None = None,
            timeout: float | None = None) -> dict:
    """The baseline and the report of `shape` (its first `layers` blocks only, when given: stated in
    the row's name, ``<shape>@<layers>L``, and its repo id, never as the full model's)."""
    from headscope.testing.hub import cached_snapshot

    repo_id, _, _, _, t_target, m_target = SHAPES[shape]
    repo_id = repo_id if layers is None else f"{repo_id}-{layers}L"
    written = None
    try:
        cached_snapshot(cache, repo_id)
    except Exception:  # not there yet
        _, _, written = write_shape(shape, cache, layers, repo_id)
    n = stored_parameters(cached_snapshot(cache, repo_id))
    env = bench_sizes.child_env(cache)
    load_before = bench_sizes._loadavg()
    timeout = timeout or max(1800.0, 4 * t_target)
    base = bench_sizes._run_child(["--child-baseline", repo_id, dtype], env, timeout)
    with tempfile.TemporaryDirectory(prefix=f"bench-families-{shape}-") as out:
        rep = bench_sizes._run_child(["--child-report", repo_id, str(Path(out) / "report"), dtype], env, timeout)
    peak = max(max(p["peak_mb"], p.get("between_peak_mb") or 0.0) for p in rep["phases"])
    return {"size": shape if layers is None else f"{shape}@{layers}L", "repo_id": repo_id, "parameters": n,
            "layers": layers, "disk_dtype": DISK_DTYPE.get(shape, "float32"), "dtype": dtype,
            "cache_write_s": written, "loadavg_before": load_before, "loadavg_after": bench_sizes._loadavg(),
            "matmul_gflops": bench_sizes.matmul_gflops(),
            "baseline": base, "report": rep, "report_wall_s": bench_sizes.report_wall(rep), "report_peak_mb": peak,
            "target_s": t_target, "target_mb": m_target * 1024}


def run(quick: bool = False, shapes=None, cache: str | Path | None = None, keep: bool = False,
        layers: int | None = None, timeout: float | None = None) -> dict:
    shapes = list(shapes or (("pythia-160m",) if quick else DEFAULT_SHAPES))
    tmp = Path(cache) if cache else Path(tempfile.mkdtemp(prefix="bench-families-hub-"))
    results = []
    try:
        for shape in shapes:
            print(f"bench_families: {shape} …", file=sys.stderr, flush=True)
            tmp.mkdir(parents=True, exist_ok=True)
            results.append(measure(shape, tmp, layers=layers, timeout=timeout))
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
    ap.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES, choices=list(SHAPES))
    ap.add_argument("--cache", help="HF cache directory to use (and keep); shapes already in it are not rewritten")
    ap.add_argument("--keep", action="store_true", help="keep the temporary HF cache")
    ap.add_argument("--layers", type=int, metavar="N",
                    help="only the first N blocks of each shape (real widths, reduced depth; rows named <shape>@<N>L)")
    ap.add_argument("--timeout", type=float, metavar="S",
                    help="seconds each child (baseline, report) may run (default: 4× the shape's target, ≥ 1800)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    big = [s for s in a.shapes if s in DISK_DTYPE]
    if big and a.layers is None and os.environ.get("HEADSCOPE_BLOCK_BUDGET", "").lower() == "all":
        ap.error(f"{', '.join(big)}: HEADSCOPE_BLOCK_BUDGET=all holds every float32 block (15–32 GB); "
                 "leave it unset (blocks held within a third of the available memory) or give --layers N")
    r = run(shapes=a.shapes, cache=a.cache, keep=a.keep, layers=a.layers, timeout=a.timeout)
    print(json.dumps(r, indent=2, default=str) if a.json else r["report_text"])
    return 0 if all(row["pass"] for row in r["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
