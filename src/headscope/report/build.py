"""``build_report``: run the stages (cached), render every page, write the report directory.

Layout of DIR::

    .headscope-report        marker: this directory is a headscope report (reruns may overwrite it)
    index.html               summary table, one section per stage, lists of item pages
    <group>/<item>.html      per-item pages (heads/L0H3.html, neurons/n123.html, …)
    data/<stage>.json        every number shown, with the cache key and what it hashes

DIR follows headscope's output rule (:mod:`headscope._atomic`): it must be new, empty or
an earlier report (its ``.headscope-manifest.json`` lists ``.headscope-report``). Every
file is written in place atomically (temp file + rename), each stage's data as soon as
the stage finishes, so an interrupted run leaves a valid cache for the rerun, which
also removes the killed run's temporaries. Pages and data of an earlier report that
this run did not write (items that no longer exist) are removed at the end — only files
the manifest says headscope wrote; a user's own files in DIR are never touched. Nothing
written depends on the clock: the same inputs give byte-identical files.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import sys
import time
from pathlib import Path
from typing import Sequence

import torch

from .._version import __version__
from .._atomic import OutputDir, read_small_file, refuse_foreign_dir
from .._errors import HeadscopeError, NotApplicable
from .._input import max_input_bytes
from .._json import NOT_APPLICABLE, Encoded, dumps, encode, is_not_applicable, not_applicable
from .._memory import peak_rss_mb, rss_mb
from ..core.weights import Processing
from . import html as H
from .builtin import default_stages
from .inputs import load_inputs
from .lanes import LANES_MAX_D_MODEL, Job, in_lane, lanes_for, run_jobs
from .stages import (Context, Inputs, PageSection, Progress, RenderContext, Rendered, Stage, check_order, data_path,
                     document, read_cached, select, stage_key)

MARKER = ".headscope-report"
MARKER_TEXT = dumps({"format": "headscope-report", "version": 1})


@dataclasses.dataclass
class ReportOptions:
    """Options of ``build_report`` (the CLI flags of ``headscope report``)."""

    calibration_text: str | Path | None = None   # default: headscope/data/calibration.txt
    samples: Sequence[str | Path] | None = None   # default: headscope/data/samples/*.txt
    use_cache: bool = True                        # reuse data/<stage>.json with the same key
    progress: bool = True                         # tqdm bars on stderr
    stages: Sequence[str] | None = None           # run only these (and what they require)
    processing: Processing = dataclasses.field(default_factory=Processing.default)
    attention_layers: Sequence[int] = (0, 1)      # layers whose heads get attention pages
    max_positions: int = 40                       # positions shown in attention heatmaps
    n_neurons: int = 8                            # MLP0 neurons shown (most variable on the samples)
    neurons: Sequence[int] | None = None          # or exactly these
    kernel_windows: int = 16                      # corpus windows for the kernels stage's TV
    denominator_window: int = 256                 # tokens per window in the denominators stage
    deep_dives: int = 2                           # top survey heads analysed in depth
    semantic_tokens: int = 5000                   # nodes of the deep dives' token graphs
    atlas_tokens: int = 2000                      # frequent tokens the atlas's metrics average over
    neighbour_keys: str = "auto"                  # deep dives' neighbours over "vocab", "nodes", or "auto" (by cost)
    claims: bool = False                          # also the optional claims page (stage claims: the seeds' claims)
    lanes: int | None = None                      # stages side by side (None: 2 on ≥ 2 torch threads up to d_model 768)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["processing"] = self.processing.to_dict()
        d["calibration_text"] = None if self.calibration_text is None else str(self.calibration_text)
        d["samples"] = None if self.samples is None else [str(s) for s in self.samples]
        return d


@dataclasses.dataclass
class StageRun:
    """One stage of a run: its key, whether it was read from the cache, and what it cost.

    ``seconds`` wall and ``cpu_seconds`` (this process, all threads, and the child processes it
    waited for: :func:`cpu_seconds`) of the stage; ``rss_mb``
    the resident set after it and ``peak_rss_mb`` the process's peak so far (a stage that
    raised the peak shows it first), in MB; None where the platform does not say.
    """

    name: str
    key: str
    cached: bool
    seconds: float
    cpu_seconds: float = 0.0
    rss_mb: float | None = None
    peak_rss_mb: float | None = None
    not_applicable: str | None = None     # the reason, when the stage did not apply (data holds it too)
    failed: str | None = None             # the one-line reason, when the stage raised HeadscopeError (no data written)

    @property
    def status(self) -> str:
        """"failed", "not applicable" (computed or cached: the data say so), else "cached" or "computed"."""
        if self.failed is not None:
            return "failed"
        return "not applicable" if self.not_applicable is not None else "cached" if self.cached else "computed"


@dataclasses.dataclass
class ReportResult:
    """What ``build_report`` did: where the report is, each stage's key and whether it was cached."""

    out_dir: Path
    index: Path
    stages: list[StageRun]
    pages: list[str]
    data_files: list[str]
    fingerprint: str
    lanes: int = 1                        #: stages side by side (report.lanes; 1: one at a time)

    def to_dict(self) -> dict:
        return {
            "out_dir": str(self.out_dir),
            "index": str(self.index),
            "fingerprint": self.fingerprint,
            "lanes": self.lanes,
            "stages": [dataclasses.asdict(s) | {"status": s.status} for s in self.stages],
            "pages": self.pages,
            "data_files": self.data_files,
            "failed": {s.name: s.failed for s in self.failed},
        }

    @property
    def failed(self) -> list[StageRun]:
        """The stages that failed (each raised :class:`HeadscopeError`, or needs one that did)."""
        return [s for s in self.stages if s.failed is not None]


