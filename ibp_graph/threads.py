"""One thread policy for every numba kernel: a fork-safe threading layer, serial inside workers.

DataLoader workers are forked, and numba's GNU OpenMP layer terminates a child forked
after it ran. Nothing is set on import: :func:`use_forksafe_layer` asks numba for a
fork-safe layer (TBB, or its own workqueue) unless the user chose one
(``NUMBA_THREADING_LAYER`` or ``numba.config.THREADING_LAYER``). Every loader calls it
when it starts, and :func:`use_parallel` calls it before this package's first parallel
kernel, so the layer is chosen before numba starts its threads. Inside a DataLoader
worker, kernels run serially: each worker is meant to own one core.
"""
from __future__ import annotations

import os

import numba


def use_forksafe_layer() -> bool:
    """Ask numba for a fork-safe threading layer unless the user chose one; True if it did.

    Takes effect only before numba's first parallel kernel (numba fixes its layer then).
    """
    if "NUMBA_THREADING_LAYER" in os.environ or numba.config.THREADING_LAYER != "default":
        return False
    numba.config.THREADING_LAYER = "forksafe"
    return True


def in_worker() -> bool:
    """Whether this process is a torch DataLoader worker."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return get_worker_info() is not None


def use_parallel(n_items: int, min_items: int) -> bool:
    """Parallel kernels pay off: enough work, more than one numba thread, not in a worker.

    numba's threading layer is made fork-safe first (use_forksafe_layer): asking numba for
    its thread count already starts its threads, and fixes the layer.
    """
    use_forksafe_layer()
    return n_items >= min_items and numba.get_num_threads() > 1 and not in_worker()
