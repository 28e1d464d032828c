"""The one multi-hop neighbour sampler, with the layout of PyG's NeighborLoader, for heterogeneous graphs and
(``sampling.neighbor``) homogeneous ones: a homogeneous graph is its one-node-type, one-edge-type case.

A heterogeneous graph is a set of node types (each with its own ids ``0 .. n - 1``) and of
edge types ``(src, rel, dst)``, each an edge list from ``src`` nodes to ``dst`` nodes, stored
here as a :class:`TypedCSC` (the in-edges of every ``dst`` node as one slice). The layout of
one :class:`HeteroSamplerOutput` is that of pyg-lib's ``hetero_neighbor_sample`` with
``csc=True``, directed, non-disjoint (PyG's NeighborLoader on a ``HeteroData``):

* Seeds are nodes of one type, the input type; ``node[input_type]`` starts with them,
  exactly as given (duplicates kept). Every other type starts empty (seeds of several
  types, ``input_type=None``: each type starts with its own, as pyg-lib's ``seed_dict``;
  disjoint seed positions run on across the types in the dict's order). Each frontier
  position is sampled on its own (a seed given twice is sampled twice, independently);
  a sampled node equal to a repeated seed maps to the seed's *first* position.
* Hop ``h`` visits the edge types in the order given. For edge type ``(s, r, d)`` it
  samples ``num_neighbors[(s, r, d)][h]`` in-edges of each node of type ``d`` that was
  new at hop ``h - 1`` (the seeds, at hop 0; ``-1``: all of them; without replacement a
  node with fewer keeps them all, with ``replace=True`` exactly ``k`` draws are made, none
  if it has none), and appends the sources seen for the first time to ``node[s]``, in the
  order of the edges that reach them. Nodes found at hop ``h`` are the frontier of hop
  ``h + 1`` only, whichever edge type found them (pyg-lib's per-type slices).
* Edges of type ``(s, r, d)``: ``row`` is the local source (a position in ``node[s]``),
  ``col`` the local destination (a position in ``node[d]``), ``edge`` the column in that
  type's ``edge_index``; listed hop by hop, frontier position by frontier position, each
  position's edges in CSC order, whether sampled or taken whole (pyg-lib leaves sampled
  edges in draw order).
* ``num_sampled_nodes[t]`` has ``hops + 1`` entries (seeds, then new nodes per hop; 0 for
  a type that is not the input type), ``num_sampled_edges[(s, r, d)]`` has ``hops``.
  Every node type and edge type is present, with empty tensors when nothing was sampled.
* ``induced=True`` (PyG's ``subgraph_type="induced"``): the nodes are sampled the same
  way, and each edge type then holds *every* edge of the graph between its sampled
  sources and destinations, destination position by destination position, each one's
  in-edges in CSC order (``homogeneous=True``: a repeated seed's later copies get none);
  the counts are None, as PyG's (torch-sparse's) induced sampling returns them.
* ``disjoint=True``: every seed grows a subgraph of its own: a node is new once *per seed*
  (``node[t]`` may repeat ids, one per subgraph holding it), edges never join two
  subgraphs, and ``batch[t]`` gives each node's seed (its position among the seeds).
* Temporal sampling (``node_time`` per node type or ``edge_time`` per edge type, PyG's
  ``time_attr``) is disjoint, and draws each frontier position's neighbours only among
  the in-edges whose source node's (or edge's) time is no later than its seed's time;
  ``temporal_strategy="last"`` draws among the latest ``k`` of them (all of them without
  replacement, ``k`` draws with ``replace=True``, as pyg-lib). The in-edges of every
  temporal edge type must be ordered by time, once, when the graph is built
  (``TypedCSC.from_edge_index(..., time=...)`` or ``graph.sorted_by_time``); the sampler
  checks that once, and each seed's allowed in-edges are then a prefix of each
  neighbourhood (a binary search), as in pyg-lib; edge types whose sources have no time
  are not restricted.
* Weighted sampling (``weight`` per edge type, PyG's ``weight_attr``): a neighbour is drawn
  with probability proportional to its edge's weight (without replacement:
  Efraimidis-Spirakis keys ``log(u) / w``; with replacement: inverse transform on the
  cumulative weights). Zero-weight edges are never drawn; a node with fewer positive-weight
  in-edges than the fan-out keeps those only; a fan-out of ``-1``, or one at least the
  in-degree without replacement, takes every in-edge. Edge types without weights stay uniform.
  Weights are float64 (any real dtype is converted), finite and >= 0; with replacement the
  weights of each node's in-edges must also sum to a finite float64, which the sampler checks
  when it is built. Draws follow the weights' ratios over float64's whole range (subnormal
  weights included).

Randomness is the counter-based hash of ``sampling.kernels`` keyed by (seed, hop, edge
type's position, frontier position) (``homogeneous=True``: by (seed, hop, frontier position)):
the output depends only on ``seed`` and the inputs, never on the number of numba threads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..threads import use_parallel
from .graph import CSCGraph, TypedCSC, as_numpy, check_int, check_time, real_values, time_sorted_check
from .kernels import (MAX_FANOUT, first_infinite_sum, induced_edges, readonly, sample_hop, table_insert,
                      table_put_seeds, valid_counts)

__all__ = ["EdgeType", "HeteroNeighborSampler", "HeteroSamplerOutput", "TEMPORAL_STRATEGIES", "TypedCSC",
           "check_num_neighbors", "check_seeds", "check_time", "check_weights", "resolve_num_neighbors"]

#: an edge type, as PyG names it: (source node type, relation, destination node type).
EdgeType = Tuple[str, str, str]

#: how a temporal draw picks among the in-edges no later than its seed: at random, or the latest.
TEMPORAL_STRATEGIES = ("uniform", "last")


@dataclass
class HeteroSamplerOutput:
    """One sampled heterogeneous subgraph, laid out like ``torch_geometric.sampler.HeteroSamplerOutput``.

    ``node[t]``: global ids (int64) of the sampled nodes of type ``t``, seeds first for the
    input type. ``row[e]``/``col[e]``: local source/destination positions into
    ``node[src]``/``node[dst]`` of edge type ``e = (src, rel, dst)``. ``edge[e]``: the
    edges' columns in that type's ``edge_index``. ``num_sampled_nodes[t]``: seeds, then
    new nodes per hop; ``num_sampled_edges[e]``: edges per hop. The counts are None for an
    induced subgraph, and ``edge[e]`` None for an edge type whose edges are not edges of
    the graph (PyG's bidirectional subgraph merges an edge type with its reverse).
    """

    node: Dict[str, torch.Tensor]
    row: Dict[EdgeType, torch.Tensor]
    col: Dict[EdgeType, torch.Tensor]
    edge: Dict[EdgeType, Optional[torch.Tensor]]
    num_sampled_nodes: Optional[Dict[str, List[int]]]
    num_sampled_edges: Optional[Dict[EdgeType, List[int]]]
    #: disjoint sampling: the seed (position among the seeds) each node's subgraph grew from.
    batch: Optional[Dict[str, torch.Tensor]] = None


def check_num_neighbors(num_neighbors: Sequence[int]) -> List[int]:
    """One edge type's fan-outs (one int >= -1 per hop, -1: every in-edge; none: no hop, the seeds alone, as in
    PyG), or a ValueError naming the bad hop."""
    if not isinstance(num_neighbors, (list, tuple)):
        raise ValueError(f"num_neighbors must be a list of ints >= -1 (one per hop), got {num_neighbors!r}")
    for hop, k in enumerate(num_neighbors):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not -1 <= k <= MAX_FANOUT:
            raise ValueError(f"num_neighbors[{hop}] must be an int >= -1 and <= {MAX_FANOUT} (2**63 - 1; "
                             f"-1 = all neighbours), got {k!r}")
    return [int(k) for k in num_neighbors]


def check_weights(name: str, value, count: Optional[int], per: str) -> np.ndarray:
    """Weights (`count` of them, None: any number; `per` says what each weighs, in errors) as contiguous
    float64, finite and >= 0: the edge weights of weighted sampling, the node weights of negative sampling."""
    w = np.ascontiguousarray(real_values(name, value, count, per), dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if bad.size:
        raise ValueError(f"{name}[{int(bad[0])}]={float(w[bad[0]])!r}; accepted: finite weights >= 0")
    return w


def _typed_times(kind: str, given: Optional[Mapping], counts: Mapping, types: str) -> Optional[dict]:
    """`node_time` or `edge_time` (`kind`): per node (edge) type, one integer or float time per node (edge)."""
    if given is None:
        return None
    out = {}
    for key, value in given.items():
        name = f"{kind}_time[{key!r}]"
        if key not in counts:
            raise ValueError(f"{name}: no such {kind} type in the graph; {types}")
        if isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16:
            value = value.float()  # numpy has no bfloat16: its float32 values, exactly
        arr = as_numpy(name, value)
        if arr.shape != (counts[key],) or not (np.issubdtype(arr.dtype, np.integer)
                                               or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(f"{name} has dtype {arr.dtype} and shape {tuple(arr.shape)}; accepted: one integer "
                             f"or float time per {kind} ({counts[key]},)")
        # int64 or float64 (float16, which numba lacks, included), NaN refused: as NeighborSampler's times
        out[key] = check_time(name, arr, counts[key])
    return out


def check_seeds(seeds: Union[torch.Tensor, np.ndarray], num_nodes: int, node_type: str = "") -> np.ndarray:
    """`seeds` as contiguous int64 ids below `num_nodes` (of `node_type`, named in errors when given), or an
    error naming what is wrong."""
    arr = as_numpy("seeds", seeds, integer=True)
    if arr.ndim != 1:
        raise ValueError(f"seeds must be 1-d, got shape {tuple(arr.shape)}")
    lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, -1)  # before the cast: uint64 would wrap
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if lo < 0 or hi >= num_nodes:
        what = f"{node_type!r} node" if node_type else "node"
        raise ValueError(f"seeds contains {what} id {lo if lo < 0 else hi}, outside the valid range [0, {num_nodes})")
    return arr


def resolve_num_neighbors(num_neighbors: Union[Sequence[int], Mapping[EdgeType, Sequence[int]]],
                          edge_types: Sequence[EdgeType],
                          default: Optional[Sequence[int]] = None) -> Dict[EdgeType, List[int]]:
    """The fan-outs of every edge type, as PyG's NumNeighbors resolves them.

    A list applies to every edge type. A dict names edge types (``(src, rel, dst)``
    tuples, or PyG's ``"src__rel__dst"`` strings); every key must be an edge type of the
    graph, and an edge type it leaves out takes ``default`` (an error when None). Every
    edge type must have the same number of hops.
    """
    if not isinstance(num_neighbors, Mapping):
        if default is not None:
            raise ValueError(f"default={default!r} with a list num_neighbors: a default is for the "
                             "edge types a dict leaves out; accepted with a list: None")
        hops = check_num_neighbors(num_neighbors)
        return {e: list(hops) for e in edge_types}
    names = {"__".join(e): e for e in edge_types}
    given = {}
    for key, value in num_neighbors.items():
        name = key if isinstance(key, str) else "__".join(key) if isinstance(key, (tuple, list)) else repr(key)
        if name not in names:
            raise ValueError(f"num_neighbors names edge type {key!r}, which the graph does not "
                             f"have; its edge types: {list(edge_types)}")
        given[names[name]] = value
    out = {}
    for e in edge_types:
        if e not in given and default is None:
            raise ValueError(f"num_neighbors gives no fan-outs for edge type {e!r}; a dict must "
                             f"name every edge type of the graph ({list(edge_types)}), or use a "
                             "list for all of them")
        out[e] = check_num_neighbors(given.get(e, default))
    lengths = {e: len(v) for e, v in out.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"Number of hops must be the same across all edge types; num_neighbors "
                         f"gives {lengths}")
    return out


class HeteroNeighborSampler:
    """Multi-hop in-neighbour sampler for a heterogeneous graph: uniform, weighted or temporal (PyG's semantics).

    `num_nodes` maps every node type to its node count; `graphs` maps every edge type
    ``(src, rel, dst)`` to its :class:`TypedCSC` (its order is the order edge types are
    visited in each hop, as PyG's ``data.edge_types``). `num_neighbors` is a list for all
    edge types or a dict per edge type (:func:`resolve_num_neighbors`). ``replace=True``
    draws with replacement; ``parallel=True`` spreads the draws over numba's threads,
    ``False`` stays on the calling thread with the same output, ``None`` decides per call
    (parallel in the main process, serial in DataLoader workers: ibp_graph.threads).
    ``induced=True`` returns the subgraph induced by the sampled nodes, ``disjoint=True``
    one subgraph per seed (see the module; PyG offers no induced disjoint sampling);
    `node_time` or `edge_time` (numpy arrays or tensors: one time per node of a type, per
    edge of a type) make it temporal, with `temporal_strategy` "uniform" or "last"; `weight`
    (one per edge of a type, in its ``edge_index`` order) makes that type's draws weighted.
    ``edge_ids=False`` leaves the edge ids out (``edge[e]`` None for every type): the sampler
    then never reads ``e_id`` after construction, one random memory access less per sampled
    edge (and none of ``e_id``'s pages in memory while training), for batches that need no
    ``e_id`` and gather no edge attributes.

    ``homogeneous=True`` is the layout of :class:`~ibp_graph.sampling.neighbor.NeighborSampler`
    (one node type, one edge type, a :class:`CSCGraph` as its graph): draws keyed by (seed, hop,
    frontier position) only, errors naming hops only, and an induced subgraph giving a
    repeated node's later positions no edges.
    """

    def __init__(self, num_nodes: Mapping[str, int], graphs: Mapping[EdgeType, TypedCSC],
                 num_neighbors: Union[Sequence[int], Mapping[EdgeType, Sequence[int]]], *,
                 default: Optional[Sequence[int]] = None, replace: bool = False,
                 parallel: Optional[bool] = None, induced: bool = False, disjoint: bool = False,
                 node_time: Optional[Mapping[str, np.ndarray]] = None,
                 edge_time: Optional[Mapping[EdgeType, np.ndarray]] = None,
                 temporal_strategy: str = "uniform",
                 weight: Optional[Mapping[EdgeType, Union[torch.Tensor, np.ndarray]]] = None,
                 homogeneous: bool = False, edge_ids: bool = True) -> None:
        for name, flag in (("replace", replace), ("induced", induced), ("disjoint", disjoint),
                           ("homogeneous", homogeneous), ("edge_ids", edge_ids)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r}")
        if temporal_strategy not in TEMPORAL_STRATEGIES:
            raise ValueError(f"temporal_strategy={temporal_strategy!r} is not accepted; use one of "
                             f"{TEMPORAL_STRATEGIES}")
        if node_time is not None and edge_time is not None:
            raise ValueError("node_time and edge_time are both given; accepted: one of them (PyG's time_attr "
                             "is node-level or edge-level)")
        temporal = node_time is not None or edge_time is not None
        if temporal and weight is not None:
            raise ValueError("weight with temporal sampling (node_time/edge_time) is not accepted (nor by PyG); "
                             "give one of them")
        disjoint = disjoint or temporal  # as PyG: temporal sampling is disjoint
        if induced and disjoint:
            raise ValueError("induced=True with disjoint=True is not accepted (nor by PyG): an induced "
                             "subgraph joins every sampled node; use one of them")
        if parallel is not None and not isinstance(parallel, bool):
            raise TypeError(f"parallel must be None or a bool, got {parallel!r}")
        self.num_nodes = {t: check_int(f"num_nodes[{t!r}]", n, minimum=0) for t, n in num_nodes.items()}
        self.graphs = dict(graphs)
        for e, g in self.graphs.items():
            if not (isinstance(e, tuple) and len(e) == 3):
                raise TypeError(f"graphs key {e!r} is not an edge type; accepted: (src, rel, dst) tuples")
            if not isinstance(g, (TypedCSC, CSCGraph)):
                raise TypeError(f"graphs[{e!r}] must be a TypedCSC, got {type(g).__name__}")
            src, _, dst = e
            for t in (src, dst):
                if t not in self.num_nodes:
                    raise ValueError(f"edge type {e!r} names node type {t!r}, which num_nodes lacks; "
                                     f"node types: {list(self.num_nodes)}")
            if g.num_src != self.num_nodes[src] or g.num_dst != self.num_nodes[dst]:
                raise ValueError(f"graphs[{e!r}] joins {g.num_src} source and {g.num_dst} destination "
                                 f"nodes; num_nodes gives {self.num_nodes[src]} {src!r} and "
                                 f"{self.num_nodes[dst]} {dst!r} nodes")
        self.edge_types: List[EdgeType] = list(self.graphs)
        self.node_types: List[str] = list(self.num_nodes)
        if homogeneous and (len(self.node_types) != 1 or len(self.edge_types) != 1):
            raise ValueError(f"homogeneous=True needs one node type and one edge type, got {self.node_types} and "
                             f"{self.edge_types}")
        self.num_neighbors = resolve_num_neighbors(num_neighbors, self.edge_types, default)
        # hops of a graph without edge types: those of a list (seeds only come out anyway)
        self.num_hops = len(next(iter(self.num_neighbors.values()))) if self.num_neighbors else \
            0 if isinstance(num_neighbors, Mapping) else len(num_neighbors)
        self.replace, self.parallel, self.induced, self.disjoint = replace, parallel, induced, disjoint
        self.temporal_strategy, self.homogeneous, self.edge_ids = temporal_strategy, homogeneous, edge_ids
        # read-only views: in-memory and memory-mapped graphs share one compiled kernel; without edge ids,
        # or with positional ones, the kernels get an empty e_id of the graph's dtype (the same compiled
        # kernel; they write CSC positions: the edge ids of a positional graph, dropped by sample() otherwise)
        self._csc = {e: (readonly(g.indptr), readonly(g.indices),
                         readonly(g.checked_e_id() if edge_ids and not g.positional_ids
                                  else np.empty(0, dtype=g.e_id_dtype)))
                     for e, g in self.graphs.items()}
        self._max_degree = {e: int(np.diff(g.indptr).max()) if g.num_dst else 0 for e, g in self.graphs.items()}
        types = f"node types {self.node_types}, edge types {self.edge_types}"
        self.node_time = _typed_times("node", node_time, self.num_nodes, types)
        self.edge_time = _typed_times("edge", edge_time, {e: g.edge_value_count for e, g in self.graphs.items()}, types)
        # the time at each CSC position of the edge types sampled temporally (their neighbours' or
        # edges' times; pyg-lib leaves the others unrestricted), checked sorted per neighbourhood, once
        self._pos_time: Dict[EdgeType, np.ndarray] = {}
        by_node, by_edge = self.node_time or {}, self.edge_time or {}
        for e, g in self.graphs.items():
            if e[0] in by_node or e in by_edge:
                indptr, indices = self._csc[e][:2]
                pos_time = by_node[e[0]][indices] if e[0] in by_node else g.in_csc_order(by_edge[e])
                time_sorted_check("graph" if homogeneous else f"graphs[{e!r}]", indptr, pos_time)
                self._pos_time[e] = readonly(np.ascontiguousarray(pos_time))
        # per weighted edge type: its weights in CSC order, and each destination's positive-weight in-edges
        self._weight: Dict[EdgeType, Tuple[np.ndarray, np.ndarray]] = {}
        for e, w in (weight or {}).items():
            if e not in self.graphs:
                raise ValueError(f"weight names edge type {e!r}, which the graph does not have; its edge "
                                 f"types: {self.edge_types}")
            name = "weight" if homogeneous else f"weight[{e!r}]: weight"
            w = check_weights(name, w, self.graphs[e].edge_value_count, "one weight per edge, ")
            w = self.graphs[e].in_csc_order(w)  # edge_index order -> CSC order
            indptr = self.graphs[e].indptr
            if replace and any(k > 0 for k in self.num_neighbors[e]):  # draws by the weights' running sum
                self._check_weight_sums(e, indptr, w)
            csum = np.concatenate([[0], np.cumsum(w > 0)])
            self._weight[e] = (readonly(w), csum[indptr[1:]] - csum[indptr[:-1]])

    def _check_weight_sums(self, e: EdgeType, indptr: np.ndarray, w: np.ndarray) -> None:
        """Refuse weights (CSC order) of edge type `e` whose float64 sum over a destination's in-edges is inf:
        with replacement, a draw is a point in [0, sum), and an infinite sum would draw one edge every time."""
        v = int(first_infinite_sum(readonly(indptr), readonly(w)))
        if v < 0:
            return
        name, node = ("weight", "node") if self.homogeneous else (f"weight[{e!r}]", f"{e[2]!r} node")
        part = w[indptr[v]:indptr[v + 1]]
        raise ValueError(f"{name}: the {part.shape[0]} in-edges of {node} {v} have weights summing to inf in float64 "
                         f"(the largest: {float(part.max())!r}), which replace=True cannot draw from; accepted "
                         f"with replace=True: weights whose sum over each node's in-edges is finite in float64 "
                         f"(at most {float(np.finfo(np.float64).max)!r}), e.g. all of them divided by the same "
                         "factor (draws follow their ratios only)")

    @property
    def temporal(self) -> bool:
        """Whether neighbours are restricted to times no later than their seed's."""
        return self.node_time is not None or self.edge_time is not None

    @property
    def weighted(self) -> bool:
        """Whether some edge type's draws follow edge weights."""
        return bool(self._weight)

    def __repr__(self) -> str:
        return (f"HeteroNeighborSampler(node_types={self.node_types}, edge_types={self.edge_types}, "
                f"num_hops={self.num_hops}, replace={self.replace}, induced={self.induced}, "
                f"disjoint={self.disjoint})")

    def check_seeds(self, input_type: str, seeds: Union[torch.Tensor, np.ndarray]) -> np.ndarray:
        """`seeds` as contiguous int64 ids of `input_type` nodes, or an error naming what is wrong."""
        if input_type not in self.num_nodes:
            raise ValueError(f"input_type={input_type!r} is not a node type of the graph; node types: "
                             f"{self.node_types}")
        return check_seeds(seeds, self.num_nodes[input_type], "" if self.homogeneous else input_type)

    def _counts(self, e: EdgeType, front: np.ndarray, k: int, valid: Optional[np.ndarray]) -> np.ndarray:
        """How many in-edges each frontier position gets at a hop of fan-out k (temporal: of its `valid`
        first ones, the latest k of them for the "last" strategy)."""
        indptr = self._csc[e][0]
        deg = indptr[front + 1] - indptr[front] if valid is None else valid
        if valid is not None and self.temporal_strategy == "last" and k >= 0:
            deg = np.minimum(deg, k)
        if k < 0:
            return deg
        # distinct draws a destination can give: its positive-weight in-edges when weighted
        drawable = self._weight[e][1][front] if e in self._weight else deg
        if self.replace:
            return np.where(drawable > 0, k, 0).astype(np.int64)
        return np.where(deg <= k, deg, np.minimum(drawable, k))  # a fan-out >= the in-degree takes them all

    def sample(self, input_type: Optional[str], seeds: Union[torch.Tensor, np.ndarray, Mapping[str, torch.Tensor]],
               *, seed: int, seed_time: Union[torch.Tensor, np.ndarray, Mapping[str, torch.Tensor], None] = None
               ) -> HeteroSamplerOutput:
        """Sample the multi-hop in-neighbourhood of `seeds` (nodes of `input_type`); same `seed`, same output.

        Temporal sampling takes each seed's time from `seed_time` (one per seed), else from
        `node_time` of the input type. With ``input_type=None``, `seeds` (and `seed_time`) map
        node types to their seeds (times), as pyg-lib's ``seed_dict`` (PyG's link sampling of
        an edge type between two node types): each type's ``node`` starts with its seeds, and a
        disjoint sample numbers the seeds across the types in the mapping's order (the second
        type's first seed follows the first type's last), as pyg-lib does.
        """
        seed = check_int("seed", seed, minimum=None)
        if seed_time is not None and not self.temporal:
            raise ValueError("seed_time is given but the sampler has no node_time or edge_time; accepted: None")
        given = self._typed_seeds(input_type, seeds, seed_time)
        times = np.concatenate([self._seed_times(t, s, st) for t, (s, st) in given.items()]) \
            if self.temporal else None
        empty = readonly(np.empty(0, dtype=np.int64))
        num_seeds = sum(s.shape[0] for s, _ in given.values())
        # disjoint: a node's key is (its seed's position) * (nodes of its type) + its id
        width = {t: max(1, n) for t, n in self.num_nodes.items()}
        if self.disjoint and num_seeds * max(width.values()) >= 1 << 62:
            raise ValueError(f"disjoint sampling of {num_seeds} seeds at once in a graph of "
                             f"{max(width.values())} nodes of one type overflows its node keys; "
                             "accepted: fewer seeds per batch")
        # per node type: the nodes new at the last hop (the frontier) and their seeds' positions, every
        # part of node[t] and batch[t], the id table (table, shift, entries) and how many nodes it holds
        frontier = {t: given[t][0] if t in given else empty for t in self.node_types}
        first, offset = 0, {}
        for t, (s, _) in given.items():  # seed positions run on across the seed types, in their order
            offset[t], first = first, first + s.shape[0]
        frontier_batch = {t: np.arange(f.shape[0], dtype=np.int64) + offset.get(t, 0) for t, f in frontier.items()}
        nodes = {t: [f] for t, f in frontier.items()}
        batch = {t: [b] for t, b in frontier_batch.items()}
        tables = {t: table_put_seeds(readonly(frontier_batch[t] * width[t] + f) if self.disjoint else f)
                  for t, f in frontier.items()}
        size = {t: f.shape[0] for t, f in frontier.items()}
        sampled: Dict[EdgeType, List[Tuple[np.ndarray, np.ndarray, np.ndarray]]] = {e: [] for e in self.edge_types}

        parallel = use_parallel(2, 2) if self.parallel is None else self.parallel
        for hop in range(self.num_hops):
            begin = {t: size[t] - frontier[t].shape[0] for t in self.node_types}
            found: Dict[str, List[np.ndarray]] = {t: [] for t in self.node_types}
            found_batch: Dict[str, List[np.ndarray]] = {t: [] for t in self.node_types}
            for pos, e in enumerate(self.edge_types):
                src_type, _, dst_type = e
                k = self.num_neighbors[e][hop]
                front, front_batch = frontier[dst_type], frontier_batch[dst_type]
                # temporal: each position draws from its first `valid` in-edges, those no later than its seed
                valid = valid_counts(self._csc[e][0], self._pos_time[e], front, times[front_batch]) \
                    if e in self._pos_time else None
                counts = self._counts(e, front, k, valid)
                what = f"num_neighbors[{hop}]={k}" if self.homogeneous else f"num_neighbors[{e!r}][{hop}]={k}"
                src, eid = sample_hop(what, parallel, self._csc[e], front, counts, k, self.replace, self._max_degree[e],
                                      (int(seed), hop, None if self.homogeneous else pos), begin[dst_type], valid,
                                      valid is not None and self.temporal_strategy == "last",
                                      self._weight[e][0] if e in self._weight else None)
                col = np.repeat(np.arange(begin[dst_type], begin[dst_type] + front.shape[0], dtype=np.int64), counts)
                row, new = np.empty_like(src), np.empty_like(src)
                keys = src + np.repeat(front_batch, counts) * width[src_type] if self.disjoint else src
                table, shift, entries, n_new = table_insert(*tables[src_type], keys, np.int64(size[src_type]), row, new)
                tables[src_type] = (table, shift, entries)
                new = new[:n_new]
                if self.disjoint:
                    new, which = new % width[src_type], new // width[src_type]
                    found_batch[src_type].append(which)
                found[src_type].append(new)
                size[src_type] += int(n_new)
                sampled[e].append((row, col, eid))
            for t in self.node_types:
                parts = found[t]
                frontier[t] = readonly(parts[0] if len(parts) == 1 else np.concatenate(parts)) if parts else empty
                if self.disjoint:
                    frontier_batch[t] = np.concatenate(found_batch[t]) if found_batch[t] else empty
                    batch[t].append(frontier_batch[t])
                nodes[t].append(frontier[t])

        def cat(parts: List[np.ndarray]) -> torch.Tensor:
            return torch.from_numpy(np.concatenate(parts)) if parts else torch.empty(0, dtype=torch.int64)

        node = {t: cat(nodes[t]) for t in self.node_types}
        if self.induced:
            return self._induced(node, tables)
        row, col = ({e: cat([part[i] for part in sampled[e]]) for e in self.edge_types} for i in range(2))
        edge = {e: cat([part[2] for part in sampled[e]]) if self.edge_ids else None for e in self.edge_types}
        return HeteroSamplerOutput(
            node=node, row=row, col=col, edge=edge,
            num_sampled_nodes={t: [int(p.shape[0]) for p in nodes[t]] for t in self.node_types},
            num_sampled_edges={e: [int(part[0].shape[0]) for part in sampled[e]] for e in self.edge_types},
            batch={t: cat(batch[t]) for t in self.node_types} if self.disjoint else None)

    def _typed_seeds(self, input_type: Optional[str], seeds, seed_time) -> Dict[str, Tuple[np.ndarray, object]]:
        """{node type: (checked seeds, their given times or None)}: of `input_type`, or of every type `seeds` maps."""
        if input_type is not None:
            return {input_type: (readonly(self.check_seeds(input_type, seeds)), seed_time)}
        if not isinstance(seeds, Mapping) or not seeds:
            raise TypeError(f"seeds with input_type=None must map node types to seed ids, got {type(seeds).__name__}; "
                            "accepted: a non-empty {node type: ids} dict, or input_type naming the seeds' type")
        if seed_time is not None and (not isinstance(seed_time, Mapping) or set(seed_time) != set(seeds)):
            raise ValueError(f"seed_time with input_type=None must map the seeds' node types {list(seeds)} to their "
                             f"times, got {list(seed_time) if isinstance(seed_time, Mapping) else type(seed_time).__name__}")
        return {t: (readonly(self.check_seeds(t, s)), None if seed_time is None else seed_time[t])
                for t, s in seeds.items()}

    def _seed_times(self, input_type: str, seeds: np.ndarray, seed_time) -> np.ndarray:
        if seed_time is not None:  # compared exactly with the graph's times, whatever their dtypes
            return check_time("seed_time", seed_time, seeds.shape[0])
        if self.node_time is None or input_type not in self.node_time:
            raise ValueError(f"temporal sampling from {input_type!r} nodes needs their times: pass seed_time, "
                             f"or node_time for {input_type!r}")
        return self.node_time[input_type][seeds]

    def _induced(self, node: Dict[str, torch.Tensor], tables) -> HeteroSamplerOutput:
        """Every edge of each edge type between its sampled sources and destinations."""
        row, col, edge = {}, {}, {}
        for e in self.edge_types:
            src_type, _, dst_type = e
            r, c, k = induced_edges(*self._csc[e], readonly(node[dst_type].numpy()), *tables[src_type][:2],
                                    *tables[dst_type][:2], self.homogeneous)
            row[e], col[e], edge[e] = torch.from_numpy(r), torch.from_numpy(c), \
                torch.from_numpy(k) if self.edge_ids else None
        return HeteroSamplerOutput(node=node, row=row, col=col, edge=edge, num_sampled_nodes=None,
                                   num_sampled_edges=None)
