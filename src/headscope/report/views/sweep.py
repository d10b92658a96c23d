"""Views of a sweep (:class:`headscope.sweep.SweepResult`), from its ``to_dict()`` and tidy rows.

:func:`csv_text` the long table ``sweep.csv`` (one row per model × revision × analysis × metric ×
component); :func:`emergence` one SVG per analysis: each metric's max over components (and min,
dashed) against the training step, one curve per model; :func:`comparison` the models side by
side at their last revision; :func:`html` the offline page ``index.html`` (figures, the grid's
cells with links to each task's page and JSON, failed cells marked); :func:`task_page` a task's
own page (its command's text view); :func:`text` the table printed.
"""

from __future__ import annotations

import csv
import io
import math

from .. import html as H
from ..figures import Series, line_plot, panels

CSV_COLUMNS = ("model", "revision", "step", "analysis", "metric", "component", "value", "status")


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    return str(v)


def csv_text(rows: list[dict]) -> str:
    """The tidy rows as CSV (repr of floats: the JSON's values exactly; empty for null)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        w.writerow([_fmt(r[c]) for c in CSV_COLUMNS])
    return buf.getvalue()


def _x(d: dict, model: str) -> tuple[list[float], str]:
    revs = d["revisions"][model]
    steps = [None if r is None else _step(r) for r in revs]
    if steps and all(s is not None for s in steps):
        return [float(s) for s in steps], "training step"
    return [float(i) for i in range(len(revs))], "revision (run order)"


def _step(rev: str) -> int | None:
    return int(rev[4:]) if rev.startswith("step") and rev[4:].isdigit() else None


def _metrics(d: dict, analysis: str) -> list[str]:
    out: list[str] = []
    for c in d["cells"]:
        if c["analysis"] == analysis and c["summary"]:
            out += [k for k, v in _flat(c["summary"]).items() if k not in out]
    return out


def _flat(summary: dict) -> dict[str, dict]:
    """metric → {max, min}: a reproduce summary's claims become their measured value (max = min)."""
    if "claims" in summary:
        out = {"n_pass": {"max": summary["n_pass"], "min": None}, "n_fail": {"max": summary["n_fail"], "min": None}}
        for cid, c in summary["claims"].items():
            m = c.get("measured")
            if isinstance(m, (int, float)) and not isinstance(m, bool):
                out[cid] = {"max": m, "min": None}
        return out
    return {k: v for k, v in summary.items() if isinstance(v, dict) and "max" in v}


def _lookup(d: dict, analysis: str) -> dict:
    return {(c["model"], c["revision"]): _flat(c["summary"]) for c in d["cells"]
            if c["analysis"] == analysis and c["summary"]}


def _value(look: dict, model: str, rev, metric: str, stat: str):
    v = look.get((model, rev), {}).get(metric, {}).get(stat)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def emergence(d: dict, analysis: str, *, cols: int = 3) -> H.Safe:
    """Each metric of `analysis` against the training step, a curve per model (module docstring)."""
    figs = []
    models = d["grid"]["models"]
    look = _lookup(d, analysis)
    for metric in _metrics(d, analysis):
        series, xlabel = [], "revision"
        for m in models:
            x, xlabel = _x(d, m)
            revs = d["revisions"][m]
            series.append(Series(x, [_value(look, m, r, metric, "max") for r in revs],
                                 label=f"{m} max" if len(models) > 1 else "max", markers=True))
            lo = [_value(look, m, r, metric, "min") for r in revs]
            if any(v is not None for v in lo):
                series.append(Series(x, lo, label=f"{m} min" if len(models) > 1 else "min", dashed=True,
                                     markers=True))
        if any(any(v is not None for v in s.y) for s in series):
            figs.append(line_plot(series, title=metric, xlabel=xlabel, ylabel=metric, width=420, height=260))
    return panels(figs, cols=cols, title=f"headscope sweep: {analysis} against training step")


def comparison(d: dict, analysis: str, *, cols: int = 3) -> H.Safe:
    """Each metric's max over components at each model's last revision, models side by side."""
    models = d["grid"]["models"]
    look = _lookup(d, analysis)
    figs = []
    for metric in _metrics(d, analysis):
        ys = [_value(look, m, d["revisions"][m][-1], metric, "max") for m in models]
        if any(v is not None for v in ys):
            figs.append(line_plot([Series([float(i) for i in range(len(models))], ys, label="max", markers=True)],
                                  title=metric, xlabel="model: " + ", ".join(models)[:60], ylabel=metric,
                                  width=420, height=260))
    return panels(figs, cols=cols, title=f"headscope sweep: {analysis}, models at their last revision")


