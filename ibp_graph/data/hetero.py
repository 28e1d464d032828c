"""A prepared heterogeneous data set on disk (ogbn-mag-like): node types, edge types, one labeled node type.

Written once by `ibp-graph prepare --dataset ogbn-mag` (``ibp_graph.data.ogb_mag``) or by
the mag-like generator (``ibp_graph.data.maggen``); opened by training memory-mapped.

Folder layout::

    meta.json                 format, version, name, num_classes, target (the labeled node type),
                              node_types {type: {num_nodes, x_shape, x_dtype, store_codec, ...}},
                              edge_types [[src, rel, dst, num_edges], ...]; written last
    nodes/<type>/x.npy        features of the node types that have them (ogbn-mag: paper only)
    nodes/<type>/store/       those features pre-encoded (EncodedTable.save layout), optional
    edges/<src>___<rel>___<dst>/
                              indptr.npy (num dst nodes + 1, int64), indices.npy (source ids),
                              e_id.npy: the in-edges of every destination node (CSC)
    y.npy                     (num target nodes,) int64 class, -1 = unlabeled
    split/train.npy           target node ids (also valid.npy, test.npy); labeled nodes only
    checksums.json            per-chunk checksums of every array (ibp_graph.data.checksums);
                              each store has its own

Nothing read back is trusted: sizes, dtypes and id ranges are checked against
meta.json on load, and the arrays against their checksums ("sample" by default).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from ..codec.auto import CodecSpec
from ..files import read_json, replace_dir, work_dir, write_text
from ..sampling.hetero import EdgeType, TypedCSC
from . import checksums
from .prepared import (EdgeChunks, LabeledDataset, SPLITS, _check_table, _load_npy, as_tensor, read_store_codec,
                       build_relation_arrays, encode_store)

__all__ = ["HeteroPreparedDataset", "load_relation", "edge_index", "EdgeType", "FORMAT", "FORMAT_VERSION",
           "edge_dir_name", "write_hetero_meta", "write_relations", "reverse_type", "encode_stores", "add_stores"]

PathLike = Union[str, os.PathLike]
FORMAT = "ibp_graph.hetero_prepared"
FORMAT_VERSION = 1
_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_RELATION_FILES = ("indptr", "indices", "e_id")


def edge_dir_name(edge_type: EdgeType) -> str:
    """The folder of an edge type under edges/: OGB's ``src___rel___dst`` naming."""
    return "___".join(edge_type)


def edge_index(relation: TypedCSC) -> torch.Tensor:
    """PyG's ``(2, num_edges)`` int64 edge_index of one edge type (row 0 sources, row 1 destinations), in
    CSC order."""
    dst = np.repeat(np.arange(relation.num_dst, dtype=np.int64), np.diff(relation.indptr))
    return torch.from_numpy(np.stack([np.asarray(relation.indices, dtype=np.int64), dst]))


def load_relation(directory: PathLike, num_src: int, num_dst: int, num_edges: int, *,
                  mmap: bool = True) -> TypedCSC:
    """Read an edges/<type> folder as a TypedCSC, checking its arrays against the sizes meta.json records."""
    d = Path(directory)
    arrays = {n: _load_npy(d / f"{n}.npy", "r" if mmap else None) for n in _RELATION_FILES}
    indptr, indices, e_id = arrays["indptr"], arrays["indices"], arrays["e_id"]
    if indptr.shape != (num_dst + 1,) or indices.shape != (num_edges,) or e_id.shape != (num_edges,):
        raise ValueError(f"{d}: indptr {indptr.shape}, indices {indices.shape}, e_id {e_id.shape}; meta.json "
                         f"records {num_dst} destination nodes and {num_edges} edges (expected ({num_dst + 1},), "
                         f"({num_edges},), ({num_edges},)): prepare again")
    try:  # TypedCSC checks dtypes, indptr's range and steps, every source id against num_src; e_id at its first use
        return TypedCSC(indptr, indices, e_id, num_src, defer_e_id_check=str(d))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{d} is not a valid edge type: {e}: prepare again") from None


