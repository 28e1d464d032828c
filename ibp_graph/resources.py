"""What this process can still use: memory (for checks made before large allocations)."""
from __future__ import annotations

import os

__all__ = ["available_memory"]


def available_memory() -> int:
    """Bytes this process can still allocate: the system's available memory (MemAvailable, else the
    free physical pages), lowered by an address-space limit (``ulimit -v``) and a cgroup v2 memory
    limit when set."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * page
        except (AttributeError, OSError, ValueError):
            avail = 2**63 - 1  # unknown: no limit we can see
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:
                avail = min(avail, soft - int(f.read().split()[0]) * page)
    except (ImportError, OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f, open("/sys/fs/cgroup/memory.current") as g:
            limit = f.read().strip()
            if limit != "max":
                avail = min(avail, int(limit) - int(g.read().strip()))
    except (OSError, ValueError):
        pass
    return max(int(avail), 0)
