"""Batch plans of the neighbour sampler's output (pipeline.producer gathers and encodes them).

:class:`HeteroPlanner` plans every batch, giving each type's tensors flat names (:func:`node_name`,
:func:`edge_name`: ``"paper.x"``, ``"author__writes__paper.e_id"``), so rows of every type with the
same dtype and row shape form one group (one codec; a name in `typed_groups`: its own TYPED group).
A homogeneous graph is the case of one node and one edge type, both None (names "x", "edge_index"):
:func:`NeighborPlanner`.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import torch

from ..sampling.hetero import EdgeType, HeteroSamplerOutput
from .grouping import GroupKey
from .producer import BatchPlan
from .requests import BatchRequest


def node_name(node_type: Optional[str], attr: str) -> str:
    """The flat name of attribute `attr` of node type `node_type` in a batch ("paper.x"; "x" for None)."""
    return attr if node_type is None else f"{node_type}.{attr}"


def edge_name(edge_type: Optional[EdgeType], attr: str) -> str:
    """The flat name of attribute `attr` of edge type `edge_type` in a batch ("author__writes__paper.e_id";
    "e_id" for None)."""
    return attr if edge_type is None else f"{'__'.join(edge_type)}.{attr}"


#: the tensor of the seeds' ids in a batch (positions into the input nodes, or node ids).
INPUT_ID = "input_id"
#: the tensor of the seeds' times in a batch (temporal sampling with given input times).
SEED_TIME = "seed_time"


def _per_type(counts) -> Optional[dict]:
    return None if counts is None else {k: list(v) for k, v in counts.items()}


class HeteroPlanner:
    """A batch: every type's gathered attributes, ``n_id`` per node type, ``edge_index`` (2 x E local
    positions) and ``e_id`` per edge type, ``input_id`` (``input_ids[positions]``, else the positions),
    ``seed_time`` with `input_time`, ``batch`` per node type for disjoint sampling; the graph's own
    ``n_id``/``e_id`` attribute is gathered instead (as PyG keeps it), other attributes named like an
    index tensor give way. Meta: ``{"num_seeds", "nodes_per_hop": {t: [...]}, "edges_per_hop": {e: [...]}}``
    (None without counts; homogeneous: the one type's lists, and ``"num_nodes"`` sampled). `post_sample`
    maps each sampler output and PyG's metadata of it, ``(input_id, seed_time)``, first (PyG's bidirectional
    subgraph, transform_sampler_output: ``post_sample(out, metadata) -> (out, metadata)``); the batch's
    ``input_id``, ``seed_time`` and seed count are then the metadata's, as PyG's NodeLoader reads them, and an
    edge type whose ``edge`` it sets to None gets no ``e_id`` and no edge attributes."""

    def __init__(self, sampler, input_type: Optional[str], input_nodes: torch.Tensor,
                 node_attrs: Mapping[Any, Mapping[str, Any]], edge_attrs: Mapping[Any, Mapping[str, torch.Tensor]],
                 input_ids: Optional[torch.Tensor] = None, input_time: Optional[torch.Tensor] = None,
                 typed_groups: Optional[Mapping[str, GroupKey]] = None,
                 post_sample: Optional[Callable[[HeteroSamplerOutput, tuple], tuple]] = None):
        if input_ids is not None and input_ids.shape != input_nodes.shape:
            raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; accepted: one id per "
                             f"input node, shape {tuple(input_nodes.shape)}")
        self.sampler, self.input_type, self.input_nodes = sampler, input_type, input_nodes
        self.input_ids, self.input_time = input_ids, input_time  # input_time: each input node's seed_time
        self.node_attrs = {t: dict(a) for t, a in node_attrs.items()}
        self.edge_attrs = {e: dict(a) for e, a in edge_attrs.items()}
        self.typed_groups = dict(typed_groups or {})
        self.post_sample = post_sample

    def __len__(self) -> int:
        return int(self.input_nodes.numel())

    def draw(self, req: BatchRequest) -> tuple[HeteroSamplerOutput, None]:
        """`req`'s sampled subgraph before `post_sample`, as `plan` takes it (the seeds' own metadata)."""
        out = self.sampler.sample(self.input_type, self.input_nodes[req.index], seed=req.seed,
                                  seed_time=self.seed_time(req))
        return out, None

    def sample(self, req: BatchRequest) -> tuple[HeteroSamplerOutput, Optional[tuple]]:
        """`req`'s sampled subgraph and its metadata after `post_sample` (None without one: `plan` takes the
        seeds' own)."""
        out, _ = self.draw(req)
        return (out, None) if self.post_sample is None else self.post_sample(out, (self.input_id(req),
                                                                                   self.seed_time(req)))

    def input_id(self, req: BatchRequest) -> torch.Tensor:
        """The ``input_id`` of `req`'s seeds: `input_ids` at its positions, else the positions."""
        return req.index if self.input_ids is None else self.input_ids[req.index]

    def seed_time(self, req: BatchRequest) -> Optional[torch.Tensor]:
        """The ``seed_time`` of `req`'s seeds (None without `input_time`)."""
        return None if self.input_time is None else self.input_time[req.index]

    def plan(self, req: BatchRequest, sampled: tuple[HeteroSamplerOutput, Optional[tuple]]) -> tuple[BatchPlan, dict]:
        """The plan of `sampled` (`sample`'s: `req`'s subgraph, and the metadata a transform left, whose
        ``(input_id, seed_time)`` the batch carries)."""
        out, metadata = sampled
        input_id, seed_time = (self.input_id(req), self.seed_time(req)) if metadata is None else metadata[:2]
        plan, empty = BatchPlan(), torch.empty(0, dtype=torch.int64)
        nodes = {t: out.node.get(t, empty) for t in self.sampler.node_types}
        edges = {e: (out.edge or {}).get(e) for e in self.sampler.edge_types}
        for e in self.sampler.edge_types:
            row, col = out.row.get(e, empty), out.col.get(e, empty)
            plan.put(edge_name(e, "edge_index"), row, col, shape=(2, int(row.numel())))
        for t in self.sampler.node_types:
            if "n_id" not in self.node_attrs.get(t, ()):
                plan.put(node_name(t, "n_id"), nodes[t])
        for e in self.sampler.edge_types:
            if edges[e] is not None and "e_id" not in self.edge_attrs.get(e, ()):
                plan.put(edge_name(e, "e_id"), edges[e])
        for t in self.sampler.node_types if out.batch is not None else ():  # disjoint: each node's seed
            plan.put(node_name(t, "batch"), out.batch.get(t, empty))
        plan.put(INPUT_ID, input_id)
        if seed_time is not None:
            plan.put(SEED_TIME, seed_time)
        for attrs, ids, name in ((self.node_attrs, nodes, node_name), (self.edge_attrs, edges, edge_name)):
            for t, tables in attrs.items():
                for attr, table in tables.items() if ids[t] is not None else ():
                    if name(t, attr) not in plan:  # the index tensors above win over same-named attributes
                        plan.gather(name(t, attr), table, ids[t], key=self.typed_groups.get(name(t, attr)))
        nodes_per_hop, edges_per_hop = _per_type(out.num_sampled_nodes), _per_type(out.num_sampled_edges)
        if self.input_type is None:  # a homogeneous graph: its one type's counts, as PyG's Data has them
            one = lambda counts: None if counts is None else counts[None]  # noqa: E731
            return plan, {"num_seeds": int(input_id.shape[0]), "num_nodes": int(nodes[None].numel()),
                          "nodes_per_hop": one(nodes_per_hop), "edges_per_hop": one(edges_per_hop)}
        return plan, {"num_seeds": int(input_id.shape[0]), "nodes_per_hop": nodes_per_hop,
                      "edges_per_hop": edges_per_hop}


