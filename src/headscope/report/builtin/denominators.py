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
from ...layer0.denominators import denominator_stability
from ...layer0.split import SEED_QUERY
from .. import figures as F
from .. import html as H
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from .paths import head_page

DELTA = 0.1


def _n_full_windows(lengths: list[int], window: int) -> int:
    return sum(n // (window - 1) for n in lengths)  # corpus.windows: chunks of window − 1 tokens + BOS


@register_stage
class DenominatorsStage(Stage):
    name = "denominators"
    title = "Layer-0 softmax denominators"
    version = 2
    inputs = ("calibration", "samples")
    nullable = ("mean", "traces", "predicted_mean", "absolute_overflow")   # None: S beyond float64 (logs given)

    def key_options(self, o) -> dict:
        return {"query": SEED_QUERY, "delta": DELTA, "window": o.denominator_window}

    def compute(self, ctx: Context) -> dict:
        model = ctx.model
        texts = [ctx.inputs.calibration.text] + [t.text for t in ctx.inputs.samples]
        lengths = [len(model.tokenizer.encode(t)) for t in texts]
        window = min(ctx.options.denominator_window, model.cfg.n_ctx)
        while window > 8 and _n_full_windows(lengths, window) < 2:
            window //= 2
        if _n_full_windows(lengths, window) < 2:
            raise HeadscopeError("denominators: the calibration and sample texts are too short "
                                 f"(expected at least 2 windows of {window} tokens)")
        ctx.progress.set_total(1)
        r = denominator_stability(model, texts, query=SEED_QUERY, window=window,
                                  n_min=max(2, min(32, window // 4)), stride=max(1, window // 16), delta=DELTA,
                                  n_traces=4)
        ctx.progress.update()
        return r.to_dict()

    def render(self, data: dict, ctx) -> Rendered:
        heads = data["heads"]
        rows = []
        for h in heads:
            pr = data["predicted_rel_std"][h] if data["predicted_rel_std"] else None
            rows.append((H.link(head_page(0, h), f"L0H{h}"), data["median_rel_spread"][h],
                         _median(data["measured_rel_std"][h]), _median(pr) if pr else None,
                         _median(data["chebyshev_rel"][h]) if pr else None,
                         _median(data["hoeffding_rel"][h]) if pr else None, data["trend_slope"][h]))
        table = H.table(["head", "median std/mean", "measured std/mean (grid)", "predicted std/mean",
                         f"Chebyshev δ={data['delta']:g}", f"Hoeffding δ={data['delta']:g}", "trend d log S/dn"],
                        rows, numeric=(1, 2, 3, 4, 5, 6),
                        caption=f"{data['n_texts']} windows of {data['window']} tokens; query {data['query']!r}; "
                                f"medians over the positions n = {data['positions'][0]}, "
                                f"{data['positions'][1] if len(data['positions']) > 1 else ''}, … "
                                f"(predictions: i.i.d. unigram tokens). Normalisation: {data['normalisation']}.")
        figs = [self._trace_fig(data, h, 360, 250) for h in heads]
        spread_max = max(heads, key=lambda h: data["median_rel_spread"][h])
        summary = [("denominator windows × tokens", f"{data['n_texts']} × {data['window']}"),
                   ("largest median denominator std/mean",
                    f"{data['median_rel_spread'][spread_max]:.3g} (L0H{spread_max})")]
        pages = [PageSection(path=head_page(0, h), title=f"Head 0.{h}", group="Attention heads", order=(0, h),
                             body=self._page(data, h), summary=f"denominator std/mean {data['median_rel_spread'][h]:.2g}")
                 for h in heads]
        return Rendered(index=[table, H.grid(figs)], summary=summary, pages=pages)

    def _trace_fig(self, data, h, width=520, height=300) -> H.Safe:
        if data["mean"] is None:
            return self._log_trace_fig(data, h, width, height)
        n = list(range(len(data["mean"][h])))
        series = [F.Series(n, data["mean"][h], "mean over texts")]
        for k, tr in enumerate(data["traces"][:2]):
            series.append(F.Series(n, tr[h], f"text window {k + 1}", dashed=True))
        bands = []
        if data["predicted_mean"]:
            x = data["positions"]
            m = data["predicted_mean"][h]
            for key, label in (("hoeffding_rel", "Hoeffding"), ("chebyshev_rel", "Chebyshev")):
                r = data[key][h]
                bands.append(F.Band(x, [max(a * (1 - b), 0.0) for a, b in zip(m, r)], [a * (1 + b) for a, b in zip(m, r)],
                                    f"{label} δ={data['delta']:g}"))
            series.append(F.Series(x, m, "predicted E[S]", markers=True))
        lo = min(min(data["mean"][h]), *(min(b.lo) for b in bands)) if bands else None
        hi = max(max(max(t[h]) for t in data["traces"][:2]), max(data["mean"][h]), *(max(b.hi) for b in bands)) if bands else None
        ylim = (max(lo, 0.0) * 0.95, hi * 1.05) if bands else None
        return H.figure(F.line_plot(series, bands=bands, title=f"L0H{h}: denominator S[n]", xlabel="query position n",
                                    ylabel="S[n]", width=width, height=height, ylim=ylim),
                        f"Head 0.{h}: the seed's denominator S[n] (mean over texts, and two text windows), with the "
                        f"i.i.d. prediction E[S] and its {100 * (1 - data['delta']):g} % Hoeffding and Chebyshev bands.")

    def _log_trace_fig(self, data, h, width=520, height=300) -> H.Safe:
        """log S[n] when S itself exceeds float64 (``absolute_overflow``): no bands, the logs only."""
        n = list(range(len(data["log_mean"][h])))
        series = [F.Series(n, data["log_mean"][h], "log mean over texts")]
        for k, tr in enumerate(data["log_traces"][:2]):
            series.append(F.Series(n, tr[h], f"text window {k + 1}", dashed=True))
        if data["log_predicted_mean"]:
            series.append(F.Series(data["positions"], data["log_predicted_mean"][h], "predicted log E[S]",
                                   markers=True))
        return H.figure(F.line_plot(series, title=f"L0H{h}: log denominator", xlabel="query position n",
                                    ylabel="log S[n]", width=width, height=height),
                        f"Head 0.{h}: log of the seed's denominator S[n] (log of the mean over texts, two text "
                        f"windows, the i.i.d. prediction log E[S]); S itself is beyond float64 here "
                        f"({data['absolute_overflow']}).")

    def _page(self, data, h) -> H.Safe:
        parts = [self._trace_fig(data, h)]
        x = data["positions"]
        series = [F.Series(x, data["measured_rel_std"][h], "measured std/mean", markers=True)]
        if data["predicted_rel_std"]:
            series += [F.Series(x, data["predicted_rel_std"][h], "predicted std/mean (i.i.d.)", dashed=True),
                       F.Series(x, data["measured_rel_quantile"][h], f"measured {1 - data['delta']:g} quantile of |S−mean|/mean"),
                       F.Series(x, data["chebyshev_rel"][h], "Chebyshev bound", dashed=True),
                       F.Series(x, data["hoeffding_rel"][h], "Hoeffding bound", dashed=True)]
        parts.append(H.figure(F.line_plot(series, log_y=True, title=f"L0H{h}: relative spread", xlabel="query position n",
                                          ylabel="relative deviation"),
                              "Relative spread of S[n] across texts, measured and predicted (log scale)."))
        return H.section("Softmax denominator", H.join([
            H.kv_table([("median std/mean over n ≥ n_min", data["median_rel_spread"][h]),
                        ("trend d log mean S / dn", data["trend_slope"][h])]), H.grid(parts)]))


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None
