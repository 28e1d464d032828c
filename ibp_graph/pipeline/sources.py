"""Where the rows of a feature table come from: one interface, for every front-end and mode.

A :class:`FeatureSource` answers "these rows, into this buffer" (`read`) and says what it delivers:
``RAW`` rows, or ``COMPRESSED`` rows (a CompressedTensor of its `codec`). The workers read sources; a
*served* source is read by the main process on the device after the batch is decoded (`fetch`), from
the node ids (and the rows the workers still read: `worker_rows`) the batch carries:

- :class:`TensorSource`: a tensor, or a view of a numpy array or np.memmap: raw rows;
- :class:`StoreSource`: an ``EncodedTable``: compressed rows, each payload chunk verified against its
  checksums before a row of it is read (``EncodedTable.verify_rows``);
- :class:`ZeroCopySource` (served): a store in page-locked host memory, read by the fused gather +
  decode kernel (only the rows' compressed bytes cross PCIe), or gathered and decoded on the CPU;
- :class:`CachedSource` (served): a DeviceCache (pipeline.cache) wrapping a store source: hits decoded
  from device memory, misses from the wrapped source, assembled bit-exactly in order.

``features=``, ``device_cache=`` and DGL's ``node_stores=`` build them (pipeline.features); a user may
pass a source object wherever a node table is accepted. A batch lists its served rows as
:class:`Served` records (``EncodedBatch.served``), which the loader's :class:`Serving` fills in.
"""
from __future__ import annotations

import dataclasses
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np
import torch

from ..codec.base import Codec
from ..data.store import EncodedTable
from ..layout.tensor import CompressedTensor
from .cache import DeviceCache, decode_rows, row_bytes
from .grouping import GroupKey, gather_rows, group_key
from .stats import Tally

#: what a source's `read` delivers.
RAW, COMPRESSED = "raw", "compressed"


class FeatureSource:
    """Rows of one feature table. Subclasses set `delivers`, `shape`, `dtype` and `table` (what the
    codec set-up reads: raw rows, or an EncodedTable whose codec the compressed rows keep) and
    implement `read`; a served one implements `fetch`."""

    delivers: str = RAW
    served: bool = False
    # a served source every rank fetches from once per batch (pipeline.sharded): it has fetch_compressed
    # (collective) and decode (not), which Serving calls on two threads
    collective: bool = False
    shape: tuple[int, ...]
    dtype: torch.dtype
    codec: Optional[Codec] = None  # the codec of COMPRESSED rows
    table: Union[torch.Tensor, EncodedTable]
    store: Optional[EncodedTable] = None  # the pre-encoded table behind the source (caches, zero-copy)

    @property
    def max_row_nbytes(self) -> int:
        """Bytes one row read takes at most (a ring slot is sized with it)."""
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def group_key(self, name: str) -> GroupKey:
        """The group RAW rows read at `name` join (by dtype and row shape)."""
        return group_key(name, torch.empty((0,) + tuple(self.shape[1:]), dtype=self.dtype))

    def read(self, ids: torch.Tensor, into: Any = None) -> Union[torch.Tensor, CompressedTensor]:
        """Rows `ids`, in order: RAW rows written into `into` (a tensor of their shape) when given;
        COMPRESSED rows with their payload from ``into(shape, dtype)`` when given."""
        raise NotImplementedError

    def worker_rows(self, ids: torch.Tensor) -> Optional[tuple["FeatureSource", torch.Tensor]]:
        """What the workers read for rows `ids` of a served source: (source, ids), or None."""
        return None

    def fetch(self, ids: torch.Tensor, sent: Optional[torch.Tensor], tally: Tally, checks=None,
              name: str = "rows") -> torch.Tensor:
        """A served source's rows `ids` decoded on the serving device (`sent`: the rows the workers
        read, decoded; `name`: the batch tensor they fill, for messages), counted into `tally`."""
        raise TypeError(f"{type(self).__name__} is not a served source (it is read in the workers)")

    def prepare(self, device: torch.device) -> None:
        """Make the source ready to serve on `device` (pin, move offsets); once."""

    def release(self) -> None:
        """Undo `prepare` (unregister host memory registered in place)."""

    def end_epoch(self) -> None:
        """A collective source's loader has fetched its epoch's last batch (the other ranks are told)."""