def cpu_seconds() -> float:
    """CPU seconds of this process (all threads) and of the child processes it has waited for (the
    semantic stage's Leiden partitions run in children: :mod:`headscope.semantic._leiden`)."""
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime


def build_report(model, out_dir: str | Path, options: ReportOptions | None = None,
                 stages: Sequence[Stage] | None = None, inputs: Inputs | None = None) -> ReportResult:
    """Write the HTML report of `model` (a :class:`headscope.Model`) to `out_dir`.

    `stages` defaults to every registered stage (:func:`headscope.report.builtin.default_stages`);
    `inputs`, the texts of `options` already read (:func:`headscope.report.inputs.load_inputs`;
    read here when not given).

    A stage that raises :class:`HeadscopeError` (other than :class:`NotApplicable`) does not end the
    report: it is recorded as failed with its one-line reason (``ReportResult.failed``; the summary
    and its section say so), no data file is written for it, the stages that require it fail with
    "needs the … stage, which failed", and the others run. The caller decides what a failure means
    (``headscope report`` exits 2 naming the failed stages).
    """
    options = options or ReportOptions()
    model = model.bound(options.processing)     # every stage reads the weights under this processing
    out = Path(out_dir)
    if inputs is None:
        inputs = load_inputs(options.calibration_text, options.samples)
    stages = list(stages) if stages is not None else default_stages()
    stages = select(stages, options.stages or ([s.name for s in stages] if options.claims else None))
    for j in options.neurons or []:  # checked before any stage runs
        model.cfg.check_neuron(j)
    check_order(stages)
    odir = OutputDir(out, MARKER).check()
    with odir.open():               # holds the directory's lock until the report is written
        return _build(model, out, odir, options, inputs, stages)