class _OneType:
    """A ``NeighborSampler`` as a typed sampler of one node type and one edge type (both None)."""

    node_types = edge_types = (None,)

    def __init__(self, sampler):
        self.sampler = sampler

    @property
    def disjoint(self) -> bool:
        return self.sampler.disjoint

    def sample(self, input_type: None, seeds: torch.Tensor, *, seed: int, seed_time=None) -> HeteroSamplerOutput:
        return one_type(self.sampler.sample(seeds, seed=seed, seed_time=seed_time))


def one_type(out) -> HeteroSamplerOutput:
    """A homogeneous sampler output as the typed output of its one node and edge type (None)."""
    one = lambda v: None if v is None else {None: v}  # noqa: E731
    return HeteroSamplerOutput(node={None: out.node}, row={None: out.row}, col={None: out.col},
                               edge={None: out.edge}, num_sampled_nodes=one(out.num_sampled_nodes),
                               num_sampled_edges=one(out.num_sampled_edges), batch=one(out.batch))


def NeighborPlanner(sampler, input_nodes: torch.Tensor, node_attrs: Mapping[str, Any],
                    edge_attrs: Mapping[str, torch.Tensor], input_ids: Optional[torch.Tensor] = None,
                    input_time: Optional[torch.Tensor] = None, post_sample: Optional[Callable] = None) -> HeteroPlanner:
    """The planner of a homogeneous graph's batches (a ``NeighborSampler``'s; `post_sample` maps its
    output, typed as one type: :func:`one_type`), named as in PyG's Data ("x", "n_id", "edge_index")."""
    return HeteroPlanner(_OneType(sampler), None, input_nodes, {None: node_attrs}, {None: edge_attrs},
                         input_ids=input_ids, input_time=input_time, post_sample=post_sample)


__all__ = ["NeighborPlanner", "HeteroPlanner", "one_type", "node_name", "edge_name", "INPUT_ID", "SEED_TIME"]
