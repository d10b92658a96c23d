"""The report's lanes (headscope.report.lanes): stages side by side on half the threads each, the
exclusive stages first and alone on all of them, requirements first, results handed back in the calling thread,
and an error raised only after the stages already running have finished (and been kept)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from headscope.report.lanes import Job, lanes_for, run_jobs


def _recorder(log: list, name: str, wait: threading.Barrier | None = None, fail: bool = False, pause: float = 0.0):
    def run():
        start = time.perf_counter()
        if wait is not None:
            wait.wait(timeout=20)         # both lanes inside at once, or BrokenBarrierError
        time.sleep(pause)
        if fail:
            raise ValueError(f"{name} failed")
        log.append({"name": name, "thread": threading.current_thread(), "threads": torch.get_num_threads(),
                    "start": start, "end": time.perf_counter()})
        return name.upper()
    return run


def _finished(finished: list):
    def finish(job, outcome):
        finished.append((job.name, outcome, threading.current_thread()))
    return finish


def test_lanes_for():
    assert lanes_for(1) == 1 and lanes_for(2) == 2 and lanes_for(16) == 2 and lanes_for(3) == 2
    assert lanes_for(2, 1) == 1 and lanes_for(1, 2) == 1 and lanes_for(8, 4) == 4
    with pytest.raises(ValueError, match="expected at least 1, got 0"):
        lanes_for(2, 0)


def test_one_lane_runs_in_order_in_the_calling_thread():
    log, finished = [], []
    jobs = [Job(n, _recorder(log, n), exclusive=(n == "b")) for n in "abc"]
    run_jobs(jobs, _finished(finished), lanes=1, threads=2)
    main = threading.current_thread()
    assert [r["name"] for r in log] == ["a", "b", "c"] and all(r["thread"] is main for r in log)
    assert finished == [("a", "A", main), ("b", "B", main), ("c", "C", main)]


def test_lanes_run_side_by_side_on_half_the_threads_and_the_exclusive_stage_alone():
    old = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        log, finished = [], []
        both = threading.Barrier(2)
        jobs = [Job("x", _recorder(log, "x", pause=0.05), exclusive=True),
                Job("a", _recorder(log, "a", wait=both)),
                Job("b", _recorder(log, "b", wait=both)),                 # a and b meet: side by side
                Job("c", _recorder(log, "c"), requires=("a",)),
                Job("d", _recorder(log, "d"), requires=("c", "b"))]
        run_jobs(jobs, _finished(finished), lanes=2, threads=4)
        assert torch.get_num_threads() == 4                               # the caller's count untouched
    finally:
        torch.set_num_threads(old)
    main = threading.current_thread()
    by = {r["name"]: r for r in log}
    assert set(by) == set("xabcd")
    for n in "abcd":                                                      # lanes: 4 // 2 threads, not the caller
        assert by[n]["threads"] == 2 and by[n]["thread"] is not main, n
    assert by["x"]["threads"] == 4 and by["x"]["thread"] is main
    assert by["c"]["start"] >= by["a"]["end"] and by["d"]["start"] >= max(by["c"]["end"], by["b"]["end"])
    assert all(by[n]["start"] >= by["x"]["end"] for n in "abcd")          # alone, first
    assert sorted(n for n, _, _ in finished) == sorted("xabcd")
    assert all(t is main and out == n.upper() for n, out, t in finished)  # handed back in the calling thread


def test_exclusive_stages_run_first_and_alone_unless_they_wait_for_a_requirement():
    log, finished = [], []
    jobs = [Job("a", _recorder(log, "a")), Job("x", _recorder(log, "x"), requires=("a",), exclusive=True),
            Job("y", _recorder(log, "y"), exclusive=True), Job("b", _recorder(log, "b"), requires=("y",))]
    run_jobs(jobs, _finished(finished), lanes=2, threads=2)
    by = {r["name"]: r for r in log}
    assert by["a"]["start"] >= by["y"]["end"] and by["b"]["start"] >= by["y"]["end"]    # y first: it waits for none
    assert by["x"]["start"] >= max(by["a"]["end"], by["b"]["end"])                       # x waits for a, then runs alone


def test_long_stages_start_first_and_the_short_ones_fill_the_lane_that_frees_first():
    """Longest first: the long stages take both lanes at once; the short ones, in stage order, go to the lane
    that ends first — and a long stage still waits for its requirement."""
    log, finished = [], []
    both = threading.Barrier(2)
    jobs = [Job("s1", _recorder(log, "s1")), Job("s2", _recorder(log, "s2")),
            Job("L1", _recorder(log, "L1", wait=both, pause=0.3), long=True),
            Job("L2", _recorder(log, "L2", wait=both), long=True),
            Job("L3", _recorder(log, "L3"), requires=("s1",), long=True)]
    run_jobs(jobs, _finished(finished), lanes=2, threads=2)
    by = {r["name"]: r for r in log}
    assert min(by["s1"]["start"], by["s2"]["start"]) >= max(by["L1"]["start"], by["L2"]["start"])
    assert by["s1"]["thread"] is by["L2"]["thread"] and by["s1"]["start"] < by["L1"]["end"]   # L2's lane, L1 runs
    assert by["L3"]["start"] >= by["s1"]["end"] and sorted(by) == ["L1", "L2", "L3", "s1", "s2"]


def test_an_error_stops_new_work_after_the_running_stages_finish():
    log, finished = [], []
    both = threading.Barrier(2)
    jobs = [Job("a", _recorder(log, "a", wait=both, fail=True)),
            Job("b", _recorder(log, "b", wait=both, pause=0.2)),          # still running when a fails
            Job("c", _recorder(log, "c"))]                                # never started
    with pytest.raises(ValueError, match="a failed"):
        run_jobs(jobs, _finished(finished), lanes=2, threads=2)
    assert [r["name"] for r in log] == ["b"] and [n for n, _, _ in finished] == ["b"]


def test_a_requirement_outside_the_run_is_refused():
    with pytest.raises(ValueError, match="job 'a' requires 'z', which is not a job of this run"):
        run_jobs([Job("a", lambda: None, requires=("z",))], lambda j, o: None, lanes=2, threads=2)


def test_a_lane_keeps_its_count_and_the_process_gets_the_callers_back():
    """torch sets a thread's count up lazily from the process-wide count (the last any thread set): a lane
    whose first operation comes after the caller changed its own count still runs on its share, and a
    thread started after the run starts on the caller's count."""
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        log, seen = [], []
        jobs = [Job("x", lambda: torch.set_num_threads(2) or "x", exclusive=True),   # the caller sets 2 again
                Job("a", _recorder(log, "a"), requires=("x",)), Job("b", _recorder(log, "b"), requires=("x",))]
        run_jobs(jobs, lambda j, o: None, lanes=2, threads=2)
        t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        t.start()
        t.join()
    finally:
        torch.set_num_threads(old)
    assert [r["threads"] for r in log] == [1, 1] and seen == [2]
