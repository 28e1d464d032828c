"""Where a batch's node features are read: ``features=`` and ``device_cache=`` build the feature sources.

Each node feature table becomes a FeatureSource (pipeline.sources):

- ``"worker"``: read by the workers (a tensor's raw rows, encoded there, or a store's compressed
  rows) and sent through shared memory;
- ``"zero_copy"``: a ZeroCopySource: the workers send the node ids only and the main process
  fetches the rows from the pinned store (a raw tensor is encoded into one once, in memory, with
  the loader's `codec`; PinError when it cannot be pinned); on the CPU stand-in it gathers and
  decodes them there, so tests cover it;
- ``"auto"`` (default): zero-copy on a CUDA device when every feature table is already a
  store and the stores fit in pinned memory (at most half the host's available RAM), else worker.

With ``device_cache=`` (pipeline.cache) each source is wrapped in a CachedSource (hot rows decoded
from device memory, misses from the source). A table given as a source object is used as it is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np
import torch

from ..data.store import EncodedTable
from ..resources import available_memory as available_host_memory  # bytes of memory this process can use now
from .cache import DeviceCache, cache_budget, degree_hotness
from .sources import CachedSource, FeatureSource, Serving, StoreSource, ZeroCopySource, as_source

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
    """"worker" or "zero_copy" for `features` on `device`, given the feature `tables` (name -> table).

    "auto" picks zero_copy on CUDA when every table is an EncodedTable (or a source backed by one)
    and their bytes fit in half of the `available` host memory (default: MemAvailable), else worker.
    """
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
    """The node attributes that are feature tables (rows of 2-d and up, stores, or source objects);
    labels and other 1-d attributes stay with the workers."""
    return {k: t for k, t in node_attrs.items() if isinstance(t, (EncodedTable, FeatureSource)) or t.dim() >= 2}


def as_store(table: Any, codec) -> EncodedTable:
    """`table` as a pre-encoded store: itself if it is one (or a source backed by one), else encoded
    once in memory with `codec` (a name, or a fitted codec used when it matches the table's dtype and
    row shape)."""
    source = as_source(table)
    if source.store is not None:
        return source.store
    table = source.table
    if not isinstance(codec, str) and (codec.dtype != table.dtype or tuple(codec.row_shape) != tuple(table.shape[1:])):
        codec = "auto"
    return EncodedTable.encode(table.contiguous(), codec, progress=False)


def codec_tables(node_attrs: Mapping[str, Any]) -> dict:
    """Node attributes as the codec set-up reads them: a source as its table (a tensor, or a store
    whose codec its rows keep), anything else as it is."""
    return {n: t.table if isinstance(t, FeatureSource) else t for n, t in node_attrs.items()}


@dataclass
class FeaturePlan:
    """A loader's feature set-up: the mode, every node attribute as the batch plans read it (feature
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
        """Every attribute a codec is set up for, as the codec set-up reads it (codec_tables)."""
        return codec_tables(self.node_attrs)

    def describe(self) -> str:
        """One line for a loader's repr: the mode and each cache's capacity."""
        caches = "; ".join(f"{n}: {c.capacity}" for n, c in self.caches.items())
        return self.mode + (f", device_cache {caches}" if caches else "")


def plan_features(node_attrs: Mapping[str, Any], *, features: str, device_cache: Union[int, float],
                  device: torch.device, indices: Union[np.ndarray, Callable[[], np.ndarray]], codec: Any = "auto",
                  available: Optional[int] = None) -> FeaturePlan:
    """Each node feature table as a FeatureSource: the mode (resolve_mode) makes them ZeroCopySources
    or leaves them read by the workers, a cache wraps each in a CachedSource; a source object given
    stays. `indices`: the CSC graph's neighbour lists, or a function returning them (read only for a
    cache, which ranks nodes by their appearances there)."""
    check_features(features)
    device = torch.device(device)
    budget = cache_budget(device_cache, device)
    tables = feature_tables(node_attrs)
    mode = resolve_mode(features, device, tables, available)
    sources = {n: as_source(t) for n, t in tables.items()}
    if mode == ZERO_COPY:
        sources = {n: s if s.served else ZeroCopySource(as_store(s, codec)) for n, s in sources.items()}
    uncached = [n for n, s in sources.items() if not isinstance(s, CachedSource)]
    if budget and uncached:
        stores = {n: as_store(sources[n], codec) for n in uncached}
        hot = degree_hotness(indices() if callable(indices) else indices, next(iter(stores.values())).n_rows)
        for n, store in stores.items():
            fallback = sources[n] if isinstance(sources[n], StoreSource) else StoreSource(store)
            sources[n] = CachedSource(fallback, DeviceCache(store, hot, budget // len(stores), device))
    served = {n: s for n, s in sources.items() if s.served}
    return FeaturePlan(mode, {**node_attrs, **sources}, Serving(served, device) if served else None)


__all__ = ["FEATURE_MODES", "available_host_memory", "FeaturePlan", "plan_features", "resolve_mode", "check_features",
           "as_store", "feature_tables", "codec_tables"]