@dataclass(frozen=True, eq=False)
class HeteroPreparedDataset(LabeledDataset):
    """A heterogeneous prepared folder, opened memory-mapped: node types, relations, labels and splits."""

    num_nodes_dict: dict[str, int]
    _x_dict: Optional[dict[str, torch.Tensor]]  # None: opened without features (the property x_dict says so)
    relations: dict[EdgeType, TypedCSC]
    format = FORMAT
    format_version = FORMAT_VERSION
    records_checksums = False  # every one is written with its checksums (data/verify.py: record_checksums)

    @property
    def target(self) -> str:
        """The node type that carries labels and splits (ogbn-mag: "paper")."""
        return self.meta["target"]

    @property
    def node_types(self) -> list[str]:
        """Node types, in meta.json's order."""
        return list(self.num_nodes_dict)

    @property
    def edge_types(self) -> list[EdgeType]:
        """Edge types (src, rel, dst), in meta.json's order."""
        return list(self.relations)

    @property
    def num_nodes(self) -> int:
        """Nodes of all types."""
        return sum(self.num_nodes_dict.values())

    @property
    def num_edges(self) -> int:
        """Edges of all types (reverse edge types included)."""
        return sum(r.num_edges for r in self.relations.values())

    @property
    def x_dict(self) -> dict[str, torch.Tensor]:
        """The features of each featured node type, memory-mapped; a ValueError when opened without them."""
        if self._x_dict is None:
            raise self._features_missing()
        return self._x_dict

    @property
    def x(self) -> torch.Tensor:
        """The target type's features (what the homogeneous PreparedDataset calls x)."""
        return self.x_dict[self.target]

    @property
    def has_features(self) -> bool:
        """Whether the feature tables were opened (load's `features`)."""
        return self._x_dict is not None

    @property
    def feature_shapes(self) -> dict[str, tuple[int, int]]:
        """{node type: (rows, dim)} of the featured node types (the feature tables), as meta.json records them, in
        its order."""
        return {t: self._feature_shape(info, t, info["num_nodes"], f"node_types.{t}.")
                for t, info in self.meta["node_types"].items() if info.get("x_shape") is not None}

    def feature_file(self, table: str) -> Path:
        """The file of feature table `table` (a featured node type)."""
        _check_table(table, list(self.feature_shapes))
        return self.directory / "nodes" / table / "x.npy"

    def feature(self, table: str) -> torch.Tensor:
        """Feature table `table`: the features of that node type."""
        _check_table(table, list(self.feature_shapes))
        return self.x_dict[table]

    def store_dir(self, node_type: str) -> Path:
        """Where `node_type`'s pre-encoded features live (may not exist)."""
        return self.directory / "nodes" / node_type / "store"

    def has_store(self, node_type: Optional[str] = None) -> bool:
        """Whether every featured node type (or `node_type`) has a pre-encoded store."""
        types = [node_type] if node_type is not None else list(self.feature_shapes)
        return all((self.store_dir(t) / "meta.json").is_file() for t in types)

    def store(self, node_type: Optional[str] = None):
        """`node_type`'s (default the target's) pre-encoded features, EncodedTable memory-mapped; opened once."""
        from .store import EncodedTable

        t = self.target if node_type is None else node_type
        if t not in self.feature_shapes:
            raise ValueError(f"node_type={t!r} has no features; featured types: {sorted(self.feature_shapes)}")
        if t not in self._stores:
            self._stores[t] = EncodedTable.load(self.store_dir(t), mmap=True, verify=self.verify)
        return self._stores[t]

    @property
    def store_codec(self) -> Optional[str]:
        """The codec the target type's store was encoded with (None without a store)."""
        return self.meta["node_types"][self.target].get("store_codec") if self.has_store(self.target) else None

    def tables(self, *, store: bool = False, given: Optional[dict] = None) -> tuple[dict, dict, dict]:
        """The graph as the PyG loaders' per-type tables ``(features, relations, num_nodes)``, served without any
        edge_index: ``x`` of the featured types (the memory-mapped table, with `store` the pre-encoded
        EncodedTable, or ``given[type]``: a feature source per featured type, e.g. its shards) and the target's
        ``y``, the TypedCSC of every edge type, every type's node count."""
        if given is not None and set(given) != set(self.feature_shapes):
            raise ValueError(f"given has tables {sorted(given)}; expected one per featured node type "
                             f"{sorted(self.feature_shapes)}")
        features: dict = {t: {"x": given[t] if given is not None else self.store(t) if store else self.x_dict[t]}
                          for t in self.feature_shapes}
        features.setdefault(self.target, {})["y"] = self.y
        return features, dict(self.relations), dict(self.num_nodes_dict)

    def to_hetero_data(self, *, store: bool = False):
        """A torch_geometric HeteroData of the whole graph: ``x`` of the featured types (the memory-mapped
        table, or with `store` the pre-encoded EncodedTable), ``num_nodes`` of every type, the target's ``y``,
        and every edge type's ``edge_index`` (built from the CSC arrays: 16 bytes per edge; the loaders take
        `tables` instead, without it)."""
        from torch_geometric.data import HeteroData

        data = HeteroData()
        for t, n in self.num_nodes_dict.items():
            data[t].num_nodes = n
            if t in self.x_dict:
                data[t].x = self.store(t) if store else self.x_dict[t]
        data[self.target].y = self.y
        for et, rel in self.relations.items():
            data[et].edge_index = edge_index(rel)
        return data

    def __repr__(self) -> str:
        nodes = ", ".join(f"{t}={n:,}" for t, n in self.num_nodes_dict.items())
        sizes = ", ".join(f"{k}={v.numel():,}" for k, v in self.split.items())
        return (f"HeteroPreparedDataset({self.name!r}, nodes: {nodes}; {len(self.relations)} edge types, "
                f"{self.num_edges:,} edges; target {self.target!r}, classes={self.num_classes}, {sizes})")

    @classmethod
    def load(cls, directory: PathLike, *, mmap: bool = True, verify: str = "sample",
             features: bool = True) -> "HeteroPreparedDataset":
        """Open a heterogeneous prepared folder, checking its structure and (`verify`) its checksums.

        Arrays are copy-on-write memory maps unless mmap=False. A damaged or inconsistent
        file raises an error naming it. With ``features=False`` no nodes/<type>/x.npy is opened
        or checked (a host of a sharded run), and ``x_dict`` raises a ValueError saying so.
        """
        d, meta_path, meta = cls._read_meta(directory, verify, "ogbn-mag")
        num_nodes, edge_types = _check_meta(meta, meta_path)
        names = _array_names(meta)
        cls._check_arrays(d, verify, names, whole=tuple(f"split/{s}.npy" for s in SPLITS),
                          skip=() if features else _feature_arrays(meta))
        mode = "c" if mmap else None
        x_dict = {}
        for t, info in meta["node_types"].items():
            if info.get("x_shape") is None or not features:
                continue
            x = _load_npy(d / "nodes" / t / "x.npy", mode)
            if x.ndim != 2 or x.shape[0] != num_nodes[t] or list(x.shape) != info["x_shape"] \
                    or str(x.dtype) != info.get("x_dtype"):
                raise ValueError(f"{d}/nodes/{t}/x.npy holds {x.dtype} {x.shape}; meta.json records "
                                 f"{info.get('x_dtype')} {tuple(info['x_shape'])} for {num_nodes[t]} nodes: "
                                 "prepare again")
            x_dict[t] = as_tensor(x)
        relations = {et[:3]: load_relation(d / "edges" / edge_dir_name(et[:3]), num_nodes[et[0]], num_nodes[et[2]],
                                           et[3], mmap=mmap) for et in edge_types}
        target = meta["target"]
        y = _load_npy(d / "y.npy", mode)
        if y.dtype != np.int64 or y.shape != (num_nodes[target],) or (y.size and (
                int(y.min()) < -1 or int(y.max()) >= meta["num_classes"])):
            raise ValueError(f"{d}/y.npy must hold int64 classes in [-1, {meta['num_classes']}) for the "
                             f"{num_nodes[target]} {target} nodes; it holds {y.dtype} {y.shape}: prepare again")
        split = {}
        for s in SPLITS:
            idx = _load_npy(d / "split" / f"{s}.npy", None)
            if idx.ndim != 1 or idx.dtype != np.int64 or (idx.size and (
                    int(idx.min()) < 0 or int(idx.max()) >= num_nodes[target])):
                raise ValueError(f"{d}/split/{s}.npy must hold int64 {target} ids in [0, {num_nodes[target]}); "
                                 f"it holds {idx.dtype} {idx.shape}: prepare again")
            split[s] = torch.from_numpy(idx)
        ds = cls(directory=d, meta=meta, num_nodes_dict=num_nodes, _x_dict=x_dict if features else None,
                 relations=relations, y=as_tensor(y), split=split, verify=verify)
        if not features:
            ds.feature_shapes  # noqa: B018 - meta.json's x_shapes checked: what a folder without them answers from
        return ds


