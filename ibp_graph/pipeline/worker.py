"""Worker side: sample -> gather -> group -> encode, one mini-batch per request.

A `BatchProducer` is a map-style dataset whose items are whole batches: the DataLoader
hands each worker a `BatchRequest` and gets an `EncodedBatch` back through shared memory.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional

import numpy as np
import torch

from ..codec.base import Codec
from ..layout import CompressedTensor, dtype_name
from ..data.store import EncodedTable
from ..sampling.neighbor import NeighborSampler
from .grouping import GroupLayout, Member, group_tensors


def store_key(name: str) -> str:
    """Group key of a node attribute served from a pre-encoded EncodedTable."""
    return f"{name}@store"


@dataclass(frozen=True)
class BatchRequest:
    """One batch to produce: positions into the loader's input nodes and the sampling seed."""

    index: torch.Tensor
    seed: int


@dataclass
class EncodedBatch:
    """A batch as it crosses from a worker to the main process: compressed groups plus metadata."""

    groups: dict[str, CompressedTensor]
    layouts: dict[str, GroupLayout]
    batch_size: int
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    seconds: dict[str, float] = field(default_factory=dict)

    def pin_memory(self) -> "EncodedBatch":
        """Pinned copy of every group (called by the DataLoader's pin-memory thread)."""
        return replace(self, groups={k: ct.pin_memory() for k, ct in self.groups.items()})

    def is_pinned(self) -> bool:
        """Whether every group lives in page-locked memory."""
        return all(ct.is_pinned() for ct in self.groups.values())

    @property
    def nbytes(self) -> int:
        """Bytes this batch moves to the device."""
        return sum(ct.nbytes for ct in self.groups.values())

    @property
    def raw_nbytes(self) -> int:
        """Bytes it would move uncompressed."""
        return sum(ct.raw_nbytes for ct in self.groups.values())


class BatchProducer(torch.utils.data.Dataset):
    """Produces EncodedBatches: samples neighbours, gathers node/edge attributes, encodes groups."""

    def __init__(self, sampler: NeighborSampler, input_nodes: torch.Tensor,
                 node_attrs: Mapping[str, torch.Tensor], edge_attrs: Mapping[str, torch.Tensor],
                 codecs: Mapping[str, Codec]):
        self.sampler = sampler
        self.input_nodes = input_nodes
        self.node_attrs = dict(node_attrs)
        self.edge_attrs = dict(edge_attrs)
        self.codecs = dict(codecs)

    def __len__(self) -> int:
        return int(self.input_nodes.numel())

    def gather(self, req: BatchRequest):
        """The batch's tensors (NeighborLoader's fields), rows of pre-encoded tables, metadata, times."""
        t0 = time.perf_counter()
        seeds = self.input_nodes[req.index]
        out = self.sampler.sample(seeds, seed=req.seed)
        t1 = time.perf_counter()
        tensors, stored = {}, {}
        for name, table in self.node_attrs.items():
            if isinstance(table, EncodedTable):
                stored[name] = table.index_select(out.node)  # compressed rows, no encode
            else:
                tensors[name] = table.index_select(0, out.node)
        tensors.update({name: table.index_select(0, out.edge) for name, table in self.edge_attrs.items()})
        tensors["edge_index"] = torch.stack([out.row, out.col])
        tensors["n_id"] = out.node
        tensors["e_id"] = out.edge
        tensors["input_id"] = req.index
        t2 = time.perf_counter()
        meta = {"batch_size": int(req.index.numel()), "num_sampled_nodes": list(out.num_sampled_nodes),
                "num_sampled_edges": list(out.num_sampled_edges)}
        return tensors, stored, meta, {"sample": t1 - t0, "gather": t2 - t1}

    def __getitem__(self, req: BatchRequest) -> EncodedBatch:
        tensors, stored, meta, seconds = self.gather(req)
        t = time.perf_counter()
        groups, layouts = {}, {}
        for name, ct in stored.items():
            key = store_key(name)
            groups[key] = ct
            layouts[key] = GroupLayout(key, dtype_name(ct.dtype), ct.row_shape, False,
                                       (Member(name, tuple(ct.shape), 0),))
        encoded, encoded_layouts = encode_groups(tensors, self.codecs)
        groups.update(encoded)
        layouts.update(encoded_layouts)
        seconds["encode"] = time.perf_counter() - t
        return EncodedBatch(groups=groups, layouts=layouts, seconds=seconds, **meta)


def encode_groups(tensors: Mapping[str, torch.Tensor], codecs: Mapping[str, Codec]
                  ) -> tuple[dict[str, CompressedTensor], dict[str, GroupLayout]]:
    """Group named tensors by (dtype, row shape) and encode each group with its codec."""
    groups, layouts = {}, {}
    for key, (layout, data) in group_tensors(tensors).items():
        codec = codecs.get(key)
        if codec is None:
            raise KeyError(f"no codec for group {key!r}; codecs exist for {sorted(codecs)}")
        groups[key] = codec.encode(data)
        layouts[key] = layout
    return groups, layouts


def batch_seeds(base_seed: int, n_batches: int) -> np.ndarray:
    """Independent 63-bit sampling seeds for the batches of one epoch (splitmix64 of base+k)."""
    z = (np.uint64(base_seed) + np.arange(1, n_batches + 1, dtype=np.uint64)
         * np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(1)).astype(np.int64)


class BatchRequests(torch.utils.data.Sampler):
    """Yields the BatchRequests of an epoch: shuffled (or not) input positions cut into batches.

    The epoch's base seed is drawn from torch's global RNG in the main process when
    iteration starts, so `torch.manual_seed` makes a whole run reproducible, whatever the
    codec. Under torch.distributed each rank takes an equal share of every epoch's order.
    """

    def __init__(self, num_inputs: int, batch_size: int, *, shuffle: bool, drop_last: bool,
                 generator: Optional[torch.Generator] = None, rank: int = 0, world_size: int = 1):
        self.num_inputs = num_inputs
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = generator
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Distributed runs: reshuffle identically on every rank for this epoch."""
        self.epoch = epoch

    def _per_rank(self) -> int:
        return self.num_inputs // self.world_size if self.world_size > 1 else self.num_inputs

    def __len__(self) -> int:
        n = self._per_rank()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        if self.world_size > 1:
            # every rank must draw the same order: a generator seeded by the epoch only
            g = torch.Generator().manual_seed(1_000_003 * self.epoch + 17)
            order = torch.randperm(self.num_inputs, generator=g) if self.shuffle else torch.arange(self.num_inputs)
            order = order[self.rank:self._per_rank() * self.world_size:self.world_size]
            base = int(torch.randint(0, 2**62, (1,), generator=g)) + self.rank
        else:
            g = self.generator
            order = torch.randperm(self.num_inputs, generator=g) if self.shuffle else torch.arange(self.num_inputs)
            base = int(torch.randint(0, 2**62, (1,), generator=g))
        n = len(self)
        seeds = batch_seeds(base, n)
        for k in range(n):
            yield BatchRequest(index=order[k * self.batch_size:(k + 1) * self.batch_size], seed=int(seeds[k]))
