"""The process's memory as the kernel reports it: resident set size now and at its peak.

Linux: current RSS and the peak (``VmRSS``, ``VmHWM``) from ``/proc/self/status``; the
peak can be reset (``5`` written to ``/proc/self/clear_refs``) to measure one phase of a
run on its own. Elsewhere the peak is ``getrusage``'s ``ru_maxrss`` and the current RSS is
unknown (None). All figures in MB (2**20 bytes).

Only benchmarks reset the peak: a reset also lowers what ``/usr/bin/time`` or a parent's
``wait4`` later report for the whole process, so library code never does it.
"""

from __future__ import annotations

import resource
import sys

_STATUS = "/proc/self/status"
_MEMINFO = "/proc/meminfo"
#: share of the available memory one chunk of a vocabulary-sized product may take
CHUNK_SHARE = 0.25


def _status_mb(field: str) -> float | None:
    try:
        with open(_STATUS, encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024                      # kB → MB
    except OSError:
        return None
    return None


def available_bytes() -> int | None:
    """Memory the kernel can give this process without swapping (``MemAvailable``); None if unknown."""
    try:
        with open(_MEMINFO, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024                      # kB → bytes
    except (OSError, ValueError):
        return None
    return None


def rows_that_fit(row_bytes: int, rows: int) -> int:
    """`rows`, or fewer when `rows` rows of `row_bytes` each would take more than
    :data:`CHUNK_SHARE` of the available memory (at least one row).

    Chunks only ever shrink below the caller's default, so results on a machine with
    memory to spare do not depend on how much it has."""
    avail = available_bytes()
    if avail is None or row_bytes <= 0:
        return rows
    return max(1, min(rows, int(avail * CHUNK_SHARE) // row_bytes))


def rss_mb() -> float | None:
    """Resident set size now (None where /proc is unavailable)."""
    return _status_mb("VmRSS")


def peak_rss_mb() -> float:
    """Peak resident set size of this process (since its start or the last :func:`reset_peak`)."""
    hwm = _status_mb("VmHWM")
    if hwm is not None:
        return hwm
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 2**20 if sys.platform == "darwin" else r / 1024                 # bytes on macOS, kB elsewhere


def reset_peak() -> bool:
    """Reset the peak RSS to the current RSS (Linux ≥ 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False
