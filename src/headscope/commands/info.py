"""Show a checkpoint's sizes, its default processing and the sha256 of its weights.

  headscope info gpt2
  headscope info ./my-checkpoint --json
"""

from __future__ import annotations

from ..report.views.model import architecture
from .args import emit, load_model


def add_arguments(p):
    p.add_argument("model", help="hub id (gpt2, distilgpt2, …) or checkpoint directory")


def run(args) -> int:
    model = load_model(args)
    d = model.describe()
    c = d["config"]
    text = "\n".join([
        f"model        {d['source']}",
        f"directory    {d['directory']}",
        f"sha256       {d['fingerprint']}",
        f"layers       {c['n_layers']}   heads {c['n_heads']}   d_model {c['d_model']}   d_head {c['d_head']}",
        f"d_mlp        {c['d_mlp']}   d_vocab {c['d_vocab']}"
        + (f" ({c['n_tokens']} tokens + {c['d_vocab'] - c['n_tokens']} padding rows, left out of every analysis)"
           if "n_tokens" in c else "") + f"   n_ctx {c['n_ctx']}   act {c['act_fn']}",
        f"parameters   {d['n_parameters']:,}",
        f"dtype        {d['dtype']}",
        f"bos          {d['bos']['token']!r} (id {d['bos']['id']}, {d['bos']['source']})"
        + ("; WARNING: not a token of the tokenizer — an embedding padding row, most likely untrained"
           if d["bos"]["padding_row"] else ""),
        "processing   " + ", ".join(k for k, v in d["processing_default"].items() if v) + " (default for analyses)",
    ] + [f"{label:<12} {value}" for label, value in architecture(c, d["bos"])])
    emit(args, d, text)
    return 0
