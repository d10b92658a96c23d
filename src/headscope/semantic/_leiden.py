"""Leiden partitions of a weighted token graph, in a child process beside the caller's other work.

leidenalg holds the GIL for a whole ``optimise_partition`` call, so a thread cannot run beside
it; a process can. :func:`start` hands a graph to a child process (``python -S -c`` running this
file: it imports only the standard library, igraph and leidenalg — not headscope, torch or
numpy, whose imports cost over a second — and starts in about 0.06 s CPU) and returns at once;
:meth:`Job.result` collects the membership when the caller needs it. Where no child can start,
or one fails, the same job runs in the calling process: one home for the graph
(:func:`graph`) and for each Leiden loop (:func:`leiden_rb`, :func:`leiden_modularity`), run by
:func:`solve` in either process, so the membership is the same either way (the same edges in
the same order, the same float64 weights, the same seed and stopping rule).

The job crosses a pipe as raw bytes (:func:`encode`): a header line (JSON: method, parameters,
n, directed, number of edges), the edges [E 2] as native int64 and the weights [E] as native
float64; the answer is the membership [n] as native int64. Nothing is written to disk, the child
reads and writes nothing but its pipes, and it is waited for (or killed and waited for,
:meth:`Job.cancel`), so none is left behind.

Small graphs stay in the calling process (:data:`CHILD_MIN_SIZE`).
"""

from __future__ import annotations

import json
import os
import sys
from array import array

#: Leiden (RB) stops when an iteration gains at most this share of the partition's quality (:func:`leiden_rb`)
LEIDEN_TOL = 1e-2

#: Graphs with fewer nodes + edges than this (or no edge) are partitioned in the calling process: measured
#: on random graphs (2 cores, 2026-12-05), Leiden costs about 25–40 µs per node and per edge (n = 2000 with
#: 2000 edges: 0.09 s CPU; n = 500 with 500: 0.02 s), a child's start about 0.06 s.
CHILD_MIN_SIZE = 3000

#: what ``python -S -c`` runs in the child: this file, with the caller's import path (the same igraph and
#: leidenalg) and without numpy (igraph's ``Graph()`` imports it only to test whether the edges are an array:
#: 0.05–0.1 s of the child's start)
_BOOT = """
import sys
path = sys.argv[1]
sys.path[:] = sys.argv[2:]
sys.modules["numpy"] = None
with open(path, "rb") as f:
    code = compile(f.read(), path, "exec")
exec(code, {"__name__": "__main__", "__file__": path})
"""


def graph(n: int, edges, weights, directed: bool):
    """igraph.Graph over nodes 0..n-1 with the edges given flat (a₀, b₀, a₁, b₁, …) and the float
    weights [E] as its ``weight`` attribute, edges in the order given."""
    import igraph

    it = iter(edges)
    g = igraph.Graph(n=n, edges=list(zip(it, it)), directed=directed)
    g.es["weight"] = list(weights)
    return g


def leiden_rb(g, *, resolution: float = 1.0, seed: int = 0, tol: float = LEIDEN_TOL) -> list[int]:
    """Leiden (RB configuration, seeded) iterated until an iteration's gain in quality is at most
    `tol` · |quality| (``tol=0``: until no iteration gains, leidenalg's ``n_iterations=-1``).

    Each iteration is leidenalg's own (the same random stream as ``find_partition``); only the
    stopping rule differs. On a graph with structure the first iteration finds it and the next
    gains nothing (the planted heads: gain 1.0 × quality, then 0), so the partition is the
    converged one; on a random graph (no structure to find) iterations go on moving a few nodes
    for tiny gains (the report's two deep dives of a random distilgpt2-shaped checkpoint, 5035
    nodes: 31 and 32 iterations to zero gain; the second gains 9 % and 5 %, the third 0.9 % and
    0.5 %, every later one < 0.4 %; the first costs 1.1 and 0.5 s CPU, each later one a quarter
    of that). At 1 % the rule stops both after 3 iterations (10 and 6 at 0.1 %, the partition
    within 3 % of the converged quality): 4.7 → 2.5 s CPU, on structure the same partition.
    """
    import leidenalg

    part = leidenalg.RBConfigurationVertexPartition(g, weights="weight", resolution_parameter=resolution)
    opt = leidenalg.Optimiser()
    opt.set_rng_seed(seed)
    while True:
        gain = opt.optimise_partition(part, n_iterations=1)
        if gain <= tol * abs(part.quality()):
            break
    return list(part.membership)