class TensorSource(FeatureSource):
    """Raw rows of a host tensor (or a view of a numpy array / np.memmap), gathered bit for bit."""

    def __init__(self, tensor: torch.Tensor):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"TensorSource takes a torch.Tensor, got {type(tensor).__name__}")
        self.tensor = tensor

    shape = property(lambda self: tuple(self.tensor.shape))
    dtype = property(lambda self: self.tensor.dtype)
    table = property(lambda self: self.tensor)

    def group_key(self, name: str) -> GroupKey:
        return group_key(name, self.tensor[:0])

    def read(self, ids: torch.Tensor, into: Optional[torch.Tensor] = None) -> torch.Tensor:
        return gather_rows(self.tensor, ids, out=into)


class StoreSource(FeatureSource):
    """Compressed rows of a pre-encoded EncodedTable, gathered without decoding (chunks verified first)."""

    delivers = COMPRESSED

    def __init__(self, table: EncodedTable):
        if not isinstance(table, EncodedTable):
            raise TypeError(f"{type(self).__name__} takes an EncodedTable (ibp_graph.data.store), got "
                            f"{type(table).__name__}")
        self._store = table

    shape = property(lambda self: self._store.shape)
    dtype = property(lambda self: self._store.dtype)
    codec = property(lambda self: self._store.codec)
    table = store = property(lambda self: self._store)
    max_row_nbytes = property(lambda self: self._store.compressed.row_nbytes)

    def read(self, ids: torch.Tensor, into: Optional[Callable[..., torch.Tensor]] = None) -> CompressedTensor:
        return self._store.index_select(ids, into)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._store!r})"


class ZeroCopySource(StoreSource):
    """A served store: rows fetched from page-locked host memory and decoded on the device (fused gather
    + decode), or gathered and decoded on the CPU; the chunks the ids need are verified first."""

    served = True

    def __init__(self, table: Union[EncodedTable, StoreSource]):
        super().__init__(table.store if isinstance(table, StoreSource) else table)
        self._device: Optional[torch.device] = None
        self.pinned: Optional[CompressedTensor] = None  # what the fetch reads (page-locked on CUDA)
        self._registration = None  # kept alive while pinned in place

    def __getstate__(self) -> dict:  # a worker never fetches: the pinned copy stays here
        return {**self.__dict__, "_device": None, "pinned": None, "_registration": None}

    def prepare(self, device: torch.device) -> None:
        device = torch.device(device)
        if self.pinned is not None and self._device == device:
            return
        self.release()
        ct = self._store.compressed
        if device.type == "cuda":
            from ..gpu.pinned import pin_table

            pinned, self._registration = pin_table(dataclasses.replace(ct, offsets=None),
                                                   "features='zero_copy': the store")
            ct = dataclasses.replace(pinned, offsets=None if ct.offsets is None else ct.offsets.to(device))
        self.pinned, self._device = ct, device

    def release(self) -> None:
        if self._registration is not None:
            self._registration.release()
            self._registration = None
        self.pinned, self._device = None, None

    def fetch(self, ids: torch.Tensor, sent: Optional[torch.Tensor], tally: Tally, checks=None,
              name: str = "rows") -> torch.Tensor:
        if self.pinned is None:
            raise RuntimeError("ZeroCopySource.fetch before prepare(device): the loader's Serving prepares it")
        guard = self._store.guard
        if guard is not None and not guard.done:
            self._store.verify_rows(ids)
        ids = ids.to(self._device)
        tally.zero_copy_bytes = tally.zero_copy_bytes + row_bytes(self.pinned, ids)
        return decode_rows(self.codec, self.pinned, ids, checks)


