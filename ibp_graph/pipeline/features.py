"""``features=`` and ``device_cache=``: builders of a loader's feature sources (pipeline.sources).

Each node feature table becomes a FeatureSource, by mode: ``"worker"`` (read by the workers: a
tensor's raw rows, encoded there, or a store's compressed rows); ``"zero_copy"`` (a ZeroCopySource:
the workers send node ids only; a raw tensor is encoded into a store once, in memory, with the
loader's `codec`; PinError when it cannot be pinned); ``"auto"`` (default: zero-copy on CUDA when
every feature table is a store and they fit in half the available host memory, else worker).
``device_cache=`` wraps each in a CachedSource (pipeline.cache). A source object given stays as it is.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np
import torch

from ..data.store import EncodedTable
from ..resources import available_memory as available_host_memory  # bytes of memory this process can use now
from .cache import SLOT_BYTES, DeviceCache, cache_budget, degree_hotness
from .sources import CachedSource, FeatureSource, Origin, Serving, StoreSource, TensorSource, ZeroCopySource, as_source

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


def resolve_mode(features: str, device: torch.device, tables: Mapping[str, Any],
                 available: Optional[int] = None) -> str:
    """"worker" or "zero_copy" for `features` on `device`, given the feature `tables` (name -> table)
    and the `available` host memory (default: MemAvailable) for "auto"."""
    if check_features(features) != AUTO:
        return features
    if torch.device(device).type != "cuda" or not tables:
        return WORKER
    stores = [as_source(t).store for t in tables.values()]
    if any(s is None for s in stores):
        return WORKER
    need = sum(t.nbytes for t in stores if not t.compressed.is_pinned())
    room = available_host_memory() if available is None else available
    return ZERO_COPY if need <= room // 2 else WORKER


def feature_tables(node_attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The node attributes that are feature tables (2-d and up, stores, sources); 1-d ones (labels)
    stay with the workers."""
    return {k: t for k, t in node_attrs.items() if isinstance(t, (EncodedTable, FeatureSource)) or t.dim() >= 2}


def as_store(table: Any, codec) -> EncodedTable:
    """`table` as a pre-encoded store: its own (a store, or a source backed by one), else encoded once
    in memory with `codec` (a name, or a fitted codec, used when it matches dtype and row shape)."""
    source = as_source(table)
    if source.store is not None:
        return source.store
    table = source.table
    if not isinstance(codec, str) and (codec.dtype != table.dtype or tuple(codec.row_shape) != tuple(table.shape[1:])):
        codec = "auto"
    return EncodedTable.encode(table.contiguous(), codec, progress=False)


def codec_tables(node_attrs: Mapping[str, Any]) -> dict:
    """Node attributes as the codec set-up reads them: a source as its `table`, anything else as it is."""
    return {n: t.table if isinstance(t, FeatureSource) else t for n, t in node_attrs.items()}


@dataclass
class FeaturePlan:
    """A loader's feature set-up: the mode, the node attributes as the batch plans read them (feature
    tables as FeatureSources), and the sources the main process serves."""

    mode: str
    node_attrs: dict
    serving: Optional[Serving] = None

    @property
    def caches(self) -> dict:
        """The device cache of each cached table."""
        return {} if self.serving is None else self.serving.caches

    @property
    def codec_attrs(self) -> dict:
        """The node attributes as the codec set-up reads them (codec_tables)."""
        return codec_tables(self.node_attrs)

    def describe(self) -> str:
        """One line for a loader's repr: the mode and each cache's capacity."""
        caches = "; ".join(f"{n}: {c.capacity}" for n, c in self.caches.items())
        return self.mode + (f", device_cache {caches}" if caches else "")


