"""Main side: copy each encoded batch to the device and decode it, `prefetch` batches ahead.

On CUDA the copy (from pinned memory) and the decode kernels (``ibp_graph.gpu``) run on a side
stream, overlapping the training step on the current stream; each yielded tensor is handed over
with an event wait and `record_stream`. Without a GPU the stage decodes on the CPU
(``codec.decode``, into the buffers of a layout.buffers.BufferPool: the pages of batches no tensor holds
any more); with sharded tables (pipeline.sharded) one thread decodes `prefetch` batches'
groups ahead and exchanges their rows with the other ranks, overlapping the decode of the rows and
the training step. Either way a corrupt group raises before its batch is handed out and `meta`
passes through untouched; then the batch's served rows are read (`features`: pipeline.sources.Serving)
on the same stream, and its ring slot (pipeline.transport) is released: on CUDA once its copy has
completed, on the CPU once no tensor of the batch is alive.
"""
from __future__ import annotations

import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, Mapping, Optional

import torch

from ..codec import IdentityCodec
from ..codec.base import Codec
from ..layout import CompressedTensor
from ..layout.buffers import BufferPool
from .batch import DecodedBatch, EncodedBatch
from .codec_setup import codec_for, describe
from .grouping import GroupKey
from .sources import Serving
from .stats import LoaderStats
from .transport import SlotKeeper, register_pinned


