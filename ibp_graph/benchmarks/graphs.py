"""Large benchmark graphs made fast: a papers-like power-law graph built straight in CSC form, and
feature tables (raw and pre-encoded) tiled from a block of synthetic rows.

``ibp_graph.data.graphgen`` makes a realistic data set (classes, homophily, years) but
draws its edges in one thread (about an hour at 100M nodes). A benchmark only needs the
shape: power-law in-degrees, power-law popularity of the cited nodes, and features of a
known family. Here the in-degree of every node is drawn first (a Pareto law with the
requested mean), so the CSC pointers are a cumulative sum and no sort is needed; the
sources are drawn in parallel chunks (one random stream per chunk, numpy releases the
GIL), skewed so that low ranks are cited most, then mapped through a random permutation
so hubs are spread over the id range. 10M nodes x 15 edges take seconds on 16 cores.

Features: ``base_rows`` rows of a family of ``ibp_graph.data.synthetic`` repeated to the
node count (raw), and the same rows encoded once and repeated as compressed rows (a
store), so a 10M-row store costs one encode of the block.
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import numpy as np
import torch

from ..data.store import EncodedTable
from ..data.synthetic import make_family
from ..layout.rows import PAYLOAD_TAIL
from ..layout.tensor import CompressedTensor
from ..sampling.graph import CSCGraph, edge_id_dtype, index_dtype

#: edges drawn per task of the parallel generator.
EDGE_CHUNK = 1 << 22
#: Pareto shape of the in-degrees (a heavy tail with a finite mean) and the popularity skew of sources.
DEGREE_SHAPE, SOURCE_SKEW = 2.1, 2.5


def _threads(threads: Optional[int]) -> int:
    return max(1, threads if threads is not None else (os.cpu_count() or 1))


def power_law_csc(num_nodes: int, avg_degree: float, *, seed: int = 0, max_degree: int = 10_000,
                  threads: Optional[int] = None) -> CSCGraph:
    """A directed graph in CSC form with Pareto in-degrees of mean ~`avg_degree` and power-law
    source popularity (a node of popularity rank r is cited ~r**(1/SOURCE_SKEW - 1) often)."""
    if num_nodes < 1 or avg_degree <= 0:
        raise ValueError(f"num_nodes={num_nodes!r}, avg_degree={avg_degree!r}: accepted: num_nodes >= 1, "
                         "avg_degree > 0")
    seeds = np.random.SeedSequence(seed)
    deg_seed, perm_seed = seeds.spawn(2)
    rng = np.random.default_rng(deg_seed)
    scale = avg_degree * (DEGREE_SHAPE - 1) / DEGREE_SHAPE
    degree = np.minimum((rng.pareto(DEGREE_SHAPE, num_nodes) + 1) * scale, max_degree)
    degree = np.floor(degree + rng.random(num_nodes)).astype(np.int64)  # unbiased rounding
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    num_edges = int(indptr[-1])
    perm = np.random.default_rng(perm_seed).permutation(num_nodes).astype(index_dtype(num_nodes))
    indices = np.empty(num_edges, dtype=index_dtype(num_nodes))
    chunk_seeds = seeds.spawn(-(-num_edges // EDGE_CHUNK))

    def fill(k: int) -> None:
        lo, hi = k * EDGE_CHUNK, min(num_edges, (k + 1) * EDGE_CHUNK)
        u = np.random.default_rng(chunk_seeds[k]).random(hi - lo)
        rank = np.minimum((u ** SOURCE_SKEW * num_nodes).astype(np.int64), num_nodes - 1)
        indices[lo:hi] = perm[rank]

    with ThreadPoolExecutor(_threads(threads)) as pool:
        list(pool.map(fill, range(len(chunk_seeds))))
    e_id = np.arange(num_edges, dtype=edge_id_dtype(num_edges))
    return CSCGraph(indptr, indices, e_id)


def tile_rows(x: torch.Tensor, n_rows: int, pin: bool = False) -> torch.Tensor:
    """The first `n_rows` rows of x repeated, written straight into (pinned) host memory."""
    out = torch.empty((n_rows,) + tuple(x.shape[1:]), dtype=x.dtype, pin_memory=pin)
    n = x.shape[0]
    for lo in range(0, n_rows, n):
        hi = min(n_rows, lo + n)
        out[lo:hi] = x[:hi - lo]
    return out


def tile_compressed(ct: CompressedTensor, k: int, pin: bool = False) -> CompressedTensor:
    """A CompressedTensor of ct's rows repeated k times (payload copied, offsets shifted)."""
    o = ct.offsets.to(torch.int64)
    used = int(o[-1])
    total = used * k
    # the format's tail: decoders may read up to PAYLOAD_TAIL bytes past the last row
    payload = torch.zeros((total + PAYLOAD_TAIL + 7) // 8 * 8, dtype=torch.uint8, pin_memory=pin)
    for i in range(k):
        payload[i * used:(i + 1) * used] = ct.payload[:used]
    n = ct.n_rows
    offsets = torch.empty(n * k + 1, dtype=torch.int64)
    offsets[:-1] = (o[:-1].unsqueeze(0) + used * torch.arange(k).unsqueeze(1)).reshape(-1)
    offsets[-1] = total
    offsets = offsets.to(torch.int32 if total < 2**31 else torch.int64)
    if pin:
        offsets = offsets.pin_memory()
    return CompressedTensor(payload=payload, offsets=offsets, shape=(n * k,) + tuple(ct.row_shape),
                            dtype=ct.dtype, codec=ct.codec, fingerprint=ct.fingerprint)


def tiled_store(x: torch.Tensor, n_rows: int, codec="auto") -> EncodedTable:
    """A store of `n_rows` rows: x (n_rows must be a multiple of its rows) encoded once and repeated."""
    base = EncodedTable.encode(x, codec, progress=False)
    k = n_rows // x.shape[0]
    if k * x.shape[0] != n_rows:
        raise ValueError(f"n_rows={n_rows} is not a multiple of the block's {x.shape[0]} rows")
    if base.compressed.offsets is None:  # identity: fixed stride, the raw rows repeated
        return EncodedTable.encode(tile_rows(x, n_rows), base.codec, progress=False)
    return EncodedTable(base.codec, tile_compressed(base.compressed, k))


def papers_like(num_nodes: int, avg_degree: float = 15, *, family: str = "embedding_f32",
                base_rows: int = 65_536, num_classes: int = 172, seed: int = 0,
                threads: Optional[int] = None) -> tuple[CSCGraph, torch.Tensor, torch.Tensor]:
    """(graph, x, y): a power-law CSC graph of `num_nodes` nodes, features of `family` tiled from
    `base_rows` generated rows (num_nodes is rounded up to a multiple of it for stores), labels."""
    base_rows = min(base_rows, num_nodes)
    num_nodes = math.ceil(num_nodes / base_rows) * base_rows
    graph = power_law_csc(num_nodes, avg_degree, seed=seed, threads=threads)
    x = tile_rows(make_family(family, base_rows, seed=seed), num_nodes)
    y = torch.randint(0, num_classes, (num_nodes,), generator=torch.Generator().manual_seed(seed))
    return graph, x, y


__all__ = ["power_law_csc", "papers_like", "tile_rows", "tile_compressed", "tiled_store"]
