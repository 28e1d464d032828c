"""A compressed cache of hot feature rows in device memory: which nodes, where, and their lookup.

A budget (``device_cache=``: bytes, or a fraction of the device's memory) holds the *compressed* rows
of the nodes most likely sampled (~1.2x (dense) to ~100x (bag-of-words) the rows of a raw cache),
ranked by :func:`degree_hotness` or a warm-up epoch's :func:`count_hotness`. It pays for a slot map
(SLOT_BYTES per node: its cache row, or -1) and the hottest rows that fit, with their offsets. A
batch's ids split into hits and misses (sources.CachedSource assembles them). Hits decode with
:func:`ibp_graph.gpu.fetch` on CUDA; on the CPU the same object, decoded by the codec, is the stand-in.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Union

import numpy as np
import torch

from ..data.store import EncodedTable
from ..layout.rows import PAYLOAD_TAIL
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
    bad = device_cache < 0 if isinstance(device_cache, int) else not 0.0 < device_cache <= 1.0
    if bad:
        raise ValueError(f"device_cache={device_cache!r} is not accepted; use {ACCEPTED}")
    return device_cache if isinstance(device_cache, int) else int(device_cache * device_memory(device))


def degree_hotness(indices: np.ndarray, num_nodes: int) -> np.ndarray:
    """How often each node can be drawn as a neighbour: its appearances in a CSC graph's ``indices``."""
    return np.bincount(np.asarray(indices), minlength=num_nodes)[:num_nodes]


def count_hotness(n_ids: Iterable[torch.Tensor], num_nodes: int) -> np.ndarray:
    """How often each node appeared in the given batches' ``n_id`` (e.g. one warm-up epoch)."""
    counts = np.zeros(num_nodes, dtype=np.int64)
    for n_id in n_ids:
        counts += np.bincount(n_id.detach().cpu().numpy(), minlength=num_nodes)[:num_nodes]
    return counts


def row_bytes(ct: CompressedTensor, ids: torch.Tensor) -> torch.Tensor:
    """Compressed bytes of rows `ids` of `ct` (offsets on the ids' device; a 0-d tensor there: no wait)."""
    o = ct.offsets
    if o is None:
        return torch.tensor(ids.numel() * ct.row_nbytes, device=ids.device)
    return (o[ids + 1].to(torch.int64) - o[ids].to(torch.int64)).sum()


def decode_rows(codec, ct: CompressedTensor, ids: torch.Tensor, checks=None) -> torch.Tensor:
    """Rows `ids` of `ct` decoded where `ids` are: the fused gather + decode kernel on a GPU (payload in
    device or page-locked host memory), the codec on the CPU."""
    if ids.device.type == "cuda":
        from .. import gpu

        return gpu.fetch(codec, ct, ids, checks=checks)
    return codec.decode(ct.index_select(ids))


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
        return {**self.__dict__, "fraction_of_nodes": self.rows / max(1, self.num_nodes)}

    def __str__(self) -> str:
        return (f"{self.rows:,} of {self.num_nodes:,} rows compressed in {self.budget_bytes / 1e6:.1f} MB "
                f"(a raw cache would hold {self.raw_rows:,}; {self.gain:.2f}x)")


class DeviceCache:
    """The compressed rows of one table's hottest nodes on `device`, and the node -> slot map."""

    def __init__(self, table: EncodedTable, hotness: np.ndarray, budget: int, device: torch.device):
        n = table.n_rows
        hotness = np.asarray(hotness)
        if hotness.shape != (n,):
            raise ValueError(f"hotness has shape {hotness.shape}; accepted: one score per row ({n},)")
        map_bytes = n * SLOT_BYTES
        if 0 < budget < map_bytes:
            raise ValueError(f"device_cache={budget} bytes cannot hold the slot map of {n:,} nodes "
                             f"({SLOT_BYTES} B per node = {map_bytes} bytes); accepted: 0 (no cache) or "
                             f">= {map_bytes} bytes")
        self.table, self.device = table, torch.device(device)
        order = np.argsort(-hotness, kind="stable")
        per_row = table.compressed.row_lengths().numpy()[order] + (0 if table.compressed.offsets is None else 8)
        room = max(0, budget - map_bytes - PAYLOAD_TAIL - 16)  # offsets: int64 at worst
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

    @property
    def codec(self):
        """The codec the cached rows (and the table) were encoded with."""
        return self.table.codec

    def split(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(hit positions, their cache slots, miss positions) of `ids`, int64 on the cache's device (on a
        GPU this waits for `ids`: the number of hits sizes the launches)."""
        slot = self.slots[ids.to(self.device)]
        hit = slot >= 0
        hit_pos = hit.nonzero().reshape(-1)
        return hit_pos, slot[hit_pos].to(torch.int64), (~hit).nonzero().reshape(-1)

    def hit_bytes(self, slots: torch.Tensor) -> torch.Tensor:
        """Compressed bytes of the cached rows `slots` (a 0-d tensor on the cache's device)."""
        return row_bytes(self.rows, slots)

    def decode(self, slots: torch.Tensor, checks=None) -> torch.Tensor:
        """Rows `slots` of the cache, decoded on its device (the codec on the CPU stand-in)."""
        return decode_rows(self.codec, self.rows, slots, checks)

    def __repr__(self) -> str:
        return f"DeviceCache({self.capacity}, codec={self.codec.name}, device={self.device})"


__all__ = ["DeviceCache", "Capacity", "cache_budget", "degree_hotness", "count_hotness", "device_memory",
           "row_bytes", "decode_rows", "SLOT_BYTES"]
