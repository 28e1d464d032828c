"""Batch plans of the neighbour samplers' outputs (pipeline.producer gathers and encodes them).

:class:`NeighborPlanner` plans a homogeneous batch of a ``NeighborSampler``,
:class:`HeteroPlanner` a heterogeneous one of a ``HeteroNeighborSampler``, whose node and
edge types' tensors get flat names (:func:`node_name`, :func:`edge_name`: ``"paper.x"``,
``"author__writes__paper.e_id"``), so that rows of every type with the same dtype and row
shape form one group (one codec), and all index tensors one element stream per dtype; a
tensor named in `typed_groups` forms its own (TYPED) group, with its own codec.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import torch

from ..sampling.hetero import EdgeType, HeteroNeighborSampler, HeteroSamplerOutput
from ..sampling.neighbor import NeighborSampler
from .grouping import GroupKey
from .producer import BatchPlan
from .requests import BatchRequest


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


def _check_ids(input_ids: Optional[torch.Tensor], input_nodes: torch.Tensor) -> None:
    if input_ids is not None and input_ids.shape != input_nodes.shape:
        raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; accepted: one id per "
                         f"input node, shape {tuple(input_nodes.shape)}")


def _listed(counts) -> Optional[list]:
    return None if counts is None else list(counts)


class _Inputs:
    """The input nodes a batch request picks its seeds from, their ids and times."""

    def __init__(self, input_nodes: torch.Tensor, input_ids: Optional[torch.Tensor],
                 input_time: Optional[torch.Tensor]):
        _check_ids(input_ids, input_nodes)
        self.input_nodes = input_nodes
        self.input_ids = input_ids
        self.input_time = input_time  # temporal sampling: each input node's time (the batch's seed_time)

    def __len__(self) -> int:
        return int(self.input_nodes.numel())

    def seed_time(self, req: BatchRequest) -> Optional[torch.Tensor]:
        return None if self.input_time is None else self.input_time[req.index]

    def put_inputs(self, plan: BatchPlan, req: BatchRequest) -> None:
        """``input_id`` (``input_ids[positions]``, else the positions) and ``seed_time`` (given times)."""
        plan.put(INPUT_ID, req.index if self.input_ids is None else self.input_ids[req.index])
        if self.input_time is not None:
            plan.put(SEED_TIME, self.input_time[req.index])


class NeighborPlanner(_Inputs):
    """A homogeneous batch: the gathered node/edge attributes and ``n_id``, ``e_id``,
    ``edge_index`` (local positions into the sampled nodes), ``input_id``, a disjoint batch's ``batch``
    and ``seed_time``; an ``n_id`` or ``e_id`` attribute of the graph's own is gathered instead (as PyG
    keeps it). Its meta is ``{"num_seeds", "num_nodes" (sampled), "nodes_per_hop", "edges_per_hop"}``.
    `post_sample`, when given, maps each sampler output to the one the batch is built from."""

    def __init__(self, sampler: NeighborSampler, input_nodes: torch.Tensor, node_attrs: Mapping[str, Any],
                 edge_attrs: Mapping[str, torch.Tensor], input_ids: Optional[torch.Tensor] = None,
                 input_time: Optional[torch.Tensor] = None, post_sample: Optional[Callable] = None):
        super().__init__(input_nodes, input_ids, input_time)
        self.sampler = sampler
        self.node_attrs = dict(node_attrs)
        self.edge_attrs = dict(edge_attrs)
        self.post_sample = post_sample

    def sample(self, req: BatchRequest):
        seeds, seed_time = self.input_nodes[req.index], self.seed_time(req)
        if seed_time is None:
            out = self.sampler.sample(seeds, seed=req.seed)
        else:
            out = self.sampler.sample(seeds, seed=req.seed, seed_time=seed_time)
        return out if self.post_sample is None else self.post_sample(out)

    def plan(self, req: BatchRequest, out) -> tuple[BatchPlan, dict]:
        plan = BatchPlan()
        plan.put("edge_index", out.row, out.col, shape=(2, int(out.row.numel())))
        if "n_id" not in self.node_attrs:
            plan.put("n_id", out.node)
        if "e_id" not in self.edge_attrs and out.edge is not None:
            plan.put("e_id", out.edge)
        if out.batch is not None:  # disjoint sampling: each node's seed position
            plan.put("batch", out.batch)
        self.put_inputs(plan, req)
        for name, table in self.node_attrs.items():  # the index tensors above win over same-named ones
            if name not in plan:
                plan.gather(name, table, out.node)
        for name, table in self.edge_attrs.items():
            if name not in plan and out.edge is not None:
                plan.gather(name, table, out.edge)
        meta = {"num_seeds": int(req.index.numel()), "num_nodes": int(out.node.numel()),
                "nodes_per_hop": _listed(out.num_sampled_nodes), "edges_per_hop": _listed(out.num_sampled_edges)}
        return plan, meta


class HeteroPlanner(_Inputs):
    """A heterogeneous batch: every type's gathered attributes, ``n_id`` of every node type, ``e_id``
    and ``edge_index`` (flattened to ``2 * E`` elements: rows then columns, local positions) of every
    edge type, ``input_id``, ``seed_time`` with `input_time`, and for disjoint sampling ``batch`` of
    every node type; an ``n_id`` or ``e_id`` attribute of the graph's own is gathered instead (as PyG
    keeps it). Its meta is ``{"num_seeds", "nodes_per_hop": {t: [...]}, "edges_per_hop": {e: [...]}}``
    (None where the sampler gives no counts). `post_sample`, when given, maps each sampler output to
    the one the batch is built from (e.g. PyG's bidirectional subgraph); an edge type whose ``edge``
    it sets to None gets no ``e_id`` and no edge attributes."""

    def __init__(self, sampler: HeteroNeighborSampler, input_type: str, input_nodes: torch.Tensor,
                 node_attrs: Mapping[str, Mapping[str, Any]], edge_attrs: Mapping[EdgeType, Mapping[str, torch.Tensor]],
                 input_ids: Optional[torch.Tensor] = None, input_time: Optional[torch.Tensor] = None,
                 typed_groups: Optional[Mapping[str, GroupKey]] = None,
                 post_sample: Optional[Callable[[HeteroSamplerOutput], HeteroSamplerOutput]] = None):
        super().__init__(input_nodes, input_ids, input_time)
        self.sampler = sampler
        self.input_type = input_type
        self.node_attrs = {t: dict(a) for t, a in node_attrs.items()}
        self.edge_attrs = {e: dict(a) for e, a in edge_attrs.items()}
        self.typed_groups = dict(typed_groups or {})
        self.post_sample = post_sample

    def sample(self, req: BatchRequest) -> HeteroSamplerOutput:
        out = self.sampler.sample(self.input_type, self.input_nodes[req.index], seed=req.seed,
                                  seed_time=self.seed_time(req))
        return out if self.post_sample is None else self.post_sample(out)

    def plan(self, req: BatchRequest, out: HeteroSamplerOutput) -> tuple[BatchPlan, dict]:
        plan, empty = BatchPlan(), torch.empty(0, dtype=torch.int64)
        nodes = {t: out.node.get(t, empty) for t in self.sampler.node_types}
        edges = {e: (out.edge or {}).get(e) for e in self.sampler.edge_types}
        for t, attrs in self.node_attrs.items():
            for attr, table in attrs.items():
                plan.gather(node_name(t, attr), table, nodes[t], key=self.typed_groups.get(node_name(t, attr)))
        for e, attrs in self.edge_attrs.items():
            for attr, table in attrs.items() if edges[e] is not None else ():
                plan.gather(edge_name(e, attr), table, edges[e], key=self.typed_groups.get(edge_name(e, attr)))
        for t in self.sampler.node_types:
            if node_name(t, "n_id") not in plan:
                plan.put(node_name(t, "n_id"), nodes[t])
            if out.batch is not None:  # disjoint sampling: each node's seed
                plan.put(node_name(t, "batch"), out.batch.get(t, empty))
        for e in self.sampler.edge_types:
            plan.put(edge_name(e, "edge_index"), out.row.get(e, empty), out.col.get(e, empty))
            if edges[e] is not None and edge_name(e, "e_id") not in plan:
                plan.put(edge_name(e, "e_id"), edges[e])
        self.put_inputs(plan, req)
        meta = {"num_seeds": int(req.index.numel()),
                "nodes_per_hop": None if out.num_sampled_nodes is None else
                {t: list(v) for t, v in out.num_sampled_nodes.items()},
                "edges_per_hop": None if out.num_sampled_edges is None else
                {e: list(v) for e, v in out.num_sampled_edges.items()}}
        return plan, meta


__all__ = ["NeighborPlanner", "HeteroPlanner", "node_name", "edge_name", "type_name", "INPUT_ID", "SEED_TIME"]
