"""Views of one analysis over several hub revisions (:class:`headscope.maps.revisions.RevisionsResult`),
from its ``to_dict()`` (the ``revisions.json`` of ``--revisions``).

:func:`text` is the table ``headscope atlas|reproduce --revisions`` prints; :func:`figure` its
``revisions.svg``; :func:`html` the notebook's view (the figure, then the table).

The figure: for the atlas one panel per metric, its max over heads (and, for signed metrics, its
min: copy suppression and self-suppression are the most negative heads) against the step — the
emergence of a semantic head or a copy-suppression head. For reproduce: the claims passed and
failed per revision, then one panel per claim whose measured value is a number. The x axis is
the training step when every revision is named ``stepN``; otherwise the revision's position in
the run order (the labels are in ``revisions.json``).
"""

from __future__ import annotations

from ...maps.atlas import COLUMN, SIGNED
from .. import html as H
from ..figures import Series, line_plot, panels


def _num(x, w: int = 8) -> str:
    return f"{'—':>{w}}" if not isinstance(x, (int, float)) else f"{x:>{w}.3f}"


def text(d: dict, status: dict[str, bool] | None = None) -> str:
    """The text table of a ``revisions.json`` dict: one line per revision; with `status` (revision →
    computed in this run), whether each was computed or reused."""
    revs = d["revisions"]
    w = max([len("revision")] + [len(r["revision"]) for r in revs])
    st = (lambda r: "") if status is None else (lambda r: "  computed" if status.get(r["revision"]) else "  reused")
    lines = [f"headscope {d['command']} --revisions: {d['model']}, {len(revs)} revision(s)"]
    if d["command"] == "atlas":
        # metrics with a value in some revision (semantic_loss only with --survey), in the atlas's order
        keys = [k for k in (revs[0]["summary"] if revs else {})
                if any(r["summary"][k]["max"] is not None for r in revs)]
        for stat, shown, note in (("max", keys, "max over heads (value, head)"),
                                  ("min", [k for k in keys if k in SIGNED],
                                   "min over heads: the most negative self score (self-suppression) and OV "
                                   "copying (copy suppression)")):
            lines.append(note + ":")
            lines.append(f"{'revision':<{w}}  {'step':>8}  "
                         + "  ".join(f"{(COLUMN[k].short if k in COLUMN else k)[:14]:>14}" for k in shown))
            for r in revs:
                cells = [f"{_num(s[stat], 7)} {s['arg' + stat] or '—':<6}" for s in (r["summary"][k] for k in shown)]
                lines.append(f"{r['revision']:<{w}}  {'—' if r['step'] is None else r['step']:>8}  "
                             + "  ".join(cells) + (st(r) if stat == "max" else ""))
    else:
        lines.append(f"{'revision':<{w}}  {'step':>8}  {'pass':>4}  {'fail':>4}  failing claims")
        for r in revs:
            s = r["summary"]
            failing = [k for k, c in s["claims"].items() if c["passed"] is False]
            lines.append(f"{r['revision']:<{w}}  {'—' if r['step'] is None else r['step']:>8}  {s['n_pass']:>4}  "
                         f"{s['n_fail']:>4}  {', '.join(failing[:6]) or '—'}"
                         + (f", … (+{len(failing) - 6})" if len(failing) > 6 else "") + st(r))
    return "\n".join(l.rstrip() for l in lines)


def html(d: dict, status: dict[str, bool] | None = None) -> H.Safe:
    """The notebook's view: the figure, then the text table."""
    return H.join([figure(d), H.tag("pre", text(d, status))])


def _axis(d: dict) -> tuple[list[float], str]:
    steps = [r["step"] for r in d["revisions"]]
    if steps and all(s is not None for s in steps):
        return [float(s) for s in steps], "training step"
    return [float(i) for i in range(len(steps))], "revision (run order: " + ", ".join(
        r["revision"] for r in d["revisions"])[:60] + ")"


def figure(d: dict, *, cols: int = 3) -> H.Safe:
    """The panels of a ``revisions.json`` dict (module docstring)."""
    x, xlabel = _axis(d)
    revs = d["revisions"]
    figs = []
    if d["command"] == "atlas":
        for k in (revs[0]["summary"] if revs else {}):
            if all(r["summary"][k]["max"] is None for r in revs):     # semantic_loss without --survey
                continue
            label = COLUMN[k].label if k in COLUMN else k
            series = [Series(x, [r["summary"][k]["max"] for r in revs], label="max over heads", markers=True)]
            if k in SIGNED:
                series.append(Series(x, [r["summary"][k]["min"] for r in revs], label="min over heads",
                                     dashed=True, markers=True))
            figs.append(line_plot(series, title=label, xlabel=xlabel, ylabel=k, width=420, height=260,
                                  legend_below=True))
    else:
        figs.append(line_plot([Series(x, [r["summary"]["n_pass"] for r in revs], label="pass", markers=True),
                               Series(x, [r["summary"]["n_fail"] for r in revs], label="fail", dashed=True,
                                      markers=True)],
                              title="claims", xlabel=xlabel, ylabel="claims", width=420, height=260,
                              legend_below=True))
        claims = list(revs[0]["summary"]["claims"]) if revs else []
        for c in claims:
            ys = [r["summary"]["claims"].get(c, {}).get("measured") for r in revs]
            ys = [y if isinstance(y, (int, float)) and not isinstance(y, bool) else None for y in ys]
            if any(y is not None for y in ys):
                figs.append(line_plot([Series(x, ys, label="measured", markers=True)], title=c, xlabel=xlabel,
                                      ylabel="measured", width=420, height=260, legend_below=True))
    return panels(figs, cols=cols, title=f"headscope {d['command']} --revisions: {d['model']}")
