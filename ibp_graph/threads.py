"""One thread policy for every numba kernel: a fork-safe threading layer, serial inside workers.

DataLoader workers are forked, and numba's GNU OpenMP layer terminates a child forked
after it ran. Unless the user chose a layer (NUMBA_THREADING_LAYER), numba is told to
use a fork-safe one (TBB, or its own workqueue). Inside a DataLoader worker, kernels run
serially: each worker is meant to own one core.
"""
from __future__ import annotations

import os

import numba

if "NUMBA_THREADING_LAYER" not in os.environ and numba.config.THREADING_LAYER == "default":
    numba.config.THREADING_LAYER = "forksafe"


def in_worker() -> bool:
    """Whether this process is a torch DataLoader worker."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return get_worker_info() is not None


def use_parallel(n_items: int, min_items: int) -> bool:
    """Parallel kernels pay off: enough work, more than one numba thread, not in a worker."""
    return n_items >= min_items and numba.get_num_threads() > 1 and not in_worker()