def leiden_modularity(g, *, max_comm_size: int = 512, seed: int = 0, n_iterations: int = 2) -> list[int]:
    """Leiden with modularity quality (directed if the graph is) and communities of at most
    `max_comm_size` nodes; `n_iterations` = 2 as leidenalg's ``find_partition`` default.

    leidenalg ≥ 0.11 enforces the size cap only with ``community_constraint_enforcement``
    > 0 (earlier versions, which the authors' unpinned code may have run, always did), so
    it is set here: the cap is a hard constraint either way.
    """
    import leidenalg

    part = leidenalg.ModularityVertexPartition(g, weights="weight")
    opt = leidenalg.Optimiser()
    opt.max_comm_size = max_comm_size
    if hasattr(opt, "community_constraint_enforcement"):
        opt.community_constraint_enforcement = 1
    opt.set_rng_seed(seed)
    opt.optimise_partition(part, n_iterations)
    return list(part.membership)


#: the Leiden loops a job may name
METHODS = {"rb": leiden_rb, "modularity": leiden_modularity}


def encode(method: str, params: dict, n: int, edges: bytes, weights: bytes, directed: bool) -> bytes:
    """A job as bytes: the header line, then `edges` (native int64 [E 2], row-major) and `weights`
    (native float64 [E])."""
    if method not in METHODS:
        raise ValueError(f"Leiden method: expected one of {sorted(METHODS)}, got {method!r}")
    n_edges = len(weights) // 8
    if len(weights) != 8 * n_edges or len(edges) != 16 * n_edges:
        raise ValueError(f"Leiden job: {len(edges)} bytes of edges and {len(weights)} of weights do not make "
                         f"[E 2] int64 and [E] float64")
    head = json.dumps({"method": method, "params": params, "n": n, "directed": directed, "n_edges": n_edges})
    return head.encode("ascii") + b"\n" + edges + weights


def solve(data: bytes) -> bytes:
    """The membership (native int64 [n]) of the job `data` (:func:`encode`): its graph built by
    :func:`graph`, partitioned by its method. What the child runs, and the calling process where no
    child does."""
    end = data.index(b"\n")
    head = json.loads(data[:end])
    n_edges = head["n_edges"]
    edges, weights = array("q"), array("d")
    edges.frombytes(data[end + 1:end + 1 + 16 * n_edges])
    weights.frombytes(data[end + 1 + 16 * n_edges:])
    if len(edges) != 2 * n_edges or len(weights) != n_edges:
        raise ValueError(f"Leiden job: expected {n_edges} edges and weights, got {len(edges) / 2:g} and {len(weights)}")
    g = graph(head["n"], edges, weights.tolist(), head["directed"])
    return array("q", METHODS[head["method"]](g, **head["params"])).tobytes()


def decode(membership: bytes) -> list[int]:
    """The membership [n] from :func:`solve`'s bytes."""
    out = array("q")
    out.frombytes(membership)
    return out.tolist()


