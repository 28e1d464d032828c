"""Node -> rank assignments from a graph partitioner, for sharded feature tables (data.shards).

A neighbour sampler reads a node's in-neighbours; a partition that keeps neighbours on one rank keeps
their rows local. :func:`metis_layout` partitions the graph with METIS (through ``pymetis``, the
``metis`` extra: ``pip install "ibp-graph[metis]"``) into balanced parts with few edges cut, on the
undirected graph of the CSC's edges (self loops and repeats dropped: METIS takes a simple undirected
graph). :func:`dgl_layout` reads the assignment of a graph partitioned by DGL
(``dgl.distributed.partition_graph``: its partition config JSON, and the ``orig_nids`` it returns with
``return_mapping=True``), so that shards follow DistDGL's partitions.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Union

import numpy as np

from .shards import ShardLayout

#: what ``ibp-graph prepare --partition`` accepts.
PARTITIONS = ("ranges", "metis")


def undirected_csr(indptr: np.ndarray, indices: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(xadj, adjncy) of the simple undirected graph of a CSC's edges (both directions, no self loops,
    no repeats), as METIS takes it."""
    dst = np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(np.asarray(indptr, np.int64)))
    src = np.asarray(indices, np.int64)
    keep = src != dst
    a = np.concatenate([src[keep], dst[keep]])
    b = np.concatenate([dst[keep], src[keep]])
    key = np.unique(a * num_nodes + b)  # sorted by (a, b): rows of a CSR, each row's neighbours ascending
    rows, cols = np.divmod(key, num_nodes)
    xadj = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=xadj[1:])
    return xadj, cols


def _check_csc(indptr, indices, num_nodes: int) -> None:
    """ValueError / IndexError naming the argument unless (`indptr`, `indices`) is a CSC of `num_nodes` nodes:
    checked before METIS (or numpy inside undirected_csr) meets it."""
    indptr = np.asarray(indptr)
    if indptr.ndim != 1 or indptr.dtype.kind not in "iu" or indptr.shape[0] != num_nodes + 1:
        raise ValueError(f"indptr has shape {indptr.shape} and dtype {indptr.dtype}; accepted: a 1-d integer array "
                         f"of num_nodes + 1 = {num_nodes + 1} offsets")
    indices = np.asarray(indices)
    if indices.ndim != 1 or indices.dtype.kind not in "iu":
        raise ValueError(f"indices has shape {indices.shape} and dtype {indices.dtype}; accepted: a 1-d integer "
                         "array of source nodes")
    if int(indptr[0]) != 0 or int(indptr[-1]) != indices.shape[0] or bool((indptr[1:] < indptr[:-1]).any()):
        raise ValueError(f"indptr runs from {int(indptr[0])} to {int(indptr[-1])}; accepted: non-decreasing offsets "
                         f"from 0 to the {indices.shape[0]} entries of indices")
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= num_nodes):
        bad = int(indices.min()) if int(indices.min()) < 0 else int(indices.max())
        raise IndexError(f"indices contains {bad}, outside the valid range [0, num_nodes={num_nodes})")


def metis_layout(indptr: np.ndarray, indices: np.ndarray, num_nodes: int, world_size: int,
                 *, seed: int = 0) -> ShardLayout:
    """A ShardLayout of `world_size` METIS parts of the graph (CSC `indptr`, `indices`), every part
    non-empty; ImportError naming the extra to install when pymetis is missing."""
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} is not accepted; use an int >= 1")
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)) or num_nodes < 0:
        raise ValueError(f"num_nodes={num_nodes!r} is not accepted; use an int >= 0")
    _check_csc(indptr, indices, int(num_nodes))
    if world_size > num_nodes:
        raise ValueError(f"world_size={world_size} is more than the graph's {num_nodes} nodes; every rank needs "
                         "at least one")
    if world_size == 1:
        return ShardLayout(num_nodes, 1, owner=np.zeros(num_nodes, np.int32))
    try:
        import pymetis
    except ImportError:
        raise ImportError("partition='metis' needs pymetis: pip install 'ibp-graph[metis]' (or pymetis); or "
                          "use partition='ranges'") from None
    xadj, adjncy = undirected_csr(indptr, indices, num_nodes)
    options = pymetis.Options(seed=seed)
    _, parts = pymetis.part_graph(world_size, pymetis.CSRAdjacency(xadj, adjncy), options=options)
    owner = np.asarray(parts, np.int32)
    empty = np.flatnonzero(np.bincount(owner, minlength=world_size) == 0)
    if empty.size:  # METIS may leave a part empty on a tiny or disconnected graph
        raise ValueError(f"METIS left part(s) {empty.tolist()} of {world_size} empty for this graph of {num_nodes} "
                         "nodes; use fewer ranks or partition='ranges'")
    return ShardLayout.from_assignment(owner, world_size)


