"""Stage ``denominators``: stability of the layer-0 softmax denominators, with predicted bands.

Runs :func:`headscope.denominators.denominator_stability` (maths in its docstring) on
windows of exactly ``window`` tokens cut from the calibration and sample texts, with the
fixed query ' the' at every position n: the seed's S_h[n] = Σ_j pos[n, j] content[n, x_j]
per text, its mean and spread over texts, and the i.i.d.-token predictions
E[S] ± Hoeffding / Chebyshev deviation bounds at level δ. ``window`` is the report's
``denominator_window`` (default 256), halved until the texts give at least two windows.
"""

from __future__ import annotations

from ..._errors import HeadscopeError
from ...corpus import windows
from ...layer0.denominators import denominator_stability
from ...layer0.split import SEED_QUERY
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from ..views import denominators as V
from ..paths import head_page

DELTA = 0.1


def _full_windows(model, texts: list[str], window: int) -> list:
    """corpus.windows' windows of exactly `window` tokens (chunks of window − 1 tokens + BOS)."""
    try:
        return [x for x in windows(model, texts, n_ctx=window) if len(x) == window]
    except HeadscopeError:          # no tokens at all
        return []


@register_stage
class DenominatorsStage(Stage):
    name = "denominators"
    title = "Layer-0 softmax denominators"
    version = 3     # 3: rotary models (layer0.rotary_split)
    inputs = ("calibration", "samples")
    nullable = ("mean", "traces", "predicted_mean", "absolute_overflow")   # None: S beyond float64 (logs given)

    def key_options(self, o) -> dict:
        return {"query": SEED_QUERY, "delta": DELTA, "window": o.denominator_window}

    def compute(self, ctx: Context) -> dict:
        model = ctx.model
        texts = [ctx.inputs.calibration.text] + [t.text for t in ctx.inputs.samples]
        window = min(ctx.options.denominator_window, model.cfg.n_ctx)
        wins = _full_windows(model, texts, window)              # the texts tokenised once (usually)
        while window > 8 and len(wins) < 2:
            window //= 2
            wins = _full_windows(model, texts, window)
        if len(wins) < 2:
            raise HeadscopeError("denominators: the calibration and sample texts are too short "
                                 f"(expected at least 2 windows of {window} tokens)")
        ctx.progress.set_total(1)
        r = denominator_stability(model, wins, query=SEED_QUERY, window=window,
                                  n_min=max(2, min(32, window // 4)), stride=max(1, window // 16), delta=DELTA,
                                  n_traces=4)
        ctx.progress.update()
        return r.to_dict()

    def render(self, data: dict, ctx) -> Rendered:
        pages = [PageSection(path=head_page(0, h), title=f"Head 0.{h}", group="Attention heads", order=(0, h),
                             body=V.head_section(data, h), summary=V.glance(data, h)) for h in data["heads"]]
        return Rendered(index=[V.html(data)], summary=V.summary(data), pages=pages)
