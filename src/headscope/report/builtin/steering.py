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
from ...semantic.steering import pattern_self_stats, steer
from ...semantic.prompts import prompts_for
from ..stages import Context, Rendered, Stage, register_stage
from ..views import steering as V
from .survey import head_label

ALPHA = 0.0
PROMPT_LENGTH = 16


@register_stage
class SteeringStage(Stage):
    name = "steering"
    title = "Steering preview: negative eigenvalues of the top semantic head"
    version = 1
    nullable = ("out", "steered_fingerprint", "prompt.categories[]")   # nothing written; BOS has no category
    requires = ("survey",)

    def key_options(self, o) -> dict:
        return {"alpha": ALPHA, "select": "negative", "prompt_length": PROMPT_LENGTH, "seed": 0}

    def compute(self, ctx: Context) -> dict:
        model = ctx.model
        best = ctx.results["survey"]["rows"][0]
        layer, head = best["layer"], best["head"]
        p = ctx.progress
        p.set_total(2)
        prompts, _ = prompts_for(model, n_prompts=1, length=PROMPT_LENGTH, seed=0)
        tokens = prompts.tokens[:1]                                                 # [1 p]
        # the prompt's patterns before and after from steer's own walk up the blocks
        st = steer(model, layer, head, ALPHA, SteerOptions(select="negative"), also=[tokens])
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
