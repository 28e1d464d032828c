"""The one batch producer of every front-end: a batch plan -> gather -> group -> encode, in a worker.

A front-end turns its sampler's output into a :class:`BatchPlan`: which named tensors a
batch holds, each the rows ``ids`` of a feature source (pipeline.sources: a tensor's raw
rows, a pre-encoded store's compressed rows) or a tensor made already (``n_id``,
``edge_index``), and into which group; the rows of a *served* source are recorded as
:class:`~ibp_graph.pipeline.sources.Served` (the main process reads them) with the node ids
they need and the rows the workers still read. :func:`produce` has every source read its rows
straight into one buffer per row group (the 1-d columns and index tensors into one padded
element stream per dtype, a store's compressed rows into its own group), encodes each raw
group with its codec and returns the EncodedBatch. In a DataLoader worker the buffers
are a slot of the producer's ``SlotRing`` (pipeline.transport; sized once, from the plan:
:meth:`BatchPlan.nbytes`), so the hand-over copies nothing. ``copied_bytes`` counts the host
bytes written into new buffers (gathers, stream copies, encode output, copies into the slot).

:class:`BatchProducer` is the map-style dataset of the PyG front-ends (items: whole batches,
from a `planner`'s ``sample`` and ``plan``); the DGL front-end calls :func:`produce` from its
sampler. :class:`SampleOnly` runs only a planner's sampling (the rest in the main process).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Protocol

import torch

from ..codec.base import Codec
from ..layout import CompressedTensor
from .batch import EncodedBatch
from .grouping import (SCALAR_BLOCK, GroupKey, GroupLayout, Member, group_dtype_name, group_key, group_tensors,
                       store_key, SCALARS)
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
        """Tensor `name`: rows `ids` of `table` (a FeatureSource, or what pipeline.sources.as_source
        takes), which goes by the name `store` (default: `name`): a store's compressed rows join its
        own group, raw rows group `key` (default: by dtype and row shape), a served source's rows are
        recorded for the main process, with the rows the workers still read for it."""
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
        if len(parts) == 1 and len(shape) > 1 and name != "edge_index":
            key = group_key(name, parts[0])
        else:
            key = GroupKey(group_dtype_name(parts[0].dtype), (), SCALARS)
        self._add(key, Planned(name, tuple(shape), parts=tuple(parts)))
        if len(parts) == 1:
            self._made.setdefault(id(parts[0]), name)

    def nbytes(self) -> int:
        """The bytes the gathered batch takes (stored rows at their widest, each allocation
        aligned), for a ring slot; encoded output beyond it goes to fresh segments once, then
        the worker's slots grow to hold it."""
        total = 0
        for key, items in self.groups.items():
            n = sum(it.numel for it in items)
            total += (n + SCALAR_BLOCK) * key.torch_dtype.itemsize + ALIGN * (1 + len(items))
        for items in self.stored.values():
            total += sum(int(it.ids.numel()) * it.table.max_row_nbytes for it in items) + 4 * ALIGN
        return total


def _new_nbytes(t: torch.Tensor, sources) -> int:
    """t's bytes when t is not a view of one of `sources` (it is a copy), else 0."""
    start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    within = any(s.data_ptr() <= start and end <= s.data_ptr() + s.numel() * s.element_size() for s in sources)
    return 0 if within else t.numel() * t.element_size()


def place(ct: CompressedTensor, buffers: OutputBuffers) -> CompressedTensor:
    """`ct` with payload and offsets in `buffers` (copied only when they are not in shared memory)."""
    payload = buffers.place(ct.payload)
    offsets = None if ct.offsets is None else buffers.place(ct.offsets)
    if payload is ct.payload and offsets is ct.offsets:
        return ct
    return replace(ct, payload=payload, offsets=offsets)


def _tensor(item: Planned) -> torch.Tensor:
    """An item made whole in private memory (rows of a dtype no codec has are gathered there: torch's
    out= is not safe for all of them, index_select into a quantized out crashes)."""
    if item.table is not None:
        return item.table.read(item.ids)
    t = item.parts[0] if len(item.parts) == 1 else torch.cat([p.reshape(-1) for p in item.parts])
    return t.reshape(item.shape)


