"""A sweep task whose allocation is refused is one line with its model and revision (serial runs too);
any other error of the task is not mistaken for memory."""

from __future__ import annotations

import pytest

from headscope.sweep.engine import TaskSpec
from headscope.sweep.task import run_task

SPEC = TaskSpec(model="org/model", revision="step3000", commit=None, analysis="composition", options={},
                dtype="float32", device="cpu", file="tasks/x.json", key="0" * 64)


def _raise(exc):
    def load(spec):
        raise exc
    return load


@pytest.mark.parametrize("exc", [MemoryError(), RuntimeError(
    "[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
    "allocate 80000000000 bytes. Error code 12 (Cannot allocate memory)")])
def test_a_refused_allocation_is_one_line_with_model_and_revision(exc):
    res = run_task(SPEC, load=_raise(exc))
    assert set(res) == {"error", "seconds"}
    assert res["error"].startswith("org/model@step3000 composition: out of memory — an allocation was refused")
    assert "\n" not in res["error"]


def test_another_runtime_error_is_not_called_memory():
    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_task(SPEC, load=_raise(RuntimeError("shape mismatch")))
