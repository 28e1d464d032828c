"""Loader benchmark: batches/s, bytes per batch and stage times, ibp vs identity vs pre-encoded stores.

All variants run in one process on the same generated graph, the same seeds and the
same worker count, so their ratios are meaningful on a shared machine.
"""
from __future__ import annotations

import argparse
import time
from typing import Optional, Sequence

import numpy as np
import torch

from ..data.store import EncodedTable
from ..data.synthetic import make_family
from ..tables import format_table, write_json

VARIANTS = ("identity", "ibp", "ibp-store", "auto-store")
#: on a GPU also: features already resident in GPU memory (no transfer at all), the ceiling.
GPU_VARIANTS = VARIANTS + ("resident",)
COLUMNS = [
    ("variant", "variant", "s"), ("batches_per_s", "batches/s", ".2f"),
    ("speedup", "vs identity", ".3f"), ("mb_per_batch", "MB sent/batch", ".2f"),
    ("raw_mb_per_batch", "MB raw/batch", ".2f"), ("fraction", "fraction", ".4f"),
    ("copied_mb_per_batch", "MB copied/batch", ".2f"),
    ("sample_ms", "sample ms", ".1f"), ("gather_ms", "gather ms", ".1f"),
    ("encode_ms", "encode ms", ".1f"), ("copy_ms", "copy ms", ".2f"), ("decode_ms", "decode ms", ".1f"),
]


def power_law_graph(num_nodes: int, avg_degree: int, seed: int = 0) -> torch.Tensor:
    """edge_index with Zipf-like source popularity (a few hubs, many leaves), uniform targets."""
    rng = np.random.default_rng(seed)
    e = num_nodes * avg_degree
    src = (rng.pareto(1.2, e) * num_nodes / 50).astype(np.int64) % num_nodes
    dst = rng.integers(0, num_nodes, e)
    return torch.from_numpy(np.stack([src, dst]))


def time_batches(loader, batches: int, use, device: str = "cpu", skip: int = 1) -> tuple[int, float]:
    """(batches taken, seconds) of up to `batches` batches after the first `skip` (the first starts the
    workers; more drain the batches workers queued ahead, so the window sees the steady state), calling
    use(batch) on each; the loader's stats count only those."""
    it = iter(loader)
    for _ in range(skip):
        next(it)
    if hasattr(loader, "stats"):
        loader.stats.reset()
    t = time.perf_counter()
    n = 0
    for _ in range(batches):
        batch = next(it, None)
        if batch is None:
            break
        use(batch)
        n += 1
    if device != "cpu":
        torch.cuda.synchronize()
    return n, time.perf_counter() - t


