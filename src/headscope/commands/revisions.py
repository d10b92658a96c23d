"""``--revisions A,B,… --revisions-out DIR`` for ``headscope atlas`` and ``headscope reproduce``.

A sweep of one model × the revisions × one analysis (``headscope.sweep``, the same tasks,
keys, reuse and writing as ``headscope sweep``): in this process one revision after another
(peak memory one model), or on a LocalCluster with ``--workers N``. Then DIR gets
``revisions.json`` (the combined table) and ``revisions.svg`` (each metric against the training
step), and the table is printed. DIR follows the output rule: new, empty, or an earlier
``--revisions`` output of the same command; a rerun reuses the per-revision files proven to be
this run's (their sha256 in the index) and recomputes the rest. A revision that fails (missing
from an offline cache) is one line; the others are still run, then the command exits 2 without
the combined table.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from .._atomic import MANIFEST, read_small_file
from .._errors import HeadscopeError
from .._json import dumps
from ..core.entry import load
from ..maps.revisions import (COMBINED, FIGURE, MARKER, RevisionRow, RevisionsResult, check_revisions_dir,
                              marker_text, parse_revisions, revision_file, training_step)
from ..report.views import revisions as V
from ..sweep import kind
from ..sweep.engine import keep_files, run_tasks
from ..sweep.task import SerialExecutor
from ..sweep.grid import analysis_options, make_spec
from .args import DTYPES, emit


def add_arguments(p) -> None:
    p.add_argument("--revisions", default=None, metavar="A,B,…",
                   help="run once per hub revision (e.g. step1000,step8000,step143000) into --revisions-out")
    p.add_argument("--revisions-out", default=None, metavar="DIR",
                   help="directory of --revisions: a JSON per revision, revisions.json and revisions.svg")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="with --revisions: run them on a Dask LocalCluster of N workers (default: one after "
                        "another in this process)")


def requested(args) -> list[str] | None:
    """The checked revisions list (run order) when ``--revisions`` is given, else None; refuses mixed flags.

    Call before any work: a bad list or directory is refused with nothing written.
    """
    if args.revisions is None:
        if args.revisions_out is not None:
            raise HeadscopeError("--revisions-out needs --revisions (the revisions to run)")
        if getattr(args, "workers", None) is not None:
            raise HeadscopeError("--workers applies to --revisions")
        return None
    if args.revisions_out is None:
        raise HeadscopeError("--revisions needs --revisions-out DIR (one JSON per revision goes there)")
    if getattr(args, "revision", None) is not None:
        raise HeadscopeError("give either --revision or --revisions, not both")
    if Path(args.model).expanduser().exists():
        raise HeadscopeError(f"--revisions applies to hub ids, but {args.model} is a local directory")
    if args.workers is not None and args.workers < 1:
        raise HeadscopeError(f"--workers: expected ≥ 1, got {args.workers}")
    return parse_revisions(args.revisions)


def _remove_if_empty(odir) -> None:
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


def run(args, revisions: list[str], analysis: str, given: dict) -> int:
    """Run `analysis` (with options `given`) on each revision, write DIR's table and figure, print it."""
    odir = check_revisions_dir(args.revisions_out, analysis)
    options = analysis_options(analysis, given)
    k = kind(analysis)
    cells = []
    for rev in revisions:
        try:
            cells.append(make_spec(args.model, rev, analysis, options, dtype=args.dtype, device=str(args.device),
                                   file=revision_file(rev)))
        except HeadscopeError as e:
            cells.append((rev, str(e)))
    if all(isinstance(c, tuple) for c in cells):
        raise HeadscopeError(cells[0][1])                       # nothing can run: nothing written

    def load_spec(spec):
        return load(args.model, device=args.device, dtype=DTYPES[args.dtype],
                    revision=spec.commit if spec.commit is not None else spec.revision)

    def progress(o, done, total) -> None:
        rev = o.spec.revision if o.spec is not None else o.label
        if o.status != "failed":
            print(f"headscope: {rev}: {o.status} ({o.seconds:.1f} s)", file=sys.stderr, flush=True)

    cluster = None
    if args.workers is not None:
        from ..sweep.cluster import DaskExecutor, plan_local, start_local

        n, limit, why = plan_local([c for c in cells if not isinstance(c, tuple)], args.workers)
        print(f"headscope: LocalCluster: {why}", file=sys.stderr, flush=True)
        client, cluster = start_local(n, limit)
        executor = DaskExecutor(client, "LocalCluster")
    else:
        executor = SerialExecutor(load_spec)

    def close():
        if cluster is not None:
            executor.client.close()
            cluster.close()
    try:
        odir.open()
        try:
            marker = marker_text(analysis)
            if read_small_file(odir.path / MARKER) != marker.encode("utf-8"):
                odir.write(MARKER, marker)
            outcomes = run_tasks(odir, cells, executor, required=lambda s: k.required,
                                 digest=lambda s, doc: k.summary(doc), progress=progress)
        except BaseException:
            _remove_if_empty(odir)
            raise
        failed = [o for o in outcomes if o.status == "failed"]
        if failed:
            odir.close()
            for o in failed[:-1]:
                print(f"headscope: error: {o.error}", file=sys.stderr)
            raise HeadscopeError(failed[-1].error)
        rows = [RevisionRow(revision=rev, step=training_step(rev), file=o.spec.file, summary=o.summary,
                            computed=o.status == "computed", seconds=o.seconds) for rev, o in zip(revisions, outcomes)]
        res = RevisionsResult(command=analysis, model=args.model, options=options, rows=rows)
        try:
            d = res.to_dict()
            odir.write(COMBINED, dumps(d))
            odir.write(FIGURE, str(V.figure(d)) + "\n")
            odir.remove_stale({MARKER, COMBINED, FIGURE} | keep_files(r.file for r in res.rows))
        finally:
            odir.close()
    finally:
        close()
    status = {r.revision: r.computed for r in res.rows}      # computed in this run, or reused
    emit(args, res, V.text(res.to_dict(), status) + f"\nwrote {Path(args.revisions_out) / COMBINED} and {FIGURE}")
    return 0 if res.ok else 1
