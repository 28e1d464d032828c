"""Worker side: sample -> gather -> group -> encode, one mini-batch per request.

A `BatchProducer` is a map-style dataset whose items are whole batches: the DataLoader
hands each worker a `BatchRequest` and gets an `EncodedBatch` back through shared memory.
The worker writes the batch's outputs straight into shared memory (pipeline.transport:
a slot of the producer's `SlotRing`), so the hand-over copies nothing.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Mapping, Optional

import torch

from ..codec.base import Codec
from ..layout import CompressedTensor
from ..layout.dtypes import SUPPORTED_DTYPES
from ..data.store import EncodedTable
from ..sampling.neighbor import NeighborSampler
from .batch import EncodedBatch
from .grouping import GroupKey, GroupLayout, gather_rows, group_tensors, store_layout
from .requests import BatchRequest
from .transport import OutputBuffers, SlotRing


def _within(t: torch.Tensor, s: torch.Tensor) -> bool:
    """Whether t's bytes lie inside s's (t is a view of s)."""
    start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    return s.data_ptr() <= start and end <= s.data_ptr() + s.numel() * s.element_size()


def _new_nbytes(t: torch.Tensor, sources) -> int:
    """t's bytes when t is not a view of one of `sources` (it is a copy), else 0."""
    return 0 if any(_within(t, s) for s in sources) else t.numel() * t.element_size()


def place(ct: CompressedTensor, buffers: OutputBuffers) -> CompressedTensor:
    """`ct` with payload and offsets in `buffers` (copied only when they are not in shared memory)."""
    payload = buffers.place(ct.payload)
    offsets = None if ct.offsets is None else buffers.place(ct.offsets)
    if payload is ct.payload and offsets is ct.offsets:
        return ct
    return replace(ct, payload=payload, offsets=offsets)


def place_stored(stored: Mapping[str, CompressedTensor], buffers: OutputBuffers
                 ) -> tuple[dict[GroupKey, CompressedTensor], dict[GroupKey, GroupLayout]]:
    """The STORE groups of a batch's stored rows (one per attribute) and their layouts, placed in
    `buffers` (the gather wrote the payloads there already; the row offsets are copied)."""
    groups, layouts = {}, {}
    for name, ct in stored.items():
        layout = store_layout(name, ct.dtype, tuple(ct.shape))
        groups[layout.key] = place(ct, buffers)
        layouts[layout.key] = layout
    return groups, layouts


def encode_groups_counted(tensors: Mapping[str, torch.Tensor], codecs: Mapping[GroupKey, Codec],
                          buffers: Optional[OutputBuffers] = None
                          ) -> tuple[dict[GroupKey, CompressedTensor], dict[GroupKey, GroupLayout], int]:
    """encode_groups, plus the host bytes written into new buffers (group concatenation, encode
    output, and its copy into `buffers` when the codec wrote it elsewhere; an encode that returns
    a view of its input, like identity's, copies none). Groups are written into `buffers`
    (default: plain memory)."""
    buffers = buffers if buffers is not None else OutputBuffers()
    groups, layouts, copied = {}, {}, 0
    for key, (layout, data) in group_tensors(tensors, empty=buffers.empty).items():
        copied += _new_nbytes(data, tensors.values())
        groups[key], encode_copied = encode_group(key, data, codecs, buffers)
        copied += encode_copied
        layouts[key] = layout
    return groups, layouts, copied


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


def encode_groups(tensors: Mapping[str, torch.Tensor], codecs: Mapping[GroupKey, Codec]
                  ) -> tuple[dict[GroupKey, CompressedTensor], dict[GroupKey, GroupLayout]]:
    """Group named tensors (grouping.group_tensors) and encode each group with its codec."""
    groups, layouts, _ = encode_groups_counted(tensors, codecs)
    return groups, layouts


def _listed(counts) -> Optional[list]:
    return None if counts is None else list(counts)