def _check_meta(meta: dict, where: Path) -> tuple[dict[str, int], list[tuple]]:
    """meta.json's node counts and edge types, or a ValueError naming the first bad entry."""
    def bad(key, value, expected):
        return ValueError(f"{where}: {key}={value!r} is not accepted; expected {expected}: prepare again")

    for key, kind in (("name", str), ("num_classes", int), ("target", str), ("node_types", dict),
                      ("edge_types", list)):
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            raise bad(key, meta.get(key), kind.__name__)
    num_nodes = {}
    for t, info in meta["node_types"].items():
        if not _NAME.match(t) or not isinstance(info, dict):
            raise bad("node_types", t, "node type names of letters, digits and '_' mapped to a mapping")
        n = info.get("num_nodes")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise bad(f"node_types.{t}.num_nodes", n, "an integer >= 0")
        shape = info.get("x_shape")
        if shape is not None and not (isinstance(shape, list) and len(shape) == 2
                                      and all(isinstance(v, int) for v in shape)):
            raise bad(f"node_types.{t}.x_shape", shape, "null or [rows, dim]")
        num_nodes[t] = n
    if meta["target"] not in num_nodes:
        raise bad("target", meta["target"], f"one of the node types {sorted(num_nodes)}")
    edge_types = []
    for et in meta["edge_types"]:
        ok = (isinstance(et, list) and len(et) == 4 and all(isinstance(v, str) and _NAME.match(v) for v in et[:3])
              and et[0] in num_nodes and et[2] in num_nodes and isinstance(et[3], int) and et[3] >= 0)
        if not ok:
            raise bad("edge_types", et, "[src type, relation, dst type, num_edges] with known node types")
        edge_types.append(tuple(et))
    return num_nodes, edge_types