class Child:
    """A child process waiting for its job: python, igraph and leidenalg start while the caller builds
    the graph (:func:`child_for`). Hand it to :func:`start`, or :meth:`stop` it."""

    def __init__(self, proc):
        self.proc = proc                   # subprocess.Popen

    @classmethod
    def spawn(cls) -> Child | None:
        """A new child, or None when none can start (no interpreter to run; a frozen application, whose
        executable is not python)."""
        import subprocess

        if getattr(sys, "frozen", False) or not sys.executable:
            return None
        try:
            return cls(subprocess.Popen([sys.executable, "-S", "-c", _BOOT, __file__, *sys.path],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        except (OSError, ValueError, subprocess.SubprocessError):
            return None

    def stop(self) -> None:
        """Kill the child if it still runs, close its pipes and wait for it."""
        _kill(self.proc)
        self.proc.communicate()


def _kill(proc) -> None:
    """Kill the process `proc` (subprocess.Popen) if it still runs."""
    if proc.poll() is None:
        try:
            proc.kill()
        except OSError:                    # it ended meanwhile
            pass


def child_for(n: int) -> Child | None:
    """A child started now for a graph over `n` nodes yet to be built, when such a graph with an edge will
    be partitioned in a child (:func:`start`: n ≥ :data:`CHILD_MIN_SIZE`, more than one CPU); else None."""
    return Child.spawn() if n >= CHILD_MIN_SIZE and _cpus() > 1 else None


class Job:
    """One graph's Leiden partition, computed by a child process from the moment it is made
    (:func:`start`), or in the calling process by :meth:`result` when no child runs it."""

    def __init__(self, data: bytes, n: int, child: Child | None):
        self._data, self._n = data, n
        self._proc = None                  # subprocess.Popen, while a child runs the job
        self._thread = None                # threading.Thread talking to it
        self._out: tuple[bytes, bytes] | None = None
        self._membership: list[int] | None = None
        self.in_child = child is not None  # whether a child process was given the job
        self.by_child = False              # whether the membership is the child's answer (set by result)
        if child is not None:
            import threading

            self._proc = child.proc
            # communicate writes the job and reads the answer (and waits for the child) without holding the
            # GIL while it blocks, so the caller goes on at once
            self._thread = threading.Thread(target=self._talk, name="headscope-leiden", daemon=True)
            self._thread.start()

    def _talk(self) -> None:
        try:
            self._out = self._proc.communicate(self._data)
        except BaseException:  # noqa: BLE001 - any failure leaves the job to the calling process
            self._out = None

    def result(self) -> list[int]:
        """The membership [n] (one int per node): the child's when it answered in full, else computed here."""
        if self._membership is None:
            out = None
            if self._proc is not None:
                self._thread.join()
                if self._out is not None and self._proc.returncode == 0 and len(self._out[0]) == 8 * self._n:
                    out, self.by_child = self._out[0], True
                self._proc = None
            self._membership = decode(out if out is not None else solve(self._data))
            self._data = b""
        return self._membership

    def cancel(self) -> None:
        """Stop the child, if one still runs, and wait for it (no result will be asked for)."""
        if self._proc is not None:
            _kill(self._proc)
            self._thread.join()                # its communicate() returns once the child is gone: waited for
            self._proc = None
        self._data = b""


def start(method: str, params: dict, n: int, edges: bytes, weights: bytes, *, directed: bool = False,
          child: bool | Child = True) -> Job:
    """Start the Leiden partition (`method` in :data:`METHODS` with keyword `params`) of the graph over
    nodes 0..n-1 with `edges` (native int64 [E 2]) and `weights` (native float64 [E]): in a child process
    when `child` (True: one started now; a :class:`Child` started ahead, :func:`child_for`), the graph has
    an edge and at least :data:`CHILD_MIN_SIZE` nodes + edges and this process may run on more than one
    CPU; else (and if the child fails) in this process when the result is asked for. A child given and
    not used is stopped."""
    data = encode(method, params, n, edges, weights, directed)
    n_edges = len(weights) // 8
    ready = child if isinstance(child, Child) else None
    if not (child is not False and n_edges > 0 and n + n_edges >= CHILD_MIN_SIZE and _cpus() > 1):
        if ready is not None:
            ready.stop()
        ready = None
    elif ready is None:
        ready = Child.spawn()
    return Job(data, n, ready)


def _cpus() -> int:
    """How many CPUs this process may run on: a child gains nothing where it is one (it would only take
    turns with its parent, after its start)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):      # not Linux
        return os.cpu_count() or 1


def _main() -> None:
    """The child: one job on stdin, its membership on stdout (igraph and leidenalg imported while the
    parent writes the job)."""
    import igraph  # noqa: F401
    import leidenalg  # noqa: F401

    data = sys.stdin.buffer.read()
    sys.stdout.buffer.write(solve(data))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    _main()
