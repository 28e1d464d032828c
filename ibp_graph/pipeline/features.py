"""Where a batch's node features come from: the DataLoader workers, or the main process (zero-copy).

``features=`` of both loaders:

- ``"worker"``: the workers gather each batch's feature rows (raw rows, encoded there, or
  compressed rows of a pre-encoded store) and send them through shared memory;
- ``"zero_copy"``: the workers sample only and send the node ids; the main process
  fetches the rows of each feature table from a pre-encoded store (``EncodedTable``)
  whose payload is page-locked host memory, with the fused gather + decode kernel
  (:func:`ibp_graph.gpu.fetch`) on the decode stage's side stream, so only the selected
  rows' compressed bytes cross PCIe and the CPU copies none of them. The whole store must
  be resident and pinned (its compressed bytes of host RAM, registered in place or copied
  once: :func:`ibp_graph.gpu.pinned.pin_table`; a table that cannot be pinned raises
  PinError), and its offsets live in device memory (4 or 8 bytes per node). A feature
  given as a raw tensor is encoded once, in memory, into such a store with the loader's
  `codec` choice (memory: the compressed table). Without a GPU the same mode gathers the
  compressed rows in the main process and decodes them on the CPU, so tests cover it.
  A store loaded from a folder has the chunks the ids need verified on the host before
  the fetch (``EncodedTable.verify_rows``; a flag test once all are verified);
- ``"auto"`` (default): zero-copy on a CUDA device when every feature table is already a
  store and the stores fit in pinned memory (at most half the host's available RAM),
  else worker.

With ``device_cache=`` (pipeline.cache) the hottest rows are decoded from device memory
and only the misses come from the zero-copy store or the workers; a batch is assembled
bit-exactly in its sampled order either way. Hits, misses and bytes per tier are counted
into the loader's stats.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np
import torch

from ..codec.base import Codec
from ..data.store import EncodedTable
from .cache import DeviceCache, cache_budget, degree_hotness, miss_rows

#: what `features=` accepts.
FEATURE_MODES = ("worker", "zero_copy", "auto")
WORKER, ZERO_COPY, AUTO = FEATURE_MODES


def check_features(features: Any) -> str:
    """`features=` checked: one of FEATURE_MODES."""
    if not isinstance(features, str) or features not in FEATURE_MODES:
        raise ValueError(f"features={features!r} is not accepted; use one of {FEATURE_MODES} "
                         "('worker': rows gathered in the DataLoader workers; 'zero_copy': fetched by the "
                         "main process from a pinned pre-encoded store; 'auto': zero_copy on a GPU when "
                         "the stores fit in pinned memory)")
    return features


def available_host_memory() -> int:
    """Bytes of host RAM available now (MemAvailable), or the physical memory when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def resolve_mode(features: str, device: torch.device, tables: Mapping[str, Any],
                 available: Optional[int] = None) -> str:
    """"worker" or "zero_copy" for `features` on `device`, given the feature `tables` (name -> table).

    "auto" picks zero_copy on CUDA when every table is an EncodedTable and their bytes fit
    in half of the `available` host memory (default: MemAvailable), else worker.
    """
    check_features(features)
    if features != AUTO:
        return features
    if torch.device(device).type != "cuda" or not tables:
        return WORKER
    if not all(isinstance(t, EncodedTable) for t in tables.values()):
        return WORKER
    need = sum(t.nbytes for t in tables.values() if not t.compressed.is_pinned())
    room = available_host_memory() if available is None else available
    return ZERO_COPY if need <= room // 2 else WORKER