class DecodeStage:
    """Turns an iterator of EncodedBatches into DecodedBatches on `device`, counting into `stats`."""

    def __init__(self, codecs: Mapping[GroupKey, Codec], device: torch.device, *, prefetch: int = 2,
                 stats: Optional[LoaderStats] = None, features: Optional[Serving] = None):
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch={prefetch!r} is not accepted; use an int >= 0 (batches in flight)")
        self.codecs, self.device, self.prefetch = dict(codecs), torch.device(device), prefetch
        self.stats = stats if stats is not None else LoaderStats()
        self.features = features
        self._stream = None
        cuda = self.device.type == "cuda"
        self.slots = SlotKeeper(register=register_pinned if cuda else None, release_on_copy=cuda)
        self._buffers = BufferPool(keep=prefetch + 2)  # the CPU's decoded groups (the user's batch, those ahead)

    def _codec(self, key: GroupKey, ct: CompressedTensor) -> Codec:
        """Group `key`'s codec; a group the set-up did not see, which the workers sent as identity
        (codec_for), gets that identity, named in the stats' codecs from its first batch on."""
        codec = self.codecs.get(key)
        if codec is None:
            if ct.codec != IdentityCodec.name:
                raise KeyError(f"the batch has group {str(key)!r} ({ct.codec}), for which this stage has no "
                               f"codec; codecs exist for {sorted(map(str, self.codecs))}")
            self.codecs[key] = codec = codec_for(self.codecs, key)
            self.stats.codecs[str(key)] = describe(codec)
        return codec

    def _count(self, batch: EncodedBatch) -> None:
        self.slots.adopt(batch)
        self.stats.batches += 1
        for key, ct in batch.groups.items():
            self.stats.add_group(str(key), ct.raw_nbytes, ct.nbytes)
        for stage, sec in batch.seconds.items():
            self.stats.add_time(stage, sec)
        self.stats.add_copied(batch.copied_bytes)

    def _decoded(self, batch: EncodedBatch, decoded: Mapping[GroupKey, torch.Tensor], checks=None,
                 exchanged: Optional[dict] = None):
        """The batch's named tensors, with its served rows filled in (`exchanged`: its collective sources'
        rows, fetched already); their Tally (None: none served)."""
        out = self._split(batch, decoded)
        return out, self._serve(batch, out, checks, exchanged)

    @staticmethod
    def _split(batch: EncodedBatch, decoded: Mapping[GroupKey, torch.Tensor]) -> DecodedBatch:
        out = DecodedBatch({}, batch.meta)
        for key, t in decoded.items():
            out.update(batch.layouts[key].split(t))
        return out

    def _serve(self, batch: EncodedBatch, out: DecodedBatch, checks=None, exchanged: Optional[dict] = None):
        if not batch.served and (self.features is None or not self.features.collective):
            return None
        if self.features is None:
            raise RuntimeError(f"the batch has rows to serve ({[s.name for s in batch.served]}) but this "
                               "decode stage serves no sources")
        return self.features.fill(batch.served, out, batch.groups, checks, exchanged)

    def _cpu_groups(self, batch: EncodedBatch) -> Mapping[GroupKey, torch.Tensor]:
        # rows of variable length are decoded into a pooled buffer; fixed-stride (identity) ones are a view
        return {k: self._codec(k, ct).decode(
                    ct, out=None if ct.offsets is None else self._buffers.empty(ct.shape, ct.dtype))
                for k, ct in batch.groups.items()}

    def _cpu_done(self, out: DecodedBatch, tally, seconds: float) -> DecodedBatch:
        if tally is not None:
            self.stats.add_tiers(**tally.counts())
        self.stats.add_time("decode", seconds)
        return out

    def _cpu(self, batches: Iterator[EncodedBatch]) -> Iterator[DecodedBatch]:
        if self.features is not None and self.features.collective and self.prefetch:
            yield from self._cpu_ahead(batches)
            return
        for batch in batches:
            self._count(batch)
            t = time.perf_counter()
            out, tally = self._decoded(batch, self._cpu_groups(batch))
            yield self._cpu_done(out, tally, time.perf_counter() - t)

    def _cpu_exchange(self, batch: EncodedBatch):
        """On the exchange thread: a batch's groups decoded and its sharded rows fetched (compressed)."""
        t = time.perf_counter()
        out = self._split(batch, self._cpu_groups(batch))
        return batch, out, self.features.exchange(batch.served, out), time.perf_counter() - t

    def _cpu_ahead(self, batches: Iterator[EncodedBatch]) -> Iterator[DecodedBatch]:
        """With sharded tables: up to `prefetch` batches ahead, one thread decodes a batch's groups and
        exchanges its rows with the other ranks (in order: the ranks' collectives pair up), while this
        thread decodes the rows of the batch before and the training step runs."""
        pool = ThreadPoolExecutor(1, thread_name_prefix="ibp-graph-exchange")
        pending: deque = deque()

        def done(future) -> DecodedBatch:
            batch, out, exchanged, seconds = future.result()
            t = time.perf_counter()
            tally = self._serve(batch, out, None, exchanged)
            return self._cpu_done(out, tally, seconds + time.perf_counter() - t)

        try:
            for batch in batches:
                self._count(batch)
                pending.append(pool.submit(self._cpu_exchange, batch))
                if len(pending) > self.prefetch:
                    yield done(pending.popleft())
            while pending:
                yield done(pending.popleft())
        finally:  # an abandoned epoch: every batch taken from the workers is exchanged still, as on every
            pool.shutdown(wait=True)  # rank (the same number: as many as consumed + prefetch)

    def _launch(self, batch: EncodedBatch):
        """Queue copy + decode of one batch on the side stream, without waiting for the GPU: the
        decoders' error checks (gpu.PendingChecks) are read in _finish, once the batch is done anyway."""
        from .. import gpu

        checks = gpu.PendingChecks()
        events = start, copied, done = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        with torch.cuda.stream(self._stream):
            start.record()
            on_device = {k: ct.to(self.device, non_blocking=True) for k, ct in batch.groups.items()}
            copied.record()
            out, tally = self._decoded(batch, {k: gpu.decode(self._codec(k, ct), ct, checks=checks)
                                               for k, ct in on_device.items()}, checks)
            done.record()
        return batch, out, tally, events, checks

    def _finish(self, item) -> DecodedBatch:
        batch, out, tally, (start, copied, done), checks = item
        current = torch.cuda.current_stream(self.device)
        current.wait_event(done)
        for t in out.values():
            t.record_stream(current)
        done.synchronize()  # event timing needs the batch finished; it is, or the step waits anyway
        self.slots.release(batch)  # copied: the worker may write its slot again
        checks.raise_first()  # a corrupt group raises here, before its batch is handed out
        self.stats.add_time("copy", start.elapsed_time(copied) / 1e3)
        self.stats.add_time("decode", copied.elapsed_time(done) / 1e3)
        if tally is not None:
            self.stats.add_tiers(**tally.counts())
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
        finalizing = sys.is_finalizing  # held here: closed at interpreter exit, this module's globals are None
        try:
            yield from self._cuda(batches) if self.device.type == "cuda" else self._cpu(batches)
            if self.features is not None and self.features.collective:
                self.features.end_epoch()  # only at the end of the batches: an abandoned epoch sends no mark
        finally:  # the epoch is over (or abandoned): keep no idle slot segments mapped, nor idle buffers
            if finalizing():  # an iterator left open at exit: the process's memory goes with it
                return
            self._buffers.clear()
            if self.slots.release_on_copy:  # batches queued but not finished: wait for their copies
                if self._stream is not None:
                    self._stream.synchronize()
                self.slots.release_all()
            self.slots.unmap_idle()
