"""Views of the layer-0 softmax denominators' stability
(:class:`headscope.layer0.denominators.DenominatorStability`), from its ``to_dict()``.

:func:`text` is ``headscope denominators``'s table and :func:`traces_figure` its ``--out``
denominators.svg; :func:`html` the report stage's index section and the notebook's view;
:func:`head_section` a head's page section.
"""

from __future__ import annotations

from .. import figures as F
from .. import html as H
from ..paths import head_page


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


# -- text and the command's file -------------------------------------------------------------------


def text(d: dict) -> str:
    """One line per head: spread, trend, predicted and measured std, the bounds (at the last position)."""
    lines = [f"{d['n_texts']} windows of {d['window']} tokens, query {d['query']!r}; {d['normalisation']}",
             f"{'head':>4} {'spread':>8} {'slope':>10} {'pred_std':>9} {'meas_std':>9} {'cheb':>8} {'hoeff':>8} {'meas_q':>8}"]
    for h in d["heads"]:
        last = -1
        pred = f"{d['predicted_rel_std'][h][last]:9.4f}" if d["predicted_rel_std"] else f"{'-':>9}"
        cheb = f"{d['chebyshev_rel'][h][last]:8.4f}" if d["chebyshev_rel"] else f"{'-':>8}"
        hoef = f"{d['hoeffding_rel'][h][last]:8.4f}" if d["hoeffding_rel"] else f"{'-':>8}"
        lines.append(f"{h:>4} {d['median_rel_spread'][h]:8.4f} {d['trend_slope'][h]:10.2e} {pred} "
                     f"{d['measured_rel_std'][h][last]:9.4f} {cheb} {hoef} {d['measured_rel_quantile'][h][last]:8.4f}")
    lines.append(f"(std/bounds relative to the mean, at position {d['positions'][-1]}; bounds at level δ = {d['delta']})")
    return "\n".join(lines)


def traces_figure(d: dict) -> H.Safe:
    """One panel per head: S_h[n] of the sampled texts (thin) and their mean (thick), against n."""
    figs = []
    log = d["mean"] is None              # S beyond float64: plot log S (absolute_overflow says why)
    mean, traces = (d["log_mean"], d["log_traces"]) if log else (d["mean"], d["traces"])
    for h in d["heads"]:
        n = list(range(len(mean[h])))
        series = [F.Series(n, t[h], "") for t in traces] + [F.Series(n, mean[h], "mean over texts")]
        figs.append(F.line_plot(series, width=300, height=210, xlabel="query position n",
                                ylabel="log S[n]" if log else "S[n]",
                                title=f"head {h}: spread {d['median_rel_spread'][h]:.3g}"))
    return F.panels(figs, cols=4, title=f"softmax denominators per head ({d['normalisation'].split(':')[0]} "
                                        f"normalisation, query {d['query']!r}, {d['n_texts']} texts)")


# -- HTML --------------------------------------------------------------------------------------------


def html(d: dict, *, links: bool = True) -> H.Safe:
    """The table of every head's spread, predictions and bounds, and each head's denominator trace."""
    heads = d["heads"]
    rows = []
    for h in heads:
        pr = d["predicted_rel_std"][h] if d["predicted_rel_std"] else None
        rows.append((H.link(head_page(0, h), f"L0H{h}") if links else f"L0H{h}", d["median_rel_spread"][h],
                     _median(d["measured_rel_std"][h]), _median(pr) if pr else None,
                     _median(d["chebyshev_rel"][h]) if pr else None,
                     _median(d["hoeffding_rel"][h]) if pr else None, d["trend_slope"][h]))
    table = H.table(["head", "median std/mean", "measured std/mean (grid)", "predicted std/mean",
                     f"Chebyshev δ={d['delta']:g}", f"Hoeffding δ={d['delta']:g}", "trend d log S/dn"],
                    rows, numeric=(1, 2, 3, 4, 5, 6),
                    caption=f"{d['n_texts']} windows of {d['window']} tokens; query {d['query']!r}; "
                            f"medians over the positions n = {d['positions'][0]}, "
                            f"{d['positions'][1] if len(d['positions']) > 1 else ''}, … "
                            f"(predictions: i.i.d. unigram tokens). Normalisation: {d['normalisation']}.")
    return H.join([table, H.grid([trace_figure(d, h, 360, 250) for h in heads])])


def summary(d: dict) -> list[tuple[str, object]]:
    spread_max = max(d["heads"], key=lambda h: d["median_rel_spread"][h])
    return [("denominator windows × tokens", f"{d['n_texts']} × {d['window']}"),
            ("largest median denominator std/mean", f"{d['median_rel_spread'][spread_max]:.3g} (L0H{spread_max})")]


