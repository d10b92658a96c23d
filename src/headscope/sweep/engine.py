"""The sweep engine: tasks in, one JSON file per task out, reused only when proven to be what this run writes.

A task (:class:`TaskSpec`) is one (model, revision, analysis) with its options, dtype and device,
the revision's resolved commit, the file it writes (relative to the sweep directory) and its
``key`` — the sha256 of everything that changes the result. The task function
(:func:`headscope.sweep.task.run_task`) is pure given the spec: it returns the JSON text, and the
*client* (the process holding the output directory's lock) writes it atomically
(:class:`headscope._atomic.OutputDir`), so workers need the model, never the sweep directory.

Reuse. After each file is written, the index ``.headscope-tasks.json`` records its key and the
sha256 of its bytes. A rerun reuses a task's file only when the index holds the same key *and*
the file's bytes hash to the recorded sha256 *and* it parses (capped read, no NaN / Infinity) as
a complete JSON object whose ``revision_run.key`` is the key — anything else (a file edited by
hand with its key kept, a truncated file, NaN, a file over the input size limit, a file without
an index entry because the run died between the two writes) is recomputed.

Executors run the specs: :class:`headscope.sweep.task.SerialExecutor` in this process, one after another (the
``--revisions`` default: peak memory one model); :class:`headscope.sweep.cluster.DaskExecutor`
on a Dask cluster. Results are written as they arrive, in any order; everything the engine
returns is in the grid's order, so the output is the same whichever executor ran it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from typing import Callable, Iterable, Sequence

from .._atomic import OutputDir, read_small_file
from .._input import max_input_bytes
from .._json import dumps

#: the index of the sweep directory: file → {key, sha256} of every task file written
INDEX = ".headscope-tasks.json"
INDEX_FORMAT = "headscope-tasks"


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One (model, revision, analysis): everything a worker needs, and nothing that varies between runs."""

    model: str                      #: hub id or checkpoint directory
    revision: str | None            #: the name asked for (None: main / a directory)
    commit: str | None              #: the resolved commit hash (hub), None for a directory
    analysis: str                   #: "atlas", "reproduce", …
    options: dict                   #: the options that change the result (JSON-able)
    dtype: str
    device: str
    file: str                       #: path of its JSON, relative to the sweep directory
    key: str                        #: sha256 of the above (:func:`task_key`)
    weight_bytes: int = 0           #: the checkpoint's weight files' size (memory sizing)

    @property
    def label(self) -> str:
        return f"{self.model}" + (f"@{self.revision}" if self.revision is not None else "") + f" {self.analysis}"


def task_key(*, command: str, model: str, revision: str | None, commit: str | None, options: dict, dtype: str,
             device: str, version: str) -> str:
    """The sha256 a reusable task file holds: command, model, revision, commit, options, dtype, device, version."""
    return hashlib.sha256(dumps({"command": command, "model": model, "revision": revision, "commit": commit,
                                 "options": options, "dtype": dtype, "device": device,
                                 "headscope": version}).encode("utf-8")).hexdigest()


@dataclasses.dataclass
class Outcome:
    """What became of one task: computed, reused or failed (with the one-line reason)."""

    spec: TaskSpec | None
    label: str
    status: str                     #: "computed", "reused" or "failed"
    summary: object = None          #: the caller's digest of the task's JSON (None when failed)
    error: str | None = None
    seconds: float = 0.0            #: not in any JSON (determinism)
    peak_rss: int | None = None     #: the worker process's peak RSS after the task (bytes)
    cpu_seconds: float | None = None  #: the worker process's CPU time over the task (all its threads)
    threads: int | None = None      #: torch's intra-op threads in that process


# -- the index and reuse ------------------------------------------------------------------------


def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name}")


def parse_task_json(data: bytes | str) -> dict | None:
    """A task file's JSON object, or None: not UTF-8 / JSON, nested too deep, NaN or ±Infinity, not an object."""
    try:
        doc = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError, UnicodeDecodeError, TypeError):
        return None
    return doc if isinstance(doc, dict) else None


def read_index(odir: OutputDir) -> dict[str, dict]:
    """file → {key, sha256} from the directory's index (empty when missing, unreadable or not ours)."""
    if INDEX not in odir.files:
        return {}
    doc = parse_task_json(read_small_file(odir.path / INDEX, limit=max_input_bytes()) or b"")
    if doc is None or doc.get("format") != INDEX_FORMAT or not isinstance(doc.get("files"), dict):
        return {}
    return {f: e for f, e in doc["files"].items() if isinstance(e, dict)}


