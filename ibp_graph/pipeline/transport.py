"""Worker -> main process: each batch's outputs written straight into shared memory.

torch's DataLoader pickles a worker's batch: a tensor in private memory is copied into a new shared
segment, one in shared memory travels as a handle. So a worker writes its outputs into `OutputBuffers`:
a slot of a `SlotRing` (`slots` reusable segments per worker, grown, never shrunk), else fresh shared
segments (every slot held, or a worker id beyond the ring), else plain memory (``num_workers=0``).
The main process's `SlotKeeper` keeps each slot's segment mapped and releases the slot: on CUDA once
its host-to-device copy completed (the segment page-locked once, cudaHostRegister), on the CPU once no
tensor of the batch is alive and nobody holds its storage object (a batch the user holds is never
overwritten). Workers let go of their segments at exit, so nothing stays in /dev/shm.

A slot's state is four shared counters with one writer each (no lock): claims, ticket and pid (the
worker's), releases (the main process's); free when claims equal releases. One writer each holds
because every iterator's workers get a lane of counters of their own (`SlotRing.start`): two live
iterators of one loader have workers with the same ids, which would otherwise claim one slot at once.
Tickets number a worker's claims, whose batches arrive in that order: when ticket T arrives, a slot
the same process claimed under a lower ticket and the keeper never saw, or one of an exited process
(an earlier iterator's, on a lane used again), holds a batch that will never arrive (dropped by the
DataLoader, or its worker raised); the keeper releases it (`reclaimed`).
"""
from __future__ import annotations

import math
import multiprocessing.util
import os
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from ..layout.buffers import python_refs, use_count

#: slots per worker: the batch the user holds, the decode stage's, the prefetched 2, the one written.
SLOTS_PER_WORKER = 5
#: worker ids a ring has slots for (a worker beyond it uses fresh segments).
MAX_WORKERS = 128
#: iterators of one loader whose workers have slots at once (the workers of more use fresh segments).
LANES = 4
#: byte alignment of every tensor carved from a slot.
ALIGN = 64
#: a slot is (re)allocated at this multiple of the largest batch its worker has written.
GROWTH = 1.25
#: columns of a slot's shared counters.
CLAIMS, RELEASES, TICKET, PID = 0, 1, 2, 3


def _exited(pid: int) -> bool:
    """Whether process `pid` is gone (an unreaped child or a reused pid counts as alive: never freed early)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # someone else's process: alive
        pass
    return False


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def _view(storage: torch.UntypedStorage, byte_offset: int, shape: Sequence[int], dtype: torch.dtype
          ) -> torch.Tensor:
    return torch.empty(0, dtype=dtype).set_(storage, byte_offset // dtype.itemsize, tuple(shape))


def shared_empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor in a new shared-memory segment (handed over without a copy)."""
    return _view(torch.UntypedStorage._new_shared(max(math.prod(shape) * dtype.itemsize, 1)), 0, shape, dtype)


def is_shared(t: torch.Tensor) -> bool:
    """Whether `t` lives in shared memory (handed over by handle, not copied)."""
    return t.untyped_storage().is_shared()


@dataclass(eq=False)
class Slot:
    """A claimed ring slot, travelling with its batch: the `lane` of its iterator, worker, slot `index`,
    the claim's seq, ticket and pid, the worker's shared counters (a row per slot) and the slot's segment."""

    lane: int
    worker: int
    index: int
    seq: int
    ticket: int
    pid: int
    counters: torch.Tensor = field(repr=False)
    storage: Optional[torch.UntypedStorage] = field(repr=False)

    def release(self) -> None:
        """The batch is done with the slot: its worker may write the next batch into it."""
        self.counters[self.index, RELEASES] = self.seq

    def dropped(self, held: set) -> list[int]:
        """The worker's other claimed slots, not in `held` (indices the keeper has), whose batches will
        never arrive: this process's under a lower ticket, or an exited process's. Claims are read
        before ticket and pid, which a worker writes first (a slot claimed meanwhile shows a higher ticket)."""
        c, out = self.counters, []
        for j in range(c.shape[0]):
            if j == self.index or j in held or int(c[j, CLAIMS]) == int(c[j, RELEASES]):
                continue
            pid = int(c[j, PID])
            if (pid == self.pid and int(c[j, TICKET]) < self.ticket) or (pid != self.pid and _exited(pid)):
                out.append(j)
        return out

    def release_dropped(self, j: int) -> None:
        """Free slot `j` of this worker (one `dropped` named)."""
        self.counters[j, RELEASES] = self.counters[j, CLAIMS]