def _build(model, out: Path, odir: OutputDir, options: ReportOptions, inputs, stages) -> ReportResult:
    if read_small_file(out / MARKER) != MARKER_TEXT.encode("utf-8"):
        odir.write(MARKER, MARKER_TEXT)

    keys: dict[str, str] = {}
    parts: dict[str, dict] = {}
    for stage in stages:
        keys[stage.name], parts[stage.name] = stage_key(stage, model, options, inputs, keys)
    results: dict[str, dict] = {}
    runs: dict[str, StageRun] = {}
    failed: dict[str, str] = {}
    number = {s.name: f"[{i + 1}/{len(stages)}]" for i, s in enumerate(stages)}
    by_name = {s.name: s for s in stages}
    rel = {s.name: data_path(out, s).relative_to(out).as_posix() for s in stages}
    jobs: list[Job] = []
    for stage in stages:
        # reused only as this run would write it: its key, and the hash the manifest recorded (no hand edit)
        t0, c0 = time.perf_counter(), cpu_seconds()
        data = (read_cached(odir.verified(rel[stage.name], max_input_bytes()), keys[stage.name])
                if options.use_cache else None)
        todo = tuple(d for d in stage.requires if any(j.name == d for j in jobs))
        if data is not None and not todo:                 # a computed requirement may fail: then not reused
            _say_cached(stage, number, options)
            results[stage.name] = data
            runs[stage.name] = _stage_run(stage, keys[stage.name], True, data, t0, c0, cpu_seconds())
            continue
        jobs.append(Job(stage.name, _job(stage, model, options, inputs, results, failed, keys, parts, number,
                                         by_name, cached=data), todo, exclusive=stage.exclusive,
                        long=stage.long))

    def finish(job: Job, done: "_Done") -> None:
        stage = by_name[job.name]
        if done.document is not None:
            odir.write(rel[stage.name], done.document, record_hash=True)
        if done.failed is not None:
            failed[stage.name] = done.failed
            if options.progress:
                print(f"{number[stage.name]} {stage.name}: failed: {done.failed}", file=sys.stderr)
        results[stage.name] = done.data
        runs[stage.name] = done.run

    threads = torch.get_num_threads()
    lanes = lanes_for(threads, options.lanes)
    if lanes > 1 and options.lanes is None and len(jobs) > 1 and (model.cfg.d_model > LANES_MAX_D_MODEL
                                                                   or not _holds_every_block(model)):
        lanes = 1   # wide products use both threads well (LANES_MAX_D_MODEL); or blocks are dropped and
        #             rebuilt when read again, and stages side by side would rebuild each other's
    run_jobs(jobs, finish, lanes, threads)

    written = _render(model, odir, stages, results, options, inputs)
    data_files = [f"data/{s.name}.json" for s in stages if s.name not in failed]   # a failed stage's old data goes
    odir.remove_stale(set(written) | set(data_files) | {MARKER})
    return ReportResult(out, out / "index.html", [runs[s.name] for s in stages],
                        sorted(p for p in written if p != "index.html"), data_files, model.fingerprint,
                        lanes if len(jobs) > 1 else 1)


@dataclasses.dataclass
class _Done:
    """A computed stage, as its lane hands it back: the data later stages and renders read, the
    text of its data file (None: nothing to write), its one-line failure, and its StageRun."""

    data: dict
    document: str | None
    failed: str | None
    run: "StageRun"


def _holds_every_block(model) -> bool:
    """Whether the model's processed blocks are all held once built (no byte budget drops any)."""
    holds_all = getattr(model.weights().blocks, "holds_all", None)      # a plain list holds them all
    return holds_all is None or holds_all()


def _closure(stage: Stage, by_name: dict) -> list[str]:
    """The stages `stage` requires, directly or through them: the data its compute may read."""
    out, todo = [], list(stage.requires)
    while todo:
        n = todo.pop(0)
        if n not in out:
            out.append(n)
            todo += list(by_name[n].requires)
    return out


def _clock() -> float:
    """CPU seconds to charge a stage with: run alone (one lane, or an exclusive stage) the whole
    process's and its waited-for children's (:func:`cpu_seconds`); in a lane (another stage may run
    beside it) its own thread's only, which is all of its torch work when a lane has one torch thread
    (child processes and a larger lane's OpenMP team not counted)."""
    return time.thread_time() if in_lane() else cpu_seconds()


