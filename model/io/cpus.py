"""How many CPUs this process may use: the cores its affinity allows (a container's share),
not the host's count that `os.cpu_count()` gives (a GPU machine's 16 cores of a larger host)."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