def feature_tables(node_attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The node attributes that are feature tables (rows of 2-d and up, or stores); labels and
    other 1-d attributes stay with the workers."""
    return {k: t for k, t in node_attrs.items() if isinstance(t, EncodedTable) or t.dim() >= 2}


def as_store(name: str, table: Any, codec) -> EncodedTable:
    """`table` as a pre-encoded store: itself if it is one, else encoded once in memory with `codec`
    (a name, or a fitted codec used when it matches the table's dtype and row shape)."""
    if isinstance(table, EncodedTable):
        return table
    if not isinstance(codec, str) and (codec.dtype != table.dtype
                                       or tuple(codec.row_shape) != tuple(table.shape[1:])):
        codec = "auto"
    return EncodedTable.encode(table.contiguous(), codec, progress=False)


#: marks a tensor of node ids sent in place of a feature's rows (ids_name).
IDS_MARK = "@ids:"


@dataclass
class Fetched:
    """One batch's feature rows fetched by the main process, and what to count for them."""

    tensors: dict[str, torch.Tensor]
    counts: Optional[torch.Tensor] = None  # int64 [hits, misses, cache bytes, zero-copy bytes]
    worker_bytes: int = 0
    drop: list = field(default_factory=list)  # ids tensors the batch no longer needs

    def apply(self, batch: dict) -> None:
        """Put the fetched rows into a decoded batch and drop the ids sent for them."""
        for k in self.drop:
            batch.pop(k, None)
        batch.update(self.tensors)


@dataclass
class _Source:
    """One feature table served by the main process: its store (zero-copy) and/or its cache."""

    name: str
    table: EncodedTable
    zero_copy: bool
    cache: Optional[DeviceCache]
    pinned: Any = None            # the CompressedTensor the fetch reads (pinned on CUDA)
    registration: Any = None      # kept alive while pinned in place


class FeatureSource:
    """The main-process half of the feature modes: rows of the zero-copy and cached tables per batch.

    `sources` maps the attribute name to its store; `zero_copy` names those fetched here
    (the others, when cached, come from the workers as misses); `caches` the DeviceCache of
    an attribute. `ids` is the batch tensor holding the node ids ("n_id").
    """

    def __init__(self, tables: Mapping[str, EncodedTable], zero_copy: set, caches: Mapping[str, DeviceCache],
                 device: torch.device, ids: str = "n_id"):
        self.device = torch.device(device)
        self.ids = ids
        self.sources = {n: _Source(n, t, n in zero_copy, caches.get(n)) for n, t in tables.items()}
        self._ready = False

    @property
    def caches(self) -> dict[str, DeviceCache]:
        """The device cache of each cached attribute."""
        return {n: s.cache for n, s in self.sources.items() if s.cache is not None}

    def prepare(self) -> None:
        """Pin the zero-copy stores (on CUDA) and put their offsets on the device; once."""
        if self._ready:
            return
        for s in self.sources.values():
            if not s.zero_copy:
                continue
            ct = s.table.compressed
            if self.device.type == "cuda":
                from ..gpu.pinned import pin_table

                payload_ct = dataclasses.replace(ct, offsets=None) if ct.offsets is not None else ct
                pinned, s.registration = pin_table(payload_ct, f"features={ZERO_COPY!r}: the store of {s.name!r}")
                offsets = None if ct.offsets is None else ct.offsets.to(self.device)
                s.pinned = dataclasses.replace(pinned, offsets=offsets)
            else:
                s.pinned = ct
        self._ready = True

    def release(self) -> None:
        """Unregister host memory registered in place (the loader no longer fetches)."""
        for s in self.sources.values():
            if s.registration is not None:
                s.registration.release()
                s.registration = None
        self._ready = False

    # ---- per batch -----------------------------------------------------------
    @staticmethod
    def _row_bytes(s: _Source, ids: torch.Tensor) -> torch.Tensor:
        """Compressed bytes of rows `ids` of the store (a 0-d tensor on their device; no wait)."""
        o = s.pinned.offsets
        if o is None:
            return torch.tensor(ids.numel() * s.table.compressed.row_nbytes, device=ids.device)
        return (o[ids + 1].to(torch.int64) - o[ids].to(torch.int64)).sum()

    def _zero_copy(self, s: _Source, ids: torch.Tensor, checks) -> torch.Tensor:
        """Rows `ids` of the store: fused gather + decode on the GPU, or gather + decode on the CPU; the
        store's chunks they need verified on the host first (until all are: EncodedTable.verify_rows)."""
        guard = s.table.guard
        if guard is not None and not guard.done:
            s.table.verify_rows(ids)
        if self.device.type == "cuda":
            from .. import gpu

            return gpu.fetch(s.table.codec, s.pinned, ids, checks=checks)
        return s.table.codec.decode(s.pinned.index_select(ids))

    def _slots(self, tensors: Mapping[str, torch.Tensor]) -> list[tuple[str, _Source, torch.Tensor]]:
        """(output name, source, node ids) of each table to serve in a batch: the tables named by
        ids tensors (``ids_name``: a front-end whose features sit in several places), else every
        source at the batch's node ids (`self.ids`)."""
        marked = [k for k in tensors if IDS_MARK in k]
        if not marked:
            return [(n, s, tensors[self.ids]) for n, s in self.sources.items()]
        return [(k.split(IDS_MARK)[0], self.sources[k.split(IDS_MARK)[1]], tensors[k]) for k in marked]

    def fill(self, tensors: Mapping[str, torch.Tensor], stored_bytes: Mapping[str, int],
             checks=None) -> Fetched:
        """The rows of every served table for one decoded batch (`tensors`: its named tensors,
        with the worker-sent misses of cached tables; `stored_bytes`: compressed bytes the
        workers sent per attribute). Call on the stream that decoded the batch."""
        self.prepare()
        counts = torch.zeros(4, dtype=torch.int64, device=self.device)
        out, worker_bytes = {}, 0
        for name, s, ids in self._slots(tensors):
            if s.cache is None:
                out[name] = self._zero_copy(s, ids, checks)
                counts[3] += self._row_bytes(s, ids.to(self.device))
                continue
            hit_pos, slots, miss_pos = s.cache.split(ids)
            hits = s.cache.decode(slots, checks)
            if s.zero_copy:
                miss_ids = ids.to(self.device)[miss_pos]
                misses = self._zero_copy(s, miss_ids, checks)
                counts[3] += self._row_bytes(s, miss_ids)
            else:
                misses = tensors[name]  # the workers sent the misses, in sampled order
                worker_bytes += int(stored_bytes.get(name, 0))
                if misses.shape[0] != miss_pos.numel():
                    raise RuntimeError(f"the workers sent {misses.shape[0]} rows of {name!r} for "
                                       f"{miss_pos.numel()} cache misses: their cache map differs")
            counts[0] += hit_pos.numel()
            counts[1] += miss_pos.numel()
            counts[2] += s.cache.hit_bytes(slots)
            out[name] = assemble(ids.numel(), hit_pos, hits, miss_pos, misses)
        return Fetched(out, counts, worker_bytes, [k for k in tensors if IDS_MARK in k])


def ids_name(name: str, table: str) -> str:
    """The name under which a worker sends the node ids of feature `table` wanted at `name`."""
    return f"{name}{IDS_MARK}{table}"


def worker_ids(plan: Optional["FeaturePlan"], name: str, table: Optional[str], ids: torch.Tensor
               ) -> tuple[dict, Optional[torch.Tensor]]:
    """For feature `table` wanted at `name` (rows of nodes `ids`): the ids a worker sends for the main
    process to serve ({} when it serves none of them), and the ids whose rows the worker still
    gathers (all of them in worker mode, the device cache's misses with a cache, None for zero-copy)."""
    src = None if plan is None or plan.source is None or table is None else plan.source.sources.get(table)
    if src is None:
        return {}, ids
    return {ids_name(name, table): ids}, (None if src.zero_copy else ids[~src.cache.hot_mask[ids]])


def worker_tensors(plan: Optional["FeaturePlan"], name: str, table: Optional[str], ids: torch.Tensor,
                   fetch) -> dict:
    """What a worker puts into a batch for feature `table` wanted at `name` (rows of nodes `ids`;
    `fetch(ids)` gathers raw rows): the rows (worker mode), the ids only (zero-copy), or the ids
    and the rows the device cache lacks (worker mode with a cache)."""
    out, rest = worker_ids(plan, name, table, ids)
    if rest is not None:
        out[name] = fetch(rest)
    return out


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
    if hits.shape[0]:
        dst.index_copy_(0, hit_pos.to(out.device), as_bytes(hits))
    if misses.shape[0]:
        dst.index_copy_(0, miss_pos.to(out.device), as_bytes(misses.to(out.device)))
    return out


@dataclass
class FeaturePlan:
    """A loader's feature set-up: the mode, what the workers gather, and the main-process source."""

    mode: str
    worker_attrs: dict
    source: Optional[FeatureSource] = None
    caches: dict = field(default_factory=dict)

    @property
    def codec_attrs(self) -> dict:
        """Every attribute a codec is set up for: what the workers gather, and the stores served here."""
        tables = {} if self.source is None else {n: s.table for n, s in self.source.sources.items()}
        return {**tables, **self.worker_attrs}

    def describe(self) -> str:
        """One line for a loader's repr: the mode and each cache's capacity."""
        caches = "; ".join(f"{n}: {c.capacity}" for n, c in self.caches.items())
        return f"{self.mode}" + (f", device_cache {caches}" if caches else "")


def plan_features(node_attrs: Mapping[str, Any], *, features: str, device_cache: Union[int, float],
                  device: torch.device, indices: Union[np.ndarray, Callable[[], np.ndarray]], codec: Any = "auto",
                  available: Optional[int] = None) -> FeaturePlan:
    """Decide where each node feature table is read: the mode (resolve_mode), the attributes the
    workers gather (zero-copy tables removed; cached ones gathering misses only), and the
    main-process FeatureSource (None in worker mode without a cache). `indices`: the CSC graph's
    neighbour lists, or a function returning them (read only for a cache, which ranks nodes by
    their appearances there)."""
    check_features(features)
    device = torch.device(device)
    budget = cache_budget(device_cache, device)
    tables = feature_tables(node_attrs)
    mode = resolve_mode(features, device, tables, available)
    if (mode == WORKER and budget == 0) or not tables:
        return FeaturePlan(mode, dict(node_attrs))
    stores = {n: as_store(n, t, codec) for n, t in tables.items()}
    caches = {}
    if budget:
        hot = degree_hotness(indices() if callable(indices) else indices, next(iter(stores.values())).n_rows)
        share = budget // len(stores)
        caches = {n: DeviceCache(t, hot, share, device) for n, t in stores.items()}
    zero_copy = set(stores) if mode == ZERO_COPY else set()
    worker_attrs = {n: t for n, t in node_attrs.items() if n not in zero_copy}
    for n in stores:
        if n not in zero_copy:
            worker_attrs[n] = miss_rows(stores[n], caches.get(n))
    return FeaturePlan(mode, worker_attrs, FeatureSource(stores, zero_copy, caches, device), caches)


def stored_bytes(groups: Mapping, names) -> dict[str, int]:
    """Compressed bytes a batch's store groups carry for the attributes `names` (by attribute)."""
    return {k.name: ct.nbytes for k, ct in groups.items() if k.name in names}


__all__ = ["FEATURE_MODES", "ids_name", "worker_tensors", "FeaturePlan", "FeatureSource", "Fetched", "plan_features",
           "resolve_mode", "check_features", "assemble", "as_store", "stored_bytes"]
