"""One torch thread for a block of work, the thread count restored after it (exceptions included).

Two kinds of work run faster on one thread than on two on this project's machines: decompositions
of many small matrices (multi-threaded LAPACK synchronises more than it computes) and memory-bound
elementwise passes over weights (two threads contend for the same memory bandwidth and spend up to 5×
the CPU). Thread count never changes these operations' results here: tests compare the bits.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from typing import Callable, TypeVar

import torch

T = TypeVar("T")


@contextlib.contextmanager
def one_thread():
    """Run the body with ``torch.set_num_threads(1)``; restore the previous count on exit. Already on
    one thread (nested, or inside :func:`split_heads`' workers): nothing is set, so workers running
    side by side never write the process-wide count."""
    old = torch.get_num_threads()
    if old == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def split_heads(fn: Callable[[slice], T], n: int) -> list[T]:
    """[fn(s) for s in contiguous slices of range(n)], one slice per torch thread the caller has, run
    side by side, each on one torch thread (:func:`one_thread`, set once here for all of them).

    For per-head work made of small decompositions and passes that run best on one thread: each
    head's figures are computed by the same operations whichever slice holds it, so the results are
    those of ``fn(slice(0, n))`` bit for bit; with t threads they take about 1/t of its wall time
    where t cores are free (torch releases the GIL inside its operations). One slice on one thread
    when the caller has one thread or there is one item."""
    parts = min(torch.get_num_threads(), n)
    with one_thread():
        if parts < 2:
            return [fn(slice(0, n))]
        cuts = [n * i // parts for i in range(parts + 1)]
        with concurrent.futures.ThreadPoolExecutor(parts) as pool:
            return list(pool.map(fn, [slice(a, b) for a, b in zip(cuts, cuts[1:])]))
