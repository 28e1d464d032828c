"""Batch plans of link batches (PyG's LinkNeighborLoader): a node planner's plan of the sampled subgraph, plus
the batch's link fields.

:class:`LinkPlanner` wraps a node planner (``NeighborPlanner`` or ``HeteroPlanner``; it uses only its
``sampler`` and ``plan(req, out)``): a request's positions pick seed edges, ``sampling.links.link_seeds``
draws the negatives and lays out the seed nodes, the planner's sampler samples from them with the
request's seed, and the plan is the inner planner's (``input_id``: the edges' positions, or the given ids)
with the link fields put on it, flattened to 1-d (each joins its dtype's element stream, whatever the
batch's size), their shapes in the meta's ``"link"`` entry.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import numpy as np
import torch

from ..sampling.hetero import EdgeType, check_time
from ..sampling.links import LinkSeeds, NegativeSampling, NodeTimes, link_seeds
from .producer import BatchPlan
from .requests import BatchRequest

#: the link fields a batch may carry (PyG's LinkLoader), in the order they are put.
LINK_FIELDS = ("edge_label_index", "edge_label", "edge_label_time", "src_index", "dst_pos_index", "dst_neg_index")
#: the link fields in PyG's ``SamplerOutput.metadata`` after ``input_id`` (its edge_sample), without negatives or
#: binary and triplet; the time is the triplet batch's ``seed_time``.
METADATA_FIELDS = (("edge_label_index", "edge_label", "edge_label_time"),
                   ("src_index", "dst_pos_index", "dst_neg_index", "edge_label_time"))


def link_name(field: str) -> str:
    """The name a link field travels under in a batch plan (apart from the graph's own attributes)."""
    return f"link:{field}"


class LinkPlanner:
    """Link batches over the seed edges ``(src[i], dst[i])`` (with labels and times), sampled by `planner`'s
    typed sampler (``sample(None, seeds, ...)``: a tensor of a homogeneous graph's seeds, or ``{type: seeds}``)
    and planned by `planner`; `edge_type` is None for a homogeneous graph. `node_time` gives the
    (src, dst) node times negatives must respect (node-level temporal sampling). A disjoint sample's
    ``batch`` is taken modulo the batch's positives (PyG: the example each subgraph belongs to);
    `post_sample` then maps the sampler output and PyG's metadata of it, ``(input_id, *link fields)`` in
    PyG's order (METADATA_FIELDS), to the batch's (PyG's bidirectional subgraph, transform_sampler_output):
    ``post_sample(out, metadata) -> (out, metadata)``."""

    def __init__(self, planner: Any, src: torch.Tensor, dst: torch.Tensor, *, num_src_nodes: int,
                 num_dst_nodes: int, edge_type: Optional[EdgeType] = None, edge_label: Optional[torch.Tensor] = None,
                 edge_label_time: Optional[torch.Tensor] = None, neg_sampling: Optional[NegativeSampling] = None,
                 node_time: tuple = (None, None), post_sample: Optional[Callable] = None):
        self.planner, self.src, self.dst = planner, src, dst
        self.num_src_nodes, self.num_dst_nodes, self.edge_type = num_src_nodes, num_dst_nodes, edge_type
        self.edge_label, self.edge_label_time, self.neg_sampling = edge_label, edge_label_time, neg_sampling
        if edge_label_time is not None:  # once here, not at the batch holding a bad time
            check_time("edge_label_time", edge_label_time, int(src.numel()))
        # checked once here, not at every batch (link_seeds takes NodeTimes as they are); one array serving
        # both ends (a homogeneous graph's) is checked once
        src_time, dst_time = node_time
        check = lambda t, end, n: None if t is None else NodeTimes.check(f"{end}_node_time", t, n)  # noqa: E731
        checked = check(src_time, "src", num_src_nodes)
        self.node_time = (checked, checked if dst_time is src_time else check(dst_time, "dst", num_dst_nodes))
        self.post_sample = post_sample

    @property
    def sampler(self):
        """The inner planner's neighbour sampler."""
        return self.planner.sampler

    def __len__(self) -> int:
        return int(self.src.numel())

    def seeds(self, req: BatchRequest) -> LinkSeeds:
        """The negatives, sampler seeds and link fields of `req`'s seed edges."""
        index = req.index
        return link_seeds(self.src[index], self.dst[index], num_src_nodes=self.num_src_nodes,
                          num_dst_nodes=self.num_dst_nodes, seed=req.seed, neg_sampling=self.neg_sampling,
                          edge_label=None if self.edge_label is None else self.edge_label[index],
                          edge_label_time=None if self.edge_label_time is None else self.edge_label_time[index],
                          disjoint=bool(self.sampler.disjoint), edge_type=self.edge_type,
                          src_node_time=self.node_time[0], dst_node_time=self.node_time[1])

    def draw(self, req: BatchRequest) -> tuple[LinkSeeds, Any, None]:
        """`req`'s link seeds and the sampler's output (PyG's edge_sample), before `post_sample`, as `plan`
        takes them (the inner planner's input_id)."""
        link = self.seeds(req)
        times = {} if link.seed_time is None else {"seed_time": link.seed_time}
        out = self.sampler.sample(None, link.seeds, seed=req.seed, **times)  # typed: the seeds of one or two types
        if out.batch is not None:  # PyG: out.batch % num_pos, the example a subgraph belongs to
            out.batch = {t: b % link.num_pos for t, b in out.batch.items()}
        return link, out, None

    def sample(self, req: BatchRequest) -> tuple[LinkSeeds, Any, Optional[torch.Tensor]]:
        """`req`'s link seeds, sampler output and input_id after `post_sample` (None: the inner planner's)."""
        link, out, _ = self.draw(req)
        if self.post_sample is None:
            return link, out, None
        fields = METADATA_FIELDS[bool(self.neg_sampling is not None and self.neg_sampling.is_triplet)]
        metadata = (self.planner.input_id(req),) + tuple(getattr(link, f) for f in fields)
        out, metadata = self.post_sample(out, metadata)
        # the batch's link fields are the metadata's, as PyG's LinkLoader.filter_fn reads them
        return dataclasses.replace(link, **{f: metadata[i + 1] for i, f in enumerate(fields)}), out, metadata[0]

    def plan(self, req: BatchRequest, sampled: tuple[LinkSeeds, Any, Optional[torch.Tensor]]
             ) -> tuple[BatchPlan, dict]:
        link, out, input_id = sampled
        plan, meta = self.planner.plan(req, (out, None if input_id is None else (input_id, None)))
        shapes = {}
        for field in LINK_FIELDS:
            value = getattr(link, field)
            if value is not None:
                plan.put(link_name(field), value.contiguous().reshape(-1))
                shapes[field] = tuple(value.shape)
        return plan, {**meta, "link": shapes}


def edge_list(indptr: np.ndarray, indices: np.ndarray, e_id: Optional[np.ndarray]) -> torch.Tensor:
    """The ``[2, E]`` edge_index of a CSC graph's edges in edge-id order (stable: CSC order among equal ids):
    a graph's own edge_index when its ids are 0..E-1, else the edges sorted by id (e.g. a prepared graph whose
    ids number the edges of a larger one); `e_id` None: the ids are CSC positions, the edges in CSC order."""
    dst = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    if e_id is None:
        return torch.from_numpy(np.stack([np.asarray(indices, dtype=np.int64), dst]))
    order = np.argsort(np.asarray(e_id), kind="stable")
    return torch.from_numpy(np.stack([np.asarray(indices, dtype=np.int64)[order], dst[order]]))


__all__ = ["LINK_FIELDS", "LinkPlanner", "edge_list", "link_name"]
