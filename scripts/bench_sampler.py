#!/usr/bin/env python
"""Neighbour samplers side by side on one graph, one thread each: ibp-graph's vs DGL's.

Both sample the same seed batches of a power-law graph with the same fan-out and build the
relabelled multi-hop subgraph a loader hands on (ours: `NeighborSampler.sample`, PyG's
layout; DGL: `dgl.dataloading.NeighborSampler.sample_blocks`, its message-flow blocks).
Printed: seeds/s and sampled edges/s per sampler, best of `--repeat` rounds (the samplers take
turns within a round), and the ratio; ours twice, with edge ids and with ``edge_ids=False`` (no
e_id read per sampled edge).
The two do not sample the same number of edges: PyG's layout (ours) samples each node once,
at the hop where it is first reached, while DGL's blocks sample every destination node of
each layer again, the earlier hops' nodes included. Seeds/s is what a loader delivers;
edges/s is the work rate.
DGL is measured when it imports (its own environment here: `make venv-dgl`); otherwise
the table has our row alone. Writes JSON (default bench_out/sampler.json).

    python scripts/bench_sampler.py --num-nodes 1000000 --batch-size 1024 --num-neighbors 15 10 5
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional, Sequence

import numpy as np
import torch

from ibp_graph.benchmarks.args import fan_out, out_file, positive_int


def power_law_edges(num_nodes: int, avg_degree: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst): Zipf-like source popularity (a few hubs, many leaves), uniform targets."""
    rng = np.random.default_rng(seed)
    e = num_nodes * avg_degree
    src = (rng.pareto(1.2, e) * num_nodes / 50).astype(np.int64) % num_nodes
    dst = rng.integers(0, num_nodes, e)
    return src, dst


def _interleaved(samplers: dict, batches: Sequence[np.ndarray], repeat: int) -> list:
    """Rows {sampler, seconds, edges}: each sampler's best pass through all batches over `repeat` rounds, the
    samplers taking turns within a round (this machine's load moves more between phases than within one).
    `samplers` maps a name to `one(i, seeds) -> edges sampled`."""
    best = {name: float("inf") for name in samplers}
    edges = {}
    for _ in range(repeat):
        for name, one in samplers.items():
            t = time.perf_counter()
            edges[name] = sum(one(i, b) for i, b in enumerate(batches))
            best[name] = min(best[name], time.perf_counter() - t)
    return [{"sampler": name, "seconds": best[name], "edges": edges[name]} for name in samplers]


def ours(graph, batches, fanout, edge_ids: bool = True):
    """(name, one batch) of ibp-graph's sampler on `graph` (a CSCGraph), serial kernels (one core);
    `edge_ids=False`: the sampler reads no edge ids (batches without e_id)."""
    from ibp_graph.sampling import NeighborSampler

    sampler = NeighborSampler(graph, fanout, parallel=False, edge_ids=edge_ids)
    sampler.sample(torch.from_numpy(batches[0]), seed=0)  # compile outside the timing

    def one(i, seeds):
        out = sampler.sample(torch.from_numpy(seeds), seed=i)
        return int(out.row.numel())

    return "ibp-graph NeighborSampler" + ("" if edge_ids else ", edge_ids=False"), one


def dgl_sampler(src, dst, num_nodes, batches, fanout):
    """(name, one batch) of DGL's NeighborSampler (C++), one OpenMP thread; None when dgl does not import."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    try:
        import dgl
    except Exception as e:  # noqa: BLE001 - any import failure means: no DGL column
        print(f"(DGL not measured: {type(e).__name__}: {e})", file=sys.stderr)
        return None
    dgl.utils.set_num_threads(1)
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=num_nodes)
    g.create_formats_()
    sampler = dgl.dataloading.NeighborSampler(list(reversed(fanout)))  # DGL lists the input layer first
    sampler.sample_blocks(g, torch.from_numpy(batches[0]))

    def one(i, seeds):
        _, _, blocks = sampler.sample_blocks(g, torch.from_numpy(seeds))
        return int(sum(b.num_edges() for b in blocks))

    return f"DGL {dgl.__version__} NeighborSampler", one


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=positive_int, default=1_000_000)
    p.add_argument("--avg-degree", type=positive_int, default=15)
    p.add_argument("--batch-size", type=positive_int, default=1024)
    p.add_argument("--num-neighbors", type=fan_out, nargs="+", default=[15, 10, 5])
    p.add_argument("--batches", type=positive_int, default=10)
    p.add_argument("--repeat", type=positive_int, default=3)
    p.add_argument("--no-dgl", action="store_true", help="measure ours only")
    p.add_argument("--out", type=out_file, default="bench_out/sampler.json")
    a = p.parse_args(argv)

    import numba

    from ibp_graph.tables import format_table, write_json

    numba.set_num_threads(1)
    torch.set_num_threads(1)
    t = time.perf_counter()
    src, dst = power_law_edges(a.num_nodes, a.avg_degree)
    rng = np.random.default_rng(1)
    batches = [rng.choice(a.num_nodes, a.batch_size, replace=False) for _ in range(a.batches)]
    print(f"graph: {a.num_nodes:,} nodes, {src.size:,} edges; {a.batches} batches of {a.batch_size} "
          f"seeds, fan-out {a.num_neighbors}; one thread; best of {a.repeat} (built in "
          f"{time.perf_counter() - t:.1f} s)", flush=True)
    from ibp_graph.sampling import CSCGraph

    graph = CSCGraph.from_edge_index(torch.from_numpy(np.stack([src, dst])), a.num_nodes)
    samplers = dict(ours(graph, batches, a.num_neighbors, edge_ids) for edge_ids in (True, False))
    named = None if a.no_dgl else dgl_sampler(src, dst, a.num_nodes, batches, a.num_neighbors)
    if named is not None:
        samplers[named[0]] = named[1]
    rows = _interleaved(samplers, batches, a.repeat)
    for r in rows:
        r["seeds_per_s"] = a.batches * a.batch_size / r["seconds"]
        r["edges_per_s"] = r["edges"] / r["seconds"]
        r["ms_per_batch"] = 1e3 * r["seconds"] / a.batches
        r["vs_ours"] = r["seeds_per_s"] / rows[0]["seeds_per_s"]
    print(format_table(rows, [("sampler", "sampler", ""), ("ms_per_batch", "ms/batch", ".1f"),
                              ("seeds_per_s", "seeds/s", ",.0f"), ("edges_per_s", "edges/s", ",.0f"),
                              ("edges", "edges sampled", ","), ("vs_ours", "vs ours", ".3f")]))
    path = write_json(a.out, {"args": vars(a), "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
