"""Stage ``calibration``: calibrated layer-0 denominators on the calibration text.

Runs :func:`headscope.calibration.calibrate` (fixed query ' the' at every position n;
maths in its docstring) on the report's calibration text. The saved data is the
calibration file itself (``Calibration.to_dict()``; ``headscope neurons --calibration``
reads the same format), which the ``neurons`` stage rebuilds with
``Calibration.from_dict``.
"""

from __future__ import annotations

from ...layer0.calibration import calibrate
from ...layer0.split import SEED_QUERY
from .. import figures as F
from .. import html as H
from ..stages import Context, Rendered, Stage, register_stage



#: calibration windows of at most GPT-2's context (the seed's): a rotary model's n_ctx (Pythia 2048, Llama 3
#: 131072) would make every window's [head p p] scores quadratic in it; GPT-2's runs unchanged
WINDOW = 1024


@register_stage
class CalibrationStage(Stage):
    name = "calibration"
    title = "Calibration of the contextual circuit"
    exclusive = True          # large products that use every thread well (report.lanes)
    version = 2     # 2: rotary models (layer0.rotary_split)
    inputs = ("calibration",)

    def key_options(self, o) -> dict:
        return {"query": SEED_QUERY, "window": WINDOW}

    def compute(self, ctx: Context) -> dict:
        ctx.progress.set_total(1)
        cal = calibrate(ctx.model, ctx.inputs.calibration.text, query=SEED_QUERY, window=WINDOW)
        ctx.progress.update()
        return cal.to_dict()

    def render(self, data: dict, ctx) -> Rendered:
        ls = data["log_seed_denom"]
        n = list(range(len(data["counts"])))
        series = [F.Series(n, ls[h], f"L0H{h}") for h in range(min(len(ls), 8))]
        fig = H.figure(F.line_plot(series, title="Calibrated log S̄[n]", xlabel="query position n",
                                   ylabel="log S̄_h[n]", width=620, height=320),
                       f"log of the seed's denominator S̄_h[n] averaged over the {data['n_windows']} calibration "
                       f"windows, query {data['query']!r} at every position n"
                       f"{' (first 8 heads)' if len(ls) > 8 else ''}.")
        kv = H.kv_table([("query token", H.code(data["query"])), ("calibration tokens", data["n_text_tokens"]),
                         ("windows", data["n_windows"]), ("positions calibrated", len(data["counts"])),
                         *([] if (ctx.results.get("model") or {}).get("config", {}).get("positional") == "rotary"
                           else [("c (typical embedding norm)", data["c"])]),      # rotary: no W_pos, c unused
                         ("median LN2 scale σ̄₂", data["ln2_scale"]),
                         ("text sha256", H.code(data["text_sha256"][:16] + "…"))])
        return Rendered(index=[H.grid([kv, fig])], summary=[("calibration windows", data["n_windows"])])
