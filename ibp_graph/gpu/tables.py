"""The one cache of the decoders' device tables: built once per codec state, kept per device.

A codec kind (``ibp``, ``ebp``) turns its codec into a *host record*: a frozen dataclass
of numbers and numpy arrays (the table records of ``abi``). :func:`device_tables` uploads
the record's arrays once per (kind, codec fingerprint, device) and keeps the last
:data:`TABLE_CACHE_SIZE` such records, least recently used evicted first.
"""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Callable, TypeVar

import numpy as np
import torch

#: device table records kept, over every kind and device; evicted least recently used.
TABLE_CACHE_SIZE = 32

R = TypeVar("R")


class TableCache:
    """A thread-safe LRU map from (kind, fingerprint, device) to a record of device tables."""

    def __init__(self, size: int = TABLE_CACHE_SIZE):
        self.size = int(size)
        self._items: "OrderedDict[tuple, object]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple, make: Callable[[], R]) -> R:
        """The record under `key`, made by `make()` (outside the lock) when absent."""
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        hit = make()
        with self._lock:
            self._items[key] = hit
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return hit

    def __len__(self) -> int:
        return len(self._items)


#: the process's cache (tests may swap it for a fresh one).
CACHE = TableCache()


def upload(host, device: torch.device):
    """`host` (a dataclass record) with every numpy array field copied to `device` as bytes."""
    moved = {}
    for f in dataclasses.fields(host):
        a = getattr(host, f.name)
        if isinstance(a, np.ndarray):
            raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            moved[f.name] = torch.from_numpy(raw.copy()).to(device)
    return dataclasses.replace(host, **moved)


def device_tables(codec, device: torch.device, build: Callable[[object], R]) -> R:
    """The record `build(codec)` with its arrays on `device`, built and uploaded once per
    (codec.name, codec.fingerprint, device) and marked as read by the current stream."""
    key = (str(codec.name), int(codec.fingerprint), str(device))
    record = CACHE.get(key, lambda: upload(build(codec), device))
    mark_in_use(record, device)
    return record


def mark_in_use(record, device: torch.device) -> None:
    """Mark a record's device tensors as read by the current stream's next launch.

    The tables are cached across calls and streams (allocated on whichever stream first
    needed them) and dropped when the cache evicts them. Without this, eviction while a
    kernel on another stream still reads them would let the allocator hand their memory
    out again at once on the allocating stream.
    """
    if device.type != "cuda":
        return
    stream = torch.cuda.current_stream(device)
    for f in dataclasses.fields(record):
        t = getattr(record, f.name)
        if isinstance(t, torch.Tensor):
            t.record_stream(stream)
