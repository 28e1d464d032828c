"""The one batch producer of every front-end: a batch plan -> gather -> group -> encode, in a worker.

A front-end turns its sampler's output into a :class:`BatchPlan`: named tensors, each the rows ``ids``
of a feature source (pipeline.sources) or a tensor made already; a served source's rows become
``Served`` records (read by the main process). :func:`produce` has each source read its rows straight
into one buffer per group (pipeline.grouping; a store's compressed rows into a group of their own),
encodes each raw group with its codec, and returns the EncodedBatch. The buffers are `OutputBuffers`:
in a worker, a ring slot sized from :meth:`BatchPlan.nbytes`, so the hand-over copies nothing.
``copied_bytes`` counts host bytes written into new buffers (gathers, streams, encode output, copies
into the slot). :class:`BatchProducer` is the PyG front-end's dataset; the DGL one calls produce.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Protocol

import torch

from ..codec.base import Codec
from ..layout import CompressedTensor
from ..threads import as_worker
from .batch import EncodedBatch
from .codec_setup import codec_for
from .grouping import (SCALAR_BLOCK, SCALARS, GroupKey, GroupLayout, Member, group_dtype_name, group_key,
                       one_tensor_group, store_key, write_group)
from .sources import COMPRESSED, FeatureSource, Served, as_source
from .transport import ALIGN, OutputBuffers, SlotRing


@dataclass(frozen=True)
class Planned:
    """One named tensor of a batch: rows `ids` of source `table`, or the concatenation of `parts` (made already)."""

    name: str
    shape: tuple[int, ...]
    table: Optional[FeatureSource] = None
    ids: Optional[torch.Tensor] = None
    parts: tuple[torch.Tensor, ...] = ()

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class BatchPlan:
    """What one batch holds: its named tensors by group (GroupKey), its stored rows by store, and the
    rows the main process serves (`served`)."""

    def __init__(self):
        self.groups: dict[GroupKey, list[Planned]] = {}
        self.stored: dict[str, list[Planned]] = {}
        self.served: list[Served] = []
        self._names: set[str] = set()
        self._made: dict[int, str] = {}  # id() of a tensor put whole -> its name (ids a served source reuses)

    def __contains__(self, name: str) -> bool:
        return name in self._names

    def _claim(self, name: str) -> None:
        if name in self._names:
            raise ValueError(f"the batch plan has a tensor named {name!r} already")
        self._names.add(name)

    def _add(self, key: GroupKey, item: Planned) -> None:
        self._claim(item.name)
        self.groups.setdefault(key, []).append(item)

    def gather(self, name: str, table: Any, ids: torch.Tensor, *, key: Optional[GroupKey] = None,
               store: Optional[str] = None) -> None:
        """Tensor `name`: rows `ids` of `table` (a FeatureSource, or what as_source takes), named `store`
        (default: `name`): compressed rows join the store's group, raw rows group `key` (default: by
        dtype and row shape), a served source's rows are recorded, with what the workers still read."""
        source, store = as_source(table), store or name
        if source.served:
            sent = source.worker_rows(ids)
            ids_name = self._made.get(id(ids))
            own = ids_name is None
            if own:  # the ids are not in the batch yet: they travel with it
                ids_name = self._unique(f"{name}.ids")
                self.put(ids_name, ids)
            self.served.append(Served(name, store, ids_name, sent is not None, own))
            if sent is None:
                return
            source, ids = sent
        shape = (int(ids.numel()),) + tuple(source.shape[1:])
        if source.delivers == COMPRESSED:
            self._claim(name)
            self.stored.setdefault(store, []).append(Planned(name, shape, source, ids))
            return
        self._add(key or source.group_key(name), Planned(name, shape, source, ids))

    def _unique(self, name: str) -> str:
        n, out = 1, name
        while out in self._names:
            n, out = n + 1, f"{name}{n}"
        return out

    def put(self, name: str, *parts: torch.Tensor, shape: Optional[tuple[int, ...]] = None) -> None:
        """Tensor `name`, made already: `parts` (one dtype) concatenated, of `shape` (default: one
        part's own shape, else 1-d). 1-d tensors and ``edge_index`` join their dtype's stream."""
        if shape is None:
            shape = tuple(parts[0].shape) if len(parts) == 1 else (sum(int(p.numel()) for p in parts),)
        key = group_key(name, parts[0]) if len(parts) == 1 and len(shape) > 1 else \
            GroupKey(group_dtype_name(parts[0].dtype), (), SCALARS)  # group_key: edge_index joins the stream
        self._add(key, Planned(name, tuple(shape), parts=tuple(parts)))
        if len(parts) == 1:
            self._made.setdefault(id(parts[0]), name)

    def nbytes(self) -> int:
        """Bytes the gathered batch takes (stored rows at their widest with their offsets, allocations
        aligned), for a ring slot; encoded output beyond it goes to fresh segments once, then the slots
        grow to hold it."""
        total = 0
        for key, items in self.groups.items():
            n = sum(it.numel for it in items)
            total += (n + SCALAR_BLOCK) * key.torch_dtype.itemsize + ALIGN * (1 + len(items))
        for items in self.stored.values():  # rows at their widest, and their offsets (at most int64)
            rows = sum(int(it.ids.numel()) for it in items)
            total += rows * items[0].table.max_row_nbytes + (rows + 1) * 8 + 4 * ALIGN
        return total


