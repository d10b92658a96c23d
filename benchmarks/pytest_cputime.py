"""A pytest plugin that measures the suite: CPU seconds (user + system, of the process and of the
children it waited for) and wall seconds per test, appended as ``cpu<TAB>wall<TAB>test id`` to
``$CPUTIME_OUT`` (default ``pytest-cputime.tsv``) when the session ends.

CPU seconds stay meaningful on a shared machine, where wall times vary with the load; a session
fixture's cost is charged to the first test that uses it.

  PYTHONPATH=benchmarks .venv/bin/python -m pytest tests/integration/test_report.py -p pytest_cputime
  sort -rn pytest-cputime.tsv | head
"""

from __future__ import annotations

import os
import resource
import time

import pytest

_rows: dict[str, tuple[float, float]] = {}


def _cpu() -> float:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    c0, t0 = _cpu(), time.perf_counter()
    yield
    _rows[item.nodeid] = (_cpu() - c0, time.perf_counter() - t0)


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ.get("CPUTIME_OUT", "pytest-cputime.tsv"), "a", encoding="utf-8") as f:
        for test, (cpu, wall) in _rows.items():
            f.write(f"{cpu:.2f}\t{wall:.2f}\t{test}\n")
