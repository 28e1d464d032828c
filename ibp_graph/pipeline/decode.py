"""Main side: copy each encoded batch to the device and decode it, `prefetch` batches ahead.

On a CUDA device the copy (from pinned memory) and the decode kernels (``ibp_graph.gpu``)
run on a side stream, so they overlap the training step running on the current stream;
each yielded tensor is handed over with an event wait and `record_stream`. Without a
GPU the same stage decodes on the CPU (``codec.decode``). Either way a corrupt group
raises before its batch is handed out, and the batch's `meta` passes through untouched.
With `features` (pipeline.sources.Serving: zero-copy stores, device caches) the stage then
reads the rows of the batch's served sources in the main process, on the same stream.
A batch written into a ring slot (pipeline.transport) has its slot released here: on a
CUDA device once its copy has completed (the slot's segment page-locked on first use), on
the CPU once no tensor of the batch is alive.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Iterator, Mapping, Optional

import torch

from ..codec.base import Codec
from .batch import DecodedBatch, EncodedBatch
from .sources import Serving
from .grouping import GroupKey
from .stats import LoaderStats
from .transport import SlotKeeper, register_pinned


class DecodeStage:
    """Turns an iterator of EncodedBatches into DecodedBatches on `device`, counting into `stats`."""

    def __init__(self, codecs: Mapping[GroupKey, Codec], device: torch.device, *, prefetch: int = 2,
                 stats: Optional[LoaderStats] = None, features: Optional[Serving] = None):
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch={prefetch!r} is not accepted; use an int >= 0 (batches in flight)")
        self.codecs = dict(codecs)
        self.device = torch.device(device)
        self.prefetch = prefetch
        self.stats = stats if stats is not None else LoaderStats()
        self.features = features
        self._stream = None
        cuda = self.device.type == "cuda"
        self.slots = SlotKeeper(register=register_pinned if cuda else None, release_on_copy=cuda)

    def _codec(self, key: GroupKey) -> Codec:
        codec = self.codecs.get(key)
        if codec is None:
            raise KeyError(f"the batch has group {str(key)!r}, for which this stage has no codec; "
                           f"codecs exist for {sorted(map(str, self.codecs))}")
        return codec

    def _count(self, batch: EncodedBatch) -> None:
        self.slots.adopt(batch)
        self.stats.batches += 1
        for key, ct in batch.groups.items():
            self.stats.add_group(str(key), ct.raw_nbytes, ct.nbytes)
        for stage, sec in batch.seconds.items():
            self.stats.add_time(stage, sec)
        self.stats.add_copied(batch.copied_bytes)

    @staticmethod
    def _split(batch: EncodedBatch, decoded: Mapping[GroupKey, torch.Tensor]) -> DecodedBatch:
        tensors = {}
        for key, t in decoded.items():
            tensors.update(batch.layouts[key].split(t))
        return DecodedBatch(tensors, batch.meta)

    def _fetch(self, batch: EncodedBatch, out: DecodedBatch, checks=None):
        """The rows of the batch's served sources, put into `out`; their Tally (None: none served)."""
        if not batch.served:
            return None
        if self.features is None:
            raise RuntimeError(f"the batch has rows to serve ({[s.name for s in batch.served]}) but this "
                               "decode stage serves no sources")
        return self.features.fill(batch.served, out, batch.groups, checks)

    def _count_fetched(self, tally) -> None:
        if tally is not None:
            self.stats.add_tiers(**tally.counts())

    # ---- CPU ------------------------------------------------------------------
    def _cpu(self, batches: Iterator[EncodedBatch]) -> Iterator[DecodedBatch]:
        for batch in batches:
            self._count(batch)
            t = time.perf_counter()
            decoded = {k: self._codec(k).decode(ct) for k, ct in batch.groups.items()}
            out = self._split(batch, decoded)
            self._count_fetched(self._fetch(batch, out))
            self.stats.add_time("decode", time.perf_counter() - t)
            yield out

    # ---- CUDA -----------------------------------------------------------------
    def _launch(self, batch: EncodedBatch):
        """Queue copy + decode of one batch on the side stream; return what finishing needs.

        Nothing here waits for the GPU: the decoders' error checks are collected
        (gpu.PendingChecks) and read in _finish, once the batch is done anyway, so the host
        can queue the next batches while this one copies and decodes.
        """
        from .. import gpu

        checks = gpu.PendingChecks()
        start, copied, done = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        with torch.cuda.stream(self._stream):
            start.record()
            on_device = {k: ct.to(self.device, non_blocking=True) for k, ct in batch.groups.items()}
            copied.record()
            decoded = {k: gpu.decode(self._codec(k), ct, checks=checks) for k, ct in on_device.items()}
            out = self._split(batch, decoded)
            fetched = self._fetch(batch, out, checks)
            done.record()
        return batch, out, fetched, (start, copied, done), checks

    def _finish(self, item) -> DecodedBatch:
        batch, out, fetched, (start, copied, done), checks = item
        current = torch.cuda.current_stream(self.device)
        current.wait_event(done)
        for t in out.values():
            t.record_stream(current)
        done.synchronize()  # event timing needs the batch finished; it is, or the step waits anyway
        self.slots.release(batch)  # copied: the worker may write its slot again
        checks.raise_first()  # a corrupt group raises here, before its batch is handed out
        self.stats.add_time("copy", start.elapsed_time(copied) / 1e3)
        self.stats.add_time("decode", copied.elapsed_time(done) / 1e3)
        self._count_fetched(fetched)
        return out

    def _cuda(self, batches: Iterator[EncodedBatch]) -> Iterator[DecodedBatch]:
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        pending: deque = deque()
        for batch in batches:
            self._count(batch)
            pending.append(self._launch(batch))
            if len(pending) > self.prefetch:
                yield self._finish(pending.popleft())
        while pending:
            yield self._finish(pending.popleft())

    def __call__(self, batches: Iterator[EncodedBatch]) -> Iterator[DecodedBatch]:
        """Decode the batches, in order."""
        try:
            yield from self._cuda(batches) if self.device.type == "cuda" else self._cpu(batches)
        finally:  # the epoch is over (or abandoned): keep no idle slot segments mapped
            if self.slots.release_on_copy:  # batches queued but not finished: wait for their copies
                if self._stream is not None:
                    self._stream.synchronize()
                self.slots.release_all()
            self.slots.unmap_idle()