def _feature_arrays(meta: dict) -> list[str]:
    """The feature tables of a heterogeneous prepared folder: nodes/<type>/x.npy of each featured node type."""
    return [f"nodes/{t}/x.npy" for t, info in meta["node_types"].items() if info.get("x_shape") is not None]


def _array_names(meta: dict) -> list[str]:
    """The arrays of a heterogeneous prepared folder (checksummed in its checksums.json)."""
    names = _feature_arrays(meta)
    for et in meta["edge_types"]:
        names += [f"edges/{edge_dir_name(tuple(et[:3]))}/{n}.npy" for n in _RELATION_FILES]
    return names + ["y.npy"] + [f"split/{s}.npy" for s in SPLITS]


def reverse_type(edge_type: EdgeType) -> EdgeType:
    """The reverse edge type PyG's ToUndirected adds: (dst, "rev_" + rel, src)."""
    src, rel, dst = edge_type
    return (dst, f"rev_{rel}", src)


def write_relations(directory: PathLike, sources: dict[EdgeType, EdgeChunks], num_nodes: dict[str, int], *,
                    dedup_bipartite: bool = True, progress: bool = True,
                    total_edges: Optional[dict[EdgeType, int]] = None) -> list[EdgeType]:
    """Write every edge type of `sources` under `directory`/edges as PyG's ``ToUndirected()`` would leave it;
    return the edge types written, in order.

    An edge type within one node type (paper-cites-paper) is made undirected and its
    repeated edges removed (to_undirected's coalesce); one between two node types keeps
    its direction and gains its reverse type (``rev_<rel>``), written after all forward
    types; `dedup_bipartite` removes repeated pairs there. `sources[t]()` yields the
    (src, dst) chunks of type t, the same ones on every call.
    """
    d = Path(directory) / "edges"
    written, reverses = [], []
    for et, chunks in sources.items():
        src, _, dst = et
        n_src, n_dst = num_nodes[src], num_nodes[dst]
        total = (total_edges or {}).get(et)
        same = src == dst
        build_relation_arrays(chunks, n_src, n_dst, d / edge_dir_name(et), undirected=same,
                              dedup=same or dedup_bipartite, progress=progress, total_edges=total)
        written.append(et)
        if not same:
            reverses.append((reverse_type(et), chunks, n_dst, n_src, total))
    for rt, chunks, n_src, n_dst, total in reverses:
        flipped = lambda chunks=chunks: ((b, a) for a, b in chunks())  # noqa: E731
        build_relation_arrays(flipped, n_src, n_dst, d / edge_dir_name(rt), dedup=dedup_bipartite,
                              progress=progress, total_edges=total)
        written.append(rt)
    return written


