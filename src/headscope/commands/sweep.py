"""Every analysis over models × training revisions, one task per (model, revision, analysis), on Dask.

  headscope sweep EleutherAI/pythia-70m EleutherAI/pythia-160m --analyses atlas,reproduce \\
      --revisions step0:143000:1000 --out pythia-sweep/
  headscope sweep gpt2 ./my-ckpt --analyses atlas,composition --out cmp/ --set atlas.tokens=1000
  headscope sweep --spec sweep.toml --out DIR --scheduler tcp://10.0.0.5:8786

--revisions: names and START:STOP:STRIDE ranges (step0:143000:1000 = step0, step1000, …,
step143000, filtered to the branches that exist). --set ANALYSIS.OPTION=VALUE sets an
analysis's option (a JSON value, else a string; `--set atlas.layers=[0,1]`); any other plain
keyword argument of the analysis's function passes through by name (`--set reproduce.find=true`
→ reproduce(…, find=True) where that argument exists). --spec FILE.toml holds the same (models,
analyses, revisions, [options.ANALYSIS]); sweep.json records the grid.

Engine: by default an embedded Dask LocalCluster, one thread per worker (one model per worker),
sized from the cores and the available memory (the plan is printed); --workers N fixes its size,
--worker-memory SIZE each worker's memory limit;
--scheduler tcp://HOST:PORT submits to a running Dask cluster (`dask scheduler`, `dask worker
ADDRESS --nthreads 1`; each worker needs the models: a shared or its own HF cache); --serial
runs in this process. Each finished task's JSON is written at once into DIR/tasks/; a rerun
reuses the tasks whose files are proven to be this run's (their sha256 in the index) and
recomputes the rest. DIR gets sweep.json, sweep.csv (one row per model × revision × analysis ×
metric × component), emergence-ANALYSIS.svg, models-ANALYSIS.svg and index.html. A cell that
fails (a missing revision, a model that does not load, a worker killed for memory) is one line;
the rest goes on; exit 1 when a cell failed (docs/scaling.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .._atomic import OutputDir, read_small_file
from .._errors import HeadscopeError
from .._json import dumps
from ..report.views import sweep as V
from ..sweep import FORMAT, MARKER, NAMES, Grid, cells, keep_files, read_spec, run_sweep, specs
from ..sweep.task import SerialExecutor
from .args import emit

RESULT, TABLE, PAGE = "sweep.json", "sweep.csv", "index.html"


def add_arguments(p):
    p.add_argument("models", nargs="*", metavar="MODEL", help="hub ids or checkpoint directories")
    p.add_argument("--analyses", default=None, metavar="A,B",
                   help=f"comma-separated, some of {','.join(NAMES)}")
    p.add_argument("--revisions", default=None, metavar="SPEC",
                   help="revisions of each hub model: names and START:STOP:STRIDE ranges (step0:143000:1000)")
    p.add_argument("--out", required=True, metavar="DIR", help="the sweep directory")
    p.add_argument("--spec", default=None, metavar="FILE", help="grid spec (TOML, or JSON); the command line wins")
    p.add_argument("--set", action="append", default=[], metavar="ANALYSIS.OPTION=VALUE",
                   help="an analysis option (repeatable); VALUE is JSON or a string")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler", default=None, metavar="ADDRESS", help="a running Dask scheduler, tcp://HOST:PORT")
    g.add_argument("--workers", type=int, default=None, metavar="N",
                   help="the embedded LocalCluster's workers (default: sized from cores and memory)")
    g.add_argument("--serial", action="store_true", help="run every task in this process, one after another")
    p.add_argument("--worker-memory", default=None, metavar="SIZE",
                   help="the LocalCluster's memory limit per worker, e.g. 4GiB (default: 80 %% of the available "
                        "memory shared out); a worker over it is restarted and its task reported as killed for memory")
    p.add_argument("--connect-timeout", type=float, default=20.0, metavar="S",
                   help="seconds to reach --scheduler (default 20)")


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def grid_from_args(args) -> Grid:
    spec = read_spec(args.spec) if args.spec else {}
    options = {a: dict(o) for a, o in spec.get("options", {}).items()}
    for item in args.set:
        name, eq, value = item.partition("=")
        analysis, dot, option = name.partition(".")
        if not eq or not dot or not analysis or not option:
            raise HeadscopeError(f"--set: expected ANALYSIS.OPTION=VALUE, got {item!r}")
        options.setdefault(analysis, {})[option] = _value(value)
    analyses = args.analyses.split(",") if args.analyses is not None else spec.get("analyses", [])
    return Grid(models=list(args.models) or list(spec.get("models", [])),
                analyses=[a.strip() for a in analyses],
                revisions=args.revisions if args.revisions is not None else spec.get("revisions"),
                options=options, dtype=args.dtype if args.dtype != "float32" else spec.get("dtype", "float32"),
                device=args.device if args.device != "cpu" else spec.get("device", "cpu")).check()


def check_dir(out: str) -> OutputDir:
    """The sweep directory, checked (nothing written): new, empty or an earlier sweep's."""
    odir = OutputDir(out, MARKER, what="sweep directory").check()
    p = Path(out) / MARKER
    if p.is_file():
        data = read_small_file(p)
        try:
            ok = data is not None and json.loads(data).get("format") == FORMAT
        except (ValueError, AttributeError, RecursionError):
            ok = False
        if not ok:
            raise HeadscopeError(f"sweep directory {out}: its {MARKER} is not a sweep's; choose another directory")
    return odir


