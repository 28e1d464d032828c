"""New host buffers for gathered and decoded rows; the large ones are backed by huge pages.

A batch's gathered payload or decoded rows (hundreds of MB) are new memory each call, and
the kernel maps new memory one 4 KiB page at a time, on first touch: for a 434k-row batch
of 512-byte rows that is ~54k page faults, and they took more time than the decode itself
(IBP decode into new memory 1.7 GB/s per core, into a reused buffer 3.5). Buffers of at
least HUGE_PAGE_MIN_NBYTES are private anonymous mappings advised MADV_HUGEPAGE, so
transparent huge pages (Linux, ``enabled`` = ``always`` or ``madvise``) map them 2 MiB at a
time; elsewhere, and below that size, they come from numpy as before. Either way the
buffer is an ordinary, writable, C-contiguous array, unmapped when its last user drops it.

Huge pages still have to be zeroed by the kernel when first touched: EBP's decode of 100k rows on
two threads reached 2.85 GB/s into new memory and 4.36 into a reused buffer (``scripts/bench_decode.py``). A stage that makes
one batch after another keeps a :class:`BufferPool`: each ``empty`` reuses the pages of an
earlier buffer that nothing in the process uses any more.
"""
from __future__ import annotations

import math
import mmap
import sys
import threading
from typing import Sequence

import numpy as np
import torch

from .dtypes import itemsize

#: buffers from this size on are advised huge pages (a few 2 MiB pages; smaller ones gain little).
HUGE_PAGE_MIN_NBYTES = 4 << 20
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)
_MAP_PRIVATE_ANONYMOUS = (getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)) \
    if hasattr(mmap, "MAP_ANONYMOUS") else None


def empty_bytes(nbytes: int) -> np.ndarray:
    """A new uninitialised 1-d uint8 array of nbytes bytes (huge pages from HUGE_PAGE_MIN_NBYTES on)."""
    if type(nbytes) is not int and not isinstance(nbytes, np.integer) or nbytes < 0:
        raise ValueError(f"nbytes={nbytes!r} is not accepted; it must be an integer >= 0")
    nbytes = int(nbytes)
    if nbytes < HUGE_PAGE_MIN_NBYTES or _MADV_HUGEPAGE is None or _MAP_PRIVATE_ANONYMOUS is None:
        return np.empty(nbytes, dtype=np.uint8)
    # private, not mmap's default MAP_SHARED: shared anonymous memory is shmem, whose huge pages
    # follow another switch (shmem_enabled, usually never) and which fork would not copy on write
    buf = mmap.mmap(-1, nbytes, flags=_MAP_PRIVATE_ANONYMOUS)
    try:
        buf.madvise(_MADV_HUGEPAGE)
    except OSError:  # a kernel without THP refuses the advice: the buffer is still good
        pass
    return np.frombuffer(buf, dtype=np.uint8)


def empty_host(shape: Sequence[int], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """A new uninitialised contiguous CPU tensor (huge pages from HUGE_PAGE_MIN_NBYTES on); the
    signature of ``torch.empty(shape, dtype=...)``, so it serves as an `empty` argument."""
    shape = tuple(int(s) for s in shape)
    nbytes = math.prod(shape) * itemsize(dtype)
    if nbytes < HUGE_PAGE_MIN_NBYTES:
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(empty_bytes(nbytes)).view(dtype).view(shape)


def use_count(storage: torch.UntypedStorage) -> int:
    """How many owners (tensors, storage objects) share `storage`'s memory in this process."""
    return torch._C._storage_Use_Count(storage._cdata)


def python_refs(storage: torch.UntypedStorage) -> int:
    """References to `storage`'s Python object (one per storage: a user's ``x.untyped_storage()`` shows here)."""
    return sys.getrefcount(storage)


class BufferPool:
    """New uninitialised host tensors for a stream of batches, backed by the pages of earlier ones.

    ``empty(shape, dtype)`` has the contract of ``torch.empty``: a new C-contiguous CPU tensor whose
    contents are undefined (the caller writes every element). From HUGE_PAGE_MIN_NBYTES on, it is
    carved from a buffer the pool remembers and that nothing in this process uses any more: no
    tensor, view or storage object of an earlier ``empty`` is alive (the storage's use count, the
    test pipeline.transport.SlotKeeper makes for batch slots). A buffer a caller still holds, even
    through a view, is never handed out again, so a batch a user keeps is never written. Without
    a free buffer large enough, a new one (``empty_bytes``: huge pages) is made with `headroom`
    for batches a little larger; at most `keep` buffers are remembered (free ones forgotten
    first, then the oldest), the others are unmapped when their last user drops them (``clear``
    forgets them all).
    Smaller tensors come from ``empty_host``. ``allocated`` and ``reused`` count the large
    buffers made and handed out again. Safe to share between threads.
    """

    def __init__(self, keep: int = 4, headroom: float = 0.125):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep={keep!r} is not accepted; use an int >= 1 (buffers remembered)")
        if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0 <= headroom <= 1:
            raise ValueError(f"headroom={headroom!r} is not accepted; use a number in [0, 1] (the fraction "
                             "a new buffer exceeds the size asked)")
        self.keep, self.headroom = keep, float(headroom)
        self._storages: list[torch.UntypedStorage] = []
        self._lock = threading.Lock()
        probe = [torch.UntypedStorage(1)]
        #: python_refs of a storage only `_storages` holds, measured the way `_free` measures it
        self._sole_refs = python_refs(probe[0])
        self.allocated = self.reused = 0

    def __len__(self) -> int:
        return len(self._storages)

    def clear(self) -> None:
        """Forget every buffer (e.g. at the end of an epoch): those in use stay valid, and each is unmapped
        when its last user drops it."""
        with self._lock:
            self._storages.clear()

    def __reduce__(self):  # a copy (e.g. in a worker process) starts empty: buffers are this process's
        return type(self), (self.keep, self.headroom)

    def _free(self, i: int) -> bool:
        return use_count(self._storages[i]) <= 1 and python_refs(self._storages[i]) <= self._sole_refs

    def _take(self, nbytes: int) -> torch.UntypedStorage:
        fits = [i for i in range(len(self._storages)) if self._storages[i].nbytes() >= nbytes and self._free(i)]
        if fits:
            self.reused += 1
            return self._storages[min(fits, key=lambda i: self._storages[i].nbytes())]
        size = -(-int(nbytes * (1 + self.headroom)) // HUGE_PAGE_MIN_NBYTES) * HUGE_PAGE_MIN_NBYTES
        storage = torch.from_numpy(empty_bytes(size)).untyped_storage()
        self.allocated += 1
        self._storages.append(storage)
        while len(self._storages) > self.keep:
            free = [i for i in range(len(self._storages) - 1) if self._free(i)]
            del self._storages[free[0] if free else 0]
        return storage

    def empty(self, shape: Sequence[int], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        """A new uninitialised contiguous CPU tensor of `shape` and `dtype` (``torch.empty``'s signature)."""
        shape = tuple(int(s) for s in shape)
        nbytes = math.prod(shape) * itemsize(dtype)
        if nbytes < HUGE_PAGE_MIN_NBYTES:
            return empty_host(shape, dtype)
        with self._lock:
            storage = self._take(nbytes)
            raw = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (nbytes,), (1,))
        return raw.view(dtype).view(shape)

    def __repr__(self) -> str:
        held = sum(s.nbytes() for s in self._storages)
        return f"BufferPool(keep={self.keep}, buffers={len(self)}, bytes={held:,}, reused={self.reused})"
