"""Page templates for the report: one inline stylesheet, one inline script, no network.

Escaping is by type: a plain ``str`` is always escaped with
:func:`headscope.escape_token` (token strings such as ``'<script'`` or
``'<|endoftext|>'`` stay text); markup we built ourselves is wrapped in :class:`Safe`
and passed through. Every helper here follows that rule, so a stage that only
composes these helpers cannot inject markup.

Every page carries a Content-Security-Policy that forbids any network fetch and every
script but one (``default-src 'none'; script-src 'sha256-…'``): :data:`SCRIPT`, inline
at the end of the page and allowed by its hash, so the report opens from ``file://``
with no server. It only reads the page — tooltips for elements with ``data-tip`` (token
heatmaps) or ``data-head`` (atlas grid cells, text from the JSON block
``hs-atlas-data``), sortable ``table.data`` columns, and the token / neuron search box
(entries from the JSON block ``hs-search-data``) — and writes with ``textContent``
only, never markup. Data for it travels in ``<script type="application/json">``
blocks (:func:`data_script`), which browsers do not execute; their JSON has ``<``,
``>`` and ``&`` escaped as ``\u003c``, ``\u003e``, ``\u0026``, so a token such as
``'</script>'`` cannot end the block.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import posixpath
from typing import Iterable, Sequence

from .._json import clean
from ..core.tokenizer import escape_token


class Safe(str):
    """A string of trusted markup: inserted into pages without escaping."""

    def __add__(self, other):
        return Safe(str.__add__(self, h(other)))


def h(x) -> str:
    """Escape `x` for HTML unless it is :class:`Safe` (numbers are formatted, not escaped)."""
    if isinstance(x, Safe):
        return x
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return escape_token(f"{x:.4g}")
    return escape_token(str(x))


def join(parts: Iterable) -> Safe:
    return Safe("".join(h(p) for p in parts))


def tag(name: str, content="", **attrs) -> Safe:
    """``<name attr="...">content</name>`` with attributes and content escaped (class_ → class)."""
    a = "".join(f' {k.rstrip("_").replace("_", "-")}="{escape_token(str(v))}"' for k, v in attrs.items() if v is not None)
    return Safe(f"<{name}{a}>{h(content)}</{name}>")


def link(href: str, text) -> Safe:
    return tag("a", text, href=href)


def code(text) -> Safe:
    """A token string shown verbatim (whitespace visible), escaped."""
    return tag("code", text, class_="tokstr")


def token_repr(s: str) -> Safe:
    """A token as a quoted literal, e.g. ``' colour'`` → ‹ colour›, escaped."""
    return tag("code", s, class_="tokstr")


def figure(svg: Safe, caption) -> Safe:
    """A figure with its caption (say what is plotted, axes and units)."""
    return Safe(f'<figure>{h(svg)}<figcaption>{h(caption)}</figcaption></figure>')


def table(headers: Sequence, rows: Iterable[Sequence], *, numeric: Sequence[int] = (), caption=None,
          class_: str = "data") -> Safe:
    """A table; cells are escaped unless :class:`Safe`; columns in `numeric` are right-aligned."""
    num = set(numeric)
    head = "".join(f'<th{" class=num" if i in num else ""}>{h(c)}</th>' for i, c in enumerate(headers))
    body = []
    for r in rows:
        body.append("<tr>" + "".join([f'<td{" class=num" if i in num else ""}>{_td(c)}</td>'
                                      for i, c in enumerate(r)]) + "</tr>")
    cap = f"<caption>{h(caption)}</caption>" if caption is not None else ""
    return Safe(f'<table class="{class_}">{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')


def _cell(c):
    if isinstance(c, float):
        return f"{c:.4g}"
    return c


def _td(c) -> str:
    """``h(_cell(c))``: a table cell's text, escaped (plain strings and floats without the two calls)."""
    t = type(c)
    if t is str:
        return escape_token(c)
    if t is float:
        return escape_token(f"{c:.4g}")
    return h(_cell(c))


def kv_table(pairs: Iterable[tuple], caption=None) -> Safe:
    """A two-column key/value table."""
    return table(["", ""], pairs, caption=caption, class_="kv")


def section(title, body, *, id: str | None = None, intro=None) -> Safe:
    intro_html = f'<p class="intro">{h(intro)}</p>' if intro is not None else ""
    ida = f' id="{escape_token(id)}"' if id else ""
    return Safe(f"<section{ida}><h2>{h(title)}</h2>{intro_html}{h(body)}</section>")


def grid(items: Iterable) -> Safe:
    """Figures side by side, wrapping."""
    return Safe('<div class="grid">' + "".join(h(i) for i in items) + "</div>")


