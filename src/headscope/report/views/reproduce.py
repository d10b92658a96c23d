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
    found = "components" in d                       # --find: a component column, each row's why below
    lines = [f"headscope reproduce: {d['source']} (sha256 {d['fingerprint'][:12]}…), "
             f"published column: {d['reference']}", ""]
    lines.append(f"{'claim':<{w}}  {'published':<28}  {'measured':<34}  {'tolerance':<24}  {'null med / p95':<24}  "
                 + (f"{'component':<24}  " if found else "") + "result")
    for r in rows:
        lines.append(f"{r['id']:<{w}}  {published(r, 28):<28}  {short(r['measured'], 34):<34}  "
                     f"{short(r['tolerance'], 24):<24}  {short(null_cell(r), 24):<24}  "
                     + (f"{short(r.get('component') or '—', 24):<24}  " if found else "") + result(r))
        if r["note"]:
            lines.append(f"{'':<{w}}  ↳ {r['note']}")
    if found:
        lines += ["", "components (--find):"] + [f"  {c['kind']}: {c['label']} — {c['why']}" for c in d["components"]]
    n_random = sum(r.get("verdict") == "indistinguishable from random" for r in rows)
    lines += ["", f"{d['n_pass']} pass, {d['n_fail']} fail, {len(rows) - d['n_pass'] - d['n_fail']} without a verdict"
              + (f" ({n_random} of the fails indistinguishable from random)" if n_random else "")]
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)


def html(d: dict) -> H.Safe:
    """The claims as a table (published and measured in at most 60 characters, the null's median /
    p95 and margin), then the notes."""
    found = "components" in d
    rows = [(r["id"], r["claim"], published(r, 60), short(r["measured"], 60), r["tolerance"],
             null_cell(r), *([r.get("component") or "—"] if found else []), result(r)) for r in d["rows"]]
    table = H.table(["claim", "what", "published", "measured", "tolerance", "null median / p95 (margin)",
                     *(["component"] if found else []), "result"],
                    rows, caption=f"{d['source']} (sha256 {d['fingerprint'][:12]}…), published column: "
                                  f"{d['reference']}; {d['n_pass']} pass, {d['n_fail']} fail.")
    return H.join([table] + [H.Safe('<p class="crumbs">') + f"note: {n}" + H.Safe("</p>") for n in d["notes"]])


# -- the report's claims page (stage ``claims``) ----------------------------------------------------

CLAIMS_PAGE = "claims.html"


def component_pages(c: dict) -> list[tuple[str, str]]:
    """(label, page path) of every head or neuron page a component names (the report's pages)."""
    from ..paths import head_page, neuron_page

    if c.get("head"):
        return [(f"{c['head'][0]}.{c['head'][1]}", head_page(*c["head"]))]
    if c.get("heads") is not None:
        return [(f"{c.get('layer', 0)}.{h}", head_page(c.get("layer", 0), h)) for h in c["heads"]]
    return [(f"n{j}", neuron_page(j)) for j in c.get("neurons") or []]


def row_component(d: dict, r: dict) -> dict | None:
    """The component (of ``d["components"]``) a row read, by the row→component map of --find."""
    from ...claims.find import ROW_COMPONENTS, SEMANTIC

    by = {c["kind"]: c for c in d.get("components") or []}
    return by.get(ROW_COMPONENTS.get(r["id"], SEMANTIC))


def _links(page: str, c: dict | None, limit: int = 12) -> H.Safe:
    if not c:
        return H.Safe("every layer-0 head")
    pages = component_pages(c)
    parts = [x for label, p in pages[:limit] for x in (", ", H.link(H.rel(page, p), label))][1:]
    more = [f" … {len(pages) - limit} more"] if len(pages) > limit else []
    return H.join([*(parts or [c["label"]]), *more,
                   *([] if c.get("found", True) else [" (not found)"])])


def claims_page(d: dict, page: str = CLAIMS_PAGE) -> H.Safe:
    """The claims table with each row's component (linked to its head or neuron pages), the measured
    value against its null, the verdict and why that component; then every component and its criterion."""
    rows = [(r["id"], short(r["measured"], 60), null_cell(r), result(r), _links(page, row_component(d, r)),
             r.get("why") or "—") for r in d["rows"]]
    table = H.table(["claim", "measured", "null median / p95 (margin)", "result", "component", "why this component"],
                    rows, caption=f"{d['source']}: published column {d['reference']}; {d['n_pass']} pass, "
                                  f"{d['n_fail']} fail, {len(d['rows']) - d['n_pass'] - d['n_fail']} without a verdict.")
    comps = H.table(["component", "found", "pages", "criterion and figures"],
                    [(c["kind"].replace("_", " "), "yes" if c["found"] else "no", _links(page, c), c["why"])
                     for c in d.get("components") or []], caption="The components the rows read.")
    notes = [H.Safe('<p class="crumbs">') + f"note: {n}" + H.Safe("</p>") for n in d["notes"]]
    return H.join([table, comps, *notes])


def component_section(d: dict, c: dict, page: str) -> H.Safe:
    """On a component's head or neuron page: the claims that read it, with their verdicts."""
    rows = [(r["id"], short(r["measured"], 50), result(r)) for r in d["rows"] if row_component(d, r) is c]
    return H.join([H.Safe("<p>") + f"{c['kind'].replace('_', ' ')} ({c['label']}): {c['why']}. " +
                   H.link(H.rel(page, CLAIMS_PAGE), "All claims") + H.Safe("</p>"),
                   H.table(["claim", "measured", "result"], rows)])


def summary(d: dict) -> list[tuple[str, str]]:
    return [("claims", f"{d['n_pass']} pass, {d['n_fail']} fail ({d['reference']})")]
