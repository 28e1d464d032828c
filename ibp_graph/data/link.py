"""A prepared link-prediction data set on disk: the training graph, features and ogbl-citation2's edge split.

Written once by `ibp-graph prepare --dataset ogbl-citation2` (``ibp_graph.data.ogb_link``)
or by the generated citation set (``ibp_graph.data.citegen``); opened by training
memory-mapped, like the node-task folders (``ibp_graph.data.prepared``).

Folder layout::

    meta.json            format, version, name, sizes, num_negatives, how it was made; written last
    graph/               CSCGraph.save of the message-passing graph: the training edges only (the
                         validation and test edges removed, as OGB gives it), undirected unless
                         prepared --directed
    x.npy                (num_nodes, dim) node features
    year.npy             (num_nodes,) int64 publication year of each node
    link/train_source_node.npy, link/train_target_node.npy
                         int64 (num_train,): the training edges (source cites target)
    link/{valid,test}_source_node.npy, link/{valid,test}_target_node.npy
                         int64 (n,): the held-out edges
    link/{valid,test}_target_node_neg.npy
                         int64 (n, num_negatives): the candidate negatives each held-out edge
                         is ranked against (OGB's target_node_neg)
    store/x/             the features pre-encoded (EncodedTable.save layout), optional
    checksums.json       per-chunk checksums of the arrays (ibp_graph.data.checksums)

`LinkPreparedDataset.split` is OGB's ``get_edge_split()``: ``{"train": {"source_node",
"target_node"}, "valid": {"source_node", "target_node", "target_node_neg"}, "test": ...}``.
Nothing read back is trusted: shapes, dtypes and node id ranges are checked on load.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from ..files import save_npy, write_text
from ..sampling.graph import CSCGraph
from . import checksums
from .prepared import HomogeneousFolder, PreparedFolder, SPLITS, _load_npy, as_tensor

__all__ = ["LinkPreparedDataset", "FORMAT", "FORMAT_VERSION", "SPLIT_KEYS", "ARRAYS", "check_part", "check_split",
           "write_split", "write_link_meta", "holdout_mask", "draw_negatives"]

PathLike = Union[str, os.PathLike]
FORMAT = "ibp_graph.link_prepared"
FORMAT_VERSION = 1
#: the keys of each part of the split, as OGB's ogbl-citation2 names them.
SPLIT_KEYS = {"train": ("source_node", "target_node"),
              "valid": ("source_node", "target_node", "target_node_neg"),
              "test": ("source_node", "target_node", "target_node_neg")}
#: the arrays of a link folder, checksummed in its checksums.json.
ARRAYS = ("x.npy", "year.npy", "graph/indptr.npy", "graph/indices.npy", "graph/e_id.npy") + tuple(
    f"link/{part}_{key}.npy" for part, keys in SPLIT_KEYS.items() for key in keys)


def check_part(part: str, values, num_nodes: int, where: str) -> dict:
    """One part of the split (``"train"``, ``"valid"`` or ``"test"``: a mapping of SPLIT_KEYS[part] to tensors
    or arrays) as int64 numpy arrays, or a ValueError naming `where`, the key and what was expected: 1-d node
    ids of one length, ``target_node_neg`` of shape (n, K) with K >= 1, every id in [0, num_nodes)."""
    keys = SPLIT_KEYS[part]
    if not isinstance(values, dict):
        raise ValueError(f"{where}: {part} is a {type(values).__name__}; expected a mapping of {', '.join(keys)}")
    out = {key: _ids(values.get(key), f"{where}: {part}[{key!r}]", num_nodes,
                     ndim=2 if key == "target_node_neg" else 1) for key in keys}
    n = out["source_node"].shape[0]
    for key in keys[1:]:
        if out[key].shape[0] != n:
            raise ValueError(f"{where}: {part}[{key!r}] has {out[key].shape[0]} rows and {part}['source_node'] "
                             f"{n}; expected one row per edge")
    if "target_node_neg" in out and out["target_node_neg"].shape[1] < 1:
        raise ValueError(f"{where}: {part}['target_node_neg'] has no candidates per edge; expected >= 1")
    return out


def check_split(split, num_nodes: int, where: str, num_negatives: Optional[int] = None) -> dict:
    """`split` (OGB's ``get_edge_split()`` form) checked part by part (``check_part``), valid and test with
    the same number of candidates per edge (`num_negatives` when given); a ValueError names `where`."""
    if not isinstance(split, dict) or any(part not in split for part in SPLIT_KEYS):
        held = sorted(split) if isinstance(split, dict) else type(split).__name__
        raise ValueError(f"{where}: the split holds {held}; expected a mapping of {', '.join(SPLIT_KEYS)}")
    out = {part: check_part(part, split[part], num_nodes, where) for part in SPLIT_KEYS}
    k = {part: out[part]["target_node_neg"].shape[1] for part in ("valid", "test")}
    want = num_negatives if num_negatives is not None else k["valid"]
    for part, got in k.items():
        if got != want:
            raise ValueError(f"{where}: {part}['target_node_neg'] has {got} candidates per edge; expected {want}"
                             + ("" if num_negatives is not None else " (as valid has)"))
    return out


def _ids(value, where: str, num_nodes: int, *, ndim: int) -> np.ndarray:
    """`value` (a tensor or array of integer node ids, `ndim` dimensions) as an int64 array, checked."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray):
        raise ValueError(f"{where} is {type(value).__name__}; expected a tensor of node ids")
    if value.dtype.kind not in "iu" or value.ndim != ndim:
        shape = "(n,)" if ndim == 1 else "(n, K)"
        raise ValueError(f"{where} is {value.dtype} of shape {value.shape}; expected integer node ids of shape {shape}")
    if value.size:
        lo, hi = int(value.min()), int(value.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(f"{where} names node {lo if lo < 0 else hi}, outside [0, {num_nodes})")
    return np.ascontiguousarray(value, dtype=np.int64)


def holdout_mask(src: np.ndarray, dst: np.ndarray, held_src: np.ndarray, held_dst: np.ndarray,
                 num_nodes: int) -> np.ndarray:
    """True for the edges (src[i], dst[i]) that are one of the held-out (held_src, held_dst) edges."""
    held = np.unique(held_src.astype(np.int64) * num_nodes + held_dst)
    return np.isin(src.astype(np.int64) * num_nodes + dst, held, assume_unique=False)


def draw_negatives(rng: np.random.Generator, src: np.ndarray, dst: np.ndarray, num_nodes: int,
                   k: int) -> np.ndarray:
    """(n, k) candidate negatives per edge: uniform over the nodes other than the edge's source and target."""
    if num_nodes < 3:
        raise ValueError(f"num_nodes={num_nodes}: negatives other than an edge's two ends need at least 3 nodes")
    lo, hi = np.minimum(src, dst)[:, None], np.maximum(src, dst)[:, None]
    neg = rng.integers(0, num_nodes - 2, (src.shape[0], k), dtype=np.int64)
    neg += neg >= lo
    neg += neg >= hi
    return neg


def write_split(directory: PathLike, split: dict) -> None:
    """The checked split (``check_split``'s output) as the link/ arrays of `directory`."""
    d = Path(directory) / "link"
    d.mkdir(parents=True, exist_ok=True)
    for part, keys in SPLIT_KEYS.items():
        for key in keys:
            save_npy(d / f"{part}_{key}.npy", split[part][key])


def write_link_meta(directory: PathLike, *, name: str, **extra) -> dict:
    """Write checksums.json and meta.json (last step of a preparation), with sizes read back from the folder."""
    d = Path(directory)
    graph = json.loads((d / "graph" / "meta.json").read_text())
    x = np.load(d / "x.npy", mmap_mode="r")
    neg = np.load(d / "link" / "valid_target_node_neg.npy", mmap_mode="r")
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "name": name,
            "num_nodes": graph["num_nodes"], "num_edges": graph["num_edges"],
            "x_shape": list(x.shape), "x_dtype": str(x.dtype), "num_negatives": int(neg.shape[1]),
            "split_sizes": {p: int(np.load(d / "link" / f"{p}_source_node.npy", mmap_mode="r").shape[0])
                            for p in SPLITS}}
    meta.update(extra)
    checksums.write_manifest(d, ARRAYS)
    write_text(d / "meta.json", json.dumps(meta, indent=2) + "\n")
    return meta


@dataclass(frozen=True, eq=False)
class LinkPreparedDataset(PreparedFolder, HomogeneousFolder):
    """A prepared link folder, opened memory-mapped: training graph, features, years and the edge split."""

    graph: CSCGraph
    _x: Optional[torch.Tensor]  # None: opened without features (the property x says so)
    year: torch.Tensor
    split: dict = field(default_factory=dict, kw_only=True)
    format = FORMAT
    format_version = FORMAT_VERSION

    @property
    def num_negatives(self) -> int:
        """Candidate negatives per held-out edge (K of target_node_neg)."""
        return int(self.split["valid"]["target_node_neg"].shape[1])

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={v['source_node'].numel():,}" for k, v in self.split.items())
        return self._repr_with(f"{sizes}, negatives={self.num_negatives}")

    @classmethod
    def load(cls, directory: PathLike, *, mmap: bool = True, verify: str = "sample",
             features: bool = True) -> "LinkPreparedDataset":
        """Open a prepared link folder, checking its structure and (`verify`: "sample", "full", "none") its
        checksums; a damaged or inconsistent file raises an error naming it. With ``features=False`` x.npy is
        neither opened nor checked (a host of a sharded run), as PreparedDataset.load's."""
        d, meta_path, meta = cls._read_meta(directory, verify, "ogbl-citation2")
        if not isinstance(meta.get("name"), str) or not isinstance(meta.get("num_negatives"), int):
            raise ValueError(f"{meta_path}: name={meta.get('name')!r}, num_negatives={meta.get('num_negatives')!r}"
                             " are not accepted; expected a string and an integer: prepare again")
        small = ("year.npy",) + tuple(a for a in ARRAYS if a.startswith("link/"))
        cls._check_arrays(d, verify, ARRAYS, whole=small, also=("graph/meta.json",),
                          skip=() if features else ("x.npy",))
        mode = "c" if mmap else None
        graph = CSCGraph.load(d / "graph", mmap=mmap)
        n = graph.num_nodes
        x = as_tensor(_load_npy(d / "x.npy", mode)) if features else None
        year = _load_npy(d / "year.npy", None)
        if (x is not None and (x.dim() != 2 or x.shape[0] != n)) or year.shape != (n,) or year.dtype != np.int64:
            shown = "(not opened)" if x is None else tuple(x.shape)
            raise ValueError(f"{d}: x has shape {shown} and year {year.dtype} {year.shape}; the graph has "
                             f"{n} nodes (expected ({n}, dim) and int64 ({n},)): prepare again")
        raw = {part: {key: _load_npy(d / "link" / f"{part}_{key}.npy", None) for key in keys}
               for part, keys in SPLIT_KEYS.items()}
        try:
            checked = check_split(raw, n, str(d / "link"), meta["num_negatives"])
        except ValueError as e:
            raise ValueError(f"{e}: prepare again") from None
        split = {part: {k: torch.from_numpy(v) for k, v in values.items()} for part, values in checked.items()}
        ds = cls(directory=d, meta=meta, graph=graph, _x=x, year=torch.from_numpy(year), split=split, verify=verify)
        if not features:
            ds.feature_shapes  # noqa: B018 - meta.json's x_shape checked: what a folder without x answers from
        return ds
