"""A compressed cache of hot feature rows in device memory: which nodes, where, and their lookup.

A budget of device memory (``device_cache=``: bytes, or a fraction of the device's
memory) holds the *compressed* rows of the nodes most likely to be sampled, so that the
same budget holds ~1.2x (dense) to ~100x (bag-of-words) more rows than a raw cache.
Nodes are ranked by how often the sampler can draw them (:func:`degree_hotness`: their
appearances in the CSC graph's neighbour lists) or by counts of a warm-up epoch
(:func:`count_hotness`). The budget pays for a slot map (4 bytes per node: the node's
row in the cache, or -1) and the rows with their offsets; the hottest rows that fit are
cached, in rank order.

A batch's rows are split by the map into hits (decoded from the cache) and misses (from
the zero-copy or worker path); ``pipeline.sources.CachedSource`` (the cache as a wrapper
around a store's source) assembles them in sampled order.
On a CUDA device the cache lives in device memory and hits decode with
:func:`ibp_graph.gpu.fetch`; on the CPU the same object is the stand-in (the rows kept
in a host tensor standing for device memory, hits decoded by the codec), so the index
mapping runs in every test.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Union

import numpy as np
import torch

from ..data.store import EncodedTable
from ..layout.tensor import CompressedTensor

#: bytes per node of the slot map (int32: a node's row in the cache, or -1).
SLOT_BYTES = 4
#: what `device_cache=` accepts, for messages.
ACCEPTED = ("an int number of bytes >= 0 (0: no cache), or a float fraction in (0, 1] of the "
            "device's memory")


def device_memory(device: torch.device) -> int:
    """Total memory of `device`: the GPU's, or the host's physical memory for the CPU stand-in."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def cache_budget(device_cache: Union[int, float], device: torch.device) -> int:
    """`device_cache=` as bytes on `device`; ValueError/TypeError naming the value and what is accepted."""
    if isinstance(device_cache, bool) or not isinstance(device_cache, (int, float)):
        raise TypeError(f"device_cache={device_cache!r} is not accepted; use {ACCEPTED}")
    if isinstance(device_cache, int):
        if device_cache < 0:
            raise ValueError(f"device_cache={device_cache!r} is not accepted; use {ACCEPTED}")
        return device_cache
    if not 0.0 < device_cache <= 1.0:
        raise ValueError(f"device_cache={device_cache!r} is not accepted; use {ACCEPTED}")
    return int(device_cache * device_memory(device))


def degree_hotness(indices: np.ndarray, num_nodes: int) -> np.ndarray:
    """How often each node can be drawn as a neighbour: its appearances in a CSC graph's
    ``indices`` (its out-degree; the in-degree of an undirected graph)."""
    return np.bincount(np.asarray(indices), minlength=num_nodes)[:num_nodes]


def count_hotness(n_ids: Iterable[torch.Tensor], num_nodes: int) -> np.ndarray:
    """How often each node appeared in the given batches' ``n_id`` (e.g. one warm-up epoch)."""
    counts = np.zeros(num_nodes, dtype=np.int64)
    for n_id in n_ids:
        counts += np.bincount(n_id.detach().cpu().numpy(), minlength=num_nodes)[:num_nodes]
    return counts


@dataclass(frozen=True)
class Capacity:
    """What a budget holds: rows cached compressed, rows a raw cache of the same budget would hold."""

    budget_bytes: int
    map_bytes: int
    rows_bytes: int
    rows: int
    raw_rows: int
    num_nodes: int

    @property
    def gain(self) -> float:
        """Rows cached compressed per row a raw cache would hold (inf when a raw cache holds none)."""
        return self.rows / self.raw_rows if self.raw_rows else float("inf") if self.rows else 1.0

    def as_dict(self) -> dict:
        """Plain values for JSON and stats."""
        return {"budget_bytes": self.budget_bytes, "map_bytes": self.map_bytes,
                "rows_bytes": self.rows_bytes, "rows": self.rows, "raw_rows": self.raw_rows,
                "num_nodes": self.num_nodes, "fraction_of_nodes": self.rows / max(1, self.num_nodes)}

    def __str__(self) -> str:
        return (f"{self.rows:,} of {self.num_nodes:,} rows compressed in {self.budget_bytes / 1e6:.1f} MB "
                f"(a raw cache would hold {self.raw_rows:,}; {self.gain:.2f}x)")


