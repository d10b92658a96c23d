"""Leiden in a child process (headscope.semantic._leiden): the same membership as in this process, a
fallback when no child can start or one fails, and no child left behind."""

from __future__ import annotations

import os
import sys

import igraph
import leidenalg
import numpy as np
import pytest
import torch

from headscope.semantic import _leiden, clustering


@pytest.fixture(autouse=True)
def _two_cpus(monkeypatch):
    """Children whatever this machine's CPUs (on one, start() keeps every job here)."""
    monkeypatch.setattr(_leiden, "_cpus", lambda: 2)


def _random_edges(n=2200, k=5, seed=4):
    """A random undirected weighted graph as knn_edges gives it: [E 2] int64 (lo < hi, sorted), [E] float64."""
    rng = np.random.default_rng(seed)
    a = np.repeat(np.arange(n), k)
    b = (a + 1 + rng.integers(0, n - 1, a.size)) % n                   # never a itself
    key = np.unique(np.minimum(a, b) * n + np.maximum(a, b))
    return np.stack([key // n, key % n], 1), rng.random(key.size) * rng.choice([1e-3, 1.0, 7.0], key.size)


def _by_hand_rb(n, edges, w, seed=0, tol=clustering.LEIDEN_TOL):
    """leidenalg on a graph built here from plain lists, stopped by the 1 % rule (test_leiden_stop)."""
    g = igraph.Graph(n=n, edges=[tuple(e) for e in edges.tolist()])
    g.es["weight"] = w.tolist()
    part = leidenalg.RBConfigurationVertexPartition(g, weights="weight", resolution_parameter=1.0)
    opt = leidenalg.Optimiser()
    opt.set_rng_seed(seed)
    while opt.optimise_partition(part, n_iterations=1) > tol * abs(part.quality()):
        pass
    return np.asarray(part.membership)


def _gone(pid: int) -> bool:
    """Whether child `pid` has been waited for (no zombie left)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.mark.parametrize("seed", [0, 5])
def test_child_gives_the_in_process_membership_on_a_random_graph(seed):
    n = 2200
    edges, w = _random_edges(n, seed=seed + 4)
    assert n + len(w) >= _leiden.CHILD_MIN_SIZE
    job = clustering.leiden_job(n, edges, w, resolution=1.0, seed=seed)
    assert job.in_child
    pid = job._proc.pid
    got = np.asarray(job.result())
    here = clustering.leiden(clustering.to_graph(n, edges, w), seed=seed)
    assert np.array_equal(got, here) and np.array_equal(got, _by_hand_rb(n, edges, w, seed))
    assert 1 < len(set(got.tolist())) < n                               # a real partition, not a trivial one
    assert job.by_child and _gone(pid) and job.result() is job.result()


def test_child_gives_the_in_process_membership_with_the_authors_graph():
    torch.manual_seed(0)
    K, Q = torch.randn(1500, 24, dtype=torch.float64), torch.randn(1500, 24, dtype=torch.float64)
    edges, w = clustering.authors_edges(K, Q, 4)
    job = clustering.leiden_job(1500, edges, w, method="modularity", directed=True, max_comm_size=64, seed=3)
    assert job.in_child
    got = np.asarray(job.result())
    assert job.by_child
    here = clustering.leiden_modularity(clustering.authors_graph(K, Q, 4), max_comm_size=64, seed=3)
    assert np.array_equal(got, here)
    assert np.bincount(got).max() <= 64 and len(set(got.tolist())) > 1


def test_graph_from_arrays_is_the_graph_from_lists():
    n = 2200
    edges, w = _random_edges(n)
    g = clustering.to_graph(n, edges, w)
    assert g.get_edgelist() == [tuple(e) for e in edges.tolist()] and g.es["weight"] == w.tolist()
    assert not g.is_directed() and clustering.to_graph(n, edges, w, directed=True).is_directed()


@pytest.mark.parametrize("executable", ["/nonexistent/python", "", sys.executable + "-not-there"])
def test_no_child_can_start_the_job_runs_here(monkeypatch, executable):
    n = 2200
    edges, w = _random_edges(n)
    monkeypatch.setattr(sys, "executable", executable)
    job = clustering.leiden_job(n, edges, w, seed=0)
    assert not job.in_child
    assert np.array_equal(job.result(), _by_hand_rb(n, edges, w)) and not job.by_child


def test_a_frozen_application_runs_the_job_here(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)           # sys.executable is the application
    n = 2200
    edges, w = _random_edges(n)
    job = clustering.leiden_job(n, edges, w, seed=0)
    assert not job.in_child and np.array_equal(job.result(), _by_hand_rb(n, edges, w))


@pytest.mark.parametrize("argv0", ["/bin/false", "/bin/true"])
def test_a_failing_child_leaves_the_job_to_this_process(monkeypatch, argv0):
    # /bin/false exits 1, /bin/true exits 0 with no answer: neither membership is taken
    if not os.path.exists(argv0):
        pytest.skip(f"no {argv0}")
    n = 2200
    edges, w = _random_edges(n)
    monkeypatch.setattr(sys, "executable", argv0)
    job = clustering.leiden_job(n, edges, w, seed=0)
    assert job.in_child
    pid = job._proc.pid
    assert np.array_equal(job.result(), _by_hand_rb(n, edges, w))
    assert not job.by_child and _gone(pid)


def test_cancel_stops_and_waits_for_the_child():
    n = 2200
    edges, w = _random_edges(n)
    job = clustering.leiden_job(n, edges, w, seed=0)
    pid = job._proc.pid
    job.cancel()
    assert _gone(pid)
    job.cancel()                                                        # twice: nothing left to do


def test_a_child_started_ahead_takes_the_job_or_is_stopped():
    n = 2200
    edges, w = _random_edges(n)
    assert _leiden.child_for(n) is None                                # n < CHILD_MIN_SIZE: its graph may be small
    ready = _leiden.child_for(_leiden.CHILD_MIN_SIZE)
    assert ready is not None
    job = clustering.leiden_job(n, edges, w, seed=1, child=ready)
    assert job.in_child and job._proc is ready.proc
    assert np.array_equal(job.result(), _by_hand_rb(n, edges, w, seed=1)) and job.by_child and _gone(ready.proc.pid)
    ready = _leiden.child_for(5000)                                    # its graph has no edge: stopped, here
    none = np.zeros((0, 2), dtype=np.int64), np.zeros(0)
    job = clustering.leiden_job(5000, *none, child=ready)
    assert not job.in_child and _gone(ready.proc.pid) and job.result() == list(range(5000))
    ready = _leiden.child_for(5000)
    ready.stop()
    assert _gone(ready.proc.pid)


def test_small_or_edgeless_graphs_stay_here():
    edges, w = _random_edges(300, k=2)
    assert not clustering.leiden_job(300, edges, w).in_child           # n + E < CHILD_MIN_SIZE
    none = np.zeros((0, 2), dtype=np.int64), np.zeros(0)
    job = clustering.leiden_job(5000, *none)
    assert not job.in_child and job.result() == list(range(5000))      # no edge: every node alone
    big = _random_edges(2200)
    assert not clustering.leiden_job(2200, *big, child=False).in_child
    assert _leiden._cpus() >= 1


def test_job_bytes_round_trip_and_refuse_bad_sizes():
    edges, w = _random_edges(300, k=2)
    data = _leiden.encode("rb", {"seed": 1}, 300, edges.astype(np.int64).tobytes(), w.tobytes(), False)
    assert _leiden.decode(_leiden.solve(data)) == clustering.leiden(clustering.to_graph(300, edges, w), seed=1).tolist()
    with pytest.raises(ValueError):
        _leiden.encode("rb", {}, 300, edges.astype(np.int64).tobytes()[:-8], w.tobytes(), False)
    with pytest.raises(ValueError):
        _leiden.encode("louvain", {}, 300, edges.astype(np.int64).tobytes(), w.tobytes(), False)


def test_one_cpu_no_child(monkeypatch):
    monkeypatch.setattr(_leiden, "_cpus", lambda: 1)
    n = 2200
    edges, w = _random_edges(n)
    job = clustering.leiden_job(n, edges, w, seed=0)
    assert not job.in_child and np.array_equal(job.result(), _by_hand_rb(n, edges, w))


def test_the_child_writes_nothing_where_it_runs(tmp_path, monkeypatch):
    # read-only working directory (a non-root user could write nothing there; the child does not try)
    cwd = tmp_path / "ro"
    cwd.mkdir()
    cwd.chmod(0o555)
    monkeypatch.chdir(cwd)
    n = 2200
    edges, w = _random_edges(n)
    job = clustering.leiden_job(n, edges, w, seed=2)
    assert np.array_equal(job.result(), _by_hand_rb(n, edges, w, seed=2)) and job.by_child
    assert list(cwd.iterdir()) == []
    cwd.chmod(0o755)
