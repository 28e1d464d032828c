"""Multi-hop neighbour sampling on a heterogeneous graph, with the layout of PyG's NeighborLoader.

A heterogeneous graph is a set of node types (each with its own ids ``0 .. n - 1``) and of
edge types ``(src, rel, dst)``, each an edge list from ``src`` nodes to ``dst`` nodes, stored
here as a :class:`TypedCSC` (the in-edges of every ``dst`` node as one slice). The layout of
one :class:`HeteroSamplerOutput` is that of pyg-lib's ``hetero_neighbor_sample`` with
``csc=True``, directed, non-disjoint (PyG's NeighborLoader on a ``HeteroData``):

* Seeds are nodes of one type, the input type; ``node[input_type]`` starts with them,
  exactly as given (duplicates kept). Every other type starts empty.
* Hop ``h`` visits the edge types in the order given. For edge type ``(s, r, d)`` it
  samples ``num_neighbors[(s, r, d)][h]`` in-edges of each node of type ``d`` that was
  new at hop ``h - 1`` (the seeds, at hop 0), and appends the sources seen for the first
  time to ``node[s]``. Nodes found at hop ``h`` are the frontier of hop ``h + 1`` only,
  whichever edge type found them (pyg-lib's per-type slices).
* Edges of type ``(s, r, d)``: ``row`` is the local source (a position in ``node[s]``),
  ``col`` the local destination (a position in ``node[d]``), ``edge`` the column in that
  type's ``edge_index``; listed hop by hop, frontier position by frontier position, each
  position's edges in CSC order (as ``sampling.neighbor`` does on a homogeneous graph).
* ``num_sampled_nodes[t]`` has ``hops + 1`` entries (seeds, then new nodes per hop; 0 for
  a type that is not the input type), ``num_sampled_edges[(s, r, d)]`` has ``hops``.
  Every node type and edge type is present, with empty tensors when nothing was sampled.
* With ``induced=True`` (PyG's ``subgraph_type="induced"``) the nodes are sampled the same
  way, and each edge type then holds *every* edge of the graph between its sampled
  sources and destinations: destination position by destination position, each one's
  in-edges in CSC order; ``num_sampled_nodes`` and ``num_sampled_edges`` are None then,
  as PyG's (torch-sparse's) induced sampling returns them.
* With ``disjoint=True`` (PyG's ``disjoint``) every seed grows a subgraph of its own: a
  node is new once *per seed* (so ``node[t]`` may repeat ids, one per subgraph holding
  the node), edges never join two subgraphs, and ``batch[t]`` gives each node's seed
  (its position among the seeds). Everything else is as above.
* Temporal sampling (``node_time`` per node type or ``edge_time`` per edge type, PyG's
  ``time_attr``) is disjoint, and draws each frontier position's neighbours only among
  the in-edges whose source node's (or edge's) time is no later than its seed's time;
  with ``temporal_strategy="last"`` it takes the latest ``k`` of them instead of ``k`` at
  random. The in-edges of every temporal edge type are ordered by time
  (``TypedCSC.from_edge_index(..., time=...)``), so those are a prefix of each
  neighbourhood, as in pyg-lib; edge types whose sources have no time are not restricted.
* Weighted sampling (``weight`` per edge type, PyG's ``weight_attr``): the draws of an
  edge type that has weights are those of ``sampling.neighbor``'s weighted kernel
  (without replacement, zero-weight edges are never drawn; a fan-out of ``-1`` or one
  at least the in-degree takes every in-edge); edge types without weights stay uniform.

Randomness is the counter-based hash of ``sampling.neighbor`` keyed by (seed, hop, edge
type's position, frontier position): the output depends only on ``seed`` and the inputs,
never on the number of numba threads. The per-edge-type draws are those of the
homogeneous sampler's kernels (``_sample_hop_*``), reused unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numba
import numpy as np
import torch

from ..index_checks import first_bad_step, first_outside
from ..threads import use_parallel
from .graph import _as_numpy, _check_int, _counting_sort_by_dst, check_edge_ids, index_dtype
from .neighbor import (_check_num_neighbors, _check_weight, _hop_key, _mix64_py, _readonly, _sample_hop_parallel,
                       _sample_hop_serial, _sample_hop_weighted_parallel, _sample_hop_weighted_serial,
                       _table_find, _table_insert, _table_put_seeds, hop_offsets, run_hop)

__all__ = ["EdgeType", "HeteroNeighborSampler", "HeteroSamplerOutput", "TEMPORAL_STRATEGIES", "TypedCSC",
           "resolve_num_neighbors"]

#: an edge type, as PyG names it: (source node type, relation, destination node type).
EdgeType = Tuple[str, str, str]

#: how a temporal draw picks among the in-edges no later than its seed: at random, or the latest.
TEMPORAL_STRATEGIES = ("uniform", "last")

# mixes an edge type's position into a hop's key (an odd constant, unrelated to the golden ratio)
_TYPE_MIX = 0xD1B54A32D192ED03


def _type_hop_key(seed: int, hop: int, type_pos: int) -> np.uint64:
    """The random key of one (hop, edge type): hop keys of sampling.neighbor, mixed with the type."""
    return np.uint64(_mix64_py(int(_hop_key(seed, hop)) ^ _mix64_py((type_pos + 1) * _TYPE_MIX)))


@numba.njit(cache=True, nogil=True)
def _induced_edges(indptr, indices, e_id, dst_nodes, table, shift):
    """Every in-edge of dst_nodes whose source is in `table`: (row, col, edge), by destination position."""
    m = 0
    for i in range(dst_nodes.shape[0]):
        v = dst_nodes[i]
        for p in range(indptr[v], indptr[v + 1]):
            if _table_find(table, shift, indices[p]) >= 0:
                m += 1
    row = np.empty(m, dtype=np.int64)
    col = np.empty(m, dtype=np.int64)
    eid = np.empty(m, dtype=np.int64)
    j = 0
    for i in range(dst_nodes.shape[0]):
        v = dst_nodes[i]
        for p in range(indptr[v], indptr[v + 1]):
            r = _table_find(table, shift, indices[p])
            if r >= 0:
                row[j] = r
                col[j] = i
                eid[j] = e_id[p]
                j += 1
    return row, col, eid


@numba.njit(cache=True, nogil=True)
def _temporal_ranges(indptr, pos_time, front, front_time, k, last):
    """Per frontier position, the in-edges a temporal draw picks from: those no later than the
    position's seed time (a prefix of its time-sorted neighbourhood), the last k of them for
    the "last" strategy; as ``[lo0, hi0, lo1, hi1, ...]``."""
    out = np.empty(2 * front.shape[0], dtype=np.int64)
    for i in range(front.shape[0]):
        lo = indptr[front[i]]
        hi = indptr[front[i] + 1]
        a, b = lo, hi                            # first position whose time exceeds the seed's
        while a < b:
            mid = (a + b) // 2
            if pos_time[mid] <= front_time[i]:
                a = mid + 1
            else:
                b = mid
        hi = a
        if last and k >= 0 and hi - lo > k:
            lo = hi - k
        out[2 * i] = lo
        out[2 * i + 1] = hi
    return out


@dataclass(frozen=True, eq=False)
class TypedCSC:
    """The edges of one edge type ``(src, rel, dst)``, stored by destination.

    ``indices[indptr[v]:indptr[v + 1]]`` are the sources (ids of ``src`` nodes, below
    ``num_src``) of the edges into ``dst`` node ``v``, in original edge order; ``e_id``
    holds each one's column in the type's ``edge_index``. Like :class:`CSCGraph`, except
    that sources and destinations are ids of different node types; ``num_edge_ids`` is
    :class:`CSCGraph`'s (``e_id`` names distinct edges below it; None: not recorded).
    """

    indptr: np.ndarray
    indices: np.ndarray
    e_id: np.ndarray
    num_src: int
    num_edge_ids: Optional[int] = None

    def __post_init__(self) -> None:
        for name in ("indptr", "indices", "e_id"):
            arr = getattr(self, name)
            accepted = ("int64",) if name == "indptr" else ("int32", "int64")
            if not isinstance(arr, np.ndarray) or arr.dtype.name not in accepted or arr.ndim != 1:
                raise TypeError(f"{name} must be a 1-d numpy array of {' or '.join(accepted)}, got "
                                f"{type(arr).__name__} {getattr(arr, 'dtype', '')} "
                                f"{getattr(arr, 'shape', '')}")
        _check_int("num_src", self.num_src, minimum=0)
        if self.indptr.shape[0] < 1:
            raise ValueError("indptr must have num_dst + 1 >= 1 entries, got 0")
        if self.e_id.shape != self.indices.shape:
            raise ValueError(f"e_id must have one entry per edge ({self.indices.shape[0]}), "
                             f"got {self.e_id.shape[0]}")
        first, last = int(self.indptr[0]), int(self.indptr[-1])
        if first != 0 or last != self.indices.shape[0]:
            raise ValueError(f"indptr must start at 0 and end at num_edges={self.indices.shape[0]}, "
                             f"got indptr[0]={first}, indptr[-1]={last}")
        bad = first_bad_step(self.indptr)
        if bad >= 0:
            raise ValueError(f"indptr must be non-decreasing; indptr[{bad}]={int(self.indptr[bad])} > "
                             f"indptr[{bad + 1}]={int(self.indptr[bad + 1])}")
        bad = first_outside(self.indices, 0, self.num_src)
        if bad >= 0:
            raise ValueError(f"indices must name source nodes in [0, num_src={self.num_src}); "
                             f"indices[{bad}]={int(self.indices[bad])}")
        check_edge_ids(self.e_id, self.num_edge_ids)

    @property
    def num_dst(self) -> int:
        """Number of destination nodes (``len(indptr) - 1``)."""
        return self.indptr.shape[0] - 1

    @property
    def num_edges(self) -> int:
        """Number of edges of the type."""
        return self.indices.shape[0]

    @classmethod
    def from_edge_index(cls, edge_index: Union[torch.Tensor, np.ndarray], num_src: int,
                        num_dst: int, time: Optional[np.ndarray] = None) -> "TypedCSC":
        """Build from PyG's ``2 x E`` ``edge_index`` of one edge type (row 0: source ids, row 1: destination ids).

        With `time` (one value per edge: the edge's time, or its source node's), each
        destination's in-edges are ordered by it (ties in edge order), as PyG orders them
        for temporal sampling; otherwise in edge order.
        """
        num_src = _check_int("num_src", num_src, minimum=0)
        num_dst = _check_int("num_dst", num_dst, minimum=0)
        ei = _as_numpy("edge_index", edge_index)
        if ei.dtype == np.bool_ or not np.issubdtype(ei.dtype, np.integer):
            raise TypeError(f"edge_index must have an integer dtype (int32 or int64), got {ei.dtype}")
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise ValueError(f"edge_index must have shape (2, num_edges), got {tuple(ei.shape)}")
        src = np.ascontiguousarray(ei[0], dtype=np.int64)
        dst = np.ascontiguousarray(ei[1], dtype=np.int64)
        for row, ids, n, what in ((0, src, num_src, "source"), (1, dst, num_dst, "destination")):
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
                bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
                raise ValueError(f"edge_index[{row}] contains {what} node id {bad}, outside the valid "
                                 f"range [0, {n}) of its node type")
        indices = np.empty(src.shape[0], dtype=index_dtype(num_src))
        e_id = np.empty(src.shape[0], dtype=index_dtype(src.shape[0]))
        indptr = _counting_sort_by_dst(src, dst, num_dst, indices, e_id)
        if time is not None:
            time = np.asarray(time)
            if time.shape != src.shape:
                raise ValueError(f"time must have one value per edge ({src.shape[0]}), got shape "
                                 f"{tuple(time.shape)}")
            order = np.lexsort((time, dst))  # stable: ties keep edge order
            indices[:] = src[order]
            e_id[:] = order
        return cls(indptr, indices, e_id, num_src, src.shape[0])

    def __repr__(self) -> str:
        return f"TypedCSC(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges})"


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


def _edge_type_name(edge_type) -> str:
    return "__".join(edge_type) if isinstance(edge_type, tuple) else repr(edge_type)


def resolve_num_neighbors(num_neighbors: Union[Sequence[int], Mapping[EdgeType, Sequence[int]]],
                          edge_types: Sequence[EdgeType],
                          default: Optional[Sequence[int]] = None) -> Dict[EdgeType, List[int]]:
    """The fan-outs of every edge type, as PyG's NumNeighbors resolves them.

    A list applies to every edge type. A dict names edge types (``(src, rel, dst)``
    tuples, or PyG's ``"src__rel__dst"`` strings); every key must be an edge type of the
    graph, and an edge type it leaves out takes ``default`` (an error when None). Every
    edge type must have the same number of hops.
    """
    if isinstance(num_neighbors, Mapping):
        names = {_edge_type_name(e): e for e in edge_types}
        given = {}
        for key, value in num_neighbors.items():
            name = key if isinstance(key, str) else _edge_type_name(tuple(key)) \
                if isinstance(key, (tuple, list)) else repr(key)
            if name not in names:
                raise ValueError(f"num_neighbors names edge type {key!r}, which the graph does not "
                                 f"have; its edge types: {list(edge_types)}")
            given[names[name]] = value
        out = {}
        for e in edge_types:
            if e in given:
                value = given[e]
            elif default is not None:
                value = default
            else:
                raise ValueError(f"num_neighbors gives no fan-outs for edge type {e!r}; a dict must "
                                 f"name every edge type of the graph ({list(edge_types)}), or use a "
                                 "list for all of them")
            out[e] = _check_num_neighbors(value)
    else:
        if default is not None:
            raise ValueError(f"default={default!r} with a list num_neighbors: a default is for the "
                             "edge types a dict leaves out; accepted with a list: None")
        hops = _check_num_neighbors(num_neighbors)
        out = {e: list(hops) for e in edge_types}
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
    edge types or a dict per edge type (:func:`resolve_num_neighbors`). `replace` and
    `parallel` are those of :class:`~ibp_graph.sampling.neighbor.NeighborSampler`;
    ``induced=True`` returns the subgraph induced by the sampled nodes, ``disjoint=True``
    one subgraph per seed (see the module; PyG offers no induced disjoint sampling);
    `node_time` or `edge_time` (numpy arrays or tensors: one time per node of a type, per
    edge of a type) make it temporal, with `temporal_strategy` "uniform" or "last".
    """

    def __init__(self, num_nodes: Mapping[str, int], graphs: Mapping[EdgeType, TypedCSC],
                 num_neighbors: Union[Sequence[int], Mapping[EdgeType, Sequence[int]]], *,
                 default: Optional[Sequence[int]] = None, replace: bool = False,
                 parallel: Optional[bool] = None, induced: bool = False, disjoint: bool = False,
                 node_time: Optional[Mapping[str, np.ndarray]] = None,
                 edge_time: Optional[Mapping[EdgeType, np.ndarray]] = None,
                 temporal_strategy: str = "uniform",
                 weight: Optional[Mapping[EdgeType, Union[torch.Tensor, np.ndarray]]] = None) -> None:
        for name, flag in (("replace", replace), ("induced", induced), ("disjoint", disjoint)):
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
        self.num_nodes = {t: _check_int(f"num_nodes[{t!r}]", n, minimum=0) for t, n in num_nodes.items()}
        self.graphs = dict(graphs)
        for e, g in self.graphs.items():
            if not (isinstance(e, tuple) and len(e) == 3):
                raise TypeError(f"graphs key {e!r} is not an edge type; accepted: (src, rel, dst) tuples")
            if not isinstance(g, TypedCSC):
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
        self.num_neighbors = resolve_num_neighbors(num_neighbors, self.edge_types, default)
        # hops of a graph without edge types: those of a list (seeds only come out anyway)
        self.num_hops = len(next(iter(self.num_neighbors.values()))) if self.num_neighbors else \
            0 if isinstance(num_neighbors, Mapping) else len(num_neighbors)
        self.replace = replace
        self.parallel = parallel
        self.induced = induced
        self.disjoint = disjoint
        self.temporal_strategy = temporal_strategy
        # read-only views: in-memory and memory-mapped graphs share one compiled kernel
        self._csc = {e: tuple(_readonly(a) for a in (g.indptr, g.indices, g.e_id))
                     for e, g in self.graphs.items()}
        self._max_degree = {e: int(np.diff(g.indptr).max()) if g.num_dst else 0 for e, g in self.graphs.items()}
        self.node_time = None if node_time is None else {t: self._time(f"node_time[{t!r}]", v, self.num_nodes.get(t))
                                                          for t, v in node_time.items()}
        self.edge_time = None if edge_time is None else {e: self._time(f"edge_time[{e!r}]", v,
                                                                       self.graphs[e].num_edges
                                                                       if e in self.graphs else None)
                                                          for e, v in edge_time.items()}
        # the time at each CSC position of the edge types sampled temporally (their neighbours' or
        # edges' times; pyg-lib leaves the others unrestricted), checked sorted per neighbourhood
        self._pos_time: Dict[EdgeType, np.ndarray] = {}
        for e, (indptr, indices, e_id) in self._csc.items():
            if self.node_time is not None and e[0] in self.node_time:
                pos_time = self.node_time[e[0]][indices]
            elif self.edge_time is not None and e in self.edge_time:
                pos_time = self.edge_time[e][e_id]
            else:
                continue
            seg = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
            bad = np.flatnonzero((pos_time[1:] < pos_time[:-1]) & (seg[1:] == seg[:-1]))
            if bad.size:
                raise ValueError(f"graphs[{e!r}] is not sorted by time within the in-edges of destination "
                                 f"{int(seg[bad[0]])}; build it with TypedCSC.from_edge_index(..., time=...)")
            self._pos_time[e] = _readonly(np.ascontiguousarray(pos_time))
        # per weighted edge type: its weights in CSC order, and each destination's positive-weight in-edges
        self._weight: Dict[EdgeType, Tuple[np.ndarray, np.ndarray]] = {}
        for e, w in (weight or {}).items():
            if e not in self.graphs:
                raise ValueError(f"weight names edge type {e!r}, which the graph does not have; its edge "
                                 f"types: {self.edge_types}")
            try:
                w = _check_weight(w, self.graphs[e])
            except (TypeError, ValueError) as err:
                raise type(err)(f"weight[{e!r}]: {err}") from None
            csum = np.concatenate([[0], np.cumsum(w > 0)])
            indptr = self.graphs[e].indptr
            self._weight[e] = (_readonly(w), csum[indptr[1:]] - csum[indptr[:-1]])

    def _time(self, argname: str, value, count: Optional[int]) -> np.ndarray:
        if count is None:
            raise ValueError(f"{argname}: no such {'node' if argname.startswith('node') else 'edge'} type "
                             f"in the graph; node types {self.node_types}, edge types {self.edge_types}")
        arr = _as_numpy(argname, value)
        if arr.shape != (count,) or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(f"{argname} has dtype {arr.dtype} and shape {tuple(arr.shape)}; accepted: one "
                             f"integer or float time per {'node' if argname.startswith('node') else 'edge'} "
                             f"({count},)")
        return np.ascontiguousarray(arr)

    @property
    def temporal(self) -> bool:
        """Whether neighbours are restricted to times no later than their seed's."""
        return bool(self._pos_time) or self.node_time is not None or self.edge_time is not None

    def __repr__(self) -> str:
        return (f"HeteroNeighborSampler(node_types={self.node_types}, edge_types={self.edge_types}, "
                f"num_hops={self.num_hops}, replace={self.replace}, induced={self.induced}, "
                f"disjoint={self.disjoint})")

    @property
    def weighted(self) -> bool:
        """Whether some edge type's draws follow edge weights."""
        return bool(self._weight)

    def _sample_hop(self, what: str, parallel: bool, edge_type: EdgeType, indptr, indices, e_id, front,
                    *rest) -> None:
        n = front.shape[0]
        if edge_type in self._weight:
            kernel = _sample_hop_weighted_parallel if parallel else _sample_hop_weighted_serial
            return run_hop(what, kernel, n, indptr, indices, e_id, self._weight[edge_type][0], front, *rest)
        run_hop(what, _sample_hop_parallel if parallel else _sample_hop_serial, n, indptr, indices, e_id,
                front, *rest)

    def check_seeds(self, input_type: str, seeds: Union[torch.Tensor, np.ndarray]) -> np.ndarray:
        """`seeds` as contiguous int64 ids of `input_type` nodes, or an error naming what is wrong."""
        if input_type not in self.num_nodes:
            raise ValueError(f"input_type={input_type!r} is not a node type of the graph; node types: "
                             f"{self.node_types}")
        if isinstance(seeds, torch.Tensor):
            if seeds.device.type != "cpu":
                raise ValueError(f"seeds must be on the CPU, got device {seeds.device}")
            if seeds.dtype == torch.bool or seeds.dtype.is_floating_point or seeds.dtype.is_complex:
                raise TypeError(f"seeds must have an integer dtype, got {seeds.dtype}")
            arr = seeds.detach().numpy()
        elif isinstance(seeds, np.ndarray):
            if seeds.dtype == np.bool_ or not np.issubdtype(seeds.dtype, np.integer):
                raise TypeError(f"seeds must have an integer dtype, got {seeds.dtype}")
            arr = seeds
        else:
            raise TypeError(f"seeds must be a 1-d integer torch.Tensor, got {type(seeds).__name__}")
        if arr.ndim != 1:
            raise ValueError(f"seeds must be 1-d, got shape {tuple(arr.shape)}")
        arr = np.ascontiguousarray(arr, dtype=np.int64)
        n = self.num_nodes[input_type]
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n):
            bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
            raise ValueError(f"seeds contains {input_type!r} node id {bad}, outside the valid range "
                             f"[0, {n})")
        return arr

    def sample(self, input_type: str, seeds: Union[torch.Tensor, np.ndarray], *,
               seed: int, seed_time: Union[torch.Tensor, np.ndarray, None] = None) -> HeteroSamplerOutput:
        """Sample the multi-hop in-neighbourhood of `seeds` (nodes of `input_type`); same `seed`, same output.

        Temporal sampling takes each seed's time from `seed_time` (one per seed), else from
        `node_time` of the input type.
        """
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {seed!r}")
        seeds_np = _readonly(self.check_seeds(input_type, seeds))
        times = self._seed_times(input_type, seeds_np, seed_time) if self.temporal else None
        empty = _readonly(np.empty(0, dtype=np.int64))
        # disjoint: a node's key is (its seed's position) * (nodes of its type) + its id
        width = {t: max(1, n) for t, n in self.num_nodes.items()}
        if self.disjoint and seeds_np.shape[0] * max(width.values()) >= 1 << 62:
            raise ValueError(f"disjoint sampling of {seeds_np.shape[0]} seeds at once in a graph of "
                             f"{max(width.values())} nodes of one type overflows its node keys; "
                             "accepted: fewer seeds per batch")

        nodes: Dict[str, List[np.ndarray]] = {t: [] for t in self.node_types}
        batch: Dict[str, List[np.ndarray]] = {t: [] for t in self.node_types}
        tables, count, frontier, frontier_batch = {}, {}, {}, {}
        for t in self.node_types:
            first = seeds_np if t == input_type else empty
            which = np.arange(first.shape[0], dtype=np.int64)
            table, shift, c = _table_put_seeds(_readonly(which * width[t] + first) if self.disjoint else first)
            tables[t] = (table, shift)
            count[t] = c
            nodes[t].append(first)
            batch[t].append(which)
            frontier[t] = first
            frontier_batch[t] = which
        size = {t: int(nodes[t][0].shape[0]) for t in self.node_types}
        num_sampled_nodes = {t: [size[t]] for t in self.node_types}
        rows: Dict[EdgeType, List[np.ndarray]] = {e: [] for e in self.edge_types}
        cols: Dict[EdgeType, List[np.ndarray]] = {e: [] for e in self.edge_types}
        edges: Dict[EdgeType, List[np.ndarray]] = {e: [] for e in self.edge_types}
        num_sampled_edges: Dict[EdgeType, List[int]] = {e: [] for e in self.edge_types}

        parallel = use_parallel(2, 2) if self.parallel is None else self.parallel
        for hop in range(self.num_hops):
            begin = {t: size[t] - frontier[t].shape[0] for t in self.node_types}
            new_this_hop: Dict[str, List[np.ndarray]] = {t: [] for t in self.node_types}
            new_batch: Dict[str, List[np.ndarray]] = {t: [] for t in self.node_types}
            for pos, e in enumerate(self.edge_types):
                src_type, _, dst_type = e
                k = self.num_neighbors[e][hop]
                front = frontier[dst_type]
                indptr, indices, e_id = self._csc[e]
                if e in self._pos_time:  # draw from [lo, hi) pairs: the in-edges no later than the seed
                    indptr = _readonly(_temporal_ranges(indptr, self._pos_time[e], front,
                                                        times[frontier_batch[dst_type]], np.int64(k),
                                                        self.temporal_strategy == "last"))
                    front = _readonly(np.arange(0, 2 * front.shape[0], 2, dtype=np.int64))
                deg = indptr[front + 1] - indptr[front]
                # distinct draws a destination can give: its positive-weight in-edges when weighted
                drawable = self._weight[e][1][front] if e in self._weight else deg
                if k < 0:
                    counts = deg
                elif self.replace:
                    counts = np.where(drawable > 0, k, 0).astype(np.int64)
                else:  # as sampling.neighbor: a fan-out at least the in-degree takes every in-edge
                    counts = np.where(deg <= k, deg, np.minimum(drawable, k))
                what = f"num_neighbors[{e!r}][{hop}]={k}"
                offsets = hop_offsets(what, counts, k, self.replace, self._max_degree[e], parallel)
                m = int(offsets[-1])
                src = np.empty(m, dtype=np.int64)
                eid = np.empty(m, dtype=np.int64)
                if m:
                    self._sample_hop(what, parallel, e, indptr, indices, e_id, front, offsets, np.int64(k),
                                     self.replace, _type_hop_key(int(seed), hop, pos),
                                     np.int64(begin[dst_type]), src, eid)
                col = np.repeat(np.arange(begin[dst_type], begin[dst_type] + front.shape[0],
                                          dtype=np.int64), counts)
                row = np.empty(m, dtype=np.int64)
                new = np.empty(m, dtype=np.int64)
                table, shift = tables[src_type]
                keys = src + np.repeat(frontier_batch[dst_type], counts) * width[src_type] \
                    if self.disjoint else src
                table, shift, count[src_type], n_new = _table_insert(
                    table, shift, count[src_type], keys, np.int64(size[src_type]), row, new)
                tables[src_type] = (table, shift)
                new = new[:n_new]
                if self.disjoint:
                    new, which = new % width[src_type], new // width[src_type]
                    new_batch[src_type].append(which)
                new_this_hop[src_type].append(new)
                size[src_type] += int(n_new)
                rows[e].append(row)
                cols[e].append(col)
                edges[e].append(eid)
                num_sampled_edges[e].append(m)
            for t in self.node_types:
                found = new_this_hop[t]
                frontier[t] = _readonly(np.concatenate(found)) if found else empty
                if self.disjoint:
                    frontier_batch[t] = np.concatenate(new_batch[t]) if new_batch[t] else empty
                    batch[t].append(frontier_batch[t])
                nodes[t].append(frontier[t])
                num_sampled_nodes[t].append(int(frontier[t].shape[0]))

        def cat(parts: List[np.ndarray]) -> torch.Tensor:
            return torch.from_numpy(np.concatenate(parts)) if parts else torch.empty(0, dtype=torch.int64)

        node = {t: cat(nodes[t]) for t in self.node_types}
        if self.induced:
            return self._induced(node, tables)
        return HeteroSamplerOutput(
            node=node,
            row={e: cat(rows[e]) for e in self.edge_types},
            col={e: cat(cols[e]) for e in self.edge_types},
            edge={e: cat(edges[e]) for e in self.edge_types},
            num_sampled_nodes=num_sampled_nodes,
            num_sampled_edges=num_sampled_edges,
            batch={t: cat(batch[t]) for t in self.node_types} if self.disjoint else None,
        )

    def _seed_times(self, input_type: str, seeds: np.ndarray, seed_time) -> np.ndarray:
        if seed_time is not None:
            arr = _as_numpy("seed_time", seed_time)
            if arr.shape != seeds.shape:
                raise ValueError(f"seed_time has shape {tuple(arr.shape)}; accepted: one time per seed "
                                 f"{tuple(seeds.shape)}")
            return np.ascontiguousarray(arr)
        if self.node_time is None or input_type not in self.node_time:
            raise ValueError(f"temporal sampling from {input_type!r} nodes needs their times: pass seed_time, "
                             f"or node_time for {input_type!r}")
        return self.node_time[input_type][seeds]

    def _induced(self, node: Dict[str, torch.Tensor], tables) -> HeteroSamplerOutput:
        """Every edge of each edge type between its sampled sources and destinations."""
        row, col, edge = {}, {}, {}
        for e in self.edge_types:
            src_type, _, dst_type = e
            indptr, indices, e_id = self._csc[e]
            table, shift = tables[src_type]
            r, c, k = _induced_edges(indptr, indices, e_id, _readonly(node[dst_type].numpy()), table, shift)
            row[e], col[e], edge[e] = torch.from_numpy(r), torch.from_numpy(c), torch.from_numpy(k)
        return HeteroSamplerOutput(node=node, row=row, col=col, edge=edge, num_sampled_nodes=None,
                                   num_sampled_edges=None)