def dgl_layout(part_config: Union[str, Path], orig_nids=None, *, ntype: Optional[str] = None) -> ShardLayout:
    """The ShardLayout of a graph partitioned by ``dgl.distributed.partition_graph``: node `i` of your graph
    goes to the partition DGL put it in. `part_config`: the partition config JSON it wrote (its
    ``node_map``: each partition's range of DGL's reshuffled node ids); `orig_nids`: the mapping
    partition_graph returns with ``return_mapping=True`` (``orig_nids[new id]`` = your id; a dict by node
    type for a heterogeneous graph: pass that type's), or None when your ids are DGL's reshuffled ids;
    `ntype`: the node type (needed when the graph has several). Partition p becomes rank p. Everything read
    is checked: a malformed config or mapping raises ValueError naming the file or argument."""
    path = Path(part_config)
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"part_config={str(path)!r}: no such file (the JSON that "
                                "dgl.distributed.partition_graph writes into its out_path)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a DGL partition config (not JSON: {e})") from None
    parts = cfg.get("num_parts") if isinstance(cfg, dict) else None
    node_map = cfg.get("node_map") if isinstance(cfg, dict) else None
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1 or not isinstance(node_map, dict) \
            or not node_map:
        raise ValueError(f"{path} is not a DGL partition config: it needs num_parts (an int >= 1) and node_map "
                         "(node type -> each partition's [start, end) of node ids)")
    if ntype is None:
        if len(node_map) != 1:
            raise ValueError(f"{path} partitions node types {sorted(node_map)}; pass ntype= (the one whose "
                             "feature table is sharded)")
        ntype = next(iter(node_map))
    if ntype not in node_map:
        raise ValueError(f"ntype={ntype!r} is not in {path}; its node types: {sorted(node_map)}")
    ranges = node_map[ntype]
    ok = isinstance(ranges, list) and len(ranges) == parts and all(
        isinstance(r, list) and len(r) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in r)
        and 0 <= r[0] <= r[1] for r in ranges)
    if not ok:
        raise ValueError(f"{path}: node_map[{ntype!r}] must list num_parts={parts} [start, end) pairs of ints "
                         f"with 0 <= start <= end, got {str(ranges)[:200]}")
    counts = np.array([e - s for s, e in ranges], np.int64)
    new_owner = np.repeat(np.arange(parts, dtype=np.int32), counts)  # DGL's reshuffled ids, partition by partition
    n = int(counts.sum())
    if orig_nids is None:
        return ShardLayout.from_assignment(new_owner, parts)
    orig = np.asarray(orig_nids.numpy() if hasattr(orig_nids, "numpy") else orig_nids)
    if orig.ndim != 1 or orig.shape[0] != n or orig.dtype.kind not in "iu":
        raise ValueError(f"orig_nids must be 1-d integer ids, one per node of type {ntype!r} ({n}), got "
                         f"dtype={orig.dtype} shape={orig.shape}")
    seen = np.zeros(n, bool)
    inside = (orig >= 0) & (orig < n)
    seen[orig[inside]] = True
    if not inside.all() or int(seen.sum()) != n:
        raise ValueError(f"orig_nids is not a permutation of 0..{n - 1} (partition_graph's return_mapping=True "
                         "mapping of this partitioning)")
    owner = np.empty(n, np.int32)
    owner[orig] = new_owner
    return ShardLayout.from_assignment(owner, parts)


__all__ = ["PARTITIONS", "metis_layout", "dgl_layout", "undirected_csr"]
