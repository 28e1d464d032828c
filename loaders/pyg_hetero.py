"""The heterogeneous side of CompressedNeighborLoader (loaders/pyg.py): PyG's NeighborLoader on a HeteroData,
heterogeneous (FeatureStore, GraphStore) or per-type tables, with compressed rows.

Sampling follows PyG's heterogeneous NeighborLoader (``ibp_graph.sampling.hetero``); the features of every
node and edge type are grouped by (dtype, row shape) across types and compressed like the homogeneous
loader's, with a codec per type where the types' rows differ enough (``ibp_graph.pipeline.type_codecs``);
batches are ``HeteroData`` on `device`.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np
import torch

from ibp_graph.data.store import EncodedTable
from ibp_graph.index_checks import check_node_table
from ibp_graph.loaders import _common
from ibp_graph.loaders._common import ADJ_T
from ibp_graph.loaders.pyg_stores import is_store_pair, read_stores
from ibp_graph.pipeline.batch import DecodedBatch
from ibp_graph.pipeline.codec_setup import CODEC_NAMES, CodecSpec
from ibp_graph.pipeline.plans import INPUT_ID, SEED_TIME, HeteroPlanner, edge_name, node_name
from ibp_graph.pipeline.type_codecs import split_row_groups
from ibp_graph.sampling.graph import sorted_by_time
from ibp_graph.sampling.hetero import EdgeType, HeteroNeighborSampler, TypedCSC

try:
    from torch_geometric.data import HeteroData
    from torch_geometric.sampler.base import NumNeighbors
except ImportError as e:  # pragma: no cover - exercised only without torch_geometric
    raise ImportError("ibp_graph.loaders.pyg_hetero needs torch_geometric: pip install 'ibp-graph[pyg]'") from e

__all__ = ["HeteroParts"]


class HeteroParts:
    """The heterogeneous side of CompressedNeighborLoader: its graph, sampler, inputs and codecs (set on the
    loader as NeighborLoader's fields), its batch plans and its batches' HeteroData.

    Arguments are NeighborLoader's (CompressedNeighborLoader's, for a heterogeneous input). `num_neighbors` is a list for
    every edge type or a dict per edge type (every edge type named; PyG's NumNeighbors
    with a `default` is accepted too). `input_nodes` is a node type (all its nodes), or
    ``(node type, None | boolean mask | node ids)``; a batch's ``input_id`` holds node ids
    for a mask, positions into the input nodes otherwise (as PyG). Node and edge attributes
    may be tensors, numpy arrays or np.memmaps (read through a view); node attributes may
    be EncodedTables. `subgraph_type` may be "directional" (the default), "bidirectional"
    (PyG's conversion of the sampled edges; converted edge types carry no ``e_id`` and no
    edge attributes, and no batch carries ``num_sampled_*``) or "induced" (every edge
    between the sampled nodes, with ``e_id``; no ``num_sampled_*``); `transform_sampler_output`
    gets PyG's HeteroSamplerOutput in the workers. ``disjoint=True`` grows one subgraph per seed
    (node ids may repeat across subgraphs; each node type gets ``batch``, its nodes' seeds;
    not with "induced", as in PyG). `time_attr` (a node-level
    or edge-level attribute) makes sampling temporal as in PyG: disjoint, each seed's
    neighbours no later than its time (`input_time`, else its node's `time_attr`), drawn
    by `temporal_strategy` ("uniform" or "last"); batches then carry ``batch`` per node
    type and, with `input_time`, ``seed_time`` on the input type. `weight_attr` names an
    edge attribute: the edge types that have it are sampled proportionally to it (PyG's
    weighted sampling without replacement: zero-weight edges are never drawn), the others
    uniformly; not with `time_attr`. 

    `data` is a HeteroData, PyG's ``(FeatureStore, GraphStore)`` pair with named node and
    edge types (read once, when the loader is built: loaders/pyg_stores.py; batches carry
    what PyG's filter_custom_hetero_store puts in them: the feature store's node
    attributes, ``num_nodes`` of the types that have one, no edge or graph-level
    attributes; edge types are sampled in the graph store's order), or per-type tables
    ``(features, graph[, num_nodes])``: ``{node type: {attr: tensor | array | EncodedTable}}``,
    ``{edge type: TypedCSC}`` and optionally ``{node type: count}`` (a prepared
    heterogeneous folder, served without building any edge_index; batch ``e_id`` are the
    TypedCSCs' ``e_id``; with `num_nodes` every type's ``num_nodes`` is in the batches).

    Each batch is a HeteroData with, per node type, the gathered node attributes, ``n_id``
    and ``num_sampled_nodes`` (``input_id`` and ``batch_size`` on the input type); per edge
    type ``edge_index`` (local ids: from the sampled source to the frontier destination),
    the gathered edge attributes, ``e_id`` and ``num_sampled_edges``; graph-level and
    other store-level attributes unchanged. `split_report` says, per row group shared by
    several types, whether the types got one codec or one each (and why).
    """

    def __init__(self, loader, data, *, num_neighbors, input_nodes, input_time, replace, subgraph_type, disjoint,
                 temporal_strategy, time_attr, weight_attr, input_id, post_sample):
        if not isinstance(disjoint, bool):
            raise TypeError(f"disjoint={disjoint!r} is not accepted; use a bool")
        if disjoint and subgraph_type == "induced":
            raise ValueError("disjoint=True with subgraph_type='induced' is not accepted (nor by PyG); "
                             "use one of them")
        self.loader = loader
        graph = self.graph = _HeteroGraph(data, time_attr, weight_attr)
        values, default = (num_neighbors.values, num_neighbors.default) \
            if isinstance(num_neighbors, NumNeighbors) else (num_neighbors, None)
        if isinstance(values, Mapping):  # PyG's EdgeTypeStr keys are strings "src__rel__dst"
            values = {tuple(k.split("__")) if isinstance(k, str) else k: v for k, v in values.items()}
        if (graph.node_time is not None or graph.edge_time is not None) and subgraph_type == "induced":
            raise ValueError("time_attr with subgraph_type='induced' is not accepted (nor by PyG): temporal "
                             "sampling is disjoint")
        loader.node_sampler = HeteroNeighborSampler(graph.num_nodes, graph.csc, values, default=default,
                                                    replace=replace, induced=subgraph_type == "induced",
                                                    disjoint=disjoint, node_time=graph.node_time,
                                                    edge_time=graph.edge_time, temporal_strategy=temporal_strategy,
                                                    weight=graph.weight)
        loader.disjoint = loader.node_sampler.disjoint  # temporal sampling is disjoint (as PyG)
        loader.input_type, loader.input_nodes, self.input_ids = _input_nodes(input_nodes, graph.num_nodes)
        if input_id is not None:
            self.input_ids = torch.as_tensor(input_id)
        loader.input_time = _input_time(input_time, loader.input_nodes)
        if loader.node_sampler.temporal and loader.input_time is None and (
                graph.node_time is None or loader.input_type not in graph.node_time):
            raise ValueError(f"time_attr={time_attr!r} gives {loader.input_type!r} nodes no time; accepted: "
                             "input_time with the seeds' times")
        self.post_sample = post_sample
        self.seeds, self.seed_time = loader.input_nodes, loader.input_time
        loader.features = None
        loader._codecs, self.typed, loader.split_report = _hetero_codecs(graph, loader._codec_spec, loader.device)

    def planner(self) -> HeteroPlanner:
        loader, g = self.loader, self.graph
        return HeteroPlanner(loader.node_sampler, loader.input_type, loader.input_nodes, g.node_attrs,
                             g.edge_attrs, input_ids=self.input_ids, input_time=loader.input_time,
                             typed_groups=self.typed, post_sample=self.post_sample)

    def read_again(self, data: HeteroData) -> dict:
        """The attributes of `data` read as the constructor reads them (the sampled graph stays); the codecs."""
        # without time_attr, weight_attr: the sampler has read them; a type left without attributes keeps its count
        self.graph = _HeteroGraph(data, counts=self.graph.num_nodes)
        codecs, self.typed, self.loader.split_report = _hetero_codecs(self.graph, self.loader._codec_spec,
                                                                      self.loader.device)
        return codecs

    @property
    def prefix(self) -> str:
        return f"input_type={self.loader.input_type!r}, "

    def describe(self) -> str:
        return "features=worker"

    def to_batch(self, batch: DecodedBatch) -> HeteroData:
        """NeighborLoader's HeteroData: every type's named tensors, and its fields from the batch's meta."""
        g, meta, loader = self.graph, batch.meta, self.loader
        out = HeteroData(**g.graph_attrs)
        for t in g.node_types:
            store = out[t]
            for key, value in g.node_other[t].items():
                store[key] = value
            for attr in g.node_attrs[t]:
                store[attr] = batch[node_name(t, attr)]
            if "n_id" not in g.node_attrs[t]:
                store.n_id = batch[node_name(t, "n_id")]
            if t in g.num_nodes_set:
                store.num_nodes = int(store.n_id.numel())
            if loader.disjoint:
                store.batch = batch[node_name(t, "batch")]
            if meta["nodes_per_hop"] is not None:
                store.num_sampled_nodes = meta["nodes_per_hop"][t]
        for e in g.edge_types:
            store = out[e]
            for key, value in g.edge_other[e].items():
                store[key] = value
            edge_index = batch[edge_name(e, "edge_index")].view(2, -1)
            for attr in g.edge_attrs[e]:  # absent where the subgraph's edges have no ids
                if edge_name(e, attr) in batch:
                    store[attr] = batch[edge_name(e, attr)]
            if ADJ_T in g.edge_attrs[e]:  # the type came as adj_t: so does the batch (PyG's filter_edge_store_)
                store.adj_t = _common.to_adj_t(edge_index, store.adj_t, out[e[0]].n_id.numel(),
                                               out[e[2]].n_id.numel())
            else:
                store.edge_index = edge_index
            if "e_id" not in g.edge_attrs[e] and edge_name(e, "e_id") in batch:
                store.e_id = batch[edge_name(e, "e_id")]
            if meta["edges_per_hop"] is not None:
                store.num_sampled_edges = meta["edges_per_hop"][e]
        inputs = out[loader.input_type]
        inputs.input_id = batch[INPUT_ID]
        if loader.input_time is not None:
            inputs.seed_time = batch[SEED_TIME]
        inputs.batch_size = meta["num_seeds"]
        return out


def _input_time(input_time, input_nodes: torch.Tensor) -> Optional[torch.Tensor]:
    """NeighborLoader's `input_time`: one time per input node (a CPU tensor), or None."""
    if input_time is None:
        return None
    t = torch.as_tensor(input_time)
    if t.shape != input_nodes.shape or t.dtype == torch.bool or t.dtype.is_complex:
        raise ValueError(f"input_time has dtype {t.dtype} and shape {tuple(t.shape)}; accepted: one integer or "
                         f"float time per input node, shape {tuple(input_nodes.shape)}")
    return _common.host_table(t, "input_time").contiguous()


def _input_nodes(input_nodes, num_nodes: Mapping[str, int]):
    """(input type, seed node ids as int64, input ids or None) from NeighborLoader's `input_nodes`.

    For a boolean mask the input ids are the node ids (as PyG); else None: the batch's
    input_id then holds positions into the input nodes.
    """
    types = list(num_nodes)
    if isinstance(input_nodes, str):
        input_type, nodes = input_nodes, None
    elif isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2 and isinstance(input_nodes[0], str):
        input_type, nodes = input_nodes
    else:
        raise ValueError(f"input_nodes={input_nodes!r} is not accepted for a HeteroData; use a node type "
                         f"(one of {types}) or (node type, None | boolean mask | node ids)")
    if input_type not in num_nodes:
        raise ValueError(f"input_nodes names node type {input_type!r}, which the graph does not have; "
                         f"node types: {types}")
    n = num_nodes[input_type]
    if nodes is None:
        return input_type, torch.arange(n), None
    t = nodes if isinstance(nodes, torch.Tensor) else torch.as_tensor(
        np.asarray(list(nodes) if isinstance(nodes, range) else nodes))
    if t.dtype == torch.bool:
        if t.dim() != 1 or t.numel() != n:
            raise ValueError(f"input_nodes[1] is a boolean mask of shape {tuple(t.shape)}; node type "
                             f"{input_type!r} has {n} nodes: accepted, a mask of shape ({n},)")
        ids = t.nonzero().view(-1)
        return input_type, ids, ids
    if t.dim() != 1 or t.dtype.is_floating_point or t.dtype.is_complex:
        raise TypeError(f"input_nodes[1] must be None, a boolean mask or a 1-d tensor of node ids, got "
                        f"dtype={t.dtype} shape={tuple(t.shape)}")
    t = t.to(torch.int64).contiguous()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
        bad = int(t.min()) if int(t.min()) < 0 else int(t.max())
        raise IndexError(f"input_nodes contains {input_type!r} node {bad}, outside [0, {n})")
    return input_type, t, None


class _HeteroGraph:
    """What the loader reads from its input: node counts, a TypedCSC per edge type (in-edges in time order
    for temporal sampling by `time_attr`), the edge weights `weight_attr` names, the node and edge attributes
    the workers gather (per type, as CPU tensors or views), everything else as given.

    The input is a HeteroData, PyG's ``(FeatureStore, GraphStore)`` (loaders/pyg_stores.py) or per-type
    tables ``(features, graph[, num_nodes])``: ``features`` ``{node type: {attr: tensor | array |
    EncodedTable}}``, ``graph`` ``{edge type: TypedCSC}`` (in the order edge types are sampled),
    ``num_nodes`` ``{node type: count}`` (optional: else the TypedCSCs' and the tables' counts; given, it
    orders the node types and batches carry every type's ``num_nodes``, as a HeteroData's set ones).
    """

    def __init__(self, data: Any, time_attr: Optional[str] = None, weight_attr: Optional[str] = None,
                 counts: Optional[Mapping[str, int]] = None):
        self._counts = dict(counts or {})  # node counts known already (a type whose attributes were deleted)
        self.num_nodes: dict[str, int] = {}
        self.num_nodes_set: set = set()
        self.node_attrs: dict[str, dict] = {}
        self.node_other: dict[str, dict] = {}
        self.csc: dict[EdgeType, TypedCSC] = {}
        self.edge_attrs: dict[EdgeType, dict] = {}
        self.edge_other: dict[EdgeType, dict] = {}
        self.graph_attrs: dict = {}
        if isinstance(data, HeteroData):
            self._read_hetero_data(data)
        elif is_store_pair(data):
            if weight_attr is not None:
                raise NotImplementedError(f"weight_attr={weight_attr!r} with (FeatureStore, GraphStore) data is not "
                                          "supported (nor by PyG): the feature store's edge groups are not read; "
                                          "accepted: None, or the graph as a HeteroData")
            self._read_stores(read_stores(data))
        elif isinstance(data, tuple) and len(data) in (2, 3) and isinstance(data[1], Mapping):
            self._read_tables(*data)
        else:
            raise TypeError(f"data must be a torch_geometric.data.HeteroData, a (FeatureStore, GraphStore) pair or "
                            f"(features, {{edge type: TypedCSC}}[, num_nodes]), got {type(data).__name__}")
        self.node_types, self.edge_types = list(self.num_nodes), list(self.csc)
        self.node_time, self.edge_time = _times(self, time_attr)
        for e, csc in self.csc.items():  # temporal edge types: each destination's in-edges in time order
            if self.node_time is not None and e[0] in self.node_time:
                self.csc[e] = sorted_by_time(csc, self.node_time[e[0]][csc.indices])
            elif self.edge_time is not None and e in self.edge_time:
                self.csc[e] = sorted_by_time(csc, self.edge_time[e][csc.e_id])
        self.weight = _weights(self, weight_attr)
        names = [node_name(t, a) for t in self.node_types for a in {**self.node_attrs[t], "n_id": None}]
        names += [edge_name(e, a) for e in self.edge_types for a in {**self.edge_attrs[e], "e_id": None}]
        if len(set(names)) != len(names):
            raise ValueError(f"node and edge type names {self.node_types} / {self.edge_types} give two "
                             "attributes the same flat name; accepted: type names that do not contain "
                             "'.' or '__'")

    def _node_type(self, t: str, n: int, items, where: str) -> None:
        """Node type `t` of `n` nodes: its tables to gather, everything else kept as given."""
        self.num_nodes[t] = n
        self.node_attrs[t], self.node_other[t] = {}, {}
        for key, value in items:
            name = f"{where}[{t!r}].{key}" if where == "data" else f"{where}[{t!r}][{key!r}]"
            if isinstance(value, EncodedTable):
                check_node_table(name, value, n)
                self.node_attrs[t][key] = value
            elif isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0 and (
                    where != "data" or key in _common.NODE_KEYS or self._store.is_node_attr(key)):
                check_node_table(name, value, n)
                self.node_attrs[t][key] = _common.host_rows(value, name)
            elif isinstance(value, (list, tuple)) and len(value) == n:
                raise TypeError(f"{name} is a {type(value).__name__} of one entry per node; the "
                                "loader gathers node attributes from tensors or numpy arrays only")
            elif where == "data":
                self.node_other[t][key] = value
            else:
                raise TypeError(f"{name} is a {type(value).__name__}; accepted: a tensor, numpy array or "
                                "EncodedTable with one row per node")

    def _read_hetero_data(self, data: HeteroData) -> None:
        node_types, edge_types = data.metadata()
        self.num_nodes_set = {t for t in node_types if "num_nodes" in data[t]}
        for t in node_types:
            store = self._store = data[t]
            if store.num_nodes is None and t in self._counts:
                self._node_type(t, self._counts[t], store.items(), "data")
                continue
            if store.num_nodes is None:
                raise ValueError(f"data[{t!r}].num_nodes is None and cannot be inferred; accepted: node "
                                 "type stores with node attributes or num_nodes set")
            self._node_type(t, int(store.num_nodes), ((k, v) for k, v in store.items() if k != "num_nodes"), "data")
        for e in edge_types:
            store = data[e]
            src, _, dst = e
            self.edge_attrs[e], self.edge_other[e] = {}, {}
            if "edge_index" not in store and ADJ_T in store:  # PyG's to_csc: adj_t's CSR is the type's CSC
                indptr, indices, self.edge_attrs[e][ADJ_T] = _common.read_adj_t(
                    store.adj_t, self.num_nodes[src], self.num_nodes[dst], f"data[{e!r}].adj_t")
                ei = torch.from_numpy(np.stack([indices, np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))]))
            elif "edge_index" not in store:
                raise NotImplementedError(f"data[{e!r}] has no edge_index nor adj_t (keys {list(store.keys())}); "
                                          "accepted: edge types given as edge_index or adj_t, or the graph as "
                                          "per-type tables (features, {edge type: TypedCSC}[, num_nodes])")
            else:
                ei = store.edge_index
                ei = torch.from_numpy(ei) if isinstance(ei, np.ndarray) else ei
            try:
                self.csc[e] = TypedCSC.from_edge_index(ei, self.num_nodes[src], self.num_nodes[dst])
            except (TypeError, ValueError, IndexError) as err:
                raise type(err)(f"data[{e!r}].edge_index: {err}") from None
            num_edges = int(ei.shape[1])
            for key, value in store.items():
                if key in ("edge_index", ADJ_T):
                    continue
                name = f"data[{e!r}].{key}"
                if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0 and \
                        store.is_edge_attr(key) and value.shape[0] == num_edges:
                    self.edge_attrs[e][key] = _common.host_rows(value, name)
                else:
                    self.edge_other[e][key] = value
        self.graph_attrs = dict(data._global_store.items())
        del self._store

    def _read_stores(self, stores) -> None:
        """PyG's filter_custom_hetero_store: the feature store's node attributes, num_nodes where a type has one."""
        for t, n in stores.num_nodes.items():
            self._node_type(t, n, stores.features.get(t, {}).items(), "feature_store")
        self.num_nodes_set = {t for t in stores.num_nodes if stores.features.get(t)}
        self.csc = dict(stores.csc)
        self.edge_attrs = {e: {} for e in self.csc}
        self.edge_other = {e: {} for e in self.csc}

    def _read_tables(self, features, graph, num_nodes=None) -> None:
        if not isinstance(features, Mapping) or not all(isinstance(v, Mapping) for v in features.values()):
            raise TypeError(f"data[0] (features) must map node types to {{attr: table}} dicts, got "
                            f"{type(features).__name__}")
        for e, csc in graph.items():
            if not (isinstance(e, tuple) and len(e) == 3) or not isinstance(csc, TypedCSC):
                raise TypeError(f"data[1] (graph) must map (src, rel, dst) edge types to TypedCSCs, got "
                                f"{e!r}: {type(csc).__name__}")
        counts: dict = {}
        sources = [(t, int(v.shape[0]), f"features[{t!r}][{k!r}]") for t, attrs in features.items()
                   for k, v in attrs.items() if getattr(v, "shape", None)]
        sources += [(t, n, f"graph[{e!r}]") for e, csc in graph.items()
                    for t, n in ((e[0], csc.num_src), (e[2], csc.num_dst))]
        if num_nodes is not None:
            if not isinstance(num_nodes, Mapping):
                raise TypeError(f"data[2] (num_nodes) must map node types to counts, got {type(num_nodes).__name__}")
            counts = {t: _check_count(t, n) for t, n in num_nodes.items()}
            self.num_nodes_set = set(counts)
        for t, n, where in sources:
            if t not in counts and num_nodes is not None:
                raise ValueError(f"{where} names node type {t!r}, which num_nodes lacks; accepted: num_nodes "
                                 f"naming every node type ({list(counts)})")
            if counts.setdefault(t, n) != n:
                raise ValueError(f"{where} gives node type {t!r} {n} nodes; elsewhere it has {counts[t]}: "
                                 "accepted: one count per node type")
        for t, n in counts.items():
            self._node_type(t, n, features.get(t, {}).items(), "features")
        self.csc = dict(graph)
        self.edge_attrs = {e: {} for e in self.csc}
        self.edge_other = {e: {} for e in self.csc}

    def flat_tables(self) -> tuple[dict, dict]:
        """Node and edge attribute tables under their flat names (pipeline.plans.node_name / edge_name)."""
        nodes = {node_name(t, a): v for t, attrs in self.node_attrs.items() for a, v in attrs.items()}
        edges = {edge_name(e, a): v for e, attrs in self.edge_attrs.items() for a, v in attrs.items()}
        return nodes, edges


