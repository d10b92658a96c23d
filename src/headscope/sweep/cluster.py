"""Dask distributed as the sweep's engine: an embedded LocalCluster sized from cores and memory, or a scheduler.

Sizing (:func:`plan_local`): every worker has one Dask thread, so it runs one task — holds one
model — at a time; inside it torch gets ⌊cores / workers⌋ threads (:func:`torch_threads`: two
workers on 2 cores, one each, so they do not oversubscribe the cores; one worker, all of them,
as a serial run). A task needs about :func:`task_memory` of its checkpoint's weight files (the
process, the weights as loaded and processed, the analysis's float64 work; measured in
``benchmarks/bench_sweep.py``). Of the available memory, 80 % is shared out: workers =
min(cores, tasks, ⌊0.8·available / the largest task's need⌋), at least 1, each with an equal
memory limit and a ``MEMORY`` resource of that size; a task asks for its need (capped at the
largest worker's), so two models that do not fit together never share a worker, and the nanny
restarts a worker that outgrows its limit. A task whose worker died twice (``KilledWorker``:
killed for memory, or lost) is reported with its model and revision; the sweep goes on.

``--scheduler tcp://HOST:PORT`` connects to a running cluster (``dask scheduler``; workers
started with ``dask worker ADDRESS --nthreads 1 [--resources MEMORY=…]``); an unreachable
scheduler is one line.
"""

from __future__ import annotations

import logging
import os
from typing import Iterator, Sequence

from .._errors import HeadscopeError
from .._input import amount
from .engine import TaskSpec

#: the memory of a worker process before it loads a model (Python, torch, headscope), bytes
BASE_MEMORY = 768 * 2**20
#: a task's memory over the base, per byte of the checkpoint's weight files (weights, processed copy, work)
PER_WEIGHT_BYTE = 6


def task_memory(weight_bytes: int) -> int:
    """The memory a task of a checkpoint with `weight_bytes` of weight files needs (module docstring)."""
    return BASE_MEMORY + PER_WEIGHT_BYTE * int(weight_bytes)


