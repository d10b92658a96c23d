"""Stage ``steering``: preview of steering the most semantic head (seed 002).

For the survey's best head, :func:`headscope.steering.steer` with α = 0 on every negative
eigenvalue of S (W' = S + Σ_{λ_i < 0} (α − 1) λ_i v_i v_iᵀ + A, rebuilt into W_Q', W_K'):
mean self-attention probability A[q, q] and mean rank of self before and after, on
seeded category prompts; and the head's attention pattern on one category prompt
before and after (the steered weights are :func:`headscope.steering.steered_qk`
unfolded into raw weights and processed again, exactly as ``headscope steer`` does).
"""

from __future__ import annotations

from ...forward import run_with_cache
from ...semantic import prompts_for
from ...steering import steer, steered_qk, unfold_into_raw
from ...weights import process
from .. import figures as F
from .. import html as H
from ..stages import Context, Rendered, Stage, register_stage
from .attention import _lower, _square, head_page
from .survey import head_label

ALPHA = 0.0
PROMPT_LENGTH = 16


@register_stage
class SteeringStage(Stage):
    name = "steering"
    title = "Steering preview: negative eigenvalues of the top semantic head"
    version = 1
    requires = ("survey",)

    def key_options(self, o) -> dict:
        return {"alpha": ALPHA, "select": "negative", "prompt_length": PROMPT_LENGTH, "seed": 0}

    def compute(self, ctx: Context) -> dict:
        model = ctx.model
        best = ctx.results["survey"]["rows"][0]
        layer, head = best["layer"], best["head"]
        p = ctx.progress
        p.set_total(2)
        res = steer(model, layer, head, ALPHA, select="negative")
        p.update()
        W = model.weights(ctx.options.processing)
        rb = steered_qk(W, layer, head, ALPHA, select="negative")
        W2 = process(unfold_into_raw(model.raw, layer, head, rb), ctx.options.processing)
        prompts, _ = prompts_for(model, n_prompts=1, length=PROMPT_LENGTH, seed=0)
        tokens = prompts.tokens[:1]                                                 # [1 p]
        name = f"blocks.{layer}.attn.hook_pattern"
        before = run_with_cache(W, tokens, [name], stop_at_layer=layer + 1)[name][0, head].double()   # [q k]
        after = run_with_cache(W2, tokens, [name], stop_at_layer=layer + 1)[name][0, head].double()
        p.update()
        labels = prompts.labels[0].tolist()
        return {
            **res.to_dict(),
            "prompt": {"tokens": model.to_str_tokens(tokens[0].tolist()),
                       "categories": [prompts.names[c] if c >= 0 else None for c in labels]},
            "pattern_before": _lower(before), "pattern_after": _lower(after),
            "prompt_self_before": before.diagonal()[1:].mean().item(),
            "prompt_self_after": after.diagonal()[1:].mean().item(),
        }

    def render(self, data: dict, ctx) -> Rendered:
        name = f"L{data['layer']}H{data['head']}"
        toks = data["prompt"]["tokens"]
        figs = [H.figure(F.heatmap(_square(data[f"pattern_{k}"]), row_labels=toks, col_labels=toks, signed=False,
                                   vmin=0.0, vmax=1.0, title=f"{name} {label}", max_width=470),
                         f"Attention pattern of {name} on a category prompt {label} "
                         f"(rows: query, columns: key; blank: masked).")
                for k, label in (("before", "before steering"), ("after", f"after α = {data['alpha']:g}"))]
        bars = H.figure(F.bar_plot([data["self_attention_before"], data["self_attention_after"]],
                                   ["before", f"α = {data['alpha']:g}"], title="Self-attention probability",
                                   ylabel="mean A[q, q]", width=300),
                        "Mean self-attention probability A[q, q] over the queries of 32 seeded category prompts.")
        kv = H.kv_table([("head", head_label(ctx, data["layer"], data["head"])),
                         ("eigenvalues scaled", f"{data['n_selected']} negative, by α = {data['alpha']:g}"),
                         ("self-attention before → after", f"{data['self_attention_before']:.4f} → "
                                                          f"{data['self_attention_after']:.4f}"),
                         ("mean rank of self before → after", f"{data['self_rank_before']:.2f} → "
                                                             f"{data['self_rank_after']:.2f}"),
                         ("rebuilt rank / rebuild error", f"{data['rank']} / {data['rebuild_error']:.2e}")],
                        caption="headscope steer MODEL --head L.H --alpha 0 writes this head as a checkpoint.")
        summary = [(f"self-attention of {name}, before → α = {data['alpha']:g}",
                    f"{data['self_attention_before']:.3f} → {data['self_attention_after']:.3f}")]
        return Rendered(index=[H.grid([kv, bars]), H.grid(figs)], summary=summary)