def figure_names(d: dict) -> list[tuple[str, str]]:
    """(file name, SVG) of every figure of the sweep directory."""
    out = []
    for a in d["grid"]["analyses"]:
        out.append((f"emergence-{a}.svg", str(emergence(d, a)) + "\n"))
        if len(d["grid"]["models"]) > 1:
            out.append((f"models-{a}.svg", str(comparison(d, a)) + "\n"))
    return out


def text(d: dict, status: dict[str, str] | None = None) -> str:
    """One line per cell: model, revision, analysis, status (computed / reused / failed: reason)."""
    cells = d["cells"]
    wm = max([5] + [len(c["model"]) for c in cells])
    wr = max([8] + [len(c["revision"] or "—") for c in cells])
    lines = [f"headscope sweep: {len(d['grid']['models'])} model(s) × {len(d['grid']['analyses'])} analyses, "
             f"{len(cells)} task(s), {d['n_failed']} failed",
             f"{'model':<{wm}}  {'revision':<{wr}}  {'analysis':<11}  status"]
    for c in cells:
        st = "failed: " + (c["error"] or "") if c["status"] == "failed" else (
            (status or {}).get(c["file"], "ok"))
        lines.append(f"{c['model']:<{wm}}  {c['revision'] or '—':<{wr}}  {c['analysis']:<11}  {st}")
    return "\n".join(lines)


def task_text(analysis: str, doc: dict) -> str:
    """The text a task's own command prints (``headscope atlas``, ``survey``, …), from its JSON."""
    from . import atlas, composition, kernels, neurons, reproduce, survey

    if analysis == "kernels":
        return kernels.text(doc) if "heads" in doc and "rule" in doc else kernels.relative_text(doc)
    if analysis == "survey":
        return survey.prompts_text(doc) + "\n" + survey.text(doc)
    return {"atlas": atlas.text, "composition": composition.text, "neurons": neurons.text,
            "reproduce": reproduce.text}[analysis](doc)


def page_name(task_file: str) -> str:
    """The task's own page beside its JSON: ``….json`` → ``….html``."""
    return task_file[:-len(".json")] + ".html"


def task_page(cell: dict, doc: dict) -> str:
    """One task's offline page: what, its text view and a link to its JSON."""
    path = page_name(cell["file"])
    body = H.join([H.kv_table([("model", cell["model"]), ("revision", cell["revision"] or "—"),
                               ("commit", cell["commit"] or "—"), ("analysis", cell["analysis"]),
                               ("JSON", H.link(cell["file"].rsplit("/", 1)[-1], "the task's JSON"))]),
                   H.tag("pre", task_text(cell["analysis"], doc))])
    return H.page(f"{cell['analysis']}: {cell['model']}" + (f" @ {cell['revision']}" if cell["revision"] else ""),
                  body, path=path, nav=[("sweep", "index.html")], output="sweep")


def html(d: dict, figures: list[tuple[str, str]], pages: set[str] = frozenset()) -> str:
    """The offline page: the figures (inline SVG, also written beside it), then every cell with its task JSON linked."""
    body = [H.section("Grid", H.kv_table([("models", ", ".join(d["grid"]["models"])),
                                          ("analyses", ", ".join(d["grid"]["analyses"])),
                                          ("revisions", d["grid"]["revisions"] or "main"),
                                          ("tasks", f"{len(d['cells'])} ({d['n_failed']} failed)"),
                                          ("table", H.link("sweep.csv", "sweep.csv")),
                                          ("result", H.link("sweep.json", "sweep.json"))]))]
    body.append(H.section("Figures", H.join(H.figure(H.Safe(svg), name) for name, svg in figures)))
    rows = []
    for c in d["cells"]:
        rows.append([c["model"], c["revision"] or "—", c["step"], c["analysis"],
                     (H.join([H.link(page_name(c["file"]), "page"), " · ", H.link(c["file"], "JSON")])
                      if page_name(c["file"]) in pages else H.link(c["file"], "JSON"))
                     if c["status"] == "ok" else H.tag("strong", "failed"),
                     c["error"] or ""])
    body.append(H.section("Cells", H.table(["model", "revision", "step", "analysis", "task", "error"], rows,
                                           numeric=[2])))
    return H.page("headscope sweep", H.join(body), path="index.html", output="sweep")