def write_task_pages(odir: OutputDir, d: dict) -> set[str]:
    """Each finished task's own page beside its JSON (read back one at a time, capped); the pages written."""
    from .._input import max_input_bytes
    from ..sweep.engine import parse_task_json

    pages = set()
    for c in d["cells"]:
        if c["status"] != "ok":
            continue
        doc = parse_task_json(read_small_file(odir.path / c["file"], limit=max_input_bytes()) or b"")
        if doc is None:
            continue
        try:
            page = V.task_page(c, doc)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):     # a view that cannot draw it
            continue
        odir.write(V.page_name(c["file"]), page)
        pages.add(V.page_name(c["file"]))
    return pages


def say(line: str) -> None:
    print(f"headscope: {line}", file=sys.stderr, flush=True)


def progress_line(o, done: int, total: int) -> None:
    cpu = (f", {o.cpu_seconds:.1f} CPU-s on {o.threads} thread{'s' if o.threads != 1 else ''}"
           if o.cpu_seconds is not None and o.threads is not None else "")
    rss = f", worker peak RSS {o.peak_rss / 2**20:.0f} MiB" if o.peak_rss else ""
    what = f"failed: {o.error}" if o.status == "failed" else f"{o.status} ({o.seconds:.1f} s{cpu}{rss})"
    say(f"[{done}/{total}] {o.label}: {what}")


def worker_memory(text: str | None) -> int | None:
    """--worker-memory as bytes (Dask's sizes: 4GiB, 500MB, 2e9); one line when it is not one."""
    if text is None:
        return None
    from dask.utils import parse_bytes

    try:
        n = parse_bytes(text)
    except (ValueError, TypeError):
        n = None
    if not isinstance(n, int) or n < 2**20:
        raise HeadscopeError(f"--worker-memory: expected a size of at least 1MiB such as 4GiB or 500MB, got {text!r}")
    return n


def executor_for(args, spec_list):
    """(executor, a close function): --serial, --scheduler, or the LocalCluster (the plan printed)."""
    memory = worker_memory(args.worker_memory)
    if memory is not None and (args.serial or args.scheduler):
        raise HeadscopeError("--worker-memory sizes the LocalCluster's workers; not with --serial or --scheduler "
                             "(there: `dask worker --memory-limit`)")
    if args.serial:
        return SerialExecutor(), lambda: None
    from ..sweep.cluster import DaskExecutor, connect, plan_local, start_local

    if args.scheduler:
        if not args.connect_timeout > 0:
            raise HeadscopeError(f"--connect-timeout: expected a positive number, got {args.connect_timeout}")
        client = connect(args.scheduler, args.connect_timeout)
        info = client.scheduler_info()
        say(f"on the Dask scheduler {args.scheduler} ({len(info.get('workers', {}))} worker(s) now)")
        if info.get("services", {}).get("dashboard"):
            say(f"Dask dashboard: {client.dashboard_link}")
        return DaskExecutor(client, args.scheduler), client.close
    if args.workers is not None and args.workers < 1:
        raise HeadscopeError(f"--workers: expected ≥ 1, got {args.workers}")
    n, limit, why = plan_local([s for s in spec_list if not isinstance(s, tuple)], args.workers, memory)
    say(f"LocalCluster: {why}")
    client, cluster = start_local(n, limit)               # no dashboard: it needs bokeh and a free port

    def close():
        client.close()
        cluster.close()
    return DaskExecutor(client, "LocalCluster"), close


def run(args) -> int:
    if args.revision is not None:
        raise HeadscopeError("sweep takes --revisions (a list or range), not --revision")
    grid = grid_from_args(args)
    odir = check_dir(args.out)
    cell_list, revisions = cells(grid)
    spec_list = specs(grid, cell_list)
    executor, close = executor_for(args, spec_list)          # an unreachable scheduler: nothing written
    try:
        odir.open()
        try:
            marker = dumps({"format": FORMAT, "version": 1})
            if read_small_file(odir.path / MARKER) != marker.encode("utf-8"):
                odir.write(MARKER, marker)
            res = run_sweep(grid, odir, executor, cell_list, spec_list, revisions, progress=progress_line)
            d = res.to_dict()
            odir.write(RESULT, dumps(d))
            odir.write(TABLE, V.csv_text(res.tidy_rows()))
            figures = V.figure_names(d)
            for name, svg in figures:
                odir.write(name, svg)
            pages = write_task_pages(odir, d)
            odir.write(PAGE, V.html(d, figures, pages))
            odir.remove_stale({MARKER, RESULT, TABLE, PAGE} | {n for n, _ in figures} | pages
                              | keep_files(c.file for c in res.cells))
        finally:
            odir.close()
    finally:
        close()
    status = {c.file: c.run_status for c in res.cells}
    emit(args, d, V.text(d, status) + f"\nwrote {Path(args.out) / RESULT}, {TABLE}, {PAGE} and the figures")
    for c in res.failed:
        print(f"headscope: error: {c.error}" if c.error and c.error.startswith(c.model) else
              f"headscope: error: {c.model}" + (f"@{c.revision}" if c.revision else "") + f" {c.analysis}: {c.error}",
              file=sys.stderr)
    return 1 if res.failed else 0

