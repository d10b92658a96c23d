"""Stage ``steering``: preview of steering the most semantic head (seed 002).

For the survey's best head, :func:`headscope.steering.steer` with α = 0 on every negative
eigenvalue of S (W' = S + Σ_{λ_i < 0} (α − 1) λ_i v_i v_iᵀ + A, rebuilt into W_Q', W_K'):
mean self-attention probability A[q, q] and mean rank of self before and after, on
seeded category prompts; and the head's attention pattern on one category prompt
before and after (the steered weights :func:`~headscope.steering.steer` returns, under
the report's processing, exactly as ``headscope steer`` measures them).
"""

from __future__ import annotations

from ...maps.patterns import lower_rows
from ...semantic.options import SteerOptions
from ...semantic.steering import MEASURE_LENGTH, measurement_prompts, pattern_self_stats, steer
from ..stages import Context, Rendered, Stage, register_stage
from ..views import steering as V
from .survey import head_label

ALPHA = 0.0


@register_stage
class SteeringStage(Stage):
    name = "steering"
    title = "Steering preview: negative eigenvalues of the top semantic head"
    version = 1
    nullable = ("out", "steered_fingerprint", "prompt.categories[]")   # nothing written; BOS has no category
    requires = ("survey",)

    def key_options(self, o) -> dict:
        return {"alpha": ALPHA, "select": "negative", "prompt_length": MEASURE_LENGTH, "seed": 0}

    def compute(self, ctx: Context) -> dict:
        model = ctx.model
        best = ctx.results["survey"]["rows"][0]
        layer, head = best["layer"], best["head"]
        p = ctx.progress
        p.set_total(2)
        # steer's own measurement prompts, built once: the preview prompt is their first (the one prompt of
        # seed 0), its patterns before and after from steer's walk up the blocks
        o = SteerOptions(select="negative")
        prompts = measurement_prompts(model, o)
        tokens = prompts.tokens[:1]                                                 # [1 p]
        st = steer(model, layer, head, ALPHA, o, tokens=prompts.tokens, also=[tokens])
        p.update()
        before, after = st.also[0]                                                  # [1 q k] each
        p.update()
        labels = prompts.labels[0].tolist()
        return {
            **st.result.to_dict(),
            "prompt": {"tokens": model.to_str_tokens(tokens[0].tolist()),
                       "categories": [prompts.names[c] if c >= 0 else None for c in labels]},
            "pattern_before": lower_rows(before[0]), "pattern_after": lower_rows(after[0]),
            "prompt_self_before": pattern_self_stats(before)["self_attention"],
            "prompt_self_after": pattern_self_stats(after)["self_attention"],
        }

    def render(self, data: dict, ctx) -> Rendered:
        return Rendered(index=[V.html(data, head=head_label(ctx, data["layer"], data["head"]))],
                        summary=V.summary(data))