def rel(from_page: str, to_page: str) -> str:
    """Relative URL from one report page (path under the report root) to another."""
    start = posixpath.dirname(from_page) or "."
    if _lexical(start) and _lexical(to_page):
        return _relpath(to_page, start)
    return posixpath.relpath(to_page, start)     # (the working directory may count: absolute, or climbing)


def _lexical(p) -> bool:
    """Whether `p` is a relative path that never climbs (a str without ``..``): relpath between such
    paths is a function of them alone (both are joined to the same working directory)."""
    return type(p) is str and ".." not in p and p[:1] != "/"


@functools.lru_cache(maxsize=4096)
def _relpath(path: str, start: str) -> str:
    """``posixpath.relpath(path, start)`` of :func:`_lexical` paths: the many links between the same few
    pages are worked out once."""
    return posixpath.relpath(path, start)


def _links(path: str, pairs: Sequence[tuple[str, str]]) -> str:
    """The links (label, path under the root) from the page `path`, one after another: the same for
    every page of a folder (each page's navigation bar), so worked out once per folder."""
    start = posixpath.dirname(path) or "."
    key = tuple(pairs)
    if _lexical(start) and all(type(label) is str and _lexical(p) for label, p in key):   # (plain text labels)
        return _folder_links(start, key)
    return "".join(str(link(rel(path, p), label)) for label, p in key)


@functools.lru_cache(maxsize=256)
def _folder_links(start: str, pairs: tuple) -> str:
    return "".join(str(link(_relpath(p, start), label)) for label, p in pairs)


CSS = """
:root { --fg:#1d1d1f; --muted:#5f6368; --line:#e3e3e3; --accent:#0b61a4; --bg:#fbfbfa; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", sans-serif; }
header.top { background:#fff; border-bottom:1px solid var(--line); padding:10px 28px; display:flex;
  gap:18px; align-items:baseline; flex-wrap:wrap; position:sticky; top:0; z-index:2; }
header.top .brand { font-weight:700; letter-spacing:.02em; color:var(--fg); text-decoration:none; }
header.top nav a { margin-right:14px; color:var(--accent); text-decoration:none; font-size:14px; }
header.top nav a:hover { text-decoration:underline; }
main { max-width:1180px; margin:0 auto; padding:18px 28px 60px; }
h1 { font-size:26px; margin:14px 0 4px; font-weight:650; }
h2 { font-size:19px; margin:34px 0 8px; padding-bottom:4px; border-bottom:1px solid var(--line); font-weight:620; }
h3 { font-size:16px; margin:22px 0 6px; font-weight:600; }
p.sub, p.intro { color:var(--muted); margin:4px 0 12px; max-width:80ch; }
a { color:var(--accent); }
table { border-collapse:collapse; margin:10px 0 16px; font-size:13.5px; background:#fff; }
table.data th, table.data td { border-bottom:1px solid var(--line); padding:4px 10px; text-align:left; vertical-align:top; }
table.data thead th { border-bottom:2px solid #c9c9c9; font-weight:600; background:#f5f5f4; position:sticky; top:44px; }
table.data tbody tr:hover { background:#f3f7fb; }
table.kv td { padding:3px 14px 3px 0; border-bottom:1px solid var(--line); }
table.kv td:first-child { color:var(--muted); white-space:nowrap; }
table.kv thead { display:none; }
td.num, th.num { text-align:right; font-variant-numeric: tabular-nums; }
caption { caption-side:bottom; text-align:left; color:var(--muted); font-size:12.5px; padding-top:4px; }
figure { margin:10px 0 18px 0; display:inline-block; vertical-align:top; max-width:100%; }
figure svg.fig { display:block; max-width:100%; height:auto; background:#fff; border:1px solid var(--line); border-radius:4px; }
figcaption { font-size:12.5px; color:var(--muted); max-width:520px; margin-top:5px; }
.grid { display:flex; flex-wrap:wrap; align-items:flex-start; gap:0 22px; }
code, .tokstr { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size:12.5px;
  white-space:pre; background:#f1f1ef; padding:0 3px; border-radius:3px; }
.tokens { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size:13px; line-height:1.9;
  white-space:pre-wrap; background:#fff; border:1px solid var(--line); border-radius:4px; padding:8px 10px; max-width:100ch; }
.tok { border-radius:2px; padding:1px 0; }
.tok-none { color:#999; }
.tok-scale { font-size:12px; color:var(--muted); margin:4px 0 14px; }
.tok-scale span { display:inline-block; padding:0 6px; margin-right:2px; border-radius:2px; color:#111; }
.pager { display:flex; justify-content:space-between; margin:8px 0 0; font-size:14px; }
.crumbs { font-size:13px; color:var(--muted); margin-top:6px; }
ul.items { columns: 4 12em; padding-left:18px; }
footer { color:var(--muted); font-size:12px; margin-top:40px; border-top:1px solid var(--line); padding-top:8px; }
"""