class SlotRing:
    """`slots` reusable shared-memory slots per worker and lane, made in the main process before the
    workers start (they inherit it with the dataset). Workers claim on `lane`: the one `start` gave
    their iterator (0 for workers started otherwise, e.g. by a DataLoader of the producer itself)."""

    def __init__(self, slots: int = SLOTS_PER_WORKER, max_workers: int = MAX_WORKERS, lanes: int = LANES):
        for name, value in (("slots", slots), ("max_workers", max_workers), ("lanes", lanes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is not accepted; use an int >= 1")
        self.slots, self.max_workers = slots, max_workers
        #: [lane, worker, slot, (claims, releases, ticket, pid)], in shared memory.
        self.lanes = torch.zeros((lanes, max_workers, slots, 4), dtype=torch.int64).share_memory_()
        self.lane: Optional[int] = 0  #: the lane of the workers started last (None: every lane was taken)
        self._iterators: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
        self._segments: dict[int, torch.UntypedStorage] = {}  # this worker's slot segments
        self._largest = 0  # the largest batch this worker has written, in bytes

    def __getstate__(self) -> dict:  # a spawned worker gets the counters and its lane; its segments are its own
        return {**self.__dict__, "_iterators": None, "_segments": {}, "_largest": 0, "_exit_hook": None}

    def __setstate__(self, state: dict) -> None:  # a copy's iterators are its own
        self.__dict__.update(state, _iterators=weakref.WeakValueDictionary())

    @property
    def counters(self) -> torch.Tensor:
        """[worker, slot, (claims, releases, ticket, pid)] of this process's lane (a view)."""
        return self.lanes[0 if self.lane is None else self.lane]

    def start(self, make_iterator: Callable[[], Any]) -> Any:
        """`make_iterator()`, which starts a DataLoader iterator's workers, with the workers on a lane of
        their own: the lowest one no live iterator made here holds (a lane is free again once its
        iterator is freed); with every lane held, the new workers use fresh segments. Main process only."""
        held = self._iterators
        self.lane = next((k for k in range(self.lanes.shape[0]) if k not in held), None)
        iterator = make_iterator()
        if self.lane is not None:
            held[self.lane] = iterator
        return iterator

    def _drop_segments_at_exit(self) -> None:
        # a DataLoader worker ends without finalizers, and under the "file_system" strategy a segment's
        # /dev/shm file goes only once every process let go of it: without this, slots stayed there
        if getattr(self, "_exit_hook", None) is None:
            self._exit_hook = multiprocessing.util.Finalize(self, self._segments.clear, exitpriority=100)

    def free(self, worker: int) -> list[int]:
        """The slots of `worker` not held by a batch."""
        c = self.counters[worker]
        return [i for i in range(self.slots) if int(c[i, CLAIMS]) == int(c[i, RELEASES])]

    def claim(self, worker: int, nbytes: int) -> Optional[tuple[Slot, torch.UntypedStorage]]:
        """A free slot of `worker` on this lane with room for `nbytes` (grown if needed), claimed for one
        batch; None when all are held, `worker` is beyond the ring or the workers have no lane."""
        free = self.free(worker) if 0 <= worker < self.max_workers and self.lane is not None else None
        if not free:
            return None
        i = free[0]
        segment, need = self._segments.get(i), max(nbytes, self._largest)
        if segment is None or segment.nbytes() < need:
            segment = self._segments[i] = torch.UntypedStorage._new_shared(_aligned(max(int(need * GROWTH), ALIGN)))
            self._drop_segments_at_exit()
        counters = self.counters[worker]
        ticket, seq, pid = int(counters[:, TICKET].max()) + 1, int(counters[i, CLAIMS]) + 1, os.getpid()
        counters[i, TICKET] = ticket  # before the claim: see Slot.dropped
        counters[i, PID] = pid
        counters[i, CLAIMS] = seq
        return Slot(self.lane, worker, i, seq, ticket, pid, counters, segment), segment

    def note(self, nbytes: int) -> None:
        """A batch of `nbytes` was written: slots grow to hold batches this large."""
        self._largest = max(self._largest, nbytes)


class OutputBuffers:
    """Where one batch's outputs are written: a ring slot, else fresh shared segments (in a
    worker), else plain memory (in the main process). `copied` counts the bytes `place` copied."""

    def __init__(self, ring: Optional[SlotRing] = None, worker: Optional[int] = None):
        self.ring, self.worker = ring, worker
        self.slot: Optional[Slot] = None
        self.copied = self._used = self._wanted = 0
        self._segment: Optional[torch.UntypedStorage] = None

    @classmethod
    def for_this_process(cls, ring: Optional[SlotRing]) -> "OutputBuffers":
        """Buffers for a batch made here: shared when this is a DataLoader worker."""
        info = torch.utils.data.get_worker_info()
        return cls(ring, None if info is None else info.id)

    @property
    def shared(self) -> bool:
        """Whether outputs go to shared memory (this is a worker: the batch will be handed over)."""
        return self.worker is not None

    def reserve(self, nbytes: int) -> None:
        """Claim a ring slot with room for `nbytes` for this batch (before the first empty())."""
        if self.shared and self.ring is not None and self.slot is None:
            got = self.ring.claim(self.worker, nbytes)
            if got is not None:
                self.slot, self._segment = got

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised contiguous tensor to write an output into."""
        size = _aligned(math.prod(shape) * dtype.itemsize)
        self._wanted += size
        if not self.shared:
            return torch.empty(tuple(shape), dtype=dtype)
        if self._segment is not None and self._used + size <= self._segment.nbytes():
            self._used += size
            return _view(self._segment, self._used - size, shape, dtype)
        return shared_empty(shape, dtype)

    def place(self, t: torch.Tensor) -> torch.Tensor:
        """`t` where the hand-over copies nothing: itself when shared already (or nothing is handed
        over), else a copy in these buffers (counted in `copied`)."""
        if not self.shared or is_shared(t):
            return t
        out = self.empty(t.shape, t.dtype)
        out.copy_(t)
        self.copied += t.numel() * t.element_size()
        return out

    def done(self) -> Optional[Slot]:
        """The batch is written: remember its size (slots grow to it); the slot it travels with."""
        if self.ring is not None and self.shared:
            self.ring.note(self._wanted)
        return self.slot


def register_pinned(storage: torch.UntypedStorage) -> Callable[[], None]:
    """Page-lock `storage` for CUDA copies (cudaHostRegister); returns the call that undoes it."""
    cudart = torch.cuda.cudart()
    ptr, size = storage.data_ptr(), storage.nbytes()
    err = cudart.cudaHostRegister(ptr, size, 0)
    if int(err) != 0:
        raise RuntimeError(f"cudaHostRegister of a {size}-byte batch slot failed with CUDA error {int(err)}")
    return lambda: cudart.cudaHostUnregister(ptr)


class SlotKeeper:
    """Main process: keeps each slot's segment mapped (page-locked by `register`, e.g. register_pinned)
    and releases it: with `release_on_copy` when the caller calls `release(batch)` (CUDA: after the
    copy's event), else once no tensor of its batch is alive (checked as batches arrive: `collect`).
    `adopt(batch)` is called for every batch as it arrives."""

    def __init__(self, *, register: Optional[Callable[[torch.UntypedStorage], Callable[[], None]]] = None,
                 release_on_copy: bool = False):
        self.register, self.release_on_copy = register, release_on_copy
        self._mapped: dict[tuple[int, int, int], torch.UntypedStorage] = {}  # (lane, worker, slot)
        probe = {0: torch.UntypedStorage(1)}
        #: python_refs of a segment only `_mapped` holds (Python's count for an object one dict holds)
        self._sole_refs = python_refs(probe[0])
        self._undo: dict[tuple[int, int, int], Callable[[], None]] = {}
        self._held: list[Slot] = []
        self.reclaimed = 0  #: slots released because their batches never arrived
        # unregister page-locked segments when the keeper goes, before they are unmapped
        self._finalizer = weakref.finalize(self, _undo_all, self._undo)

    def _unmap(self, key: tuple[int, int, int]) -> None:
        undo = self._undo.pop(key, None)
        if undo is not None:
            undo()
        self._mapped.pop(key, None)

    def adopt(self, batch) -> None:
        """Note the slot `batch` travels in (if any); release slots whose batches are gone."""
        if not self.release_on_copy:
            self.collect()
        slot = getattr(batch, "slot", None)
        if slot is None:
            return
        key = _key(slot)
        segment, slot.storage = slot.storage, None  # the keeper's reference is the only extra one
        old = self._mapped.get(key)
        if old is None or old.data_ptr() != segment.data_ptr():  # a new slot, or one its worker grew
            self._unmap(key)
            self._mapped[key] = segment
            del segment
            if self.register is not None:
                try:
                    self._undo[key] = self.register(self._mapped[key])
                except (RuntimeError, AssertionError) as e:  # e.g. a locked-memory limit
                    warnings.warn(f"page-locking a {self._mapped[key].nbytes()}-byte batch slot failed ({e}); "
                                  "batches are copied into pinned memory instead (pin_memory)")
                    self.register = None
        for j in slot.dropped({s.index for s in self._held if _key(s)[:2] == key[:2]}):
            slot.release_dropped(j)
            self.reclaimed += 1
        self._held.append(slot)

    def release(self, batch) -> None:
        """`batch`'s host memory has been copied: its slot may be written again."""
        slot = getattr(batch, "slot", None)
        if slot is not None and any(s is slot for s in self._held):
            self._held = [s for s in self._held if s is not slot]
            slot.release()

    def collect(self) -> int:
        """Release the held slots no tensor (and no user holding the storage object) uses; how many."""
        keep = []
        for slot in self._held:
            key = _key(slot)
            if use_count(self._mapped[key]) <= 1 and python_refs(self._mapped[key]) <= self._sole_refs:
                slot.release()
            else:
                keep.append(slot)
        released, self._held = len(self._held) - len(keep), keep
        return released

    def unmap_idle(self) -> None:
        """Forget the segments of slots no batch holds (an epoch ended: its workers may be gone); a
        slot used again is mapped (and page-locked) again when its next batch arrives."""
        if not self.release_on_copy:
            self.collect()
        held = {_key(s) for s in self._held}
        for key in [k for k in self._mapped if k not in held]:
            self._unmap(key)

    def release_all(self) -> None:
        """Release every held slot (with `release_on_copy`: once no copy from them is pending)."""
        for slot in self._held:
            slot.release()
        self._held = []

    @property
    def held(self) -> int:
        """Slots held by batches now."""
        return len(self._held)


def _key(slot: Slot) -> tuple[int, int, int]:
    return slot.lane, slot.worker, slot.index


def _undo_all(undo: dict) -> None:
    for fn in undo.values():
        fn()
    undo.clear()