def _new_nbytes(t: torch.Tensor, source: torch.Tensor) -> int:
    """t's bytes when t is not a view of `source` (it is a copy), else 0."""
    start, n = t.data_ptr(), t.numel() * t.element_size()
    within = source.data_ptr() <= start and start + n <= source.data_ptr() + source.numel() * source.element_size()
    return 0 if within else n


def place(ct: CompressedTensor, buffers: OutputBuffers) -> tuple[CompressedTensor, int]:
    """`ct` with payload and offsets in `buffers` (copied only when not in shared memory), and the bytes copied."""
    before = buffers.copied
    payload = buffers.place(ct.payload)
    offsets = None if ct.offsets is None else buffers.place(ct.offsets)
    if payload is not ct.payload or offsets is not ct.offsets:
        ct = replace(ct, payload=payload, offsets=offsets)
    return ct, buffers.copied - before


def _writer(item: Planned, whole: bool):
    """What write_group writes `item` with: its source's rows read straight into its view, its one part,
    or a function copying its parts in turn; `whole` (a dtype no codec has): the item made in private
    memory (torch's out= is not safe for every such dtype: index_select into a quantized out crashes)."""
    if item.table is not None:
        return item.table.read(item.ids) if whole else lambda out: item.table.read(item.ids, out)
    if len(item.parts) == 1:
        return item.parts[0].reshape(item.shape) if whole else item.parts[0]
    if whole:
        return torch.cat([p.reshape(-1) for p in item.parts]).reshape(item.shape)

    def copy_parts(out: torch.Tensor) -> None:  # parts of a flattened element stream
        at = 0
        for p in item.parts:
            out[at:at + p.numel()].copy_(p.reshape(-1))
            at += p.numel()
    return copy_parts


def _group(key: GroupKey, items: list[Planned], buffers: OutputBuffers
           ) -> tuple[GroupLayout, torch.Tensor, int]:
    """Group `key` written into one buffer of `buffers`, its layout and the bytes written; a group of
    one contiguous tensor made already is that tensor."""
    first = items[0]
    if len(items) == 1 and first.table is None and len(first.parts) == 1 and not key.scalar \
            and first.parts[0].is_contiguous():
        return (*one_tensor_group(key, first.name, first.parts[0].reshape(first.shape)), 0)
    writers = [_writer(it, key.as_bytes) for it in items]
    made = sum(w.numel() * w.element_size() for it, w in zip(items, writers) if key.as_bytes and it.table is not None)
    layout, data = write_group(key, [(it.name, it.shape, w) for it, w in zip(items, writers)], buffers.empty)
    return layout, data, made + data.numel() * data.element_size()


def _stored(store: str, items: list[Planned], buffers: OutputBuffers
            ) -> tuple[GroupKey, CompressedTensor, GroupLayout, int]:
    """A store's compressed rows of every item read at once into `buffers`: key, group, layout, bytes
    written (the gather, and the offsets' copy into a slot)."""
    table = items[0].table
    ids = torch.cat([it.ids for it in items]) if len(items) > 1 else items[0].ids
    ct = table.read(ids, buffers.empty)
    key = store_key(store, table.dtype, tuple(table.shape[1:]))
    starts = itertools.accumulate((it.shape[0] for it in items), initial=0)
    layout = GroupLayout(key, tuple(Member(it.name, it.shape, at) for it, at in zip(items, starts)))
    placed, copied = place(ct, buffers)
    return key, placed, layout, ct.nbytes + copied


def encode_group(key: GroupKey, data: torch.Tensor, codecs: Mapping[GroupKey, Codec], buffers: OutputBuffers
                 ) -> tuple[CompressedTensor, int]:
    """Group `key`'s `data` encoded and placed in `buffers`, and the host bytes written (encode output
    that is not a view of `data`, and its copy into `buffers`)."""
    ct = codec_for(codecs, key).encode(data)
    placed, copied = place(ct, buffers)
    return placed, copied + _new_nbytes(ct.payload, data) + (0 if ct.offsets is None else _new_nbytes(ct.offsets, data))


