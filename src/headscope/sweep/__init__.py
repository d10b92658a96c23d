"""Sweeps: every analysis over models × training revisions, one task per cell, on Dask or in this process.

``headscope sweep`` (``commands/sweep.py``) and ``--revisions`` of atlas and reproduce
(``commands/revisions.py``) both run here: the grid (:mod:`.grid`) becomes task specs, the engine
(:mod:`.engine`) reuses the task files proven to be this run's and sends the rest to an executor
— :class:`SerialExecutor` in this process, or :class:`~headscope.sweep.cluster.DaskExecutor` on
an embedded LocalCluster or a remote scheduler (:mod:`.cluster`) — and each worker runs
:func:`~headscope.sweep.task.run_task`. The result (:class:`SweepResult`) lists every cell in
the grid's order, with a summary and tidy rows of its JSON; it is the same whichever executor ran
it. docs/scaling.md has the costs and the cluster recipes.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .._atomic import OutputDir
from ..maps.revisions import training_step
from .analyses import KINDS, NAMES, Kind, kind, summarise_rows
from .engine import INDEX, Outcome, TaskSpec, keep_files, run_tasks
from .task import SerialExecutor
from .grid import Cell, Grid, cells, read_spec, specs

__all__ = ["Grid", "Cell", "TaskSpec", "Outcome", "SweepResult", "SweepCell", "SerialExecutor", "KINDS", "NAMES",
           "Kind", "kind", "summarise_rows", "cells", "specs", "read_spec", "run_sweep", "keep_files", "INDEX",
           "MARKER", "FORMAT"]

MARKER = ".headscope-sweep"
FORMAT = "headscope-sweep"
VERSION = 1


@dataclasses.dataclass
class SweepCell:
    model: str
    revision: str | None
    analysis: str
    file: str
    commit: str | None
    status: str                      #: "ok" or "failed" (computed / reused: `run_status`, not in the JSON)
    error: str | None
    summary: dict | None
    tidy: list                       #: [(metric, component, value)]
    run_status: str = ""
    seconds: float = 0.0
    peak_rss: int | None = None

    @property
    def step(self) -> int | None:
        return None if self.revision is None else training_step(self.revision)

    def to_dict(self) -> dict:
        return {"model": self.model, "revision": self.revision, "step": self.step, "commit": self.commit,
                "analysis": self.analysis, "file": self.file, "status": self.status, "error": self.error,
                "summary": self.summary}


@dataclasses.dataclass
class SweepResult:
    grid: Grid
    revisions: dict[str, list]
    cells: list[SweepCell]

    @property
    def failed(self) -> list[SweepCell]:
        return [c for c in self.cells if c.status == "failed"]

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "grid": self.grid.to_dict(), "revisions": self.revisions,
                "cells": [c.to_dict() for c in self.cells],
                "n_ok": sum(c.status == "ok" for c in self.cells), "n_failed": len(self.failed)}

    def tidy_rows(self) -> list[dict]:
        """One row per model × revision × analysis × metric × component (a failed cell: one row, no metric)."""
        rows = []
        for c in self.cells:
            base = {"model": c.model, "revision": c.revision or "", "step": c.step, "analysis": c.analysis}
            if c.status == "failed":
                rows.append({**base, "metric": "", "component": "", "value": None, "status": "failed"})
                continue
            rows += [{**base, "metric": m, "component": comp, "value": v, "status": "ok"} for m, comp, v in c.tidy]
        return rows


def _digest(spec: TaskSpec, doc: dict):
    k = kind(spec.analysis)
    return k.summary(doc), k.tidy(doc)


def run_sweep(grid: Grid, odir: OutputDir, executor, cell_list: list[Cell], spec_list: list, revisions: dict,
              progress: Callable[[Outcome, int, int], None] | None = None) -> SweepResult:
    """Run every cell of `grid` (``cell_list`` from :func:`cells`, ``spec_list`` from :func:`specs`) into the
    opened `odir` with `executor`."""
    outcomes = run_tasks(odir, spec_list, executor, required=lambda s: kind(s.analysis).required, digest=_digest,
                         progress=progress)
    out = []
    for c, o in zip(cell_list, outcomes):
        summary, tidy = o.summary if o.status != "failed" else (None, [])
        out.append(SweepCell(c.model, c.revision, c.analysis, c.file, o.spec.commit if o.spec else None,
                             "failed" if o.status == "failed" else "ok", o.error, summary, tidy, o.status,
                             o.seconds, o.peak_rss))
    return SweepResult(grid, revisions, out)
