"""Node -> rank assignments from a graph partitioner, for sharded feature tables (data.shards).

A neighbour sampler reads a node's in-neighbours; a partition that keeps neighbours on one rank keeps
their rows local. :func:`metis_layout` partitions the graph with METIS (through ``pymetis``, the
``metis`` extra: ``pip install "ibp-graph[metis]"``) into balanced parts with few edges cut, on the
undirected graph of the CSC's edges (self loops and repeats dropped: METIS takes a simple undirected
graph). A DGL partition book gives its own assignment: ``ShardLayout.from_assignment(
gpb.nid2partid(torch.arange(n)).numpy(), W)``.
"""
from __future__ import annotations

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


def metis_layout(indptr: np.ndarray, indices: np.ndarray, num_nodes: int, world_size: int,
                 *, seed: int = 0) -> ShardLayout:
    """A ShardLayout of `world_size` METIS parts of the graph (CSC `indptr`, `indices`), every part
    non-empty; ImportError naming the extra to install when pymetis is missing."""
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} is not accepted; use an int >= 1")
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


__all__ = ["PARTITIONS", "metis_layout", "undirected_csr"]
