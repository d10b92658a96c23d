"""Views of the claims table (:class:`headscope.reproduce.ReproduceResult`), from its ``to_dict()``.

:func:`text` is ``headscope reproduce``'s table; :func:`html` the notebook's view (the report has
no reproduce stage).
"""

from __future__ import annotations

from .. import html as H

VERDICT = {True: "PASS", False: "FAIL", None: "n/a"}


def short(x, width: int = 30) -> str:
    """A published or measured figure in at most `width` characters (— for none, 4 digits for a float)."""
    if x is None:
        s = "—"
    elif isinstance(x, float):
        s = f"{x:.4g}"
    elif isinstance(x, (list, tuple)):
        s = ", ".join(short(v, width) for v in x) if len(x) <= 8 else f"{len(x)} items"
    else:
        s = str(x)
    return s if len(s) <= width else s[: width - 1] + "…"


def null_cell(r: dict) -> str:
    """``median / p95 (margin)`` of a row's null, or — (the p5 for a statistic that is claimed small)."""
    n = r.get("null")
    if not n:
        return "—"
    m = f"×{n['margin']:g}" if n["margin_kind"] != "diff" else f"{'+' if n['direction'] == 'above' else '−'}{n['margin']:g}"
    return f"{n['median']:.3g} / {n['p95']:.3g} ({m})"


def published(r: dict, width: int) -> str:
    """The published figure, marked when no source states it (seed_claims.json's "source")."""
    mark = " (unsourced)" if str(r.get("source", "")).startswith("unsourced") else ""
    return short(r["published"], width - len(mark)) + mark


def result(r: dict) -> str:
    return r.get("verdict") or VERDICT[r["passed"]]


def text(d: dict) -> str:
    """One line per claim (published, measured, tolerance, null median / p95 (margin), verdict;
    its note below), then the counts."""
    rows = d["rows"]
    w = max(len(r["id"]) for r in rows)
    lines = [f"headscope reproduce: {d['source']} (sha256 {d['fingerprint'][:12]}…), "
             f"published column: {d['reference']}", ""]
    lines.append(f"{'claim':<{w}}  {'published':<28}  {'measured':<34}  {'tolerance':<24}  {'null med / p95':<24}  result")
    for r in rows:
        lines.append(f"{r['id']:<{w}}  {published(r, 28):<28}  {short(r['measured'], 34):<34}  "
                     f"{short(r['tolerance'], 24):<24}  {short(null_cell(r), 24):<24}  {result(r)}")
        if r["note"]:
            lines.append(f"{'':<{w}}  ↳ {r['note']}")
    n_random = sum(r.get("verdict") == "indistinguishable from random" for r in rows)
    lines += ["", f"{d['n_pass']} pass, {d['n_fail']} fail, {len(rows) - d['n_pass'] - d['n_fail']} without a verdict"
              + (f" ({n_random} of the fails indistinguishable from random)" if n_random else "")]
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)


def html(d: dict) -> H.Safe:
    """The claims as a table (published and measured in at most 60 characters, the null's median /
    p95 and margin), then the notes."""
    rows = [(r["id"], r["claim"], published(r, 60), short(r["measured"], 60), r["tolerance"],
             null_cell(r), result(r)) for r in d["rows"]]
    table = H.table(["claim", "what", "published", "measured", "tolerance", "null median / p95 (margin)", "result"],
                    rows, caption=f"{d['source']} (sha256 {d['fingerprint'][:12]}…), published column: "
                                  f"{d['reference']}; {d['n_pass']} pass, {d['n_fail']} fail.")
    return H.join([table] + [H.Safe('<p class="crumbs">') + f"note: {n}" + H.Safe("</p>") for n in d["notes"]])