class CachedSource(StoreSource):
    """A DeviceCache in front of a store source: hits decoded from device memory, misses read from
    `fallback` (by the workers, or by the main process when `fallback` is served too)."""

    served = True

    def __init__(self, fallback: FeatureSource, cache: DeviceCache):
        if not isinstance(fallback, StoreSource):
            raise TypeError(f"CachedSource caches the compressed rows of a store source (StoreSource, "
                            f"ZeroCopySource), got {type(fallback).__name__}")
        if cache.table is not fallback.store:
            raise ValueError("CachedSource: the cache holds rows of another table than its fallback's store")
        super().__init__(fallback.store)
        self.fallback, self.cache = fallback, cache

    def prepare(self, device: torch.device) -> None:
        self.fallback.prepare(device)

    def release(self) -> None:
        self.fallback.release()

    def worker_rows(self, ids: torch.Tensor) -> Optional[tuple[FeatureSource, torch.Tensor]]:
        return None if self.fallback.served else (self.fallback, ids[~self.cache.hot_mask[ids]])

    def fetch(self, ids: torch.Tensor, sent: Optional[torch.Tensor], tally: Tally, checks=None,
              name: str = "rows") -> torch.Tensor:
        hit_pos, slots, miss_pos = self.cache.split(ids)
        hits = self.cache.decode(slots, checks)
        if self.fallback.served:
            misses = self.fallback.fetch(ids.to(self.cache.device)[miss_pos], None, tally, checks, name)
        elif sent is None or sent.shape[0] != miss_pos.numel():
            raise RuntimeError(f"the workers sent {0 if sent is None else sent.shape[0]} rows of {name!r} for "
                               f"{miss_pos.numel()} cache misses: their cache map differs")
        else:
            misses = sent
        tally.hits = tally.hits + hit_pos.numel()
        tally.misses = tally.misses + miss_pos.numel()
        tally.cache_bytes = tally.cache_bytes + self.cache.hit_bytes(slots)
        return assemble(ids.numel(), hit_pos, hits, miss_pos, misses)

    def __repr__(self) -> str:
        return f"CachedSource({self.fallback!r}, {self.cache!r})"


def as_source(table: Any) -> FeatureSource:
    """`table` as a FeatureSource: a source as it is, an EncodedTable as a StoreSource, a tensor as a TensorSource."""
    if isinstance(table, FeatureSource):
        return table
    return StoreSource(table) if isinstance(table, EncodedTable) else TensorSource(table)


def assemble(n: int, hit_pos: torch.Tensor, hits: torch.Tensor, miss_pos: torch.Tensor,
             misses: torch.Tensor) -> torch.Tensor:
    """Rows in sampled order: out[hit_pos] = hits, out[miss_pos] = misses, copied as bytes (bit exact)."""
    out = torch.empty((n,) + tuple(hits.shape[1:]), dtype=hits.dtype, device=hits.device)
    if n == 0:
        return out
    row = out[0].numel() * out.element_size()
    word = next((d for d in (torch.int64, torch.int32, torch.int16) if row % d.itemsize == 0), torch.uint8)
    # rows seen as whole integer words: a copy of bits, never of values (NaN payloads, -0.0 kept)
    as_bytes = lambda t: t.reshape(-1).view(torch.uint8).view(word).reshape(t.shape[0], -1)  # noqa: E731
    dst = as_bytes(out)
    for pos, rows in ((hit_pos, hits), (miss_pos, misses)):
        if rows.shape[0]:
            dst.index_copy_(0, pos.to(out.device), as_bytes(rows.to(out.device)))
    return out


class Origin:
    """The tensor a served source's store was encoded from by the loader itself (features="zero_copy" or
    device_cache= given a raw tensor): once the rows a batch should see differ from that encode, they are read
    from the tensor, uncompressed, as the worker path reads them. `current()`: the tensor batches read now (the
    front-end's own: PyG's table; DGL's graph column, which may have been replaced); `label`: its name for
    the warning, given once; `hint`: how the user gets compressed rows again."""

    def __init__(self, tensor: torch.Tensor, label: str,
                 hint: str = "build a new loader to serve the new rows compressed",
                 current: Optional[Callable[[], torch.Tensor]] = None):
        self.ref, self.version = weakref.ref(tensor), tensor._version
        self.label, self.hint = label, hint
        self.current = current if current is not None else self.ref
        self.warned = False

    def __getstate__(self) -> dict:  # a copy in another process (a spawned worker) serves nothing: follows nothing
        return {**self.__dict__, "ref": None, "current": None}

    def changed(self) -> Optional[torch.Tensor]:
        """The tensor to read rows from when it is no longer the one encoded, as it was (None: the store is current)."""
        live = None if self.current is None else self.current()
        if live is None or live is self.ref() and live._version == self.version:
            return None
        if not self.warned:
            self.warned = True
            warnings.warn(f"{self.label} changed after the loader encoded it (features='zero_copy' and device_cache= "
                          "serve a copy encoded when the loader was built): batches read its rows from the tensor as "
                          f"it is now, uncompressed; {self.hint}", stacklevel=2)
        return live