def available_memory() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def torch_threads(n_workers: int) -> int:
    """torch's (OpenMP/MKL) threads in each of `n_workers` local workers: the cores shared out, at least 1."""
    return max(1, (os.cpu_count() or 1) // max(1, n_workers))


def plan_local(specs: Sequence[TaskSpec], workers: int | None = None,
               memory: int | None = None) -> tuple[int, int, str]:
    """(workers, memory limit per worker, why): the LocalCluster for `specs` (module docstring); `memory`
    (``--worker-memory``) fixes the limit per worker instead of sharing out 80 % of the available memory."""
    cores = os.cpu_count() or 1
    avail = available_memory()
    need = max([task_memory(s.weight_bytes) for s in specs] or [BASE_MEMORY])
    budget = int(0.8 * avail)
    fit = max(1, budget // need)
    n = workers if workers is not None else max(1, min(cores, max(1, len(specs)), fit))
    limit = max(need, budget // n) if workers is None else budget // n
    t = torch_threads(n)
    why = (f"{n} worker(s) of 1 task at a time, torch on {t} thread(s) each: {cores} core(s), {amount(avail)} "
           f"available, the largest task needs ≈{amount(need)} (one model per worker), so {fit} fit in 80 % of "
           f"it; memory limit {amount(limit)} per worker")
    if workers is not None:
        why = (f"{n} worker(s) of 1 task at a time (--workers), torch on {t} thread(s) each, memory limit "
               f"{amount(limit)} per worker")
    if memory is not None:
        n = workers if workers is not None else max(1, min(cores, max(1, len(specs)), budget // memory))
        limit, t = memory, torch_threads(n)
        why = (f"{n} worker(s) of 1 task at a time, torch on {t} thread(s) each, memory limit {amount(limit)} per "
               f"worker (--worker-memory); the largest task needs ≈{amount(need)}" +
               (" — more than the limit: a worker over it is restarted and its task reported as killed for memory"
                if need > limit else ""))
    return n, limit, why


def _quiet() -> None:
    for name in ("distributed", "distributed.worker", "distributed.scheduler", "distributed.nanny",
                 "distributed.core", "distributed.comm", "distributed.batched", "distributed.client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def start_local(n_workers: int, memory_limit: int):
    """An embedded LocalCluster (worker processes, one Dask thread each, torch on :func:`torch_threads`, no
    dashboard) and its Client."""
    import dask
    from distributed import Client, LocalCluster

    _quiet()
    t = str(torch_threads(n_workers))                  # read by torch when the worker imports it
    env = {"OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t}
    with dask.config.set({"distributed.scheduler.allowed-failures": 1,
                          # a worker holds one model and returns a small JSON: nothing to spill, and pausing a
                          # worker whose freed model's pages the OS has not taken back would stall the sweep;
                          # the nanny still terminates a worker over 95 % of its limit (reported as memory)
                          "distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
                          "distributed.worker.memory.pause": False,
                          "distributed.worker.profile.enabled": False,    # its 10 ms sampling thread costs CPU
                          "distributed.nanny.pre-spawn-environ": {
                              **dask.config.get("distributed.nanny.pre-spawn-environ", {}), **env}}):
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                               resources={"MEMORY": memory_limit}, dashboard_address=None,
                               silence_logs=logging.CRITICAL, host="127.0.0.1")
        client = Client(cluster)
    return client, cluster


def connect(address: str, timeout: float = 20.0):
    """A Client of the scheduler at `address`; one line when it cannot be reached in `timeout` seconds."""
    from distributed import Client

    _quiet()
    if "://" not in address:
        raise HeadscopeError(f"--scheduler: expected an address such as tcp://HOST:PORT, got {address!r}")
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        raise HeadscopeError(f"--scheduler {address}: cannot reach the Dask scheduler "
                             f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no answer'})") from None


class DaskExecutor:
    """Run tasks on a Dask cluster through `client`, yielding results as they complete."""

    def __init__(self, client, description: str = "dask"):
        self.client = client
        self.description = description

    def _memory_resources(self) -> int | None:
        """The smallest … largest ``MEMORY`` resource when every worker declares one, else None."""
        workers = self.client.scheduler_info().get("workers", {}).values()
        mems = [w.get("resources", {}).get("MEMORY") for w in workers]
        return max(mems) if mems and all(isinstance(m, (int, float)) for m in mems) else None

    def memory_deaths(self) -> dict[str, int]:
        """worker address → its RSS when its nanny terminated it for exceeding its memory limit (Dask's
        ``worker-restart-memory`` events)."""
        try:
            events = self.client.get_events("worker-restart-memory")
        except Exception:                   # noqa: BLE001 — a scheduler without the event log: none known
            return {}
        return {e["worker"]: int(e.get("rss") or 0) for _, e in events if isinstance(e, dict) and "worker" in e}

    def death(self, spec: TaskSpec, exc) -> str:
        """One line for a task whose workers all died running it (``KilledWorker``): for memory when the
        last one's nanny says so (with its RSS and limit), else lost. The events may trail the death a little."""
        import time

        worker = getattr(exc, "last_worker", None)
        address, limit = getattr(worker, "address", None), getattr(worker, "memory_limit", None)
        tries = getattr(exc, "allowed_failures", 0) + 1
        need = amount(task_memory(spec.weight_bytes))
        deadline = time.monotonic() + 3.0
        while True:
            rss = self.memory_deaths().get(address)
            if rss is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if rss is not None:
            of = f" of its {amount(limit)} limit" if limit else ""
            return (f"{spec.label}: killed for memory — its worker exceeded its memory limit (RSS {amount(rss)}{of}) "
                    f"each of the {tries} times it ran; the task was estimated at ≈{need}; the rest of the sweep "
                    "went on")
        return (f"{spec.label}: lost — the worker running it died each of the {tries} times it ran, not for its "
                "memory limit as far as its nanny saw (killed, e.g. by the system's out-of-memory killer, or its "
                "machine lost); the rest of the sweep went on")

    def run(self, specs: Sequence[TaskSpec]) -> Iterator[tuple[int, dict]]:
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        from .task import run_task

        if not specs:
            return
        largest = self._memory_resources()
        futures, where = [], {}
        for j, spec in enumerate(specs):
            resources = None if largest is None else {"MEMORY": min(task_memory(spec.weight_bytes), largest)}
            f = self.client.submit(run_task, spec, key=f"headscope-task-{j}-{spec.key[:16]}", pure=False,
                                   resources=resources)
            futures.append(f)
            where[f.key] = j
        try:
            for f in as_completed(futures, loop=self.client.loop):
                j = where[f.key]
                spec = specs[j]
                if f.status == "finished":
                    res = f.result()
                else:
                    exc = f.exception()
                    if isinstance(exc, KilledWorker):
                        res = {"error": self.death(spec, exc)}
                    else:
                        msg = str(exc).splitlines()[0] if str(exc) else ""
                        res = {"error": f"{spec.label}: {type(exc).__name__}" + (f": {msg}" if msg else "")}
                f.release()
                yield j, res
        finally:
            self.client.cancel([f for f in futures if not f.done()])
