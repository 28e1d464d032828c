"""One thread policy for every numba kernel: a fork-safe threading layer, serial inside workers.

DataLoader workers are forked, and numba's GNU OpenMP layer terminates a child forked
after it ran. Nothing is set on import: :func:`use_forksafe_layer` asks numba for a
fork-safe layer (TBB, or its own workqueue) unless the user chose one
(``NUMBA_THREADING_LAYER`` or ``numba.config.THREADING_LAYER``). Every loader calls it
when it starts, and :func:`use_parallel` calls it before this package's first parallel
kernel, so the layer is chosen before numba starts its threads. Inside a DataLoader
worker, kernels run serially: each worker is meant to own one core.

The workqueue layer (numba's own, the fork-safe one where TBB is not installed) is not
thread-safe: two Python threads launching parallel kernels at once abort the process
("Concurrent access has been detected"), as the sharded loaders' exchange thread and main
thread decoding side by side did. So one parallel kernel runs at a time in a process
(:func:`parallel_slot`), and a thread that finds one running runs the serial build instead
of waiting (the same results: every kernel's output is independent of its threads).

Other threads must not make a forked worker hang either: :class:`CollectiveTensors` keeps the
tensors of gloo's collectives referenced from Python, so that gloo's own threads never enter Python.
"""
from __future__ import annotations

import collections
import contextlib
import os
import threading
from typing import Iterator

import numba

#: held while a parallel kernel of this package runs (see the module docstring).
_PARALLEL = threading.Lock()
#: `as_worker` sets `serial` on it: this thread's kernels run as a DataLoader worker's.
_THREAD = threading.local()


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


@contextlib.contextmanager
def as_worker() -> Iterator[None]:
    """This thread's kernels run as a DataLoader worker runs them (serially) until the block ends: a loader
    produces one batch so before its workers start, so that they inherit every kernel compiled (a worker that
    compiles one, or loads it from numba's cache, runs LLVM, which registers the code's unwind tables under a
    libgcc lock; a worker forked while another thread of its parent held that lock, e.g. a thread exiting,
    waits for it forever)."""
    before = getattr(_THREAD, "serial", False)
    _THREAD.serial = True
    try:
        yield
    finally:
        _THREAD.serial = before


@contextlib.contextmanager
def parallel_slot(wanted: bool = True) -> Iterator[bool]:
    """True, held until the block ends, when this thread `wanted` to and may launch a parallel kernel now;
    False while another thread of the process runs one (run the serial build then), or when not `wanted`."""
    free = wanted and _PARALLEL.acquire(blocking=False)
    try:
        yield free
    finally:
        if free:
            _PARALLEL.release()


def use_parallel(n_items: int, min_items: int) -> bool:
    """Parallel kernels pay off: enough work, more than one numba thread, not in a worker (nor `as_worker`).

    numba's threading layer is made fork-safe first (use_forksafe_layer): asking numba for
    its thread count already starts its threads, and fixes the layer.
    """
    use_forksafe_layer()
    return (n_items >= min_items and numba.get_num_threads() > 1 and not in_worker()
            and not getattr(_THREAD, "serial", False))


#: collectives whose tensors a CollectiveTensors holds (gloo runs two worker threads per process group:
#: once this many later collectives of the group completed, both have dropped their reference).
HELD_COLLECTIVES = 8


class CollectiveTensors:
    """The tensors of a process group's last `HELD_COLLECTIVES` collectives, kept alive in Python.

    gloo's worker thread drops its reference to a collective's tensors after the collective completed.
    Where that is a tensor's last reference and the tensor has a Python object (one made in Python and
    dropped there already), torch takes the GIL from that thread to free the object, and pybind11 makes the
    thread a Python thread state first: under CPython's thread-list lock, without the GIL. A process forked
    at that moment (a DataLoader worker starting at a loader's first batch) starts with that lock held and,
    before CPython 3.11.8 (gh-112275, this project's environment has 3.11.7), blocks on it before running a
    line of Python: the loader then waits forever for its first batch and the other ranks time out in the
    row exchange. Seen under the 2-rank sharded tests (a worker started right after an epoch's last
    exchange). Holding the tensors until later collectives completed makes a Python thread, with the GIL,
    drop the last reference instead."""

    def __init__(self, held: int = HELD_COLLECTIVES):
        self._recent: collections.deque = collections.deque(maxlen=held)

    def hold(self, *tensors) -> None:
        """Keep these tensors (one collective's inputs and outputs) until `held` later calls."""
        self._recent.append(tensors)
