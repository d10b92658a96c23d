"""One torch thread for a block of work, the thread count restored after it (exceptions included).

Two kinds of work run faster on one thread than on two on this project's machines: decompositions
of many small matrices (multi-threaded LAPACK synchronises more than it computes) and memory-bound
elementwise passes over weights (two threads contend for the same memory bandwidth and spend up to 5×
the CPU). Thread count never changes these operations' results here: tests compare the bits.
"""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def one_thread():
    """Run the body with ``torch.set_num_threads(1)``; restore the previous count on exit."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)
