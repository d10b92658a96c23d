"""Dask distributed as the sweep's engine: an embedded LocalCluster sized from cores and memory, or a scheduler.

Sizing (:func:`plan_local`): every worker has one thread, so it runs one task — holds one model
— at a time. A task needs about :func:`task_memory` of its checkpoint's weight files (the
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


def plan_local(specs: Sequence[TaskSpec], workers: int | None = None) -> tuple[int, int, str]:
    """(workers, memory limit per worker, why): the LocalCluster for `specs` (module docstring)."""
    cores = os.cpu_count() or 1
    avail = available_memory()
    need = max([task_memory(s.weight_bytes) for s in specs] or [BASE_MEMORY])
    budget = int(0.8 * avail)
    fit = max(1, budget // need)
    n = workers if workers is not None else max(1, min(cores, max(1, len(specs)), fit))
    limit = max(need, budget // n) if workers is None else budget // n
    why = (f"{n} worker(s) of 1 thread: {cores} core(s), {amount(avail)} available, the largest task needs "
           f"≈{amount(need)} (one model per worker), so {fit} fit in 80 % of it; "
           f"memory limit {amount(limit)} per worker")
    if workers is not None:
        why = f"{n} worker(s) of 1 thread (--workers), memory limit {amount(limit)} per worker"
    return n, limit, why


def _quiet() -> None:
    for name in ("distributed", "distributed.worker", "distributed.scheduler", "distributed.nanny",
                 "distributed.core", "distributed.comm", "distributed.batched", "distributed.client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def start_local(n_workers: int, memory_limit: int):
    """An embedded LocalCluster (worker processes, one thread each, no dashboard) and its Client."""
    import dask
    from distributed import Client, LocalCluster

    _quiet()
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
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
                        res = {"error": f"{spec.label}: the worker running it died (killed for exceeding its memory "
                                        f"limit, or lost) — needs ≈{amount(task_memory(spec.weight_bytes))}; "
                                        "the rest of the sweep went on"}
                    else:
                        msg = str(exc).splitlines()[0] if str(exc) else ""
                        res = {"error": f"{spec.label}: {type(exc).__name__}" + (f": {msg}" if msg else "")}
                f.release()
                yield j, res
        finally:
            self.client.cancel([f for f in futures if not f.done()])
