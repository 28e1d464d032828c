"""Worker side for heterogeneous graphs: sample -> gather per node and edge type -> group -> encode.

The twin of ``worker.BatchProducer`` for a :class:`HeteroNeighborSampler`. Each node and
edge type's tensors get flat names (:func:`node_name`, :func:`edge_name`: ``"paper.x"``,
``"author__writes__paper.e_id"``), so that one batch is one set of named tensors and
the grouping of ``grouping.group_tensors`` applies across types: rows of every type with
the same dtype and row shape form one group (one codec), and all index tensors (``n_id``,
``e_id``, ``edge_index`` of every type, ``input_id``) one element stream per dtype. A
tensor named in `typed_groups` is encoded alone, under its TYPED key, with its own codec.
In a DataLoader worker the batch is written into a slot of the producer's `SlotRing`, as
``worker.BatchProducer`` does, so the hand-over copies nothing.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Mapping, Optional

import torch

from ..codec.base import Codec
from ..data.store import EncodedTable
from ..sampling.hetero import EdgeType, HeteroNeighborSampler, HeteroSamplerOutput
from .batch import EncodedBatch
from .grouping import GroupKey, GroupLayout, group_key
from .requests import BatchRequest
from .transport import OutputBuffers, SlotRing
from .worker import encode_groups_counted, place_stored, rows_into


def type_name(node_or_edge_type) -> str:
    """A node type as is; an edge type ``(src, rel, dst)`` as PyG's ``"src__rel__dst"``."""
    return "__".join(node_or_edge_type) if isinstance(node_or_edge_type, tuple) else node_or_edge_type


def node_name(node_type: str, attr: str) -> str:
    """The flat name of attribute `attr` of node type `node_type` in a batch ("paper.x")."""
    return f"{node_type}.{attr}"


def edge_name(edge_type: EdgeType, attr: str) -> str:
    """The flat name of attribute `attr` of edge type `edge_type` in a batch ("author__writes__paper.e_id")."""
    return f"{type_name(edge_type)}.{attr}"


#: the tensor of the seeds' ids in a batch (positions into the input nodes, or node ids).
INPUT_ID = "input_id"
#: the tensor of the seeds' times in a batch (temporal sampling with given input times).
SEED_TIME = "seed_time"


