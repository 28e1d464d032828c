"""The lifetime checks both front-ends' tests run: a dropped loader is freed by reference counting
alone, one freed in a cycle stops its workers at once, and a script exiting with iterators open is quiet.

A loader in a reference cycle is left to the cyclic collector, which closes the multiprocessing
queues of its persistent workers before the iterator's shutdown asks them to stop: each worker then
waits out torch's 5 s join timeout. The kernels are compiled first: a numba compile keeps the frames
of its callers (the constructor's, holding the loader) in a cycle, so the first loader of a process
with a cold kernel cache is freed by the cyclic collector."""
import gc
import time
import weakref
from typing import Callable

from tests.faults.isolated import expect_clean_exit, run_python


def _freed(ref: weakref.ref, wait: float = 5.0) -> bool:
    # a decode thread may hold a frame for a moment after its epoch was dropped: give it that moment
    end = time.monotonic() + wait
    while ref() is not None and time.monotonic() < end:
        time.sleep(0.01)
    return ref() is None


def check_freed_by_refcount(make: Callable, num_workers: int) -> None:
    """`make(num_workers=, persistent_workers=)` builds a loader; an epoch left half-way and a whole
    one later, the loader dropped with the cyclic collector off is freed, its workers gone within 4 s."""
    warm = make(num_workers=0)
    sum(1 for _ in warm)
    del warm
    gc.collect()
    gc.disable()
    try:
        loader = make(num_workers=num_workers, persistent_workers=num_workers > 0)
        it = iter(loader)
        next(it)
        del it  # an epoch left half-way, as a `break` leaves it
        assert sum(1 for _ in loader) == len(loader)  # a second epoch (the same persistent workers)
        ref = weakref.ref(loader)
        workers = list(getattr(getattr(loader, "_iterator", None), "_workers", None) or [])
        assert len(workers) == num_workers
        start = time.monotonic()
        del loader
        assert _freed(ref), "the loader is kept alive by a reference cycle"
        for w in workers:
            w.join(timeout=10)
        assert not any(w.is_alive() for w in workers)
        assert time.monotonic() - start < 4.0  # not torch's 5 s join timeout per worker
    finally:
        gc.enable()


def check_workers_stop_when_freed_in_a_cycle(make: Callable) -> None:
    """A loader with 2 persistent workers in a user's reference cycle, dropped: the collection that frees
    it stops its workers at once (not after torch's 5 s join timeout each)."""
    loader = make(num_workers=2, persistent_workers=True)
    assert sum(1 for _ in loader) == len(loader)
    workers = list(loader._iterator._workers)
    assert len(workers) == 2 and all(w.is_alive() for w in workers)
    loader.cycle = [loader]  # e.g. a training object holding the loader, and held by it
    ref = weakref.ref(loader)
    del loader
    start = time.monotonic()
    gc.collect()
    assert ref() is None
    for w in workers:
        w.join(timeout=10)
    assert not any(w.is_alive() for w in workers)
    assert time.monotonic() - start < 4.0


def check_exit_is_quiet(script: str) -> None:
    """`script` (which leaves loaders' iterators open, half-way through an epoch, with and without
    workers) exits 0 and prints no 'Exception ignored' from generators closed at interpreter exit."""
    done = run_python(script, timeout=300)
    assert "exiting" in expect_clean_exit(done)
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