def _job(stage: Stage, model, options, inputs, results: dict, failed: dict, keys: dict, parts: dict,
         number: dict, by_name: dict, cached: dict | None):
    """What a lane runs for `stage`: its data (from `cached`, this key's saved data, when every
    requirement it waited for finished well; else computed), encoded as its file will hold it."""

    def run() -> _Done:
        t0, c0 = time.perf_counter(), _clock()
        key = keys[stage.name]
        broken = next((d for d in stage.requires if d in failed), None)
        if broken is None and cached is not None:        # requirements computed and well: the cache holds
            _say_cached(stage, number, options)
            return _Done(cached, None, None, _stage_run(stage, key, True, cached, t0, c0, _clock()))
        progress = Progress(f"{number[stage.name]} {stage.name}", enabled=options.progress)
        try:
            if broken is not None:
                raise HeadscopeError(f"needs the {broken} stage, which failed")
            deps = {d: results[d] for d in _closure(stage, by_name)}
            raw = _compute(stage, Context(model, options, inputs, deps, progress))
        except NotApplicable:
            raise
        except HeadscopeError as e:
            why = (str(e).splitlines() or [type(e).__name__])[0]
            return _Done(failed_data(why), None, why,
                         StageRun(stage.name, key, False, round(time.perf_counter() - t0, 3),
                                  round(_clock() - c0, 3), failed=why))
        finally:
            progress.close()
        if not isinstance(raw, dict):
            raise TypeError(f"stage {stage.name}: compute must return a dict, got {type(raw).__name__}")
        text = encode(raw, level=1)   # as it sits in its document, encoded once
        del raw
        data = json.loads(text)  # what is saved is exactly what later stages see
        doc = document(stage, key, parts[stage.name], Encoded(text))
        return _Done(data, doc, None, _stage_run(stage, key, False, data, t0, c0, _clock()))

    return run


def _say_cached(stage: Stage, number: dict, options) -> None:
    if options.progress:
        print(f"{number[stage.name]} {stage.name}: cached ({data_path(Path(), stage).name})", file=sys.stderr)


def _stage_run(stage: Stage, key: str, cached: bool, data: dict, t0: float, c0: float, c1: float) -> StageRun:
    """The StageRun of a stage that ended with `data` (computed or read from the cache)."""
    rss = rss_mb()
    return StageRun(stage.name, key, cached, round(time.perf_counter() - t0, 3), round(c1 - c0, 3),
                    None if rss is None else round(rss, 1), round(peak_rss_mb(), 1),
                    data[NOT_APPLICABLE] if is_not_applicable(data) else None)


def _compute(stage: Stage, ctx: Context) -> dict:
    """The stage's data, or ``{"not_applicable": reason}`` when it cannot apply to this model.

    A stage that requires a stage which did not apply does not apply either, unless it
    sets ``tolerates_not_applicable`` (and then reads that stage's data itself). Only
    :class:`NotApplicable` is caught: any other exception is a bug and propagates.
    """
    if not stage.tolerates_not_applicable:
        for dep in stage.requires:
            if is_not_applicable(ctx.results.get(dep)):
                return not_applicable(f"needs the {dep} stage, which does not apply: "
                                      f"{ctx.results[dep][NOT_APPLICABLE]}")
    try:
        return stage.compute(ctx)
    except NotApplicable as e:
        return not_applicable(str(e))


FAILED = "failed"


def failed_data(reason: str) -> dict:
    """A failed stage's entry among the results the renders read: not applicable to them (their
    readers already handle that), and marked failed (never written to data/)."""
    return {NOT_APPLICABLE: f"the stage failed: {reason}", FAILED: reason}


def _render_failed(stage: Stage, data: dict) -> Rendered:
    reason = data[FAILED]
    return Rendered(index=[H.Safe('<p class="failed"><strong>Failed:</strong> ') + reason + H.Safe("</p>")],
                    summary=[(stage.title, f"failed: {reason}")])


def _render_not_applicable(stage: Stage, data: dict) -> Rendered:
    reason = data[NOT_APPLICABLE]
    return Rendered(index=[H.Safe('<p class="not-applicable"><strong>Not applicable:</strong> ') + reason
                           + H.Safe("</p>")],
                    summary=[(stage.title, f"not applicable: {reason}")])


# -- rendering ---------------------------------------------------------------------------


def _check_page_path(p: str, stage: str) -> str:
    parts = p.split("/")
    if not p.endswith(".html") or p.startswith("/") or any(x in ("", ".", "..") for x in parts) or p == "index.html":
        raise ValueError(f"stage {stage}: bad page path {p!r} (expected e.g. 'heads/L0H3.html')")
    return p