CSS += """
#hs-tip { position:fixed; z-index:10; max-width:420px; background:#1d1d1f; color:#fff; font-size:12.5px;
  line-height:1.45; padding:6px 9px; border-radius:4px; white-space:pre-line; pointer-events:none;
  box-shadow:0 2px 8px rgba(0,0,0,.25); }
#hs-tip[hidden] { display:none; }
table.data th.sortable { cursor:pointer; user-select:none; }
table.data th.sortable::after { content:" \\2195"; color:#aaa; font-size:11px; }
table.data th[aria-sort="ascending"]::after { content:" \\25B2"; color:var(--accent); }
table.data th[aria-sort="descending"]::after { content:" \\25BC"; color:var(--accent); }
table.hgrid { border-collapse:separate; border-spacing:1px; background:none; margin:4px 0 6px; font-size:11px; }
table.hgrid th { font-weight:500; color:var(--muted); padding:0 3px; text-align:right; }
table.hgrid thead th { text-align:center; writing-mode:vertical-rl; transform:rotate(180deg); padding:2px 0; }
table.hgrid td { padding:0; }
table.hgrid a.cell, table.hgrid span.cell { display:block; width:18px; height:18px; border-radius:2px;
  outline:1px solid rgba(0,0,0,.06); }
table.hgrid a.cell:hover, table.hgrid a.cell:focus { outline:2px solid #000; }
.gridfig { display:inline-block; vertical-align:top; margin:6px 26px 16px 0; max-width:100%; overflow-x:auto; }
.gridfig h3 { margin:4px 0 2px; font-size:14px; }
.search { margin:8px 0 14px; }
.search input { font:inherit; padding:5px 9px; width:min(420px, 100%); border:1px solid #c9c9c9; border-radius:4px; }
.search ul { list-style:none; padding:0; margin:6px 0; max-height:320px; overflow-y:auto; max-width:80ch; }
.search li { padding:2px 0; font-size:13.5px; }
.search li span { color:var(--muted); margin-left:8px; }
"""

#: The report's one script (module docstring). Kept free of markup so that the page can hold it inline.
SCRIPT = r"""(function () {
  "use strict";
  function each(list, fn) { Array.prototype.forEach.call(list, fn); }
  function data(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  var tips = data("hs-atlas-data") || {};
  var tip = document.createElement("div");
  tip.id = "hs-tip";
  tip.setAttribute("role", "tooltip");
  tip.hidden = true;
  document.body.appendChild(tip);
  function target(el) {
    return el && el.closest ? el.closest("[data-tip],[data-head]") : null;
  }
  function text(el) {
    var key = el.getAttribute("data-head");
    if (key !== null && Object.prototype.hasOwnProperty.call(tips, key)) { return tips[key]; }
    return el.getAttribute("data-tip");
  }
  function place(x, y) {
    var w = tip.offsetWidth, h = tip.offsetHeight;
    var left = x + 14, top = y + 16;
    if (left + w > window.innerWidth - 4) { left = Math.max(4, x - w - 14); }
    if (top + h > window.innerHeight - 4) { top = Math.max(4, y - h - 12); }
    tip.style.left = left + "px";
    tip.style.top = top + "px";
  }
  function show(el, x, y) {
    var t = text(el);
    if (t === null || t === undefined) { return; }
    tip.textContent = t;
    tip.hidden = false;
    place(x, y);
  }
  document.addEventListener("mouseover", function (ev) {
    var el = target(ev.target);
    if (el) { show(el, ev.clientX, ev.clientY); } else { tip.hidden = true; }
  });
  document.addEventListener("mousemove", function (ev) {
    if (!tip.hidden) { place(ev.clientX, ev.clientY); }
  });
  document.addEventListener("mouseout", function (ev) {
    if (!target(ev.relatedTarget)) { tip.hidden = true; }
  });
  document.addEventListener("focusin", function (ev) {
    var el = target(ev.target);
    if (el) { var r = el.getBoundingClientRect(); show(el, r.right, r.bottom); } else { tip.hidden = true; }
  });
  each(document.querySelectorAll("[data-tip][title]"), function (el) { el.removeAttribute("title"); });

  function cellKey(cell) {
    var s = cell.getAttribute("data-sort");
    if (s === null) { s = cell.textContent.trim(); }
    if (s === "" || s === "—") { return null; }
    var x = Number(s.replace(/,/g, "").replace(/−/g, "-"));
    return isNaN(x) ? s : x;
  }
  function compare(a, b) {
    if (a === null || b === null) { return a === b ? 0 : (a === null ? 1 : -1); }
    if (typeof a === "number" && typeof b === "number") { return a - b; }
    return String(a).localeCompare(String(b), undefined, {numeric: true});
  }
  each(document.querySelectorAll("table.data"), function (table) {
    if (!table.tHead || !table.tBodies.length) { return; }
    each(table.tHead.rows[0].cells, function (th, col) {
      th.classList.add("sortable");
      th.tabIndex = 0;
      th.setAttribute("aria-sort", "none");
      function sort() {
        var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        each(table.tHead.rows[0].cells, function (o) { o.setAttribute("aria-sort", "none"); });
        th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows).map(function (r, i) {
          return {row: r, key: r.cells[col] ? cellKey(r.cells[col]) : null, i: i};
        });
        rows.sort(function (a, b) {
          if (a.key === null || b.key === null) { return compare(a.key, b.key) || a.i - b.i; }
          return dir * compare(a.key, b.key) || a.i - b.i;
        });
        rows.forEach(function (r) { body.appendChild(r.row); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (ev) {
        if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); sort(); }
      });
    });
  });

  var box = document.getElementById("hs-search");
  var list = document.getElementById("hs-results");
  var entries = data("hs-search-data");
  if (box && list && entries) {
    box.addEventListener("input", function () {
      var q = box.value.toLowerCase();
      list.textContent = "";
      if (!q.trim()) { return; }
      var shown = 0;
      for (var i = 0; i < entries.length && shown < 60; i++) {
        var e = entries[i];
        if (e[0].toLowerCase().indexOf(q) < 0 && e[1].toLowerCase().indexOf(q) < 0) { continue; }
        var li = document.createElement("li");
        var a = document.createElement("a");
        a.href = e[2];
        a.textContent = e[0];
        var note = document.createElement("span");
        note.textContent = e[1];
        li.appendChild(a);
        li.appendChild(note);
        list.appendChild(li);
        shown++;
      }
      if (!shown) { var none = document.createElement("li"); none.textContent = "no match"; list.appendChild(none); }
    });
  }
})();"""

SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")

CSP = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src '{SCRIPT_HASH}'"


def script_json(obj) -> str:
    """JSON of `obj` safe inside a ``<script>`` element: ``<``, ``>``, ``&`` (and U+2028/9) escaped."""
    text = json.dumps(clean(obj), sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def data_script(id: str, obj) -> Safe:
    """``<script type="application/json" id=…>`` holding `obj` for :data:`SCRIPT` (not executed)."""
    return Safe(f'<script type="application/json" id="{escape_token(id)}">{script_json(obj)}</script>')


def search_box(entries: Sequence[tuple[str, str, str]], *, placeholder: str = "search tokens, neurons, heads") -> Safe:
    """A search box over (label, note, href) entries; results are links (hrefs relative to this page)."""
    data = [[str(a), str(b), str(c)] for a, b, c in entries]
    return Safe('<div class="search">'
                f'<input type="search" id="hs-search" placeholder="{escape_token(placeholder)}" '
                f'aria-label="{escape_token(placeholder)}" autocomplete="off">'
                '<ul id="hs-results" aria-live="polite"></ul></div>') + data_script("hs-search-data", data)


def output_marker(command: str) -> str:
    """The meta element naming the command whose single-file output a page is."""
    return f'<meta name="headscope-output" content="{h(command)}">'


def page(title, body, *, path: str, nav: Sequence[tuple[str, str]] = (), crumbs: Sequence[tuple[str, str]] = (),
         prev: tuple[str, str] | None = None, next: tuple[str, str] | None = None, footer=None,
         output: str | None = None) -> str:
    """A full HTML document.

    `path` is this page's path under the report root (``index.html``,
    ``heads/L0H3.html``); `nav`, `crumbs`, `prev`, `next` hold (label, path under the
    root) pairs and are turned into relative links. `output` names the command of a
    standalone page (``neuron``): :func:`output_marker` then marks it, so that a rerun
    recognises its own earlier page and nothing else.
    """
    nav_html = _links(path, nav)
    crumb_html = ""
    if crumbs:
        crumb_html = '<div class="crumbs">' + " › ".join(str(link(rel(path, p), label)) for label, p in crumbs) + "</div>"
    pager = ""
    if prev or next:
        left = str(link(rel(path, prev[1]), f"← {prev[0]}")) if prev else "<span></span>"
        right = str(link(rel(path, next[1]), f"{next[0]} →")) if next else "<span></span>"
        pager = f'<div class="pager">{left}{right}</div>'
    foot = f"<footer>{h(footer)}</footer>" if footer is not None else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        + (output_marker(output) if output else "") +
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{h(title)}</title><style>{CSS}</style></head>\n<body>"
        f'<header class="top"><a class="brand" href="{escape_token(rel(path, "index.html"))}">headscope report</a>'
        f"<nav>{nav_html}</nav></header>\n"
        f"<main>{crumb_html}<h1>{h(title)}</h1>{pager}\n{h(body)}\n{pager}{foot}</main>\n"
        f"<script>{SCRIPT}</script></body></html>\n"
    )