def run(*, num_nodes: int = 200_000, avg_degree: int = 15, batch_size: int = 512,
        num_neighbors: Sequence[int] = (10, 5), batches: int = 30, num_workers: int = 1,
        device: str = "cpu", out: Optional[str] = "bench_out/loader.json", quiet: bool = False) -> list[dict]:
    """Time `batches` batches of each variant; print the table, write JSON."""
    from torch_geometric.data import Data

    from ..loaders.pyg import CompressedNeighborLoader

    t = time.perf_counter()
    x = make_family("embedding_f32", num_nodes)
    y = torch.randint(0, 172, (num_nodes,), generator=torch.Generator().manual_seed(0))
    edge_index = power_law_graph(num_nodes, avg_degree)
    # pre-encoded feature stores: IBP, and what fit_codec picks (the default of prepare)
    stores = {v: EncodedTable.encode(x, v.split("-")[0], progress=False)
              for v in ("ibp-store", "auto-store")}
    if not quiet:
        print(f"graph: {num_nodes:,} nodes, {edge_index.shape[1]:,} edges, x {tuple(x.shape)} float32 "
              f"(store fraction: ibp {stores['ibp-store'].fraction:.4f}, auto "
              f"{stores['auto-store'].codec.name} {stores['auto-store'].fraction:.4f}); built in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
    rows = []
    x_dev = x.to(device) if device != "cpu" else None
    for variant in (GPU_VARIANTS if device != "cpu" else VARIANTS):
        features = {**stores, "resident": None}.get(variant, x)
        data = Data(y=y, edge_index=edge_index, num_nodes=num_nodes)
        if features is not None:
            data.x = features
        codec = {"identity": "identity", "resident": "identity", "auto-store": "auto"}.get(variant, "ibp")
        torch.manual_seed(0)
        loader = CompressedNeighborLoader(data, list(num_neighbors), batch_size=batch_size, shuffle=True,
                                          num_workers=num_workers, codec=codec, device=device,
                                          persistent_workers=num_workers > 0)
        def use(batch):
            if variant == "resident":
                batch.x = x_dev.index_select(0, batch.n_id)  # gathered where it already lives

        n, wall = time_batches(loader, batches, use, device)
        s = loader.stats
        per = max(s.batches, 1)
        rows.append({
            "variant": variant, "batches": n, "seconds": wall, "batches_per_s": n / wall,
            "mb_per_batch": s.total_sent_bytes / per / 1e6, "raw_mb_per_batch": s.total_raw_bytes / per / 1e6,
            "fraction": s.fraction, "copied_mb_per_batch": s.copied_bytes_per_batch / 1e6, **{f"{k}_ms": s.seconds.get(k, 0.0) / per * 1e3
                                       for k in ("sample", "gather", "encode", "copy", "decode")},
        })
        if not quiet:
            print(f"  {variant}: {n / wall:.2f} batches/s", flush=True)
    base = rows[0]["batches_per_s"]
    for r in rows:
        r["speedup"] = r["batches_per_s"] / base
    if not quiet:
        print(f"\nCompressedNeighborLoader, batch {batch_size}, fan-out {list(num_neighbors)}, "
              f"{num_workers} worker(s), device {device}; worker stage times are per batch per worker")
        print(format_table(rows, COLUMNS))
    if out:
        path = write_json(out, {"benchmark": "loader", "num_nodes": num_nodes, "avg_degree": avg_degree,
                                "batch_size": batch_size, "num_neighbors": list(num_neighbors),
                                "num_workers": num_workers, "device": device, "results": rows})
        if not quiet:
            print(f"\nwrote {path}")
    return rows


#: the loaders `run_dgl` times, in this order: DGL's own DataLoader, then ours with DGL's sampler
#: (codec identity, auto, and auto from a pre-encoded store: `node_stores`).
DGL_VARIANTS = ("dgl-DataLoader", "dgl-identity", "dgl-auto", "dgl-auto-store")


def run_dgl(*, num_nodes: int = 200_000, avg_degree: int = 15, batch_size: int = 512,
            num_neighbors: Sequence[int] = (10, 5), batches: int = 30, num_workers: int = 1,
            rounds: int = 1, quiet: bool = False) -> list[dict]:
    """DGL's own DataLoader against CompressedDGLDataLoader (DGL_VARIANTS) on `run`'s graph and
    features, the same seeds, fan-out and worker count, CPU only; needs dgl (DGLBACKEND=pytorch).

    Each of `rounds` times `batches` batches of every loader in turn (after draining what its
    workers queued ahead), so that a machine's changing load hits all loaders alike; a row
    gives the median and best batches/s over the rounds, and its median's ratio to DGL's."""
    import statistics

    import dgl

    from ..loaders.dgl import CompressedDGLDataLoader

    x = make_family("embedding_f32", num_nodes)
    y = torch.randint(0, 172, (num_nodes,), generator=torch.Generator().manual_seed(0))
    edge_index = power_law_graph(num_nodes, avg_degree)
    g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=num_nodes)
    g.ndata["x"], g.ndata["y"] = x, y
    seeds = torch.arange(num_nodes)
    loaders = {}
    for variant in DGL_VARIANTS:
        # PyG lists fan-outs from the seeds outwards, DGL from the input layer to the seeds
        sampler = dgl.dataloading.NeighborSampler(list(reversed(num_neighbors)),
                                                  prefetch_node_feats=["x"], prefetch_labels=["y"])
        cls = dgl.dataloading.DataLoader if variant == "dgl-DataLoader" else CompressedDGLDataLoader
        kw = {} if variant == "dgl-DataLoader" else {"codec": variant.split("-")[1]}
        if variant == "dgl-auto-store":
            kw["node_stores"] = {"x": EncodedTable.encode(x, "auto", progress=False)}
        torch.manual_seed(0)
        loaders[variant] = cls(g, seeds, sampler, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                               persistent_workers=num_workers > 0, **kw)

    def use(batch):
        assert batch[2][0].srcdata["x"].shape[0] == batch[0].shape[0]  # features delivered

    rates: dict[str, list[float]] = {v: [] for v in loaders}
    taken = dict.fromkeys(loaders, batches)
    for _ in range(rounds):
        for variant, loader in loaders.items():
            n, wall = time_batches(loader, batches, use, skip=2 * num_workers + 2)
            rates[variant].append(n / wall)
            taken[variant] = min(taken[variant], n)
            if not quiet:
                print(f"  {variant}: {n / wall:.2f} batches/s", flush=True)
    rows = [{"variant": v, "batches": taken[v], "rounds": rounds, "batches_per_s": statistics.median(r),
             "best_batches_per_s": max(r)} for v, r in rates.items()]
    for r in rows:
        r["vs_dgl"] = r["batches_per_s"] / rows[0]["batches_per_s"]
    if not quiet:
        print(f"\nDGL DataLoader vs CompressedDGLDataLoader, batch {batch_size}, fan-out "
              f"{list(num_neighbors)}, {num_workers} worker(s), cpu, median of {rounds} round(s)")
        print(format_table(rows, [("variant", "variant", "s"), ("batches_per_s", "batches/s", ".2f"),
                                  ("best_batches_per_s", "best", ".2f"), ("vs_dgl", "vs DGL DataLoader", ".3f")]))
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line of `ibp-graph bench loader` and scripts/bench_loader.py."""
    p = argparse.ArgumentParser(prog="ibp-graph bench loader", description=__doc__)
    p.add_argument("--num-nodes", type=int, default=200_000)
    p.add_argument("--avg-degree", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--num-neighbors", type=int, nargs="+", default=[10, 5])
    p.add_argument("--batches", type=int, default=30, help="timed batches per variant")
    p.add_argument("--num-workers", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", default="bench_out/loader.json")
    p.add_argument("--rounds", type=int, default=1,
                   help="with --dgl: timing rounds, every loader in turn each round (median and best)")
    p.add_argument("--dgl", action="store_true",
                   help="instead: DGL's own DataLoader vs CompressedDGLDataLoader identity, auto, auto store (needs dgl)")
    a = p.parse_args(argv)
    if a.dgl:
        run_dgl(num_nodes=a.num_nodes, avg_degree=a.avg_degree, batch_size=a.batch_size,
                num_neighbors=a.num_neighbors, batches=a.batches, num_workers=a.num_workers, rounds=a.rounds)
        return 0
    run(num_nodes=a.num_nodes, avg_degree=a.avg_degree, batch_size=a.batch_size,
        num_neighbors=a.num_neighbors, batches=a.batches, num_workers=a.num_workers,
        device=a.device, out=a.out)
    return 0
