"""One sweep task, as a worker runs it: load (model, commit), run the analysis, return its JSON text.

Pure given the :class:`~headscope.sweep.engine.TaskSpec`: the model is loaded at the resolved
commit (not the branch name, which may move), the analysis is seeded, and the JSON carries no
time, host or path of the worker — the same spec gives the same bytes on any worker. The text is
the analysis's usual JSON plus ``revision_run`` (command, model, revision, step, commit, options,
key). A bad input or a model that fails to load is a :class:`HeadscopeError` (one line).
"""

from __future__ import annotations

import gc
import json
import re
import resource
import sys
import time
from typing import Callable, Iterator, Sequence

from .._errors import HeadscopeError
from .._json import dumps
from ..maps.revisions import training_step
from .analyses import kind
from .engine import TaskSpec

#: torch's messages for a refused CPU / GPU allocation
_OOM_RE = re.compile(r"can't allocate memory|not enough memory|out of memory", re.IGNORECASE)


def task_json(spec: TaskSpec, model) -> str:
    """The task's JSON text for a loaded `model` (what :func:`run_task` returns)."""
    res = kind(spec.analysis).execute(model, spec.options)
    doc = json.loads(dumps(res.to_dict()))
    del res
    doc["revision_run"] = {"command": spec.analysis, "model": spec.model, "revision": spec.revision,
                           "step": None if spec.revision is None else training_step(spec.revision),
                           "commit": spec.commit, "options": spec.options, "key": spec.key}
    return dumps(doc)


def load_spec(spec: TaskSpec):
    """The model of `spec`, at its commit when known (else its revision name)."""
    import torch

    from ..core.entry import load

    dtypes = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
              "float16": torch.float16}
    return load(spec.model, device=spec.device, dtype=dtypes[spec.dtype],
                revision=spec.commit if spec.commit is not None else spec.revision)


def run_task(spec: TaskSpec, load=None) -> dict:
    """Run `spec` here (`load`: spec → model, default :func:`load_spec`): {"json": text, "seconds": wall time,
    "cpu_seconds": this process's CPU time over it (all threads), "threads": torch's intra-op threads, "peak_rss":
    this process's peak RSS in bytes}. None of these is in the JSON (determinism).

    Errors the user can act on come back as {"error": one line} (the sweep marks the cell and
    goes on), an allocation refused for memory too (one line naming the model and revision);
    anything else propagates (a bug: the sweep reports it as the task's failure).
    """
    import torch

    t0, c0 = time.perf_counter(), time.process_time()
    try:
        model = (load or load_spec)(spec)
        text = task_json(spec, model)
    except HeadscopeError as e:
        return {"error": str(e), "seconds": time.perf_counter() - t0}
    except (MemoryError, RuntimeError) as e:             # an allocation refused (torch: a RuntimeError)
        if not isinstance(e, MemoryError) and not _OOM_RE.search(str(e)):
            raise
        return {"error": f"{spec.label}: out of memory — an allocation was refused in the task "
                         f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else 'no message'}); "
                         "the rest of the sweep went on", "seconds": time.perf_counter() - t0}
    finally:
        model = None
        gc.collect()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return {"json": text, "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
            "threads": torch.get_num_threads(), "peak_rss": rss}


class SerialExecutor:
    """Run each task in this process, in order (what ``--revisions`` does by default)."""

    description = "serial, in this process"

    def __init__(self, load: Callable[[TaskSpec], object] | None = None):
        self.load = load

    def run(self, specs: Sequence[TaskSpec]) -> Iterator[tuple[int, dict]]:
        """Yield (position, :func:`run_task`'s dict) as each task ends."""
        for i, spec in enumerate(specs):
            yield i, run_task(spec, self.load)