class BatchProducer(torch.utils.data.Dataset):
    """Produces EncodedBatches: samples neighbours, gathers node/edge attributes, encodes groups.

    Each batch holds the gathered attributes and ``n_id``, ``e_id``, ``edge_index`` (local
    positions into ``n_id``) and ``input_id`` (``input_ids[positions]`` when `input_ids` is
    given, else the positions into the input nodes); its `meta` is ``{"num_seeds",
    "nodes_per_hop", "edges_per_hop"}``. In a DataLoader worker, the batch is written into a
    slot of `ring` (made here, in the main process, before the workers start).
    """

    def __init__(self, sampler: NeighborSampler, input_nodes: torch.Tensor,
                 node_attrs: Mapping[str, torch.Tensor], edge_attrs: Mapping[str, torch.Tensor],
                 codecs: Mapping[GroupKey, Codec], input_ids: Optional[torch.Tensor] = None,
                 input_time: Optional[torch.Tensor] = None):
        if input_ids is not None and input_ids.shape != input_nodes.shape:
            raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; accepted: one id per "
                             f"input node, shape {tuple(input_nodes.shape)}")
        self.sampler = sampler
        self.input_nodes = input_nodes
        self.input_ids = input_ids
        self.input_time = input_time  # temporal sampling: each input node's time (batch's seed_time)
        self.node_attrs = dict(node_attrs)
        self.edge_attrs = dict(edge_attrs)
        self.codecs = dict(codecs)
        self.ring = SlotRing()

    def __len__(self) -> int:
        return int(self.input_nodes.numel())

    def _reserve(self, buffers: OutputBuffers, out, num_seeds: int) -> None:
        """Claim room for the batch: gathered rows, the index streams' group (n_id, e_id, edge_index,
        input_id, and a disjoint batch's `batch` and `seed_time`), stored rows (raw size)."""
        n, e = out.node.numel() * (2 if out.batch is not None else 1), out.edge.numel()
        rows = sum(n * t.element_size() * math.prod(t.shape[1:]) for t in self.node_attrs.values()
                   if isinstance(t, torch.Tensor))
        rows += sum(e * t.element_size() * math.prod(t.shape[1:]) for t in self.edge_attrs.values())
        stored = sum(n * t.compressed.row_nbytes for t in self.node_attrs.values() if isinstance(t, EncodedTable))
        buffers.reserve(rows + stored + 8 * (n + 3 * e + 2 * num_seeds) + 2 * 4096)

    def gather(self, req: BatchRequest, buffers: Optional[OutputBuffers] = None):
        """The batch's tensors (attribute rows gathered into `buffers`), rows of pre-encoded
        tables, meta and stage times."""
        buffers = buffers if buffers is not None else OutputBuffers()
        t0 = time.perf_counter()
        seeds = self.input_nodes[req.index]
        seed_time = None if self.input_time is None else self.input_time[req.index]
        out = self.sampler.sample(seeds, seed=req.seed) if seed_time is None else \
            self.sampler.sample(seeds, seed=req.seed, seed_time=seed_time)
        t1 = time.perf_counter()
        self._reserve(buffers, out, int(req.index.numel()))
        tensors, stored = {}, {}
        for name, table in self.node_attrs.items():
            if isinstance(table, EncodedTable):
                stored[name] = table.index_select(out.node, buffers.empty)  # compressed rows, no encode
            else:
                tensors[name] = rows_into(table, out.node, buffers)
        tensors.update({name: rows_into(table, out.edge, buffers) for name, table in self.edge_attrs.items()})
        tensors["edge_index"] = torch.stack([out.row, out.col])
        tensors["n_id"] = out.node
        tensors["e_id"] = out.edge
        tensors["input_id"] = req.index if self.input_ids is None else self.input_ids[req.index]
        if out.batch is not None:  # disjoint sampling: each node's seed position
            tensors["batch"] = out.batch
        if seed_time is not None:
            tensors["seed_time"] = seed_time
        t2 = time.perf_counter()
        meta = {"num_seeds": int(req.index.numel()), "nodes_per_hop": _listed(out.num_sampled_nodes),
                "edges_per_hop": _listed(out.num_sampled_edges)}
        return tensors, stored, meta, {"sample": t1 - t0, "gather": t2 - t1}

    def __getitem__(self, req: BatchRequest) -> EncodedBatch:
        buffers = OutputBuffers.for_this_process(self.ring)
        tensors, stored, meta, seconds = self.gather(req, buffers)
        t = time.perf_counter()
        groups, layouts = place_stored(stored, buffers)
        copied = buffers.copied
        encoded, encoded_layouts, encode_copied = encode_groups_counted(tensors, self.codecs, buffers)
        copied += encode_copied
        groups.update(encoded)
        layouts.update(encoded_layouts)
        seconds["encode"] = time.perf_counter() - t
        # the gathers (raw rows, stored compressed rows, edge attributes) and edge_index's stack
        gathered = [n for n in tensors if n in self.node_attrs or n in self.edge_attrs] + ["edge_index"]
        copied += sum(ct.nbytes for ct in stored.values()) + sum(
            tensors[n].numel() * tensors[n].element_size() for n in gathered)
        return EncodedBatch(groups=groups, layouts=layouts, meta=meta, seconds=seconds,
                            copied_bytes=copied, slot=buffers.done())


def rows_into(table: torch.Tensor, index: torch.Tensor, buffers: OutputBuffers) -> torch.Tensor:
    """table[index] (rows), written into `buffers`; rows of a dtype no codec has (quantized, complex,
    uint16/32/64, ...) are gathered into private memory (torch's out= is not safe for all of them:
    index_select into a quantized out crashes) and copied into the buffers as bytes when grouped."""
    if table.dtype not in SUPPORTED_DTYPES.values():
        return gather_rows(table, index)
    return gather_rows(table, index, out=buffers.empty((index.numel(),) + tuple(table.shape[1:]), table.dtype))
