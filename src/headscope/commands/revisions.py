"""``--revisions A,B,… --revisions-out DIR`` for ``headscope atlas`` and ``headscope reproduce``.

Runs the command once per hub revision (``headscope.maps.revisions``), then writes into DIR
``revisions.json`` (the combined table) and ``revisions.svg`` (each metric against the
training step), and prints the table. DIR follows the output rule: new, empty, or an
earlier ``--revisions`` output of the same command; a rerun reuses complete per-revision
files with the same options and recomputes the rest.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from .._errors import HeadscopeError
from .._json import dumps
from ..core.entry import load
from ..maps.revisions import COMBINED, FIGURE, MARKER, Analysis, check_revisions_dir, parse_revisions, run_revisions
from ..report.views import revisions as V
from .args import DTYPES, emit


def add_arguments(p) -> None:
    p.add_argument("--revisions", default=None, metavar="A,B,…",
                   help="run once per hub revision (e.g. step1000,step8000,step143000) into --revisions-out")
    p.add_argument("--revisions-out", default=None, metavar="DIR",
                   help="directory of --revisions: a JSON per revision, revisions.json and revisions.svg")


def requested(args) -> list[str] | None:
    """The checked revisions list (run order) when ``--revisions`` is given, else None; refuses mixed flags.

    Call before any work: a bad list or directory is refused with nothing written.
    """
    if args.revisions is None:
        if args.revisions_out is not None:
            raise HeadscopeError("--revisions-out needs --revisions (the revisions to run)")
        return None
    if args.revisions_out is None:
        raise HeadscopeError("--revisions needs --revisions-out DIR (one JSON per revision goes there)")
    if getattr(args, "revision", None) is not None:
        raise HeadscopeError("give either --revision or --revisions, not both")
    if Path(args.model).expanduser().exists():
        raise HeadscopeError(f"--revisions applies to hub ids, but {args.model} is a local directory")
    revisions = parse_revisions(args.revisions)
    return revisions


def file_digest(path: str | None) -> str | None:
    """sha256 of an input file named in the options (part of the reuse key), None when not given."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        raise HeadscopeError(f"cannot read {path}: {e.strerror}") from None


def run(args, revisions: list[str], analysis: Analysis) -> int:
    """Run `analysis` on each revision, write DIR's table and figure, print the table; exit status."""
    odir = check_revisions_dir(args.revisions_out, analysis.command)

    def load_revision(rev: str):
        return load(args.model, device=args.device, dtype=DTYPES[args.dtype], revision=rev)

    def progress(line: str) -> None:
        print(f"headscope: {line}", file=sys.stderr, flush=True)

    try:
        res = run_revisions(args.model, revisions, odir, analysis, load=load_revision, dtype=args.dtype,
                            device=str(args.device), progress=progress)     # opens odir
        d = res.to_dict()
        odir.write(COMBINED, dumps(d))
        odir.write(FIGURE, str(V.figure(d)) + "\n")
        odir.remove_stale({MARKER, COMBINED, FIGURE} | {r.file for r in res.rows})
    finally:
        odir.close()
    status = {r.revision: r.computed for r in res.rows}      # computed in this run, or reused
    emit(args, res, V.text(res.to_dict(), status) + f"\nwrote {Path(args.revisions_out) / COMBINED} and {FIGURE}")
    return 0 if res.ok else 1
