"""PyG's remote-backend input ``data=(FeatureStore, GraphStore)``, read once, when the loader is built, into
the loaders' graph form: every edge type's edges in the layout PyG's sampler reads (``GraphStore.csc()``'s
choice: CSC if stored, else COO, else CSR) as a CSC of our own (a stored CSC as it is, its edge ids CSC
positions; COO and CSR sorted stably by destination, their edge ids COO columns / CSR positions, as PyG's
``perm``), and every node attribute of the feature store (``get_tensor(index=None)``) as a CPU table;
edge groups' attributes are left out, as PyG's ``filter_custom_store`` leaves them out of batches. That
costs one full read of each store, once (the features' bytes, 12 to 16 bytes per edge); batches then cost
what a ``Data``'s do. Node counts come from the edge attributes' ``size`` (as PyG's
``remote_backend_utils``), else from the feature tensors' rows.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch

from ibp_graph.loaders import _common
from ibp_graph.sampling.hetero import TypedCSC

try:
    from torch_geometric.data import FeatureStore, GraphStore
    from torch_geometric.data.graph_store import EdgeLayout
except ImportError as e:  # pragma: no cover - exercised only without torch_geometric
    raise ImportError("ibp_graph.loaders.pyg_stores needs torch_geometric: pip install 'ibp-graph[pyg]'") from e

__all__ = ["StoreGraph", "is_hetero_input", "is_store_pair", "read_stores"]

#: the layout PyG's sampler converts from, best first (GraphStore.csc(): no conversion, else COO, CSC, CSR).
_LAYOUTS = (EdgeLayout.CSC, EdgeLayout.COO, EdgeLayout.CSR)


def is_store_pair(data: Any) -> bool:
    """Whether `data` is PyG's remote-backend input ``(FeatureStore, GraphStore)``."""
    return isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], FeatureStore) \
        and isinstance(data[1], GraphStore)


def is_hetero_input(data: Any) -> bool:
    """Whether `data` is a heterogeneous input other than a HeteroData: a store pair with named node or edge
    types (from the stores' metadata, no tensor read), or per-type tables ``(features, {edge type: TypedCSC}, ...)``."""
    if is_store_pair(data):
        return any(a.edge_type is not None for a in data[1].get_all_edge_attrs()) or \
            any(a.group_name is not None for a in data[0].get_all_tensor_attrs())
    return isinstance(data, tuple) and len(data) in (2, 3) and isinstance(data[1], Mapping)


@dataclass
class StoreGraph:
    """What the stores hold: node counts, node attributes and a TypedCSC per edge type.

    For a homogeneous store pair (group names and edge types None) the only node type
    and edge type are None. `num_nodes` and `csc` keep the stores' order (feature store,
    then graph store): the heterogeneous sampler visits edge types in it.
    """

    hetero: bool
    num_nodes: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)
    csc: dict = field(default_factory=dict)


