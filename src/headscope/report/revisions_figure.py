"""The figure of ``--revisions``: each summary metric against training step (one SVG of panels).

Atlas: one panel per metric, its max over heads (and, for signed metrics, its min: copy
suppression and self-suppression are the most negative heads) against the step — the
emergence of a semantic head or a copy-suppression head. Reproduce: the claims passed and
failed per revision, then one panel per claim whose measured value is a number.

The x axis is the training step when every revision is named ``stepN``; otherwise the
revision's position in the run order (the labels are in ``revisions.json``).
"""

from __future__ import annotations

from ..maps.atlas import COLUMN, SIGNED
from .figures import Series, line_plot, panels
from .html import Safe


def _axis(d: dict) -> tuple[list[float], str]:
    steps = [r["step"] for r in d["revisions"]]
    if steps and all(s is not None for s in steps):
        return [float(s) for s in steps], "training step"
    return [float(i) for i in range(len(steps))], "revision (run order: " + ", ".join(
        r["revision"] for r in d["revisions"])[:60] + ")"


def revisions_figure(d: dict, *, cols: int = 3) -> Safe:
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
            figs.append(line_plot(series, title=label, xlabel=xlabel, ylabel=k, width=420, height=260))
    else:
        figs.append(line_plot([Series(x, [r["summary"]["n_pass"] for r in revs], label="pass", markers=True),
                               Series(x, [r["summary"]["n_fail"] for r in revs], label="fail", dashed=True,
                                      markers=True)],
                              title="claims", xlabel=xlabel, ylabel="claims", width=420, height=260))
        claims = list(revs[0]["summary"]["claims"]) if revs else []
        for c in claims:
            ys = [r["summary"]["claims"].get(c, {}).get("measured") for r in revs]
            ys = [y if isinstance(y, (int, float)) and not isinstance(y, bool) else None for y in ys]
            if any(y is not None for y in ys):
                figs.append(line_plot([Series(x, ys, label="measured", markers=True)], title=c, xlabel=xlabel,
                                      ylabel="measured", width=420, height=260))
    return panels(figs, cols=cols, title=f"headscope {d['command']} --revisions: {d['model']}")
