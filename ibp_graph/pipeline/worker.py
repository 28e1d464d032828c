"""Worker side: sample -> gather -> group -> encode, one mini-batch per request.

A `BatchProducer` is a map-style dataset whose items are whole batches: the DataLoader
hands each worker a `BatchRequest` and gets an `EncodedBatch` back through shared memory.
"""
from __future__ import annotations

import time
from typing import Mapping, Optional

import torch

from ..codec.base import Codec
from ..layout import CompressedTensor
from ..data.store import EncodedTable
from ..sampling.neighbor import NeighborSampler
from .batch import EncodedBatch
from .grouping import GroupKey, GroupLayout, gather_rows, group_tensors, store_layout
from .requests import BatchRequest


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _new_nbytes(t: torch.Tensor, sources) -> int:
    """t's bytes when t lives in a buffer other than those of `sources` (a copy), else 0."""
    return 0 if _storage(t) in {_storage(s) for s in sources} else t.numel() * t.element_size()


def encode_groups_counted(tensors: Mapping[str, torch.Tensor], codecs: Mapping[GroupKey, Codec]
                          ) -> tuple[dict[GroupKey, CompressedTensor], dict[GroupKey, GroupLayout], int]:
    """encode_groups, plus the host bytes written into new buffers (group concatenation and
    encode output; an encode that returns a view of its input, like identity's, copies none)."""
    groups, layouts, copied = {}, {}, 0
    for key, (layout, data) in group_tensors(tensors).items():
        codec = codecs.get(key)
        if codec is None:
            raise KeyError(f"no codec for group {str(key)!r}; codecs exist for {sorted(map(str, codecs))}")
        ct = codec.encode(data)
        copied += _new_nbytes(data, tensors.values())
        copied += _new_nbytes(ct.payload, [data])
        copied += 0 if ct.offsets is None else _new_nbytes(ct.offsets, [data])
        groups[key] = ct
        layouts[key] = layout
    return groups, layouts, copied


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
    "nodes_per_hop", "edges_per_hop"}``.
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

    def __len__(self) -> int:
        return int(self.input_nodes.numel())

    def gather(self, req: BatchRequest):
        """The batch's tensors, rows of pre-encoded tables, meta and stage times."""
        t0 = time.perf_counter()
        seeds = self.input_nodes[req.index]
        seed_time = None if self.input_time is None else self.input_time[req.index]
        out = self.sampler.sample(seeds, seed=req.seed) if seed_time is None else \
            self.sampler.sample(seeds, seed=req.seed, seed_time=seed_time)
        t1 = time.perf_counter()
        tensors, stored = {}, {}
        for name, table in self.node_attrs.items():
            if isinstance(table, EncodedTable):
                stored[name] = table.index_select(out.node)  # compressed rows, no encode
            else:
                tensors[name] = gather_rows(table, out.node)
        tensors.update({name: gather_rows(table, out.edge) for name, table in self.edge_attrs.items()})
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
        tensors, stored, meta, seconds = self.gather(req)
        t = time.perf_counter()
        groups, layouts = {}, {}
        for name, ct in stored.items():
            layout = store_layout(name, ct.dtype, tuple(ct.shape))
            groups[layout.key] = ct
            layouts[layout.key] = layout
        encoded, encoded_layouts, copied = encode_groups_counted(tensors, self.codecs)
        groups.update(encoded)
        layouts.update(encoded_layouts)
        seconds["encode"] = time.perf_counter() - t
        # the gathers (raw rows, stored compressed rows, edge attributes) and edge_index's stack
        gathered = [n for n in tensors if n in self.node_attrs or n in self.edge_attrs] + ["edge_index"]
        copied += sum(ct.nbytes for ct in stored.values()) + sum(
            tensors[n].numel() * tensors[n].element_size() for n in gathered)
        return EncodedBatch(groups=groups, layouts=layouts, meta=meta, seconds=seconds,
                            copied_bytes=copied)