def glance(d: dict, h: int) -> str:
    """A head's one-line summary (the report's page list)."""
    return f"denominator std/mean {d['median_rel_spread'][h]:.2g}"


def trace_figure(d: dict, h: int, width: int = 520, height: int = 300) -> H.Safe:
    """Head h's S[n]: mean over texts, two text windows, and the i.i.d. prediction with its bands."""
    if d["mean"] is None:
        return log_trace_figure(d, h, width, height)
    n = list(range(len(d["mean"][h])))
    series = [F.Series(n, d["mean"][h], "mean over texts")]
    for k, tr in enumerate(d["traces"][:2]):
        series.append(F.Series(n, tr[h], f"text window {k + 1}", dashed=True))
    bands = []
    if d["predicted_mean"]:
        x = d["positions"]
        m = d["predicted_mean"][h]
        for key, label in (("hoeffding_rel", "Hoeffding"), ("chebyshev_rel", "Chebyshev")):
            r = d[key][h]
            bands.append(F.Band(x, [max(a * (1 - b), 0.0) for a, b in zip(m, r)], [a * (1 + b) for a, b in zip(m, r)],
                                f"{label} δ={d['delta']:g}"))
        series.append(F.Series(x, m, "predicted E[S]", markers=True))
    lo = min(min(d["mean"][h]), *(min(b.lo) for b in bands)) if bands else None
    hi = max(max(max(t[h]) for t in d["traces"][:2]), max(d["mean"][h]), *(max(b.hi) for b in bands)) if bands else None
    ylim = (max(lo, 0.0) * 0.95, hi * 1.05) if bands else None
    return H.figure(F.line_plot(series, bands=bands, title=f"L0H{h}: denominator S[n]", xlabel="query position n",
                                ylabel="S[n]", width=width, height=height, ylim=ylim),
                    f"Head 0.{h}: the seed's denominator S[n] (mean over texts, and two text windows), with the "
                    f"i.i.d. prediction E[S] and its {100 * (1 - d['delta']):g} % Hoeffding and Chebyshev bands.")


def log_trace_figure(d: dict, h: int, width: int = 520, height: int = 300) -> H.Safe:
    """log S[n] when S itself exceeds float64 (``absolute_overflow``): no bands, the logs only."""
    n = list(range(len(d["log_mean"][h])))
    series = [F.Series(n, d["log_mean"][h], "log mean over texts")]
    for k, tr in enumerate(d["log_traces"][:2]):
        series.append(F.Series(n, tr[h], f"text window {k + 1}", dashed=True))
    if d["log_predicted_mean"]:
        series.append(F.Series(d["positions"], d["log_predicted_mean"][h], "predicted log E[S]", markers=True))
    return H.figure(F.line_plot(series, title=f"L0H{h}: log denominator", xlabel="query position n",
                                ylabel="log S[n]", width=width, height=height),
                    f"Head 0.{h}: log of the seed's denominator S[n] (log of the mean over texts, two text "
                    f"windows, the i.i.d. prediction log E[S]); S itself is beyond float64 here "
                    f"({d['absolute_overflow']}).")


def head_section(d: dict, h: int) -> H.Safe:
    """A head's page section: its trace and its relative spread, measured and predicted, against n."""
    parts = [trace_figure(d, h)]
    x = d["positions"]
    series = [F.Series(x, d["measured_rel_std"][h], "measured std/mean", markers=True)]
    if d["predicted_rel_std"]:
        series += [F.Series(x, d["predicted_rel_std"][h], "predicted std/mean (i.i.d.)", dashed=True),
                   F.Series(x, d["measured_rel_quantile"][h], f"measured {1 - d['delta']:g} quantile of |S−mean|/mean"),
                   F.Series(x, d["chebyshev_rel"][h], "Chebyshev bound", dashed=True),
                   F.Series(x, d["hoeffding_rel"][h], "Hoeffding bound", dashed=True)]
    parts.append(H.figure(F.line_plot(series, log_y=True, title=f"L0H{h}: relative spread", xlabel="query position n",
                                      ylabel="relative deviation"),
                          "Relative spread of S[n] across texts, measured and predicted (log scale)."))
    return H.section("Softmax denominator", H.join([
        H.kv_table([("median std/mean over n ≥ n_min", d["median_rel_spread"][h]),
                    ("trend d log mean S / dn", d["trend_slope"][h])]), H.grid(parts)]))