class HeteroBatchProducer(torch.utils.data.Dataset):
    """Produces EncodedBatches of a heterogeneous graph: samples, gathers every type's attributes, encodes.

    `node_attrs[t]` / `edge_attrs[e]` map attribute names to tables (CPU tensors, or
    EncodedTables for node attributes) of node type ``t`` / edge type ``e``. Each batch
    holds the gathered attributes, ``n_id`` of every node type, ``e_id`` and
    ``edge_index`` (flattened to ``2 * E`` elements: rows then columns, local positions)
    of every edge type, and ``input_id`` (``input_ids[positions]`` when `input_ids` is
    given, else the positions into the input nodes), ``seed_time`` when `input_time` (one
    time per input node) is given, and for disjoint sampling ``batch`` of every node type
    (each node's seed). Its `meta` is ``{"num_seeds",
    "nodes_per_hop": {t: [...]}, "edges_per_hop": {e: [...]}}`` (None where the sampler
    output has no counts). `typed_groups` maps the flat names of tensors that get a codec
    of their own to their (TYPED) group keys. `post_sample`, when given, maps each sampler
    output to the one the batch is built from (e.g. PyG's bidirectional subgraph); an edge
    type whose ``edge`` it sets to None gets no ``e_id`` and no edge attributes.
    """

    def __init__(self, sampler: HeteroNeighborSampler, input_type: str, input_nodes: torch.Tensor,
                 node_attrs: Mapping[str, Mapping[str, torch.Tensor]],
                 edge_attrs: Mapping[EdgeType, Mapping[str, torch.Tensor]],
                 codecs: Mapping[GroupKey, Codec], input_ids: Optional[torch.Tensor] = None,
                 input_time: Optional[torch.Tensor] = None, typed_groups: Optional[Mapping[str, GroupKey]] = None,
                 post_sample: Optional[Callable[[HeteroSamplerOutput], HeteroSamplerOutput]] = None):
        if input_ids is not None and input_ids.shape != input_nodes.shape:
            raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; accepted: one id per "
                             f"input node, shape {tuple(input_nodes.shape)}")
        self.sampler = sampler
        self.input_type = input_type
        self.input_nodes = input_nodes
        self.input_ids = input_ids
        self.input_time = input_time
        self.node_attrs = {t: dict(a) for t, a in node_attrs.items()}
        self.edge_attrs = {e: dict(a) for e, a in edge_attrs.items()}
        self.codecs = dict(codecs)
        self.typed_groups = dict(typed_groups or {})
        self.post_sample = post_sample
        # tensors the worker writes for a batch: gathered attribute rows and each edge_index
        self._written = {node_name(t, a) for t, attrs in self.node_attrs.items() for a, table in attrs.items()
                         if not isinstance(table, EncodedTable)}
        self._written |= {edge_name(e, a) for e, attrs in self.edge_attrs.items() for a in attrs}
        self._written |= {edge_name(e, "edge_index") for e in sampler.edge_types}
        missing = [str(k) for k in self.typed_groups.values() if k not in self.codecs]
        if missing:
            raise ValueError(f"typed_groups names groups {missing} that codecs has no codec for")
        self.ring = SlotRing()

    def __len__(self) -> int:
        return int(self.input_nodes.numel())

    def sample(self, req: BatchRequest) -> tuple[HeteroSamplerOutput, float]:
        """The batch's sampled subgraph (after `post_sample`) and the seconds it took."""
        t0 = time.perf_counter()
        out = self.sampler.sample(self.input_type, self.input_nodes[req.index], seed=req.seed,
                                  seed_time=None if self.input_time is None else self.input_time[req.index])
        if self.post_sample is not None:
            out = self.post_sample(out)
        return out, time.perf_counter() - t0

    def _reserve(self, buffers: OutputBuffers, nodes: Mapping[str, torch.Tensor],
                 edges: Mapping[EdgeType, Optional[torch.Tensor]], num_seeds: int) -> None:
        """Claim room for the batch: gathered and stored rows (raw size) of every type, and the
        index streams' group (n_id, batch, e_id, edge_index, input_id, seed_time)."""
        nbytes = 16 * num_seeds + 2 * 4096
        for t, attrs in self.node_attrs.items():
            n = int(nodes[t].numel())
            nbytes += 16 * n + sum(n * (a.compressed.row_nbytes if isinstance(a, EncodedTable) else
                                        a.element_size() * math.prod(a.shape[1:])) for a in attrs.values())
        for e, ids in edges.items():
            m = 0 if ids is None else int(ids.numel())
            nbytes += 24 * m + sum(m * a.element_size() * math.prod(a.shape[1:])
                                   for a in self.edge_attrs.get(e, {}).values())
        buffers.reserve(nbytes)

    def gather(self, req: BatchRequest, sampled: Optional[tuple[HeteroSamplerOutput, float]] = None,
               buffers: Optional[OutputBuffers] = None):
        """The batch's named tensors, rows of pre-encoded tables, meta and stage times (`sampled`:
        `sample(req)`'s result when it ran elsewhere, e.g. in a worker while this runs in the main
        process). Attribute rows are gathered into `buffers` (default: plain memory)."""
        buffers = buffers if buffers is not None else OutputBuffers()
        out, sample_seconds = self.sample(req) if sampled is None else sampled
        t1 = time.perf_counter()
        empty = torch.empty(0, dtype=torch.int64)
        nodes = {t: out.node.get(t, empty) for t in self.sampler.node_types}
        edges = {e: (out.edge or {}).get(e) for e in self.sampler.edge_types}
        self._reserve(buffers, nodes, edges, int(req.index.numel()))
        tensors, stored = {}, {}
        for t, attrs in self.node_attrs.items():
            for attr, table in attrs.items():
                if isinstance(table, EncodedTable):
                    stored[node_name(t, attr)] = table.index_select(nodes[t], buffers.empty)
                else:
                    tensors[node_name(t, attr)] = rows_into(table, nodes[t], buffers)
        for e, attrs in self.edge_attrs.items():
            if edges[e] is not None:
                for attr, table in attrs.items():
                    tensors[edge_name(e, attr)] = rows_into(table, edges[e], buffers)
        # an n_id or e_id attribute of the graph's own is gathered instead (as PyG keeps it)
        for t in self.sampler.node_types:
            tensors.setdefault(node_name(t, "n_id"), nodes[t])
            if out.batch is not None:  # disjoint sampling: each node's seed
                tensors[node_name(t, "batch")] = out.batch.get(t, empty)
        for e in self.sampler.edge_types:
            tensors[edge_name(e, "edge_index")] = torch.cat([out.row.get(e, empty), out.col.get(e, empty)])
            if edges[e] is not None:
                tensors.setdefault(edge_name(e, "e_id"), edges[e])
        tensors[INPUT_ID] = req.index if self.input_ids is None else self.input_ids[req.index]
        if self.input_time is not None:
            tensors[SEED_TIME] = self.input_time[req.index]
        t2 = time.perf_counter()
        meta = {"num_seeds": int(req.index.numel()),
                "nodes_per_hop": None if out.num_sampled_nodes is None else
                {t: list(v) for t, v in out.num_sampled_nodes.items()},
                "edges_per_hop": None if out.num_sampled_edges is None else
                {e: list(v) for e, v in out.num_sampled_edges.items()}}
        return tensors, stored, meta, {"sample": sample_seconds, "gather": t2 - t1}

    def __getitem__(self, req: BatchRequest) -> EncodedBatch:
        return self.encode(req)

    def encode(self, req: BatchRequest, sampled: Optional[tuple[HeteroSamplerOutput, float]] = None
               ) -> EncodedBatch:
        """The batch, gathered and encoded (from `sampled` when given, as for `gather`), written
        into a ring slot when this is a DataLoader worker."""
        buffers = OutputBuffers.for_this_process(self.ring)
        tensors, stored, meta, seconds = self.gather(req, sampled, buffers)
        t = time.perf_counter()
        groups, layouts = place_stored(stored, buffers)
        copied = buffers.copied
        shared = {n: x for n, x in tensors.items() if n not in self.typed_groups}
        encoded, encoded_layouts, shared_copied = encode_groups_counted(shared, self.codecs, buffers)
        copied += shared_copied
        groups.update(encoded)
        layouts.update(encoded_layouts)
        for name, key in self.typed_groups.items():
            if name not in tensors:
                continue
            plain = group_key(name, tensors[name])
            one, one_layout, one_copied = encode_groups_counted({name: tensors[name]},
                                                                {plain: self.codecs[key]}, buffers)
            groups[key] = one[plain]
            layouts[key] = GroupLayout(key, one_layout[plain].members)
            copied += one_copied
        seconds["encode"] = time.perf_counter() - t
        # the gathers (raw rows, stored compressed rows, edge attributes) and edge_index's cat
        copied += sum(ct.nbytes for ct in stored.values()) + sum(
            x.numel() * x.element_size() for n, x in tensors.items() if n in self._written)
        return EncodedBatch(groups=groups, layouts=layouts, meta=meta, seconds=seconds,
                            copied_bytes=copied, slot=buffers.done())


class HeteroSampleOnly(torch.utils.data.Dataset):
    """The sampling half of a HeteroBatchProducer, for DataLoader workers when the gathering and
    encoding run in the main process (PyG's ``filter_per_worker=False``): items are
    ``(request, producer.sample(request))``, to pass to ``producer.encode``."""

    def __init__(self, producer: HeteroBatchProducer):
        self.producer = producer

    def __len__(self) -> int:
        return len(self.producer)

    def __getitem__(self, req: BatchRequest):
        return req, self.producer.sample(req)
