"""One analysis across training revisions of a hub model (``--revisions``): emergence curves.

Pythia publishes ``step0 … step143000`` as hub branches. :func:`run_revisions` loads each
revision in turn (``headscope.load(model, revision=r)``: ``HF_HUB_OFFLINE`` semantics are
unchanged — offline when the cache has it), runs one analysis on it (the atlas, the claims
table), writes that command's usual JSON to ``DIR/rev-<revision>.json`` as soon as it is
done, and drops the model before loading the next, so the peak memory is about one model.

Each per-revision file carries, beside the command's usual keys, ``revision_run``: the
command, model id, revision, the options that change the result, and ``key`` — the sha256
of those with the dtype, device and headscope version. A rerun of the same command reuses
a per-revision file that parses, is a JSON object of the expected kind and holds the same
key, and recomputes every other revision (resume after an interrupted run).

The combined result (:class:`RevisionsResult`, ``DIR/revisions.json``) lists per revision
its name, its training step (``N`` when the name is ``stepN``, else null) and a summary of
its JSON (:func:`summarise_atlas`: per metric the max and min over heads and the heads that
attain them; :func:`summarise_reproduce`: per claim the measured value and the verdict).
Revisions are ordered by step where parsable (ascending), then the others in the order given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Callable, Sequence

from .._atomic import MANIFEST, OutputDir, read_small_file
from .._errors import HeadscopeError
from .._html_repr import HtmlRepr, render_text
from .._json import dumps
from .._version import __version__
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
    """The per-revision file name: ``rev-<revision>.json``, other characters as ``_`` plus a short hash."""
    safe = _SAFE_RE.sub("_", revision)
    if safe != revision:
        safe += "-" + hashlib.sha256(revision.encode("utf-8")).hexdigest()[:8]
    return f"rev-{safe[:120]}.json"


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


@dataclasses.dataclass(frozen=True)
class Analysis:
    """What ``--revisions`` runs per revision: the command, its options, the analysis and its summary."""

    command: str                                  #: "atlas" or "reproduce"
    options: dict                                 #: the options that change the result (JSON-able)
    run: Callable[[object], object]               #: Model → result with ``to_dict()``
    summarise: Callable[[dict], dict]             #: the result's dict → its summary
    required: tuple[str, ...] = ("rows",)         #: keys a complete per-revision JSON holds


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


def run_key(model: str, revision: str, analysis: Analysis, dtype: str, device: str) -> str:
    """The sha256 that a reusable per-revision file holds (module docstring)."""
    return hashlib.sha256(dumps({"command": analysis.command, "model": model, "revision": revision,
                                 "options": analysis.options, "dtype": dtype, "device": device,
                                 "headscope": __version__}).encode("utf-8")).hexdigest()


def read_complete(path: Path, key: str, required: Sequence[str]) -> dict | None:
    """The per-revision JSON at `path` if it is complete and has `key` (reusable), else None."""
    if path.is_symlink() or not path.is_file():
        return None
    data = read_small_file(path, limit=512 * 2**20)
    try:
        doc = json.loads(data) if data is not None else None
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or not all(k in doc for k in required):
        return None
    run = doc.get("revision_run")
    return doc if isinstance(run, dict) and run.get("key") == key else None


def _free(device: str) -> None:
    gc.collect()
    if str(device).startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def run_revisions(model: str, revisions: Sequence[str], odir: OutputDir, analysis: Analysis, *,
                  load: Callable[[str], object], dtype: str = "float32", device: str = "cpu",
                  progress: Callable[[str], None] | None = None) -> RevisionsResult:
    """Run `analysis` on every revision of hub model `model` into `odir` (module docstring).

    `revisions` are run in the order given (:func:`parse_revisions` orders them); `load`
    maps a revision to a loaded model. Each finished revision's JSON is written at once
    (atomically), so an interrupted run keeps it; the combined table and figure are the
    caller's (the presentation layer) to write.
    """
    odir.open()
    try:
        return _run(model, revisions, odir, analysis, load, dtype, device, progress)
    except BaseException:
        _remove_if_empty(odir)
        raise


def _remove_if_empty(odir: OutputDir) -> None:
    """A directory this run created and wrote no revision into is removed again (nothing half-written)."""
    if not odir.created or odir.files - {MARKER}:
        return
    odir.close()
    ours = {MARKER, MANIFEST, ".headscope-lock"}
    try:
        if set(os.listdir(odir.path)) <= ours:
            for name in ours:
                with contextlib.suppress(FileNotFoundError):
                    (odir.path / name).unlink()
            odir.path.rmdir()
    except OSError:
        pass


def _run(model, revisions, odir, analysis, load, dtype, device, progress) -> RevisionsResult:
    marker = marker_text(analysis.command)
    if read_small_file(odir.path / MARKER) != marker.encode("utf-8"):
        odir.write(MARKER, marker)
    rows = []
    for rev in revisions:
        name = revision_file(rev)
        key = run_key(model, rev, analysis, dtype, device)
        t0 = time.perf_counter()
        doc = read_complete(odir.path / name, key, analysis.required) if name in odir.files else None
        summary = None
        if doc is not None:
            try:
                summary = analysis.summarise(doc)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError):   # edited by hand: recompute
                doc = None
        computed = doc is None
        if computed:
            m = load(rev)
            res = analysis.run(m)
            doc = json.loads(dumps(res.to_dict()))       # what is saved, also what a reused run reads
            doc["revision_run"] = {"command": analysis.command, "model": model, "revision": rev,
                                   "step": training_step(rev), "options": analysis.options, "key": key}
            odir.write(name, dumps(doc))
            del m, res
            _free(device)
            summary = analysis.summarise(doc)
        row = RevisionRow(revision=rev, step=training_step(rev), file=name, summary=summary,
                          computed=computed, seconds=time.perf_counter() - t0)
        rows.append(row)
        del doc
        if progress is not None:
            progress(f"{rev}: {'computed' if computed else 'reused'} ({row.seconds:.1f} s)")
    return RevisionsResult(command=analysis.command, model=model, options=analysis.options, rows=rows)