def produce(plan: BatchPlan, codecs: Mapping[GroupKey, Codec], buffers: Optional[OutputBuffers] = None, *,
            meta: Any = None, seconds: Optional[dict] = None) -> EncodedBatch:
    """The planned batch gathered and encoded into `buffers` (default: plain memory; a worker's:
    ``OutputBuffers.for_this_process(ring)``); `seconds` (e.g. "sample") gains "gather" and "encode"."""
    buffers = buffers if buffers is not None else OutputBuffers()
    buffers.reserve(plan.nbytes())
    t0 = time.perf_counter()
    raw, groups, layouts, copied = {}, {}, {}, 0
    for key, items in plan.groups.items():
        layout, data, written = _group(key, items, buffers)
        raw[layout.key] = (layout, data)
        copied += written
    for store, items in plan.stored.items():
        key, groups[key], layouts[key], written = _stored(store, items, buffers)
        copied += written
    t1 = time.perf_counter()
    for key, (layout, data) in raw.items():
        groups[key], written = encode_group(key, data, codecs, buffers)
        layouts[key] = layout
        copied += written
    seconds = dict(seconds or {}, gather=t1 - t0, encode=time.perf_counter() - t1)
    return EncodedBatch(groups=groups, layouts=layouts, meta=meta, seconds=seconds, copied_bytes=copied,
                        slot=buffers.done(), served=tuple(plan.served))


def warm_gathers(tables: Mapping[str, Any], codecs: Mapping[GroupKey, Codec], ids_dtype: torch.dtype) -> None:
    """Row 0 of each of `tables` (a table without rows: none) gathered by ids of `ids_dtype` and encoded here as
    a worker does (threads.as_worker): BatchProducer.warm for a front-end whose batches this process cannot
    draw itself (DGL's samplers draw from its random generator)."""
    plan = BatchPlan()
    for name, table in tables.items():
        plan.gather(name, table, torch.zeros(min(1, int(table.shape[0])), dtype=ids_dtype), store=name)
    with as_worker():
        produce(plan, codecs)


def encode_tensors(tensors: Mapping[str, torch.Tensor], codecs: Mapping[GroupKey, Codec]) -> EncodedBatch:
    """Named tensors made already, grouped (grouping.group_key) and encoded as a worker would: the batch."""
    plan = BatchPlan()
    for name, t in tensors.items():
        plan.put(name, t)
    return produce(plan, codecs)


class Planner(Protocol):
    """A front-end's half of a batch: its sampling (`draw`: without the user's own post-sampling step, for a
    warm-up), and the plan of the batch from the sampled output."""

    def __len__(self) -> int: ...
    def sample(self, req: Any) -> Any: ...
    def draw(self, req: Any) -> Any: ...
    def plan(self, req: Any, sampled: Any) -> tuple[BatchPlan, Any]: ...


class BatchProducer(torch.utils.data.Dataset):
    """EncodedBatches, one per request: the `planner` samples and plans, :func:`produce` gathers and
    encodes, in a worker into a slot of `ring` (made here, before the workers start)."""

    def __init__(self, planner: Planner, codecs: Mapping[GroupKey, Codec]):
        self.planner, self.codecs, self.ring = planner, dict(codecs), SlotRing()

    def __len__(self) -> int:
        return len(self.planner)

    def warm(self, req, *, workers: bool) -> None:
        """Compile here, once, the kernels the batches run (touching no random generator, running none of the
        user's post-sampling step): with `workers`, produce `req`'s batch (into private memory, its rows read
        from the sources) with the kernels the workers run (serial: threads.as_worker), so that the forked
        workers inherit every one (threads.as_worker says why a worker must not compile); without, sample it
        (the first batch then finds the sampler compiled)."""
        if not workers:
            self.planner.draw(req)
            return
        with as_worker():
            plan, meta = self.planner.plan(req, self.planner.draw(req))
            produce(plan, self.codecs, meta=meta)

    def __getitem__(self, req) -> EncodedBatch:
        t0 = time.perf_counter()
        out = self.planner.sample(req)
        sample_seconds = time.perf_counter() - t0
        plan, meta = self.planner.plan(req, out)
        return produce(plan, self.codecs, OutputBuffers.for_this_process(self.ring), meta=meta,
                       seconds={"sample": sample_seconds})


__all__ = ["BatchPlan", "Planned", "Planner", "produce", "encode_group", "encode_tensors", "place", "BatchProducer",
           "warm_gathers"]