@dataclass(frozen=True)
class Served:
    """Rows of served source `source` in a batch: tensor `name` gets rows `ids` (the batch tensor of the
    node ids); `sent`: the workers sent the rows they read at `name`; `own_ids`: the ids tensor was put
    only for this (dropped once served)."""

    name: str
    source: str
    ids: str
    sent: bool
    own_ids: bool


class Serving:
    """A loader's served sources (name -> source), read by its decode stage for each batch's Served rows."""

    def __init__(self, sources: Mapping[str, FeatureSource], device: torch.device,
                 origins: Optional[Mapping[str, Origin]] = None):
        self.sources = dict(sources)
        self.device = torch.device(device)
        self.origins = dict(origins or {})  # the sources the loader encoded from a tensor: Origin
        self._ready = False

    @property
    def caches(self) -> dict[str, DeviceCache]:
        """The device cache of each cached source."""
        return {n: s.cache for n, s in self.sources.items() if isinstance(s, CachedSource)}

    def prepare(self) -> None:
        """Pin the zero-copy stores (on CUDA) and put their offsets on the device; once."""
        if not self._ready:
            for name in sorted(self.sources):  # one order on every rank: a sharded source's set-up is collective
                self.sources[name].prepare(self.device)
            self._ready = True

    def release(self) -> None:
        """Unregister host memory registered in place (the loader no longer serves)."""
        for s in self.sources.values():
            s.release()
        self._ready = False

    @property
    def collective(self) -> list[str]:
        """Names of the sources every rank must fetch from once per batch, in this order (sharded tables)."""
        return sorted(n for n, s in self.sources.items() if getattr(s, "collective", False))

    def end_epoch(self) -> None:
        """Every batch of the epoch was served: the collective sources tell the other ranks, in one order."""
        for name in self.collective:
            self.sources[name].end_epoch()

    def exchange(self, served, tensors: Mapping[str, torch.Tensor]) -> dict:
        """The collective sources' rows of a batch, still compressed (name -> their `fetch_compressed`):
        each fetched from once, whether the batch has rows of it or not (its records' ids together), so
        that every rank's exchange pairs with the others'. `fill` decodes them; both may run on
        different threads (the exchange of the next batch overlapping the decode of this one)."""
        self.prepare()
        out = {}
        for name in self.collective:
            records = [s for s in served if s.source == name]
            ids = [tensors[s.ids] for s in records]
            out[name] = self.sources[name].fetch_compressed(torch.cat(ids) if ids else torch.zeros(0, dtype=torch.int64),
                                                    records[0].name if records else name)
        return out

    def fill(self, served, tensors: dict, stored: Mapping[GroupKey, CompressedTensor], checks=None,
             exchanged: Optional[dict] = None) -> Tally:
        """Put the rows of every `served` record into the decoded `tensors` (dropping ids sent only for
        them); `stored`: the batch's compressed groups (the workers' misses are counted from them);
        `exchanged`: the collective sources' rows (`exchange`), fetched now when not given. Call on the
        stream that decoded the batch."""
        self.prepare()
        for s in served:
            if s.source not in self.sources:
                raise KeyError(f"the batch has rows of source {s.source!r} to serve; this loader serves "
                               f"{sorted(self.sources)}")
        exchanged = self.exchange(served, tensors) if exchanged is None else exchanged
        tally, out = Tally(), {}
        for s in served:
            live = self.origins[s.source].changed() if s.source in self.origins else None
            if live is not None:  # the tensor changed since its encode: its rows as they are now
                ids = tensors[s.ids]
                out[s.name] = gather_rows(live, ids.to(live.device)).to(self.device)
            elif s.source not in exchanged:
                out[s.name] = self.sources[s.source].fetch(tensors[s.ids], tensors.get(s.name) if s.sent else None,
                                                           tally, checks, s.name)
        for name, fetched in exchanged.items():
            records = [s for s in served if s.source == name]
            rows = self.sources[name].decode(fetched, tally, checks)
            out.update(zip((s.name for s in records), rows.split([int(tensors[s.ids].numel()) for s in records])))
        sent_by = {s.source for s in served if s.sent}
        tally.worker_bytes = sum(ct.nbytes for k, ct in stored.items() if k.name in sent_by)
        for s in served:
            if s.own_ids:
                tensors.pop(s.ids, None)
        tensors.update(out)
        return tally


__all__ = ["FeatureSource", "TensorSource", "StoreSource", "ZeroCopySource", "CachedSource", "Origin", "Served",
           "Serving", "Tally", "as_source", "assemble", "RAW", "COMPRESSED"]