def write_index(odir: OutputDir, index: dict[str, dict]) -> None:
    odir.write(INDEX, dumps({"format": INDEX_FORMAT, "version": 1, "files": dict(sorted(index.items()))}))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def reusable(odir: OutputDir, spec: TaskSpec, index: dict[str, dict], required: Sequence[str]) -> dict | None:
    """The task file's JSON when it is proven to be what this run would write (module docstring), else None."""
    entry = index.get(spec.file)
    if spec.file not in odir.files or entry is None or entry.get("key") != spec.key:
        return None
    path = odir.path / spec.file
    if path.is_symlink():
        return None
    data = read_small_file(path, limit=max_input_bytes())           # capped: over the input limit → recompute
    if data is None or sha256_bytes(data) != entry.get("sha256"):
        return None
    doc = parse_task_json(data)
    if doc is None or not all(k in doc for k in required):
        return None
    run = doc.get("revision_run")
    return doc if isinstance(run, dict) and run.get("key") == spec.key else None


# -- executors ------------------------------------------------------------------------------------


def run_tasks(odir: OutputDir, cells: Sequence[TaskSpec | tuple[str, str]], executor, *,
              required: Callable[[TaskSpec], Sequence[str]], digest: Callable[[TaskSpec, dict], object],
              progress: Callable[[Outcome, int, int], None] | None = None) -> list[Outcome]:
    """Run every cell (a spec, or (label, error) for a cell that failed before it could run) into `odir`.

    Reusable files are reused (:func:`reusable`); the rest go to `executor`; each result is
    written (then the index) as soon as it arrives. Returns one :class:`Outcome` per cell, in
    the order given. `digest` maps a task's JSON to what the caller keeps (a summary); a JSON
    it cannot digest counts as not reusable.
    """
    index = read_index(odir)
    outcomes: list[Outcome | None] = [None] * len(cells)
    todo: list[tuple[int, TaskSpec]] = []
    done = [0]

    def finish(i: int, o: Outcome) -> None:
        outcomes[i] = o
        done[0] += 1
        if progress is not None:
            progress(o, done[0], len(cells))

    for i, cell in enumerate(cells):
        if not isinstance(cell, TaskSpec):
            label, err = cell
            finish(i, Outcome(None, label, "failed", error=err))
            continue
        t0 = time.perf_counter()
        doc = reusable(odir, cell, index, required(cell))
        summary = None
        if doc is not None:
            try:
                summary = digest(cell, doc)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError):
                doc = None
        if doc is None:
            todo.append((i, cell))
        else:
            finish(i, Outcome(cell, cell.label, "reused", summary, seconds=time.perf_counter() - t0))
        del doc
    specs = [s for _, s in todo]
    for j, res in executor.run(specs):
        i, spec = todo[j]
        seconds, rss = res.get("seconds", 0.0), res.get("peak_rss")
        usage = {"cpu_seconds": res.get("cpu_seconds"), "threads": res.get("threads")}
        if "error" in res:
            finish(i, Outcome(spec, spec.label, "failed", error=res["error"], seconds=seconds, peak_rss=rss))
            continue
        data = res["json"].encode("utf-8")
        doc = parse_task_json(data)
        if doc is None:                              # a task returns finite JSON (dumps refuses NaN)
            finish(i, Outcome(spec, spec.label, "failed", error="the task returned no JSON object"))
            continue
        odir.write(spec.file, data)
        index[spec.file] = {"key": spec.key, "sha256": sha256_bytes(data)}
        write_index(odir, index)
        finish(i, Outcome(spec, spec.label, "computed", digest(spec, doc), seconds=seconds, peak_rss=rss, **usage))
        del doc, data, res
    ours = {s.file for s in cells if isinstance(s, TaskSpec)}
    if set(index) - ours:                            # entries of files no longer in the grid
        write_index(odir, {f: e for f, e in index.items() if f in ours})
    return [o for o in outcomes if o is not None]


def keep_files(files: Iterable[str]) -> set[str]:
    """The task files of a run and the index (what :meth:`OutputDir.remove_stale` keeps of the engine's)."""
    return set(files) | {INDEX}