def read_stores(data: tuple) -> StoreGraph:
    """Read a ``(FeatureStore, GraphStore)`` pair once: node attributes as CPU tables, edges as TypedCSCs."""
    feature_store, graph_store = data
    by_type: dict = {}
    for attr in graph_store.get_all_edge_attrs():
        by_type.setdefault(attr.edge_type, []).append(attr)
    tensor_attrs = [a for a in feature_store.get_all_tensor_attrs() if not isinstance(a.group_name, tuple)]
    groups = [a.group_name for a in tensor_attrs]
    hetero = any(e is not None for e in by_type) or any(g is not None for g in groups)
    if hetero and (None in by_type or None in groups):
        raise ValueError(f"the stores mix a homogeneous part (group_name or edge_type None) with node types "
                         f"{sorted(g for g in groups if g is not None)} and edge types "
                         f"{[e for e in by_type if e is not None]}; accepted: all None or all named")
    for e in by_type:
        if hetero and not (isinstance(e, tuple) and len(e) == 3):
            raise ValueError(f"graph store edge_type={e!r} is not accepted; use (src, rel, dst) tuples")
    out = StoreGraph(hetero=hetero)
    for attr in tensor_attrs:
        whole = copy.copy(attr)
        whole.index = None
        name = f"feature_store[{attr.group_name!r}, {attr.attr_name!r}]"
        value = feature_store.get_tensor(whole)
        out.features.setdefault(attr.group_name, {})[attr.attr_name] = _common.host_rows(value, name)
    sizes: dict = {}
    for t, attrs in out.features.items():
        rows = {int(v.shape[0]) for v in attrs.values() if v.ndim > 0}
        if len(rows) > 1:
            raise ValueError(f"feature_store group {t!r} holds attributes of {sorted(rows)} rows; accepted: "
                             "one row per node in every attribute of a node type")
        sizes.update({t: rows.pop()} if rows else {})
    for e, attrs in by_type.items():  # edge attributes' sizes first, as PyG's remote_backend_utils
        for attr in (a for a in attrs if a.size is not None):
            # PyG: a homogeneous graph has max(size) nodes
            pairs = ((e[0], attr.size[0]), (e[2], attr.size[1])) if hetero else ((None, max(attr.size)),)
            for t, n in pairs:
                out.num_nodes.setdefault(t, int(n))
    for t, n in sizes.items():  # more rows than nodes: the graph store's count holds, as in PyG (rows unread)
        if n < out.num_nodes.setdefault(t, n):
            raise ValueError(f"feature_store group {t!r} has {n} rows but the graph store's size gives "
                             f"{out.num_nodes[t]} nodes; accepted: a row for every node")
    order = list(out.features) + [t for e in by_type for t in ((e[0], e[2]) if hetero else (None,))]
    for t in order:
        if t not in out.num_nodes:
            raise ValueError(f"node type {t!r}: neither an edge attribute's size nor a feature tensor of the "
                             "stores gives its node count; accepted: EdgeAttr(size=(num_src, num_dst)) or a "
                             "node feature tensor")
    out.num_nodes = {t: out.num_nodes[t] for t in dict.fromkeys(order)}
    for e, attrs in by_type.items():
        src, dst = (e[0], e[2]) if hetero else (None, None)
        attr = min(attrs, key=lambda a: _LAYOUTS.index(a.layout))
        try:
            out.csc[e] = _typed_csc(graph_store.get_edge_index(attr), attr.layout, out.num_nodes[src],
                                    out.num_nodes[dst])
        except (TypeError, ValueError, IndexError) as err:
            raise type(err)(f"graph store edge_type={e!r} ({attr.layout.value}): {err}") from None
    return out


def _typed_csc(edges, layout: EdgeLayout, num_src: int, num_dst: int) -> TypedCSC:
    """One edge type's (row, col) pair in `layout` as a TypedCSC (edge ids: PyG's, see the module)."""
    row, col = (_common.host_rows(t, "edge_index").numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
                for t in edges)
    if layout == EdgeLayout.CSC:  # (row, colptr): already by destination
        indptr = np.ascontiguousarray(col, dtype=np.int64)
        if indptr.shape != (num_dst + 1,):
            raise ValueError(f"colptr has shape {indptr.shape}; accepted: ({num_dst + 1},) for {num_dst} "
                             "destination nodes")
        indices = np.ascontiguousarray(row, dtype=np.int64)
        return TypedCSC(indptr, indices, None, num_src)  # edge ids: CSC positions
    if layout == EdgeLayout.CSR:  # (rowptr, col): sources expanded, in CSR order
        rowptr = np.asarray(row, dtype=np.int64)
        if rowptr.shape != (num_src + 1,):
            raise ValueError(f"rowptr has shape {rowptr.shape}; accepted: ({num_src + 1},) for {num_src} "
                             "source nodes")
        row = np.repeat(np.arange(num_src, dtype=np.int64), np.diff(rowptr))
    return TypedCSC.from_edge_index(np.stack([np.asarray(row, dtype=np.int64), np.asarray(col, dtype=np.int64)]),
                                    num_src, num_dst)