class DeviceCache:
    """The compressed rows of one table's hottest nodes on `device`, and the node -> slot map."""

    def __init__(self, table: EncodedTable, hotness: np.ndarray, budget: int, device: torch.device,
                 argname: str = "device_cache"):
        n = table.n_rows
        hotness = np.asarray(hotness)
        if hotness.shape != (n,):
            raise ValueError(f"hotness has shape {hotness.shape}; accepted: one score per row ({n},)")
        map_bytes = n * SLOT_BYTES
        if 0 < budget < map_bytes:
            raise ValueError(f"{argname}={budget} bytes cannot hold the slot map of {n:,} nodes "
                             f"({SLOT_BYTES} B per node = {map_bytes} bytes); accepted: 0 (no cache) or "
                             f">= {map_bytes} bytes")
        self.table = table
        self.device = torch.device(device)
        order = np.argsort(-hotness, kind="stable")
        lengths = table.compressed.row_lengths().numpy()[order]
        per_row = lengths + (0 if table.compressed.offsets is None else 8)  # offsets: int64 at worst
        from ..layout.rows import PAYLOAD_TAIL

        room = max(0, budget - map_bytes - PAYLOAD_TAIL - 16)
        k = int(np.searchsorted(np.cumsum(per_row), room, side="right")) if budget else 0
        hot = torch.from_numpy(np.ascontiguousarray(order[:k]).astype(np.int64))
        rows = table.index_select(hot)
        slots = torch.full((n,), -1, dtype=torch.int32)
        slots[hot] = torch.arange(k, dtype=torch.int32)
        row_nbytes = rows.row_nbytes
        self.capacity = Capacity(budget_bytes=budget, map_bytes=map_bytes, rows_bytes=rows.nbytes, rows=k,
                                 raw_rows=max(0, budget - map_bytes) // row_nbytes if row_nbytes else 0,
                                 num_nodes=n)
        self.hot_mask = slots >= 0  # host copy for workers: which rows they need not send
        self.rows: CompressedTensor = rows.to(self.device)
        self.slots = slots.to(self.device)
        self._lengths = rows.row_lengths().to(self.device)

    @property
    def codec(self):
        """The codec the cached rows (and the table) were encoded with."""
        return self.table.codec

    def split(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(hit positions, their cache slots, miss positions) of `ids`, all int64 on the cache's device.

        On a GPU this waits for `ids` (the number of hits sizes the launches)."""
        slot = self.slots[ids.to(self.device)]
        hit = slot >= 0
        hit_pos = hit.nonzero().reshape(-1)
        miss_pos = (~hit).nonzero().reshape(-1)
        return hit_pos, slot[hit_pos].to(torch.int64), miss_pos

    def hit_bytes(self, slots: torch.Tensor) -> torch.Tensor:
        """Compressed bytes of the cached rows `slots` (a 0-d tensor on the cache's device)."""
        return self._lengths[slots].sum()

    def decode(self, slots: torch.Tensor, checks=None) -> torch.Tensor:
        """Rows `slots` of the cache, decoded on its device (the codec on the CPU stand-in)."""
        if self.device.type == "cuda":
            from .. import gpu

            return gpu.fetch(self.codec, self.rows, slots, checks=checks)
        return self.codec.decode(self.rows.index_select(slots))

    def __repr__(self) -> str:
        return f"DeviceCache({self.capacity}, codec={self.codec.name}, device={self.device})"


__all__ = ["DeviceCache", "Capacity", "cache_budget", "degree_hotness", "count_hotness", "device_memory",
           "SLOT_BYTES"]