def write_hetero_meta(directory: PathLike, *, name: str, num_classes: int, target: str,
                      num_nodes: dict[str, int], edge_types: list[EdgeType], **extra) -> dict:
    """Write checksums.json and meta.json (the last step of a preparation), sizes read back from the folder."""
    d = Path(directory)
    node_types = {}
    for t, n in num_nodes.items():
        info: dict = {"num_nodes": int(n), "x_shape": None, "x_dtype": None}
        path = d / "nodes" / t / "x.npy"
        if path.is_file():
            x = np.load(path, mmap_mode="r")
            info.update(x_shape=list(x.shape), x_dtype=str(x.dtype))
        store_meta = d / "nodes" / t / "store" / "meta.json"
        if store_meta.is_file():
            info["store_codec"] = read_store_codec(store_meta)
        node_types[t] = info
    edges = []
    for et in edge_types:
        indptr = np.load(d / "edges" / edge_dir_name(et) / "indptr.npy", mmap_mode="r")
        edges.append([*et, int(indptr[-1])])
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "name": name, "num_classes": int(num_classes),
            "target": target, "node_types": node_types, "edge_types": edges,
            "split_sizes": {s: int(np.load(d / "split" / f"{s}.npy", mmap_mode="r").shape[0]) for s in SPLITS}}
    meta.update(extra)
    checksums.write_manifest(d, _array_names(meta))
    write_text(d / "meta.json", json.dumps(meta, indent=2) + "\n")
    return meta


def encode_stores(directory: PathLike, codec: CodecSpec = "auto", *, progress: bool = True) -> dict:
    """Pre-encode every nodes/<type>/x.npy of `directory` into nodes/<type>/store (one codec fitted per type);
    return {type: store entries} (codec chosen, fraction of the raw bytes, bytes)."""
    d = Path(directory)
    return {p.parent.name: encode_store(p.parent, codec, progress=progress, out=p.parent / "store")
            for p in sorted((d / "nodes").glob("*/x.npy"))}


def add_stores(directory: PathLike, codec: CodecSpec = "auto", *, progress: bool = True) -> dict:
    """Give a finished heterogeneous folder prepared without stores (``--no-store``) its stores; return meta.json.

    Each store is encoded in a work folder and moved into place; meta.json then names
    its codec. Nothing else is redone.
    """
    d = Path(directory)
    if not HeteroPreparedDataset.is_complete(d):
        raise FileNotFoundError(f"{d} is not a finished prepared data set (no valid meta.json): prepare it first")
    meta = read_json(d / "meta.json", ValueError, ": prepare again")
    changed = False
    for t, info in meta["node_types"].items():
        final = d / "nodes" / t / "store"
        if info.get("x_shape") is None or (info.get("store_codec") and (final / "meta.json").is_file()):
            continue
        if not (final / "meta.json").is_file():
            with work_dir(final) as tmp:
                encode_store(d / "nodes" / t, codec, progress=progress, out=tmp)
                if not (final / "meta.json").is_file():  # another process may have finished it meanwhile
                    replace_dir(tmp, final)
        info["store_codec"] = read_store_codec(final / "meta.json")
        changed = True
    if changed:
        write_text(d / "meta.json", json.dumps(meta, indent=2) + "\n")
    return meta
