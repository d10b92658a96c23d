"""The report's stages side by side: two lanes of half the torch threads each.

Some stages are made of large products that two threads run nearly twice as fast as one (on
GPT-2 small, 2026-12-06: calibration 1.7×, survey 1.6×, atlas 1.65×); these are marked
``exclusive`` and run alone on every thread. The others are made of small products,
decompositions and elementwise passes that a second thread hardly speeds up (kernels 1.08×,
composition 1.04×, attention and denominators none, the semantic stage's own process slower:
its Leiden partitions run in child processes), or are short; they run two at a time, each on
half the threads, so that both cores stay busy. The neuron scan (1.5×) gains more beside them
than alone: the gpt2 report's stages took 15.3 s in-process with it exclusive, 15.0 s without,
against 18.9 s one at a time (the README has the benchmarks).

``build_report`` uses two lanes by default where torch has two threads or more, the model is at
most :data:`LANES_MAX_D_MODEL` wide (wider, the lane stages too are products two threads speed up)
and every processed block stays held (else stages side by side would rebuild each other's blocks);
``ReportOptions.lanes`` (``--lanes``) sets it.

Which thread count a stage runs on is fixed by the plan, never by timing: every lane stage runs
on ``threads // lanes`` torch threads, every exclusive stage (and every stage, with one lane) on
``threads``. A stage reads only the results of the stages it requires, finished before it starts,
so its numbers depend on its inputs and its thread count only, and the same inputs on the same
machine give the same bytes whichever lane ran what, in whatever order they finished. (A
product's last bits can depend on the thread count — MKL picks other kernels for some shapes —
so ``--lanes 1`` may differ from the default in the last printed digit on some models.)

The scheduler: among the stages whose requirements have finished, exclusive ones first, then the
``long`` ones (the longest stages that run in a lane), then the stage order. An exclusive stage waits
for both lanes to empty and runs in the calling thread; the others go to the first free lane.
Starting the long stages first is longest-first scheduling: the short ones then fill whichever lane
ends first, and the lanes end nearly together (gpt2, 2026-12-06, in-process, alternating: the
report 0.5–1.2 s shorter, lanes ending 0.2 s apart instead of 1.3 s; which lane runs a stage never
changes its bytes). ``finish(job, outcome)`` is called in the calling thread as each
stage ends (the report writes its data file there, so nothing else touches the output directory).
An exception other than the stage's own reported failure (a bug, KeyboardInterrupt) stops new
work; the stages already running finish and are kept, then it is raised.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from typing import Any, Callable, Sequence

import torch

#: lanes when torch has at least two threads (each lane gets threads // LANES)
LANES = 2
#: the widest model whose report runs in lanes by default. At d_model 768 a second thread hardly speeds
#: up the lane stages (gpt2, 2026-12-06: kernels 1.08×, composition 1.04×, the semantic stage's own process
#: 0.91×), so two at a time gain: the stages took 15.4 s against 18.9 s one at a time. At 1024 they are
#: made of products two threads do speed up (gpt2-medium: semantic 7.1 s on two threads, 11.0 s in a
#: lane; composition 10.9 s against 14.3 s): lanes still gained 4 s of 53 but the semantic stage and
#: composition side by side raised the peak from 4.08 to 4.60 GB, over medium's 4.4 GB target.
LANES_MAX_D_MODEL = 768
_LOCAL = threading.local()


def in_lane() -> bool:
    """Whether the calling thread is a lane (another stage may be running beside it)."""
    return getattr(_LOCAL, "lane", False)


def lanes_for(threads: int, requested: int | None = None) -> int:
    """The number of lanes: `requested` (≥ 1) if given, else :data:`LANES` when `threads` ≥ 2, else 1;
    never more than `threads` (each lane has at least one thread)."""
    if requested is not None and requested < 1:
        raise ValueError(f"lanes: expected at least 1, got {requested}")
    n = requested if requested is not None else (LANES if threads >= 2 else 1)
    return max(1, min(n, threads))


@dataclasses.dataclass
class Job:
    """One stage to compute: `run()` returns its outcome; `requires` names jobs of this run that
    must finish first (requirements already met, e.g. read from the cache, are not listed)."""

    name: str
    run: Callable[[], Any]
    requires: tuple[str, ...] = ()
    exclusive: bool = False
    long: bool = False          #: started before the other lane stages (longest first)


def run_jobs(jobs: Sequence[Job], finish: Callable[[Job, Any], None], lanes: int = 1,
             threads: int | None = None) -> None:
    """Run every job (list order is the stage order), calling ``finish(job, outcome)`` in this thread
    as each ends. One lane: in this thread, in order. More: the module docstring."""
    names = {j.name for j in jobs}
    unknown = [(j.name, d) for j in jobs for d in j.requires if d not in names]
    if unknown:
        raise ValueError(f"job {unknown[0][0]!r} requires {unknown[0][1]!r}, which is not a job of this run")
    threads = torch.get_num_threads() if threads is None else threads
    if lanes <= 1 or len(jobs) <= 1:
        for j in jobs:                          # requirements come earlier in the stage order
            finish(j, j.run())
        return
    _Lanes(lanes, max(1, threads // lanes)).run(list(jobs), finish)


class _Lanes:
    def __init__(self, lanes: int, lane_threads: int):
        self.n, self.lane_threads = lanes, lane_threads
        self.todo: queue.SimpleQueue = queue.SimpleQueue()      # (job) or None: stop
        self.done: queue.SimpleQueue = queue.SimpleQueue()      # (job, outcome, exception)

    def _lane(self) -> None:
        # torch sets up a thread's count lazily, on its first parallel operation, from the process-wide
        # count (the last one any thread set): set up first, then this thread's own count (OpenMP, MKL)
        torch.get_num_threads()
        torch.set_num_threads(self.lane_threads)
        _LOCAL.lane = True
        while (job := self.todo.get()) is not None:
            try:
                self.done.put((job, job.run(), None))
            except BaseException as e:                          # raised in the calling thread
                self.done.put((job, None, e))

    def run(self, jobs: list[Job], finish) -> None:
        pending = sorted(jobs, key=lambda j: (not j.exclusive, not j.long))   # stable: stage order within each
        finished: set[str] = set()
        running = 0
        error: BaseException | None = None
        workers = [threading.Thread(target=self._lane, name=f"headscope-lane-{i}", daemon=True)
                   for i in range(self.n)]
        for w in workers:
            w.start()
        try:
            while pending or running:
                ready = next((j for j in pending if finished.issuperset(j.requires)), None) if error is None else None
                if ready is not None and ready.exclusive and running == 0:
                    pending.remove(ready)
                    try:
                        outcome = ready.run()                   # alone, on every thread
                    except BaseException as e:
                        error = e
                        continue
                    finished.add(ready.name)
                    finish(ready, outcome)
                    continue
                if ready is not None and not ready.exclusive and running < self.n:
                    pending.remove(ready)
                    self.todo.put(ready)
                    running += 1
                    continue
                if running == 0:                                # nothing runs and nothing may start
                    break
                job, outcome, exc = self.done.get()
                running -= 1
                if exc is not None:
                    error = error or exc
                    continue
                finished.add(job.name)
                finish(job, outcome)                            # kept even after another stage's error
        finally:
            for _ in workers:
                self.todo.put(None)
            torch.set_num_threads(torch.get_num_threads())      # the process-wide count back to the caller's
        if error is not None:
            raise error
