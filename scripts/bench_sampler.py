#!/usr/bin/env python
"""Neighbour samplers side by side on one graph, one thread each: ibp-graph's vs DGL's.

Both sample the same seed batches of a power-law graph with the same fan-out and build the
relabelled multi-hop subgraph a loader hands on (ours: `NeighborSampler.sample`, PyG's
layout; DGL: `dgl.dataloading.NeighborSampler.sample_blocks`, its message-flow blocks).
Printed: seeds/s and sampled edges/s per sampler, best of `--repeat` passes, and the ratio.
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


def power_law_edges(num_nodes: int, avg_degree: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst): Zipf-like source popularity (a few hubs, many leaves), uniform targets."""
    rng = np.random.default_rng(seed)
    e = num_nodes * avg_degree
    src = (rng.pareto(1.2, e) * num_nodes / 50).astype(np.int64) % num_nodes
    dst = rng.integers(0, num_nodes, e)
    return src, dst


def _best(fn, batches: Sequence[np.ndarray], repeat: int) -> tuple[float, int]:
    """(best seconds over `repeat` passes through all batches, sampled edges in one pass)."""
    best, edges = float("inf"), 0
    for _ in range(repeat):
        t = time.perf_counter()
        edges = sum(fn(i, b) for i, b in enumerate(batches))
        best = min(best, time.perf_counter() - t)
    return best, edges


def bench_ours(src, dst, num_nodes, batches, fanout, repeat) -> dict:
    """ibp-graph's sampler, serial kernels (one core)."""
    from ibp_graph.sampling import CSCGraph, NeighborSampler

    graph = CSCGraph.from_edge_index(torch.from_numpy(np.stack([src, dst])), num_nodes)
    sampler = NeighborSampler(graph, fanout, parallel=False)
    sampler.sample(torch.from_numpy(batches[0]), seed=0)  # compile outside the timing

    def one(i, seeds):
        out = sampler.sample(torch.from_numpy(seeds), seed=i)
        return int(out.row.numel())

    sec, edges = _best(one, batches, repeat)
    return {"sampler": "ibp-graph NeighborSampler", "seconds": sec, "edges": edges}


def bench_dgl(src, dst, num_nodes, batches, fanout, repeat) -> Optional[dict]:
    """DGL's NeighborSampler (C++), one OpenMP thread; None when dgl does not import."""
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

    sec, edges = _best(one, batches, repeat)
    return {"sampler": f"DGL {dgl.__version__} NeighborSampler", "seconds": sec, "edges": edges}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-nodes", type=int, default=1_000_000)
    p.add_argument("--avg-degree", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-dgl", action="store_true", help="measure ours only")
    p.add_argument("--out", default="bench_out/sampler.json")
    a = p.parse_args(argv)
    for name in ("num_nodes", "avg_degree", "batch_size", "batches", "repeat"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(a, name)} is not accepted; use an int >= 1")
    if any(k == 0 or k < -1 for k in a.num_neighbors):
        p.error(f"--num-neighbors={a.num_neighbors} is not accepted; use ints >= 1 (or -1: all)")

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
    rows = [bench_ours(src, dst, a.num_nodes, batches, a.num_neighbors, a.repeat)]
    if not a.no_dgl:
        row = bench_dgl(src, dst, a.num_nodes, batches, a.num_neighbors, a.repeat)
        if row is not None:
            rows.append(row)
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
