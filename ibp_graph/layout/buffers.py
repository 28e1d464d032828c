"""New host buffers for gathered and decoded rows; the large ones are backed by huge pages.

A batch's gathered payload or decoded rows (hundreds of MB) are new memory each call, and
the kernel maps new memory one 4 KiB page at a time, on first touch: for a 434k-row batch
of 512-byte rows that is ~54k page faults, and they took more time than the decode itself
(IBP decode into new memory 1.7 GB/s per core, into a reused buffer 3.5). Buffers of at
least HUGE_PAGE_MIN_NBYTES are private anonymous mappings advised MADV_HUGEPAGE, so
transparent huge pages (Linux, ``enabled`` = ``always`` or ``madvise``) map them 2 MiB at a
time; elsewhere, and below that size, they come from numpy as before. Either way the
buffer is an ordinary, writable, C-contiguous array, unmapped when its last user drops it.
"""
from __future__ import annotations

import math
import mmap
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
