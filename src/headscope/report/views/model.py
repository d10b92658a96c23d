"""Views of a model's description (``Model.describe()`` / the report's ``model`` stage): the
architecture rows that ``headscope info`` prints and the report's model table shows — family,
positional scheme (learned, or rotary with its fraction, base and scaling), key/value heads, norm,
residual layout, attention windows and the BOS headscope prepends."""

from __future__ import annotations

#: config.json's model_type → the family's name in tables
FAMILIES = {"gpt2": "GPT-2", "gpt_neo": "GPT-Neo", "gpt_neox": "GPT-NeoX (Pythia)", "opt": "OPT",
            "llama": "Llama", "qwen2": "Qwen2"}


def positional(c: dict) -> str:
    """'learned absolute (W_pos, n_ctx 1024)' or 'rotary on 16/64 dims of each head (25%), base 10000, …'."""
    if c.get("positional", "learned") != "rotary":
        return f"learned absolute (W_pos added to the embedding, {c['n_ctx']} positions)"
    r, e = c.get("rotary_dim", 0), c["d_head"]
    scaling = c.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "none"
    detail = ", ".join(f"{k} {v}" for k, v in sorted(scaling.items()) if k not in ("rope_type", "type"))
    return (f"rotary on {r}/{e} dims of each head ({100 * r / e:.0f}%), base {c.get('rotary_base', 10000.0):g}, "
            f"scaling {kind}{f' ({detail})' if detail else ''}")


def windows(c: dict) -> str:
    """'global' or 'local 256 on layers 1, 3; global elsewhere'."""
    w = c.get("attn_windows") or []
    local = {}
    for l, x in enumerate(w):
        if x:
            local.setdefault(int(x), []).append(l)
    if not local:
        return "global (every layer)"
    return "; ".join(f"local {x} on layer{'s' if len(ls) > 1 else ''} {', '.join(map(str, ls))}"
                     for x, ls in sorted(local.items())) + "; global elsewhere"


def bos(b: dict | None) -> str:
    if not b:
        return "unknown"
    return (f"{b['token']!r} (id {b['id']}, {b['source']}) prepended by headscope; the family's tokenizer "
            f"{'prepends it too' if b.get('prepended_by_tokenizer') else 'prepends none'}")


def architecture(c: dict, b: dict | None) -> list[tuple[str, str]]:
    """(label, value) rows of the architecture beyond the shapes."""
    norm = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}.get(c.get("norm", "layernorm"), c.get("norm"))
    layout = ("parallel residual (attention and MLP read the block's input)" if c.get("parallel_residual")
              else "post-LN" if c.get("post_ln") else "sequential pre-LN")
    return [
        ("family", f"{FAMILIES.get(c.get('family', 'gpt2'), c.get('family'))} (model_type {c.get('family', 'gpt2')})"),
        ("positions", positional(c)),
        ("key/value heads", f"{c.get('n_kv_heads', c['n_heads'])} for {c['n_heads']} query heads"
                            + (" (grouped-query)" if c.get("n_kv_heads", c["n_heads"]) != c["n_heads"] else "")),
        ("norm", f"{norm} (eps {c.get('ln_eps', 1e-5):g}), {layout}"),
        ("MLP", f"{'gated (SwiGLU-style) ' if c.get('gated_mlp') else ''}{c['act_fn']}"),
        ("attention windows", windows(c)),
        ("BOS", bos(b)),
    ]