def _check_count(t, n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"num_nodes[{t!r}]={n!r} is not accepted; use an int >= 0")
    return int(n)


def _weights(graph: _HeteroGraph, weight_attr: Optional[str]) -> Optional[dict]:
    """The edge weights `weight_attr` names, per edge type that has them (PyG's ``data.collect``), or None."""
    if weight_attr is None:
        return None
    if not isinstance(weight_attr, str):
        raise TypeError(f"weight_attr={weight_attr!r} is not accepted; use None or the name of an edge attribute")
    out = {e: attrs[weight_attr] for e, attrs in graph.edge_attrs.items() if weight_attr in attrs}
    if not out:
        raise ValueError(f"weight_attr={weight_attr!r} is an attribute of no edge type (edge types "
                         f"{graph.edge_types}); accepted: the name of an edge attribute with one weight per edge")
    return out


def _times(graph: _HeteroGraph, time_attr: Optional[str]):
    """(node times per node type, edge times per edge type) of `time_attr`, as numpy arrays; one of
    them None (PyG: a time attribute is node-level or edge-level), both None without `time_attr`."""
    if time_attr is None:
        return None, None
    if not isinstance(time_attr, str):
        raise TypeError(f"time_attr={time_attr!r} is not accepted; use None or an attribute name")

    def arr(value, argname):
        if isinstance(value, torch.Tensor):
            value = _common.host_table(value, argname).numpy()
        return np.asarray(value)

    nodes = {t: arr(attrs[time_attr], f"data[{t!r}].{time_attr}") for t, attrs in graph.node_attrs.items()
             if time_attr in attrs}
    edges = {e: arr(attrs[time_attr], f"data[{e!r}].{time_attr}") for e, attrs in graph.edge_attrs.items()
             if time_attr in attrs}
    if nodes and edges:
        raise ValueError(f"time_attr={time_attr!r} holds both node-level and edge-level times; accepted: "
                         "an attribute of node types or of edge types")
    if not nodes and not edges:
        raise ValueError(f"time_attr={time_attr!r} is neither a node-level nor an edge-level attribute of "
                         "the graph")
    return (nodes, None) if nodes else (None, edges)


def _hetero_codecs(graph: _HeteroGraph, codec: CodecSpec, device: torch.device):
    """One codec per group, warmed up for `device` (_common.setup_codecs); row groups shared by several
    types are split per type where that pays."""
    nodes, edges = graph.flat_tables()
    num_nodes = max(graph.num_nodes.values(), default=0)
    num_edges = max((g.num_edges for g in graph.csc.values()), default=0)
    split = isinstance(codec, str) and codec in CODEC_NAMES and codec != "identity"
    refine = (lambda codecs: split_row_groups({**nodes, **edges}, codecs, kind=codec)) if split else \
        (lambda codecs: (codecs, {}, {}))
    return _common.setup_codecs(nodes, edges, num_nodes=num_nodes, num_edges=num_edges, codec=codec,
                                device=device, refine=refine)