def plan_features(node_attrs: Mapping[str, Any], *, features: str, device_cache: Union[int, float],
                  device: torch.device, hotness: Callable[[str], np.ndarray], codec: Any = "auto",
                  available: Optional[int] = None,
                  origin: Optional[Callable[[str, torch.Tensor], Origin]] = None) -> FeaturePlan:
    """The FeaturePlan of `node_attrs`. `hotness(name)`: how often each row of table `name` can be drawn (e.g.
    `neighbour_hotness`), asked only for a cache (the device cache's, or a sharded table's without a hotness of
    its own). The device cache budget is shared equally by the tables it caches. A table encoded here from a
    tensor is served from that tensor once it changes (sources.Origin): `origin(name, tensor)` says how the
    front-end names and finds it (default: that tensor, by its name)."""
    check_features(features)
    origins: dict[str, Origin] = {}

    def encoded(n: str, s: FeatureSource) -> EncodedTable:
        if isinstance(s, TensorSource):
            origins[n] = origin(n, s.tensor) if origin is not None else Origin(s.tensor, repr(n))
        return as_store(s, codec)

    device = torch.device(device)
    budget = cache_budget(device_cache, device)
    tables = feature_tables(node_attrs)
    mode = resolve_mode(features, device, tables, available)
    sources = {n: as_source(t) for n, t in tables.items()}
    for n, s in sources.items():
        if not s.collective:
            continue
        if budget:
            raise ValueError(f"device_cache={device_cache!r} with the sharded table {n!r} is not accepted: its "
                             "ShardedSource caches hot remote rows itself (cache_bytes=, device_cache_bytes=); "
                             "use device_cache=0")
        if s.cache_budget and s.hotness is None:  # hot remote rows ranked like the device cache's
            s.hotness = functools.partial(hotness, n)
    if mode == ZERO_COPY:
        sources = {n: s if s.served else ZeroCopySource(encoded(n, s)) for n, s in sources.items()}
    uncached = [n for n, s in sources.items() if not isinstance(s, CachedSource)]
    if budget and uncached:
        _check_shares(device_cache, budget, {n: sources[n].shape[0] for n in uncached})
        for n in uncached:
            store = encoded(n, sources[n])
            fallback = sources[n] if isinstance(sources[n], StoreSource) else StoreSource(store)
            sources[n] = CachedSource(fallback, DeviceCache(store, hotness(n), budget // len(uncached), device))
    served = {n: s for n, s in sources.items() if s.served}
    return FeaturePlan(mode, {**node_attrs, **sources},
                       Serving(served, device, {n: o for n, o in origins.items() if n in served}) if served else None)


def _check_shares(device_cache: Union[int, float], budget: int, rows: Mapping[str, int]) -> None:
    """ValueError naming `device_cache` unless its equal share holds each table's slot map (`rows`: the tables'
    row counts); one table's cache checks its own."""
    share = budget // len(rows)
    short = {n: r for n, r in rows.items() if share < r * SLOT_BYTES}
    if len(rows) > 1 and short:
        need = len(rows) * max(rows.values()) * SLOT_BYTES
        raise ValueError(f"device_cache={device_cache!r} ({budget:,} bytes) is shared by {len(rows)} tables, "
                         f"{share:,} bytes each, which cannot hold the slot map of "
                         + ", ".join(f"{n!r} ({r:,} nodes)" for n, r in short.items())
                         + f" ({SLOT_BYTES} B per node); accepted: 0 (no cache) or >= {need:,} bytes")


def neighbour_hotness(indices: Union[np.ndarray, Callable[[], np.ndarray]], num_nodes: int
                      ) -> Callable[[str], np.ndarray]:
    """`plan_features`' hotness for a graph of one node type, whatever the table: degree_hotness of its
    neighbour lists (`indices`, or a function returning them), counted when first asked for, then kept."""
    kept: list = []

    def hotness(name: str) -> np.ndarray:
        if not kept:
            kept.append(degree_hotness(indices() if callable(indices) else indices, num_nodes))
        return kept[0]
    return hotness


__all__ = ["FEATURE_MODES", "available_host_memory", "FeaturePlan", "plan_features", "resolve_mode", "check_features",
           "as_store", "feature_tables", "codec_tables", "neighbour_hotness"]
