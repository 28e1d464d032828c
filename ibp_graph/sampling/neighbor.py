"""Multi-hop neighbour sampling of a homogeneous :class:`CSCGraph`, with the layout of PyG's NeighborLoader.

The graph is the one-node-type, one-edge-type case of the one sampler,
:class:`~ibp_graph.sampling.hetero.HeteroNeighborSampler` (``homogeneous=True``), which does every
draw and whose module documents the layout, fan-outs, induced, disjoint, temporal and weighted
sampling and the randomness. One :class:`SamplerOutput` is laid out as pyg-lib's ``neighbor_sample``
with ``csc=True``, directed, non-disjoint (PyG's NeighborLoader default): ``node`` lists the seeds
first, exactly as given (``node[:len(seeds)] == seeds``, ``batch_size == len(seeds)``), then, hop by
hop, every node seen for the first time; a seed given twice is the destination (``col``) of its own
edges per copy, as in pyg-lib, and a neighbour equal to it maps to its *first* position (pyg-lib
picks the first or the last depending on graph size). Edges are listed hop by hop, frontier position
by frontier position, each position's in CSC order (increasing edge id for a graph from
``CSCGraph.from_edge_index``).

``subgraph_type="bidirectional"``: the sampled edges plus their reversals, duplicates removed,
sorted by (destination, source) (PyG's ``SamplerOutput.to_bidirectional``); a reversed edge
carries its forward edge's id. ``"induced"``: the same nodes, with every edge of the graph between
two of them (a repeated seed's later copies get none). Both report no per-hop counts (None), as
PyG. Temporal sampling (``node_time`` or ``edge_time``) is always disjoint, as PyG; the sampler
orders each node's in-edges by time once, when it is built (``graph.sorted_by_time``, ties in CSC
order).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from .graph import CSCGraph, sorted_by_time, time_order
from .hetero import HeteroNeighborSampler, check_time

__all__ = ["NeighborSampler", "SamplerOutput", "SUBGRAPH_TYPES"]

# the node and edge type of a homogeneous graph in the one sampler
_NODE = "_N"
_EDGE = (_NODE, "_E", _NODE)


@dataclass
class SamplerOutput:
    """One sampled subgraph, laid out like ``torch_geometric.sampler.SamplerOutput``.

    ``node``: global ids (int64), seeds first. ``row``/``col``: local source/destination
    indices into ``node`` (``edge_index = stack([row, col])``). ``edge``: global edge
    ids (None from a sampler made with ``edge_ids=False``). ``num_sampled_nodes``: seeds,
    then new nodes per hop (``len == hops + 1``).
    ``num_sampled_edges``: edges per hop (``len == hops``). Both are None for the
    bidirectional and induced subgraphs. ``batch``: the seed position of every node
    (disjoint sampling only, else None).
    """

    node: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    edge: Optional[torch.Tensor]
    num_sampled_nodes: Optional[List[int]]
    num_sampled_edges: Optional[List[int]]
    batch: Optional[torch.Tensor] = None


#: subgraph types NeighborSampler accepts (PyG's SubgraphType values).
SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")


class NeighborSampler:
    """Multi-hop in-neighbour sampler for a :class:`CSCGraph` (PyG semantics; see the module docstrings).

    ``num_neighbors[h]`` in-neighbours are drawn per frontier node at hop ``h`` (``-1``: all of
    them); ``weight`` (one per edge), ``node_time`` (one per node) or ``edge_time`` (one per edge),
    edges in ``edge_index`` order (one per edge id, ``graph.edge_value_count``), make the draws
    weighted or temporal. ``replace``, ``disjoint``,
    ``temporal_strategy``, ``parallel`` and ``edge_ids`` are :class:`HeteroNeighborSampler`'s,
    ``subgraph_type`` (one of :data:`SUBGRAPH_TYPES`) PyG's.
    """

    def __init__(self, graph: CSCGraph, num_neighbors: Sequence[int], *,
                 replace: bool = False, parallel: Optional[bool] = None,
                 weight: Union[torch.Tensor, np.ndarray, None] = None,
                 subgraph_type: str = "directional", disjoint: bool = False,
                 node_time: Union[torch.Tensor, np.ndarray, None] = None,
                 edge_time: Union[torch.Tensor, np.ndarray, None] = None,
                 temporal_strategy: str = "uniform", edge_ids: bool = True) -> None:
        if not isinstance(graph, CSCGraph):
            raise TypeError(f"graph must be a CSCGraph, got {type(graph).__name__}")
        # flags, the temporal strategy and the other combinations are checked by HeteroNeighborSampler
        if isinstance(num_neighbors, Mapping):  # checked here: the one sampler would name its internal edge type
            raise ValueError(f"num_neighbors={dict(num_neighbors)!r} is not accepted for a homogeneous graph (a dict "
                             "per edge type is for a heterogeneous one); accepted: a list of ints >= -1, one per hop")
        if subgraph_type not in SUBGRAPH_TYPES:
            raise ValueError(f"subgraph_type={subgraph_type!r} is not accepted; use one of {SUBGRAPH_TYPES}")
        temporal = node_time is not None or edge_time is not None
        if (disjoint is True or temporal) and subgraph_type == "induced":  # as PyG: temporal sampling is disjoint
            level = "node" if node_time is not None else "edge"
            why = "disjoint=True" if disjoint is True else \
                f"temporal sampling ({level}-level times, a loader's time_attr; it is disjoint)"
            raise ValueError(f"{why} with subgraph_type='induced' is not accepted (as in PyG); use it with "
                             "'directional' or 'bidirectional'")
        self.graph = graph
        self.subgraph_type = subgraph_type
        self.node_time = check_time("node_time", node_time, graph.num_nodes)
        edge_time = check_time("edge_time", edge_time, graph.edge_value_count)
        if temporal:  # built once in time order: each node's in-edges by time, ties in CSC order
            key = self.node_time[graph.indices] if edge_time is None else graph.in_csc_order(edge_time)
            if edge_ids:
                graph = sorted_by_time(graph, key)
            else:  # no edge id is read or reported: the sorted graph numbers its edges by their new CSC positions
                order = time_order(graph, key)  # (it holds no e_id), and edge times come in that order
                graph = CSCGraph(graph.indptr, np.ascontiguousarray(graph.indices[order]), None)
                edge_time = None if edge_time is None else key[order]
        self._typed = HeteroNeighborSampler(
            {_NODE: graph.num_nodes}, {_EDGE: graph}, num_neighbors, replace=replace, parallel=parallel,
            induced=subgraph_type == "induced", disjoint=disjoint,
            node_time=None if self.node_time is None else {_NODE: self.node_time},
            edge_time=None if edge_time is None else {_EDGE: edge_time}, temporal_strategy=temporal_strategy,
            weight=None if weight is None else {_EDGE: weight}, homogeneous=True, edge_ids=edge_ids)
        self.num_neighbors = self._typed.num_neighbors[_EDGE]
        self.replace, self.disjoint, self.temporal_strategy = replace, self._typed.disjoint, temporal_strategy

    @property
    def parallel(self) -> Optional[bool]:
        """True: numba's threads; False: the calling thread; None: decided per call (ibp_graph.threads)."""
        return self._typed.parallel

    @parallel.setter
    def parallel(self, value: Optional[bool]) -> None:
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"parallel must be None or a bool, got {value!r}")
        self._typed.parallel = value

    @property
    def temporal(self) -> bool:
        """Whether the sampler respects node or edge times."""
        return self._typed.temporal

    def __repr__(self) -> str:
        return (f"NeighborSampler({self.graph!r}, num_neighbors={self.num_neighbors}, "
                f"replace={self.replace}, parallel={self.parallel}, weighted={self._typed.weighted}, "
                f"subgraph_type={self.subgraph_type!r}, disjoint={self.disjoint}, temporal={self.temporal})")

    def sample(self, seeds: Union[torch.Tensor, np.ndarray], *, seed: int,
               seed_time: Union[torch.Tensor, np.ndarray, None] = None) -> SamplerOutput:
        """Sample the multi-hop in-neighbourhood of ``seeds``; same ``seed``, same output.
        Temporal samplers take each seed's time from `seed_time`, else from ``node_time``."""
        if seed_time is not None and not self.temporal:
            raise ValueError("seed_time is given but the sampler has no node_time or edge_time; accepted: None")
        if seed_time is None and self.temporal and self.node_time is None:
            raise ValueError("edge-level temporal sampling needs seed_time (the loader's input_time): "
                             "accepted: one time per seed")
        out = self._typed.sample(_NODE, seeds, seed=seed, seed_time=seed_time)
        node, row, col, edge = out.node[_NODE], out.row[_EDGE], out.col[_EDGE], out.edge[_EDGE]
        nodes_per_hop = None if out.num_sampled_nodes is None else out.num_sampled_nodes[_NODE]
        edges_per_hop = None if out.num_sampled_edges is None else out.num_sampled_edges[_EDGE]
        if self.subgraph_type == "bidirectional":
            row, col, edge = (None if a is None else torch.from_numpy(a) for a in _bidirectional(
                row.numpy(), col.numpy(), None if edge is None else edge.numpy(), max(int(node.numel()), 1)))
            nodes_per_hop = edges_per_hop = None
        return SamplerOutput(node=node, row=row, col=col, edge=edge, num_sampled_nodes=nodes_per_hop,
                             num_sampled_edges=edges_per_hop, batch=None if out.batch is None else out.batch[_NODE])


def _bidirectional(row: np.ndarray, col: np.ndarray, edge: Optional[np.ndarray], n: int):
    """The edges plus their reversals, each (row, col) pair once (its first occurrence, forward
    edges first), sorted by (col, row): PyG's to_bidirectional (coalesce, sort_by_row=False);
    the edge ids of the kept pairs (None without edge ids)."""
    r2, c2 = np.concatenate([row, col]), np.concatenate([col, row])
    order = np.argsort(c2 * n + r2, kind="stable")
    key = (c2 * n + r2)[order]
    keep = np.ones(key.shape[0], dtype=bool)
    keep[1:] = key[1:] != key[:-1]
    sel = order[keep]
    return r2[sel], c2[sel], None if edge is None else np.concatenate([edge, edge])[sel]