def _render(model, odir: OutputDir, stages: Sequence[Stage], results: dict, options, inputs) -> list[str]:
    rctx = RenderContext(results=results, options=options)
    index_sections, summary, pages = [], [], {}
    page_stages: dict[str, list[str]] = {}
    for stage in stages:
        data = results[stage.name]
        r = (_render_failed(stage, data) if isinstance(data, dict) and FAILED in data else
             _render_not_applicable(stage, data) if is_not_applicable(data) else stage.render(data, rctx))
        if r.index:
            index_sections.append((stage, H.join(r.index)))
        summary += r.summary
        for ps in r.pages:
            _check_page_path(ps.path, stage.name)
            pages.setdefault(ps.path, []).append(ps)
            page_stages.setdefault(ps.path, []).append(stage.name)

    groups: dict[str, list[tuple[str, list[PageSection]]]] = {}
    for path, sections in pages.items():
        groups.setdefault(sections[0].group, []).append((path, sections))
    for g in groups.values():
        g.sort(key=lambda item: (item[1][0].order, item[0]))
    group_ids = {g: "pages-" + "".join(c if c.isalnum() else "-" for c in g.lower()) for g in groups}
    nav = [("Overview", "index.html")] + [(g, f"index.html#{group_ids[g]}") for g in groups]

    odir.announce([path for items in groups.values() for path, _ in items] + ["index.html"])  # one manifest write
    written = []
    source = getattr(model, "source", "model")
    foot_base = f"headscope {__version__} · model sha256 {model.fingerprint[:16]}…"
    for g, items in groups.items():
        for k, (path, sections) in enumerate(items):
            title = sections[0].title
            body = H.join(H.Safe(f'<div class="stage-part">{H.h(s.body)}</div>') for s in sections)
            names = sorted(set(page_stages[path]))
            links = [str(H.link(H.rel(path, f"data/{n}.json"), f"data/{n}.json")) for n in names]
            data_links = H.Safe("numbers: " + " · ".join(links))
            prev = (items[k - 1][1][0].title, items[k - 1][0]) if k > 0 else None
            nxt = (items[k + 1][1][0].title, items[k + 1][0]) if k + 1 < len(items) else None
            doc = H.page(title, body, path=path, nav=nav,
                         crumbs=[("Report", "index.html"), (g, f"index.html#{group_ids[g]}")],
                         prev=prev, next=nxt, footer=H.join([foot_base, H.Safe(" · "), data_links]))
            odir.write(path, doc)
            written.append(path)

    # index
    parts = []
    parts.append(H.Safe('<p class="sub">') + H.join([f"{source} · sha256 ", H.code(model.fingerprint),
                                                    f" · processing {options.processing.label()}"]) + H.Safe("</p>"))
    parts.append(H.section("Summary", H.table(["quantity", "value"], summary, numeric=(1,)), id="summary"))
    toc = [H.link(f"#{s.name}", s.title) for s, _ in index_sections] + [H.link(f"#{group_ids[g]}", g) for g in groups]
    parts.append(H.Safe('<p class="crumbs">Contents: ' + " · ".join(str(x) for x in toc) + "</p>"))
    for stage, body in index_sections:
        parts.append(H.section(stage.title, H.join([body, H.Safe('<p class="crumbs">'),
                                                   H.link(f"data/{stage.name}.json", f"data/{stage.name}.json"),
                                                   H.Safe("</p>")]), id=stage.name))
    for g, items in groups.items():
        rows = [(H.link(path, secs[0].title), " · ".join(s.summary for s in secs if s.summary)) for path, secs in items]
        parts.append(H.section(g, H.table(["page", "at a glance"], rows), id=group_ids[g]))
    title = f"Report: {source}"
    odir.write("index.html", H.page(title, H.join(parts), path="index.html", nav=nav, footer=foot_base))
    written.append("index.html")
    return written


def check_out_dir(out: str | Path) -> None:
    """Raise if `out` cannot hold a report (exists with other files, or is a file)."""
    refuse_foreign_dir(Path(out), MARKER)
    if Path(out).exists() and not Path(out).is_dir():
        raise HeadscopeError(f"output path {out} exists and is not a directory")
