"""One analysis across training revisions of a hub model (``--revisions``): emergence curves.

Pythia publishes ``step0 … step143000`` as hub branches. ``--revisions`` runs one analysis
(the atlas, the claims table) per revision as a sweep (:mod:`headscope.sweep`: one task per
revision, in this process one after another by default — peak memory about one model — or on a
LocalCluster with ``--workers N``), each task's JSON written to ``DIR/rev-<revision>.json`` as
soon as it is done. This module holds the names, the summaries and the combined result.

Each per-revision file carries, beside the command's usual keys, ``revision_run``: the
command, model id, revision, its resolved commit, the options that change the result, and
``key`` — the sha256 of those with the dtype, device and headscope version. A rerun reuses a
per-revision file only when the directory's index holds its key and the sha256 of its bytes
(:mod:`headscope.sweep.engine`), and recomputes every other revision.

The combined result (:class:`RevisionsResult`, ``DIR/revisions.json``) lists per revision
its name, its training step (``N`` when the name is ``stepN``, else null) and a summary of
its JSON (:func:`summarise_atlas`: per metric the max and min over heads and the heads that
attain them; :func:`summarise_reproduce`: per claim the measured value and the verdict).
Revisions are ordered by step where parsable (ascending), then the others in the order given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Sequence

from .._atomic import OutputDir, read_small_file
from .._errors import HeadscopeError
from .._html_repr import HtmlRepr, render_text
from .._json import dumps
from .atlas import METRICS

#: the marker file of a revisions output directory (listed in its manifest)
MARKER = ".headscope-revisions"
FORMAT = "headscope-revisions"
VERSION = 1
COMBINED = "revisions.json"
FIGURE = "revisions.svg"
_STEP_RE = re.compile(r"step(\d{1,12})")
_SAFE_RE = re.compile(r"[^A-Za-z0-9._-]")


# -- the revisions list ------------------------------------------------------------------


def training_step(revision: str) -> int | None:
    """N for a revision named ``stepN`` (Pythia's branches), else None."""
    m = _STEP_RE.fullmatch(revision)
    return int(m.group(1)) if m else None


def parse_revisions(spec: str | Sequence[str]) -> list[str]:
    """The revisions of ``--revisions a,b,c`` in run order (by step where parsable, then as given).

    Empty names and duplicates are refused (one line, naming them).
    """
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [n.strip() for n in names]
    if not names or any(not n for n in names):
        raise HeadscopeError(f"--revisions: expected comma-separated branch, tag or commit names without empty "
                             f"entries, got {','.join(names)!r}")
    seen, dups = set(), []
    for n in names:
        if n in seen and n not in dups:
            dups.append(n)
        seen.add(n)
    if dups:
        raise HeadscopeError(f"--revisions: each revision once, got {', '.join(dups)} more than once")
    for n in names:
        if any(c.isspace() for c in n) or n.startswith("/") or ".." in n.split("/"):
            raise HeadscopeError(f"--revisions: {n!r} is not a branch, tag or commit name")
    order = sorted(range(len(names)), key=lambda i: (0, training_step(names[i]), i)
                   if training_step(names[i]) is not None else (1, 0, i))
    return [names[i] for i in order]


def revision_file(revision: str) -> str:
    """The per-revision file name: ``rev-<revision>.json``; a name with other characters than
    ``A-Z a-z 0-9 . _ -`` (those become ``_``) or longer than 120 is cut to 111 characters and
    followed by a short hash of the whole name, so two names never share a file."""
    safe = _SAFE_RE.sub("_", revision)
    if safe != revision or len(safe) > 120:
        safe = safe[:111] + "-" + hashlib.sha256(revision.encode("utf-8")).hexdigest()[:8]
    return f"rev-{safe}.json"


# -- summaries of one revision's JSON ------------------------------------------------------


def summarise_atlas(doc: dict) -> dict:
    """Per atlas metric (the JSON's ``metrics``, and the DLA column when computed): max, argmax, min, argmin.

    Heads are named ``L<layer>H<head>``; heads whose value is null are skipped; a metric with
    no value anywhere gives nulls.
    """
    rows = doc["rows"]
    keys = [k for k in METRICS if k in doc["metrics"]] + [k for k in doc["metrics"] if k not in METRICS] + (
        ["dla_logit_diff"] if doc.get("spec", {}).get("logit_diff") else [])      # the atlas's column order
    out = {}
    for k in keys:
        vals = [(r[k], f"L{r['layer']}H{r['head']}") for r in rows if isinstance(r[k], (int, float))]   # every row has k
        if not vals:
            out[k] = {"max": None, "argmax": None, "min": None, "argmin": None}
            continue
        hi = max(vals, key=lambda v: v[0])        # first head wins ties (rows are in layer, head order)
        lo = min(vals, key=lambda v: v[0])
        out[k] = {"max": hi[0], "argmax": hi[1], "min": lo[0], "argmin": lo[1]}
    return out


def summarise_reproduce(doc: dict) -> dict:
    """Per claim: the measured value and pass/fail (null: no verdict); plus the pass and fail counts."""
    return {"ok": doc["ok"], "n_pass": doc["n_pass"], "n_fail": doc["n_fail"],
            "claims": {r["id"]: {"measured": r["measured"], "passed": r["passed"]} for r in doc["rows"]}}


# -- the result ----------------------------------------------------------------------------


@dataclasses.dataclass
class RevisionRow:
    revision: str
    step: int | None
    file: str
    summary: dict
    computed: bool = True          #: False: reused from an earlier run (not in the JSON)
    seconds: float = 0.0           #: not in the JSON (determinism)

    def to_dict(self) -> dict:
        return {"revision": self.revision, "step": self.step, "file": self.file, "summary": self.summary}


@dataclasses.dataclass
class RevisionsResult(HtmlRepr):
    """One analysis over several revisions of `model` (module docstring); ``rows`` in run order."""

    command: str
    model: str
    options: dict
    rows: list[RevisionRow]

    @property
    def ok(self) -> bool:
        """For reproduce: every revision's claims pass (rows without a verdict aside); else True."""
        return all(r.summary.get("ok", True) for r in self.rows)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "command": self.command, "model": self.model,
                "options": self.options, "revisions": [r.to_dict() for r in self.rows]}

    def render(self) -> str:
        """The table, one line per revision (headscope.report.views.revisions.text)."""
        return render_text(self)


# -- the output directory -------------------------------------------------------------------


def marker_text(command: str) -> str:
    return dumps({"format": FORMAT, "version": VERSION, "command": command})


def check_revisions_dir(out: str | Path, command: str) -> OutputDir:
    """The output directory, checked (nothing written): new, empty, or an earlier ``COMMAND --revisions``
    output of the same command (the output rule: :mod:`headscope._atomic`)."""
    odir = OutputDir(out, MARKER, what="--revisions-out directory").check()
    p = Path(out) / MARKER
    if p.is_file():
        data = read_small_file(p)
        try:
            other = json.loads(data).get("command") if data is not None else None
        except (ValueError, AttributeError, RecursionError):
            other = None
        if other != command:
            raise HeadscopeError(f"--revisions-out {out} holds the output of headscope {other or 'another command'} "
                                 f"--revisions, not {command}; choose another directory")
    return odir