def _group(key: GroupKey, items: list[Planned], buffers: OutputBuffers
           ) -> tuple[GroupLayout, torch.Tensor, int]:
    """Group `key`'s tensors written into one buffer of `buffers` (gathered straight into it, or
    copied there; a stream's padding zeroed), its layout and the bytes written. A group of one
    contiguous tensor made already is that tensor; a group of a dtype no codec has is written as
    bytes by grouping.group_tensors."""
    single = len(items) == 1 and items[0].table is None and len(items[0].parts) == 1
    if key.as_bytes or (single and not key.scalar and items[0].parts[0].is_contiguous()):
        tensors = {it.name: _tensor(it) for it in items}
        layout, data = group_tensors(tensors, empty=buffers.empty)[group_key(items[0].name, tensors[items[0].name])]
        made = sum(t.numel() * t.element_size() for it, t in zip(items, tensors.values()) if it.table is not None)
        return layout, data, made + _new_nbytes(data, list(tensors.values()))
    n = sum(it.numel if key.scalar else it.shape[0] for it in items)
    data = buffers.empty((-(-n // SCALAR_BLOCK), SCALAR_BLOCK) if key.scalar else (n,) + key.row_shape,
                         key.torch_dtype)
    flat = data.view(-1) if key.scalar else data
    members, pos = [], 0
    for it in items:
        size = it.numel if key.scalar else it.shape[0]
        out = flat[pos:pos + size]
        if it.table is not None:
            it.table.read(it.ids, out)
        else:
            at = 0
            for p in it.parts:
                if key.scalar:
                    out[at:at + p.numel()].copy_(p.reshape(-1))
                else:
                    out.copy_(p)
                at += p.numel()
        members.append(Member(it.name, it.shape, pos))
        pos += size
    if key.scalar:
        flat[pos:].zero_()
    return GroupLayout(key, tuple(members)), data, data.numel() * data.element_size()


def _stored(store: str, items: list[Planned], buffers: OutputBuffers
            ) -> tuple[GroupKey, CompressedTensor, GroupLayout, int]:
    """A store's compressed rows of every item, read at once into `buffers`: key, group, layout,
    bytes written (the gather, and the offsets' copy into a slot)."""
    table = items[0].table
    ids = torch.cat([it.ids for it in items]) if len(items) > 1 else items[0].ids
    ct = table.read(ids, buffers.empty)
    key = store_key(store, table.dtype, tuple(table.shape[1:]))
    members, pos = [], 0
    for it in items:
        members.append(Member(it.name, it.shape, pos))
        pos += it.shape[0]
    before = buffers.copied
    placed = place(ct, buffers)
    return key, placed, GroupLayout(key, tuple(members)), ct.nbytes + buffers.copied - before


def encode_group(key: GroupKey, data: torch.Tensor, codecs: Mapping[GroupKey, Codec], buffers: OutputBuffers
                 ) -> tuple[CompressedTensor, int]:
    """Group `key`'s `data` encoded with its codec and placed in `buffers`, and the host bytes that
    wrote (encode output that is not a view of `data`, and its copy into `buffers`)."""
    codec = codecs.get(key)
    if codec is None:
        raise KeyError(f"no codec for group {str(key)!r}; codecs exist for {sorted(map(str, codecs))}")
    ct = codec.encode(data)
    copied = _new_nbytes(ct.payload, [data]) + (0 if ct.offsets is None else _new_nbytes(ct.offsets, [data]))
    before = buffers.copied
    placed = place(ct, buffers)
    return placed, copied + buffers.copied - before


def produce(plan: BatchPlan, codecs: Mapping[GroupKey, Codec], buffers: Optional[OutputBuffers] = None, *,
            meta: Any = None, seconds: Optional[dict] = None) -> EncodedBatch:
    """The planned batch, gathered and encoded into `buffers` (``OutputBuffers.for_this_process(ring)``:
    a ring slot in a DataLoader worker; default: plain memory), its slot claimed for the plan's size;
    `seconds` (the front-end's, e.g. "sample") gains "gather" and "encode"."""
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


def encode_tensors(tensors: Mapping[str, torch.Tensor], codecs: Mapping[GroupKey, Codec]) -> EncodedBatch:
    """Named tensors made already, grouped (grouping.group_key) and encoded as a worker would: the batch."""
    plan = BatchPlan()
    for name, t in tensors.items():
        plan.put(name, t)
    return produce(plan, codecs)


class Planner(Protocol):
    """A front-end's half of a batch: its sampling, and the plan of the batch from the sampled output."""

    def __len__(self) -> int: ...

    def sample(self, req: Any) -> Any: ...

    def plan(self, req: Any, sampled: Any) -> tuple[BatchPlan, Any]: ...


class BatchProducer(torch.utils.data.Dataset):
    """Produces EncodedBatches: the `planner` samples and plans each batch, :func:`produce` gathers
    and encodes it. Items are whole batches (the DataLoader hands a worker a request); a worker
    writes its batch into a slot of `ring` (made here, in the main process, before the workers start)."""

    def __init__(self, planner: Planner, codecs: Mapping[GroupKey, Codec]):
        self.planner = planner
        self.codecs = dict(codecs)
        self.ring = SlotRing()

    def __len__(self) -> int:
        return len(self.planner)

    def __getitem__(self, req) -> EncodedBatch:
        return self.encode(req)

    def encode(self, req) -> EncodedBatch:
        """The batch of `req`: sampled, planned, gathered and encoded."""
        out, sample_seconds = self.sample(req)
        plan, meta = self.planner.plan(req, out)
        return produce(plan, self.codecs, OutputBuffers.for_this_process(self.ring), meta=meta,
                       seconds={"sample": sample_seconds})

    def sample(self, req) -> tuple[Any, float]:
        """The planner's sampled output for `req`, and the seconds it took."""
        t0 = time.perf_counter()
        out = self.planner.sample(req)
        return out, time.perf_counter() - t0


__all__ = ["BatchPlan", "Planned", "Planner", "produce", "encode_group", "encode_tensors", "place", "BatchProducer"]
